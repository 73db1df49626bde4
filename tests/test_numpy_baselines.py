"""Checks of the NumPy baselines (benchmarks/numpy_baselines.py) against independent truth.

Exact laws (LapZ pmf, PrivTree split probabilities and expected leaves), POT ``emd2`` on
explicit tree-distance matrices built from the partition's cell indices, the consistency
invariants, the partition / window geometry of PrivTree, and agreement in law of the
sparse and dense Pruned-PMM executions.  All seeds are fixed (deterministic).
"""

import math
import sys
from pathlib import Path

import numpy as np
import ot
import pytest
from scipy import stats
from scipy.spatial.distance import cdist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import numpy_baselines as nb  # noqa: E402

from tests.mechanisms import reference_pmm as ref  # noqa: E402


# ------------------------------------------------------------------ independent helpers


def cell_index(P, j, d):
    """Cell index of points P [N, d] at level j: min(⌊x 2^k⌋, 2^k − 1) [N, d]."""
    k = j // d + (np.arange(d) < j % d)
    return np.minimum(np.floor(P * 2.0**k), 2.0**k - 1)


def diam(j, d, metric):
    j = np.asarray(j)
    k = j[..., None] // d + (np.arange(d) < j[..., None] % d)
    side = 2.0 ** (-k)
    return side.max(-1) if metric == "linf" else np.sqrt((side**2).sum(-1))


def lca_levels(P, dp, Q, dq, d):
    """Level of the lowest common cell of P_i (depth dp_i) and Q_k (depth dq_k) [N, M]."""
    dp, dq = np.broadcast_to(dp, len(P)), np.broadcast_to(dq, len(Q))
    top = int(max(dp.max(), dq.max()))
    lca = np.zeros((len(P), len(Q)), int)
    for j in range(1, top + 1):
        same = np.all(cell_index(P, j, d)[:, None] == cell_index(Q, j, d)[None], -1)
        same &= (j <= dp[:, None]) & (j <= dq[None])
        lca = np.where(same, j, lca)  # equality is monotone in j
    return lca


def tree_cost(P, dp, Q, dq, d, metric):
    """Ultrametric tree distance: diam(lca) − (diam(a) + diam(b))/2."""
    lca = lca_levels(P, dp, Q, dq, d)
    dp, dq = np.broadcast_to(dp, len(P)), np.broadcast_to(dq, len(Q))
    return diam(lca, d, metric) - (diam(dp, d, metric)[:, None] + diam(dq, d, metric)[None]) / 2


def emd(X, weights, cost):
    a = np.full(len(X), 1.0 / len(X))
    b = np.asarray(weights, np.float64)
    return float(ot.emd2(a, b / b.sum(), cost))


