"""A release carries only what the mechanism releases; what reads the data is apart.

Two data sets whose points differ only inside the finest cells a mechanism counts (so
every count it reads is the same) give bit-identical releases under one key.  Adaptive
Pruned-PMM reads counts deeper than the depth it selects (its scores): moving the points
inside the cells of the selected depth keeps the release but changes the exact scores,
which therefore must not be in it (they are in ``NotPrivateDiagnostics``).
"""

import jax
import numpy as np
import pytest

import jaxsynth as js
from jaxsynth.mechanisms.privtree import PrivTree

EPS = 1.0
MECHS = [js.PMM(depth=8), js.PrunedPMM(depth=8), js.PrivTree(), js.PrivTree(placement="uniform")]


def _moved_within_cells(X, level: int):
    """``X`` with every point moved uniformly inside its level-``level`` cell (the cell of
    ``⌈level/d⌉`` binary digits per coordinate holds it): counts to that level are kept."""
    bits = -(-level // X.shape[1])
    u = np.random.default_rng(1).uniform(0.05, 0.95, X.shape)
    return (np.floor(X * 2.0**bits) + u) / 2.0**bits


def _assert_same_release(a, b):
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b  # same fields, same static parts
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def X():
    return np.asarray(js.datasets.load("spiral", n=2000, key=0), np.float64)


@pytest.mark.parametrize("mech", MECHS, ids=lambda m: f"{m.name}-{getattr(m, 'placement', '')}")
def test_same_counts_same_release(X, mech):
    Y = _moved_within_cells(X, mech.data_depth(*X.shape, EPS) + X.shape[1])
    assert not np.allclose(X, Y)
    a, diag = js.release_batch(3, mech, X, [EPS], seeds=4, diagnostics=True)
    _assert_same_release(a, js.release_batch(3, mech, Y, [EPS], seeds=4))
    assert set(a.info).isdisjoint(diag.keys())
    assert not any(k.startswith(("tree_", "upper_")) for k in a.info)


def test_adaptive_release_does_not_carry_its_scores():
    X = np.asarray(js.datasets.load("uniform", n=3000, d=4, key=0), np.float64)
    mech = js.AdaptivePrunedPMM()
    a, da = js.release_batch(5, mech, X, [EPS], seeds=4, diagnostics=True)
    Y = _moved_within_cells(X, int(np.max(np.asarray(a.depth))))
    b, db = js.release_batch(5, mech, Y, [EPS], seeds=4, diagnostics=True)
    _assert_same_release(a, b)
    assert not np.array_equal(np.asarray(da["scores"]), np.asarray(db["scores"]))


@pytest.mark.slow
def test_adaptive_selection_statistics_are_diagnostics_only(X):
    out, diag = js.release(0, js.AdaptivePrunedPMM(), X, EPS, diagnostics=True)
    assert {"scores", "probabilities", "sensitivity"} <= set(diag.keys())
    assert set(out.info) == {"selected", "candidate_depths", "candidate_s"}
    np.testing.assert_allclose(float(np.sum(diag["probabilities"])), 1.0, rtol=1e-5)
    assert "NOT PRIVATE" in js.NotPrivateDiagnostics.__doc__
    with pytest.raises(KeyError, match="tree_linf"):
        diag["nothing"]


def test_diagnostics_flag_is_checked(X):
    with pytest.raises(ValueError, match="diagnostics"):
        js.release_batch(0, js.PMM(depth=4), X, EPS, diagnostics="yes")


@pytest.mark.slow  # three capacities, three compilations of the kernel
@pytest.mark.parametrize("shift", [False, True])
def test_privtree_release_does_not_show_its_fitted_capacity(X, shift, monkeypatch):
    # the node table's capacity is fitted to the data without noise: no shape or value of
    # the release may depend on it (the arrays are cut to the released leaves)
    mech = js.PrivTree(shift=shift)
    fitted = js.release_batch(4, mech, X, [0.5, 2.0], seeds=3)
    initial, retry, reruns = PrivTree._initial_capacity, PrivTree._retry, []
    monkeypatch.setattr(PrivTree, "_retry", lambda self, s: reruns.append(s) or retry(self, s))
    # four times the fitted capacity, and a quarter of it: replicates overflow and rerun
    for capacity, rerun in ((lambda self, *a: 4 * initial(self, *a), False),
                            (lambda self, *a: initial(self, *a) // 4, True)):
        monkeypatch.setattr(PrivTree, "_initial_capacity", capacity)
        _assert_same_release(fitted, js.release_batch(4, mech, X, [0.5, 2.0], seeds=3))
        assert bool(reruns) == rerun
    width = fitted.points.shape[-2]
    most = int(np.max(np.asarray(fitted.leaves)))
    assert width >= most > width // 2
    assert np.all(np.asarray(fitted.weights)[..., most:] == 0)
