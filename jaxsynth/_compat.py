"""The JAX internals jaxsynth reads, each until an upstream fix.

The package names ``jax._src`` here only.  Every workaround names what it waits for, and
``tests/test_compat.py`` asserts that the defect is still in the installed versions: a
release that fixes one fails its test, and the workaround goes.

* ``ott_batching``: ott-jax 0.6.0 (``ott.utils``) reads
  ``jax.interpreters.batching.is_vmappable``, which JAX 0.9 removed from the public
  module; ott-jax issue #700, fixed on ott's main branch by PR #701, in no release yet.
* ``backends_are_initialized``: JAX has no public way to ask whether this process has set
  up its devices (jax issue #23320); a cluster must be joined before.
* ``distributed_client``: ``jax.distributed`` does not expose the coordination service's
  key-value client, the channel of a cluster's rows (no upstream request found).
"""

from __future__ import annotations

import contextlib
import importlib

import jax
from jax.interpreters import batching as _public_batching

__all__ = ["backends_are_initialized", "distributed_client", "ott_batching"]


@contextlib.contextmanager
def ott_batching():
    """Expose ``is_vmappable`` where ott-jax 0.6.0 looks for it, for this block only."""
    if hasattr(_public_batching, "is_vmappable"):
        yield
        return
    import jax._src.interpreters.batching as private_batching

    _public_batching.is_vmappable = private_batching.is_vmappable
    try:
        yield
    finally:
        del _public_batching.is_vmappable


def backends_are_initialized() -> bool:
    """Whether this process has set up JAX's devices (``jax._src.xla_bridge``)."""
    return bool(_cluster_internal("jax._src.xla_bridge", "backends_are_initialized")())


def distributed_client():
    """The key-value client of the coordination service ``jax.distributed`` joined
    (``jax._src.distributed.global_state.client``; ``None`` before joining)."""
    return _cluster_internal("jax._src.distributed", "global_state").client


def _cluster_internal(module: str, attribute: str):
    """``module.attribute``, or a ``RuntimeError`` naming it and the JAX version when this
    JAX has moved it (a cluster cannot run; one process still can)."""
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError):
        raise RuntimeError(f"jaxsynth's clusters need {module}.{attribute}, which JAX "
                           f"{jax.__version__} does not have; run on one process, or install "
                           "the JAX version jaxsynth's tests pass with") from None
