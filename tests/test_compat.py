"""The JAX internals of ``jaxsynth._compat``: read there only, still working, still needed.

Each workaround has a test asserting that the upstream defect is still in the installed
versions.  A release that fixes it fails that test: the workaround (and the test) go.
"""

import re
from pathlib import Path

import jax
import jax.interpreters.batching as public_batching
import numpy as np
import pytest

import jaxsynth
from jaxsynth import _compat

PACKAGE = Path(jaxsynth.__file__).parent


def test_jax_internals_are_read_in_the_compatibility_module_only():
    named = re.compile(r"jax\._src\b")
    users = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                   if named.search(path.read_text()))
    assert users == ["_compat.py"]


def test_ott_still_reads_is_vmappable_from_the_public_module():
    """ott-jax issue #700 (fixed by ott PR #701): while the installed ott-jax reads
    ``is_vmappable`` from JAX's public ``batching`` module, where this JAX has none,
    ``ott_batching`` is needed."""
    import ott.utils

    assert ott.utils.batching is public_batching
    assert not hasattr(public_batching, "is_vmappable")


def test_the_ott_alias_is_scoped_and_is_jax_own():
    import jax._src.interpreters.batching as private

    with _compat.ott_batching():
        assert public_batching.is_vmappable is private.is_vmappable
    assert not hasattr(public_batching, "is_vmappable")


def test_online_sinkhorn_needs_the_alias_and_runs_with_it():
    """ott's online point cloud (a ``batch_size``) is what reads ``is_vmappable``."""
    import jax.numpy as jnp
    from ott.geometry.pointcloud import PointCloud
    from ott.problems.linear.linear_problem import LinearProblem
    from ott.solvers.linear.sinkhorn import Sinkhorn

    def solve():
        geometry = PointCloud(jnp.zeros((4, 2)), jnp.ones((5, 2)), epsilon=0.1, batch_size=2)
        return Sinkhorn(max_iterations=20)(LinearProblem(geometry))

    with pytest.raises(AttributeError, match="is_vmappable"):
        solve()
    with _compat.ott_batching():
        plan = np.asarray(solve().matrix)
    # every pair of points is as far apart: the optimal plan is the product coupling
    np.testing.assert_allclose(plan, np.full((4, 5), 1 / 20), rtol=1e-5)


def test_jax_still_has_no_public_name_for_its_initialized_backends():
    """jax issue #23320 asks for one (``jax.is_initialized`` there)."""
    import jax.extend.backend

    assert not hasattr(jax, "is_initialized")
    assert not hasattr(jax.extend.backend, "backends_are_initialized")
    jax.devices()  # sets the devices up, if nothing in this process has yet
    assert _compat.backends_are_initialized() is True


def test_jax_distributed_still_hides_its_key_value_client():
    public = [name for name in dir(jax.distributed)
              if "key_value" in name or name in ("client", "global_state", "get_client")]
    assert public == []
    assert _compat.distributed_client() is None  # not joined: no coordination service


def test_a_moved_internal_is_named_in_the_error():
    with pytest.raises(RuntimeError, match=r"jax\._src\.nowhere\.thing.*one process"):
        _compat._cluster_internal("jax._src.nowhere", "thing")
