"""Large data sets: preparation, release and in-kernel W1 at 10^6 points.

The reduced form (CI) prepares n = 10^6 points in d = 3; ``JAXSYNTH_FULL_TESTS=1`` runs
the same checks at n = 10^7 (``benchmarks/run_all.py --scale`` records its time and
memory).  Truths: cell counts by brute force (``partition.cell_index`` and
``np.unique``, independent of the Morton sort), and the in-kernel tree W1 against the
general formula of ``js.w1`` (atoms sorted again).
"""

import numpy as np
import pytest

import jaxsynth as js
from jaxsynth.core import partition
from jaxsynth.mechanisms import schedules
from tests.conftest import FULL_TESTS

N = 10**7 if FULL_TESTS else 10**6
D = 3


@pytest.fixture(scope="module")
def large():
    rng = np.random.default_rng(0)
    X = np.clip(0.5 + 0.15 * rng.standard_normal((N, D)), 0.0, 1.0)
    depth = schedules.default_depth(1.0, N)
    return X, js.prepare(X, depth)


@pytest.mark.slow
def test_large_preparation_counts_match_brute_force(large):
    X, tree = large
    assert tree.n == N and tree.depth == schedules.default_depth(1.0, N)
    np.testing.assert_array_equal(tree.points[:: N // 1000], X[tree.order[:: N // 1000]])
    for level in (1, 7, 14, tree.depth):
        _, brute = np.unique(partition.cell_index(X, level), axis=0, return_counts=True)
        np.testing.assert_array_equal(np.sort(tree.level_counts(level)), np.sort(brute))
        assert tree.occupancy[level] == len(brute)
    dense = tree.dense_counts(12)[12]
    assert dense.sum() == N
    np.testing.assert_array_equal(np.sort(dense[dense > 0]),
                                  np.sort(np.asarray(tree.level_counts(12), np.int32)))


@pytest.mark.slow
@pytest.mark.parametrize("mech", [js.PMM(), js.PrunedPMM(engine="sparse")], ids=["pmm", "pruned"])
def test_large_release_and_tree_w1(large, mech):
    X, _ = large
    out, diag = js.release_batch(0, mech, X, 1.0, seeds=2, diagnostics=True)
    w = np.asarray(out.weights)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)
    assert np.all(np.asarray(out.depth) == schedules.default_depth(1.0, N))
    # the root count is n + Laplace noise of scale ≤ 2/ε: far inside ±1% of n
    assert np.all(np.abs(np.asarray(out.size) - N) < 0.01 * N)
    general = js.w1(X, out, method="tree", metric="linf")
    np.testing.assert_allclose(diag["tree_linf"], general, rtol=2e-5, atol=1e-7)
    assert np.all((general > 0) & (general < 1))
