"""The pure per-replicate release (``js.release_fn``, ``engine.replicate_fn``): jitted and
vmapped over keys by the user, it gives bit for bit the measures ``release_batch`` gives
(the engine's chunked, capacity-fitted run is the independent route), and it refuses the
configurations that need the host during a release.  ``release_batch`` without its
diagnostics (a program that drops their work) releases the same measures, bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsynth as js
from jaxsynth.experiments import datasets

FIELDS = ("points", "weights", "leaf_depth", "size", "visited", "leaves", "depth")


@pytest.mark.parametrize("mech", [
    pytest.param(js.PMM(depth=5), id="pmm"),
    pytest.param(js.PrunedPMM(depth=8, engine="sparse"), id="pruned-sparse",
                 marks=pytest.mark.slow)])
def test_vmapped_release_fn_equals_release_batch_bitwise(mech):
    X = datasets.load("spiral", n=400, key=2)
    eps = [0.5, 2.0]
    batch = js.release_batch(5, mech, X, eps=eps, seeds=12)
    fn = js.release_fn(mech, X, eps)
    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(5), s))(jnp.arange(12))
    for e in range(len(eps)):
        mine = jax.jit(jax.vmap(fn, in_axes=(0, None)))(keys, e)
        theirs = batch[e]
        width = theirs.weights.shape[-1]
        assert mine.weights.shape[-1] >= width
        assert not np.asarray(mine.weights)[:, width:].any()  # only padding beyond it
        for field in FIELDS:
            a, b = np.asarray(getattr(mine, field)), np.asarray(getattr(theirs, field))
            if a.ndim == 2 + (field == "points"):
                a = a[:, :width]
            np.testing.assert_array_equal(a, b, err_msg=field)
        for k in theirs.budget:
            np.testing.assert_array_equal(mine.budget[k], theirs.budget[k])
        assert (mine.mechanism, mine.adjacency) == (theirs.mechanism, theirs.adjacency)


def test_release_fn_refuses_releases_that_need_the_host():
    X = datasets.load("spiral", n=200, key=2)
    with pytest.raises(ValueError, match="mech: .*use release_batch"):
        js.release_fn(js.PrivTree(), X, 1.0)
    with pytest.raises(ValueError, match="eps"):
        js.release_fn(js.PMM(), X, -1.0)


@pytest.mark.parametrize("mech", [
    pytest.param(js.PMM(depth=5), id="pmm"),
    pytest.param(js.PrivTree(), id="privtree"),
    pytest.param(js.AdaptivePrunedPMM(), id="adaptive", marks=pytest.mark.slow),
    pytest.param(js.PrivTree(shift=True), id="privtree-shift", marks=pytest.mark.slow)])
def test_a_release_is_the_same_with_and_without_its_diagnostics(mech):
    X = datasets.load("spiral", n=400, key=3)
    plain = js.release_batch(7, mech, X, eps=[0.5, 2.0], seeds=5)
    with_diagnostics, diag = js.release_batch(7, mech, X, eps=[0.5, 2.0], seeds=5,
                                              diagnostics=True)
    assert "level_gap" in diag.keys()
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(plain, field), getattr(with_diagnostics, field),
                                      err_msg=field)
    for name, value in plain.info.items():
        np.testing.assert_array_equal(value, with_diagnostics.info[name], err_msg=name)
