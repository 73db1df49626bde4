"""Non-private oracle partitions and oracle measures against brute-force recursion and POT."""

import numpy as np
import ot
import pytest

import jaxsynth as js
from jaxsynth.core import partition
from jaxsynth.mechanisms import oracle
from tests.mechanisms.test_privtree import EPS, MECH, SHIFT, clustered_data

CAP = 12


@pytest.fixture(scope="module")
def X():
    return clustered_data()


def _brute_tree(X, threshold, cap):
    """Leaves ``{path: count}`` of the threshold tree by explicit recursion on Morton bits."""
    leaves, stack = {}, [(np.arange(len(X)), 0, "")]
    while stack:
        idx, k, path = stack.pop()
        if k < cap and len(idx) > threshold(k):
            bit = partition.morton_bit(X[idx], k)
            stack += [(idx[bit == 0], k + 1, path + "0"), (idx[bit == 1], k + 1, path + "1")]
        else:
            leaves[path] = len(idx)
    return leaves


def _released_leaves(out, n):
    size = int(out.leaves)
    pts = np.asarray(out.points[:size], np.float64)
    depth = np.asarray(out.leaf_depth[:size])
    paths = [
        "".join(str(int(partition.morton_bit(pts[i : i + 1], t)[0])) for t in range(k))
        for i, k in enumerate(depth)
    ]
    counts = np.rint(np.asarray(out.weights[:size], np.float64) * n).astype(int)
    return dict(zip(paths, counts))


@pytest.mark.parametrize(
    "kind, theta, delta", [("hard", 0.0525, 0.0), ("soft", 0.0125, 0.0031)]
)
def test_threshold_trees_match_bruteforce(X, kind, theta, delta):
    """Thresholds ``θn + kδn`` avoid integers, so float32 and exact comparisons agree."""
    n = len(X)
    out = (oracle.hard_threshold(X, theta, CAP) if kind == "hard"
           else oracle.soft_threshold(X, theta, delta, CAP))
    ref = _brute_tree(X, lambda k: theta * n + k * delta * n, CAP)
    assert _released_leaves(out, n) == ref
    assert int(out.leaves) == len(ref)
    assert float(np.sum(out.weights)) == pytest.approx(1.0, abs=1e-6)
    assert sum(2.0 ** -len(p) for p in ref) == 1.0  # the leaves partition the cube
    assert out.adjacency == oracle.ORACLE_ADJACENCY and "ORACLE" in out.accounting["adjacency"]
    assert out.mechanism == f"oracle-{kind}"


def test_hard_threshold_is_capped_on_atoms():
    """Split-while-heavy never stops on a repeated point; the cap stops it and is reported."""
    dup = np.tile([[0.3, 0.7]], (200, 1))
    out = oracle.hard_threshold(dup, 0.0525, CAP)
    assert int(out.depth) == CAP and int(out.info["cap_hits"]) == 1
    assert int(out.leaves) == CAP + 1  # one heavy path, one empty sibling per level


@pytest.mark.slow
def test_leaf_masses_of_privtree_release_equal_cell_counts(X):
    """Oracle masses of released trees (plain and shifted) vs brute-force ``cell_index`` counts."""
    n = len(X)
    for mech in (MECH, SHIFT):
        out = js.release_batch(7, mech, X, eps=EPS, seeds=4)
        nu = oracle.oracle_measure(X, out)
        w = np.asarray(nu.weights, np.float64)
        np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)
        assert nu.accounting["adjacency"] == oracle.ORACLE_ADJACENCY
        assert nu.mechanism == f"oracle[{mech.name}]"
        assert np.all(np.isinf(np.asarray(nu.budget["epsilon"])))
        for e, s in [(0, 0), (1, 3)]:
            rep = out[e, s]
            size = int(rep.leaves)
            u = np.asarray(rep.info["shift"], np.float64) if mech.shift else 0.0
            scale = 2.0 if mech.shift else 1.0
            Z = (X + u) / scale
            P = (np.asarray(rep.points[:size], np.float64) + u) / scale
            depth = np.asarray(rep.leaf_depth[:size])
            brute = [
                np.sum(np.all(partition.cell_index(Z, k) == partition.cell_index(P[i][None], k), 1))
                for i, k in enumerate(depth)
            ]
            np.testing.assert_allclose(w[e, s, :size], np.array(brute) / n, atol=1e-7)
            assert np.all(w[e, s, size:] == 0)  # padding atoms (root cells) carry nothing
        if mech.shift:
            np.testing.assert_array_equal(nu.info["shift"], out.info["shift"])


def test_resolution_functional_bounds_w1(X):
    """``W1(μ, ν_T) ≤ Σ p_Q diam(Q) ≤ 2d·R_T(μ)`` (ℓ2, exact W1 by POT).

    He (Intrinsic-Dimensional …) Lemma 2.5.
    """
    n, d = X.shape
    hard = oracle.hard_threshold(X, 0.0525, CAP)
    for out in (hard, oracle.soft_threshold(X, 0.0125, 0.0031, CAP)):
        size = int(out.leaves)
        p = np.asarray(out.weights[:size], np.float64)
        depth = np.asarray(out.leaf_depth[:size])
        r_t = oracle.resolution_functional(X, out)
        assert r_t == pytest.approx(np.sum(p * 2.0 ** (-depth / d)), rel=1e-6)
        y = np.asarray(out.points[:size], np.float64)
        cost = np.linalg.norm(X[:, None] - y[None], axis=-1)
        w1 = ot.emd2(np.full(n, 1 / n), p / p.sum(), cost)
        per_leaf = np.sum(p * partition.diameter(depth, d, "l2"))
        assert w1 <= per_leaf + 1e-9 <= 2 * d * r_t + 1e-9


def test_bad_oracle_inputs(X):
    with pytest.raises(ValueError, match="theta"):
        oracle.hard_threshold(X, 1.5)
    with pytest.raises(ValueError, match="delta"):
        oracle.soft_threshold(X, 0.1, -0.01)
    with pytest.raises(ValueError, match="depth_cap"):
        oracle.hard_threshold(X, 0.1, depth_cap=45)
    with pytest.raises(ValueError, match="outside"):
        oracle.hard_threshold(X - 1.0, 0.1)