def leaf_of(P, lower, level, d):
    """Indices of the leaf boxes [lower, lower + side) containing each point; −1 if none.

    Also returns how many boxes contain each point (upper faces at 1 are closed)."""
    side = 2.0 ** -(level[:, None] // d + (np.arange(d) < level[:, None] % d))
    upper = lower + side
    P, lower, upper = P[:, None], lower[None], upper[None]
    inside = np.all((P >= lower) & ((P < upper) | ((P == 1) & (upper == 1))), -1)
    return np.where(inside.any(1), inside.argmax(1), -1), inside.sum(1)


def n_ancestors(centers, level, d):
    """Number of distinct proper ancestor cells of the leaf cells (level, center)."""
    cells = set()
    for j in range(int(level.max())):
        sel = level > j
        for row in cell_index(centers[sel], j, d):
            cells.add((j, *row))
    return len(cells)


def data(n, d=2, seed=0):
    X = nb.spiral(n, np.random.default_rng(seed))
    return X if d == 2 else nb.embed(X, d)


# ------------------------------------------------------------------------------- noise


@pytest.mark.parametrize("method", ["exponential", "geometric"])
@pytest.mark.parametrize("sigma", [0.1, 1.0, 10.0, 1e4])
def test_lapz_matches_exact_law(method, sigma):
    N = 200_000
    z = nb.lapz(np.random.default_rng(7), sigma, N, method)
    assert z.dtype == np.int64
    # bins: integer cut points at quantiles of the exact cdf, each tail holding >= 5 expected
    q = np.linspace(0, 1, 41)[1:-1]
    grid = np.arange(-int(60 * sigma) - 2, int(60 * sigma) + 3)
    cdf = nb.lapz_cdf(grid, sigma)
    edges = np.unique(grid[np.searchsorted(cdf, q)])
    for e in (-1, 0):  # keep the atoms around 0 separate at small scales
        edges = np.union1d(edges, [e])
    ce = nb.lapz_cdf(edges, sigma)
    edges = edges[(N * ce >= 5) & (N * (1 - ce) >= 5)]
    probs = np.diff(np.concatenate([[0.0], nb.lapz_cdf(edges, sigma), [1.0]]))
    observed = np.bincount(np.searchsorted(edges, z, side="left"), minlength=len(probs))
    assert len(probs) >= 3
    assert stats.chisquare(observed, N * probs).pvalue > 1e-4
    # the cdf is the sum of the pmf
    zz = np.arange(-5, 6)
    assert np.allclose(np.cumsum(nb.lapz_pmf(np.arange(-4000, 6), 1.0))[-11:], nb.lapz_cdf(zz, 1.0))


# ------------------------------------------------------------------------- consistency


def scalar_rule(m, a, b, coin, rule):
    """The proportional and zero-respecting rules, one node at a time (the per-node reference's)."""
    return (ref.zero_respecting if rule == "zero_respecting" else ref.proportional)(m, a, b, coin)


def check_comparable(m, a, b, m0, rule):
    m1 = m - m0
    assert np.all((m0 >= 0) & (m1 >= 0))
    assert np.all(((m0 <= a) & (m1 <= b)) | ((m0 >= a) & (m1 >= b)))
    if rule == "zero_respecting":
        assert np.all(m0[(a == 0) & (b > 0)] == 0)
        assert np.all(m1[(b == 0) & (a > 0)] == 0)
        both = (a == 0) & (b == 0)
        assert np.all((m0[both] == 0) | (m1[both] == 0))


@pytest.mark.parametrize("rule", nb.RULES)
def test_split_rule_matches_scalar_rule_and_is_comparable(rule):
    rng = np.random.default_rng(1)
    for hi in (5, 1000, 10**8):
        m, a, b = rng.integers(0, hi, (3, 4000))
        a[::7] = 0
        b[::5] = 0
        coin = rng.integers(0, 2, 4000)
        m0 = nb.split_masses(m, a, b, coin, rule)
        check_comparable(m, a, b, m0, rule)
        rows = zip(m[:500], a[:500], b[:500], coin[:500])
        expect = [scalar_rule(*map(int, v), rule) for v in rows]
        assert np.array_equal(m0[:500], expect)


@pytest.mark.parametrize("rule", nb.RULES)
def test_dense_pmm_invariants(rule):
    X = data(300)
    prep = nb.prepare_dense(X, 6)
    assert [c.sum() for c in prep.counts] == [300] * 7
    for seed in range(5):
        rng = np.random.default_rng(seed)
        out = nb.pmm_dense(prep, np.full(6, 3.0), 1.0, rng, rule, trace=True)
        assert out["leaf_mass"].sum() == out["m"] >= 1
        assert np.isclose(out["weights"].sum(), 1.0)
        for m, a, b, m0 in out["trace"]:
            check_comparable(m, a, b, m0, rule)
        assert out["nodes_drawn"] == 127
        assert out["visited"] == (127 if rule == "proportional" else 1 + 2 * sum(
            np.count_nonzero(m) for m, *_ in out["trace"]))
        assert out["variates"] >= 2 + 2 * 126


def test_sparse_pruned_invariants_and_deep_tree():
    X = data(2000, d=10)
    prep = nb.prepare_sparse(X, 150)
    assert prep.bits.shape == (150, 2000)
    r = 150
    out = nb.pruned_pmm_sparse(prep, np.full(r, 2.0 * r), 1.0, np.random.default_rng(0), trace=True)
    assert out["leaf_mass"].sum() == out["m"] and np.all(out["leaf_mass"] > 0)
    for m, a, b, m0 in out["trace"]:
        check_comparable(m, a, b, m0, "zero_respecting")
    assert out["visited"] == 1 + 2 * out["active"][:-1].sum() <= 1 + 2 * out["m"] * r
    assert 2 + 2 * (out["visited"] - 1) <= out["variates"] <= 2 + 3 * (out["visited"] - 1)
    assert out["points"].shape == (out["atoms"], 10)
    assert np.all((out["points"] > 0) & (out["points"] < 1))
    assert np.isfinite(out["w1_linf"]) and 0 < out["w1_linf"] < 1


# ------------------------------------------------------------------ tree W1 against POT


@pytest.mark.parametrize("d,r", [(2, 5), (3, 7)])
def test_pmm_family_tree_w1_matches_emd(d, r):
    X = data(60, d, seed=d)
    dense, sparse = nb.prepare_dense(X, r), nb.prepare_sparse(X, r)
    sig = np.full(r, 1.5)
    for seed in range(3):
        outs = [
            nb.pmm_dense(dense, sig, 1.0, np.random.default_rng(seed), "proportional"),
            nb.pmm_dense(dense, sig, 1.0, np.random.default_rng(seed), "zero_respecting"),
            nb.pruned_pmm_sparse(sparse, sig, 1.0, np.random.default_rng(seed)),
        ]
        for out in outs:
            for metric in ("linf", "l2"):
                cost = tree_cost(X, r, out["points"], r, d, metric)
                assert out[f"w1_{metric}"] == pytest.approx(emd(X, out["weights"], cost), abs=1e-12)
                # the tree upper bound holds against the true ground cost
                true = cdist(X, out["points"], "euclidean" if metric == "l2" else "chebyshev")
                bound = out[f"w1_{metric}"] + diam(r, d, metric)
                assert emd(X, out["weights"], true) <= bound + 1e-12


def test_privtree_tree_w1_matches_emd():
    X = data(120, seed=3)
    cap = 12
    prep = nb.prepare_privtree(X, cap)
    for seed in range(3):
        out = nb.privtree(prep, 1.0, cap, np.random.default_rng(seed))
        leaf, _ = leaf_of(X, out["leaf_lower"], out["leaf_level"], 2)
        assert np.all(leaf >= 0)
        for metric in ("linf", "l2"):
            depth = out["leaf_level"]
            cost = tree_cost(X, depth[leaf], out["points"], depth, 2, metric)
            assert out[f"w1_{metric}"] == pytest.approx(emd(X, out["weights"], cost), abs=1e-12)


def test_shifted_privtree_tree_w1_matches_emd():
    X = data(120, seed=4)
    cap = 12
    for seed in range(3):
        out = nb.privtree_shifted(X, 1.0, cap, np.random.default_rng(seed))
        Y = (X + out["shift"]) / 2
        leaf, _ = leaf_of(Y, out["leaf_lower"], out["leaf_level"], 2)
        assert np.all(leaf >= 0) and out["dropped"] == 0
        centers = out["leaf_lower"] + 0.5 * 2.0 ** -(
            out["leaf_level"][:, None] // 2 + (np.arange(2) < out["leaf_level"][:, None] % 2))
        for metric in ("linf", "l2"):
            cost = 2 * tree_cost(Y, out["leaf_level"][leaf], centers, out["leaf_level"], 2, metric)
            assert out[f"w1_{metric}"] == pytest.approx(emd(X, out["weights"], cost), abs=1e-12)


# ------------------------------------------------------------------------ law agreement


def test_sparse_and_dense_pruned_pmm_agree_in_law():
    X = data(200, seed=5)
    r, reps = 6, 400
    sig = np.full(r, 2.0 * r)
    dense, sparse = nb.prepare_dense(X, r), nb.prepare_sparse(X, r)
    rng_a, rng_b = np.random.default_rng(11), np.random.default_rng(12)
    keys = ("m", "visited", "atoms", "w1_linf", "w1_l2")
    A = np.array([[o[k] for k in keys] for o in
                  (nb.pmm_dense(dense, sig, 1.0, rng_a, "zero_respecting") for _ in range(reps))])
    B = np.array([[o[k] for k in keys] for o in
                  (nb.pruned_pmm_sparse(sparse, sig, 1.0, rng_b) for _ in range(reps))])
    se = np.sqrt(A.var(0, ddof=1) / reps + B.var(0, ddof=1) / reps)
    assert np.all(np.abs(A.mean(0) - B.mean(0)) <= 5 * se), (A.mean(0), B.mean(0), se)
    # and pruning is visible: dense PMM has many more atoms than Pruned-PMM here
    P = [nb.pmm_dense(dense, sig, 1.0, rng_a, "proportional")["atoms"] for _ in range(50)]
    assert np.mean(P) > A[:, 2].mean() + 5 * A[:, 2].std() / np.sqrt(reps)


# ------------------------------------------------------------------------------ PrivTree


def test_privtree_leaves_partition_the_cube():
    X = data(500, seed=6)
    cap = nb.default_depth_cap(500, 2, 1.0)
    assert cap == 2 * (9 + 1)
    prep = nb.prepare_privtree(X, cap)
    probes = np.random.default_rng(0).random((20000, 2))
    for seed in range(3):
        out = nb.privtree(prep, 1.0, cap, np.random.default_rng(seed))
        lower, level = out["leaf_lower"], out["leaf_level"]
        side = 2.0 ** -(level[:, None] // 2 + (np.arange(2) < level[:, None] % 2))
        assert np.prod(side, 1).sum() == 1.0  # volumes (exact dyadics)
        for P in (probes, X):
            leaf, hits = leaf_of(P, lower, level, 2)
            assert np.all(hits == 1)
        assert out["leaves"] == len(out["weights"]) == len(level)
        assert out["visited"] == 2 * out["leaves"] - 1  # every node tested, binary tree
        assert out["visited"] == out["leaves"] + n_ancestors(lower + side / 2, level, 2)
        assert np.all(out["weights"] >= 0) and np.isclose(out["weights"].sum(), 1.0)
        assert out["m"] == np.count_nonzero(out["weights"] > 0)
        assert np.allclose(out["points"], lower + side / 2)
        assert out["depth"] == level.max() <= cap


def test_privtree_split_law_single_point():
    """n = 1: exact E[#leaves] from the split probabilities P(max(c−kδ,−δ) + Lap(λ) > 0)."""
    eps, cap, reps = 1.0, 8, 3000
    lam, delta = 6.0 / eps, 6.0 / eps * math.log(2)

    def p_split(c, k):
        b = max(c - k * delta, -delta)
        return 1 - 0.5 * math.exp(-b / lam) if b >= 0 else 0.5 * math.exp(b / lam)

    assert p_split(0, 3) == pytest.approx(0.25)
    ghost = [1.0] * (cap + 1)
    occ = [1.0] * (cap + 1)
    for k in range(cap - 1, -1, -1):
        g = p_split(0, k)
        ghost[k] = (1 - g) + g * 2 * ghost[k + 1]
        p = p_split(1, k)
        occ[k] = (1 - p) + p * (occ[k + 1] + ghost[k + 1])
    prep = nb.prepare_privtree(np.array([[0.3, 0.7]]), cap)
    rng = np.random.default_rng(3)
    outs = [nb.privtree(prep, eps, cap, rng) for _ in range(reps)]
    leaves = np.array([o["leaves"] for o in outs])
    assert abs(leaves.mean() - occ[0]) < 5 * leaves.std() / math.sqrt(reps)
    single = np.mean(leaves == 1)
    assert abs(single - (1 - p_split(1, 0))) < 5 * math.sqrt(single * (1 - single) / reps)


def test_shifted_privtree_window_rule():
    X = data(500, seed=8)
    cap = 16
    probes = np.random.default_rng(1).random((20000, 2))
    for seed in range(4):
        out = nb.privtree_shifted(X, 1.0, cap, np.random.default_rng(seed))
        U = out["shift"]
        lo, hi = U / 2, (1 + U) / 2
        lower, level = out["leaf_lower"], out["leaf_level"]
        side = 2.0 ** -(level[:, None] // 2 + (np.arange(2) < level[:, None] % 2))
        overlap = np.clip(np.minimum(lower + side, hi) - np.maximum(lower, lo), 0, None)
        vol = np.prod(overlap, 1)
        assert np.all(vol > 0)  # no leaf is disjoint from the window
        assert vol.sum() == pytest.approx(0.5**2, abs=1e-12)  # leaves cover the window
        _, hits = leaf_of(lo + probes * (hi - lo), lower, level, 2)
        assert np.all(hits == 1)
        _, hits = leaf_of((X + U) / 2, lower, level, 2)
        assert np.all(hits == 1) and out["dropped"] == 0
        # representatives: centers of Q ∩ (Ω + U) mapped back by −U
        a = np.maximum(2 * lower - U, 0)
        b = np.minimum(2 * (lower + side) - U, 1)
        assert np.allclose(out["points"], (a + b) / 2)
        assert np.all((out["points"] >= 0) & (out["points"] <= 1))
        # tested cells = leaves + their ancestors: discarded cells are never tested
        centers = lower + side / 2
        assert out["visited"] == out["leaves"] + n_ancestors(centers, level, 2)
        assert out["visited"] >= 2 * out["leaves"] - 1
        assert np.isclose(out["weights"].sum(), 1.0) and np.all(out["weights"] >= 0)


# ------------------------------------------------------------------------------ Adaptive


def test_occupancy_profile_matches_unique_cells():
    X = nb.embed(np.random.default_rng(2).random((3000, 2)), 5)
    prep = nb.prepare_sparse(X, 40, occupancy=True)
    for j in (0, 1, 4, 9, 17, 30, 40):
        assert prep.occupancy[j] == len(np.unique(cell_index(X, j, 5), axis=0))


def test_adaptive_candidates_fig2_setting():
    """Numbers documented in jaxsynth.mechanisms.adaptive for d = 8, n = 30000, ε = 1, ε_sel = 0.1."""
    c = nb.adaptive_candidates(30000, 8, 0.9)
    assert c["L"] == 117
    assert list(c["depth"]) == [117, 34, 28, 23, 20, 17, 15, 14]
    assert c["sensitivity"] == pytest.approx(0.418, abs=1e-3)
    assert np.argmax(c["sens_terms"]) == 0
    for sig in c["sigmas"]:
        assert 2 * np.sum(1 / sig) == pytest.approx(0.9)  # tight budget ε_main
    X = np.random.default_rng(0).random((30000, 8))
    prep = nb.prepare_adaptive(X, 1.0)
    sel = nb.adaptive_select(prep, 1.0)
    expect = [3559, 786, 487, 247, 132, 51.6, 20.4, 11.7]
    assert np.allclose(sel["scores"], expect, rtol=0.02)
    assert sel["probabilities"].sum() == pytest.approx(1.0)
    assert sel["probabilities"][-1] == pytest.approx(0.74, abs=0.03)
    # a k = 1 coordinate line (others 0.5): near-uniform selection, as documented
    X = np.full((30000, 8), 0.5)
    X[:, 0] = np.random.default_rng(0).random(30000)
    sel = nb.adaptive_select(nb.prepare_adaptive(X, 1.0), 1.0)
    assert np.allclose(sel["scores"], [5.46, 0.674, 0.697, 0.714, 0.771, 0.793, 0.838, 0.901],
                       rtol=0.01)
    expect = [0.075, 0.134, 0.133, 0.133, 0.132, 0.132, 0.131, 0.130]
    assert np.allclose(sel["probabilities"], expect, atol=0.003)


def test_adaptive_selection_law():
    X = data(200, seed=9)
    prep = nb.prepare_adaptive(X, 1.0)
    sel = nb.adaptive_select(prep, 1.0)
    p = sel["probabilities"]
    assert len(p) == 2 and min(p) > 0.05
    rng = np.random.default_rng(4)
    outs = [nb.adaptive_pruned_pmm(prep, 1.0, rng) for _ in range(400)]
    picks = np.array([o["selected"] for o in outs])
    assert stats.chisquare(np.bincount(picks, minlength=2), 400 * p).pvalue > 1e-4
    for o in outs[:20]:
        assert o["depth"] == o["selected_depth"] == sel["depth"][o["selected"]]
        assert o["leaf_mass"].sum() == o["m"]


# ----------------------------------------------------------------------------- validation


def test_rejects_bad_input():
    X = data(50)
    with pytest.raises(ValueError, match="X"):
        nb.prepare_dense(X + 1.0, 3)
    with pytest.raises(ValueError, match="X"):
        nb.prepare_sparse(np.full((3, 2), np.nan), 3)
    with pytest.raises(ValueError, match="r"):
        nb.prepare_sparse(X, 0)
    with pytest.raises(ValueError, match="eps"):
        nb.privtree_shifted(X, 0.0, 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="sigmas"):
        nb.pruned_pmm_sparse(nb.prepare_sparse(X, 3), np.ones(4), 1.0, np.random.default_rng(0))
