"""Adaptive Pruned-PMM (Zare Moayedi et al., arXiv 2609.33363, §4.2, §B.1–B.6).

Truth used here: the candidate formulas recomputed term by term in float64 Python; the
score-sensitivity bound checked on explicit neighbouring data sets (scores from the
exact occupancy of each); selection frequencies against the softmax recomputed from
those formulas (chi-square); the synthesis stage against a direct sparse Pruned-PMM run
with the key, root scale and schedule the paper prescribes.

Compile time dominates on CPU, so every JAX test shares one small configuration
(``d = 4``, ``n = 200``, ``k = 2`` subspace, ``ε = 16``), except the deep test, which
also checks the synthesis stage against a direct sparse Pruned-PMM call.
"""

import functools
import math

import jax
import numpy as np
import pytest
import scipy.stats

import dataclasses

from jaxsynth import engine
from jaxsynth.api import release, release_batch
from jaxsynth.core import keys as K
from jaxsynth.core.datatree import DataTree
from jaxsynth.experiments import datasets
from jaxsynth.mechanisms.adaptive import (
    AdaptivePrunedPMM,
    main_key,
    select_candidate,
)
from jaxsynth.mechanisms.pmm_kernels import root_mass, sparse_kernel
from jaxsynth.core.measure import LEVEL_FIELDS
from jaxsynth.mechanisms.schedules import packing_inverse_scales


N, D, EPS = 200, 4, 16.0
MECH = AdaptivePrunedPMM()
_SELECT = jax.jit(jax.vmap(select_candidate, in_axes=(0, None, None, None)))


@functools.cache
def _keys():
    return K.replicate_keys(0, 20000)  # the replicate keys of release_batch(0, ..., seeds=20000)


def _draws(sel, eps):
    """Selections of replicates 0..19999 of ``release_batch(key=0, ...)`` (one compile)."""
    return np.asarray(_SELECT(_keys(), sel["gaps"], sel["sensitivity"], 0.1 * eps))


@pytest.fixture(scope="module")
def small():
    X = datasets.load("subspace", n=N, d=D, k=2, key=0)
    return X, DataTree.build(X, MECH.data_depth(N, D, EPS))


# ---------------------------------------------------------------- reference formulas


def ref_candidates(n, d, em, kind="standard", C=1.0):
    """(s, r, sigmas, public bound, Δ_a) per candidate, plain Python floats (§B.1)."""
    L = math.floor(d * math.log2(em * n))

    def norm(s, r):
        q = 2 ** ((s - 1) / (2 * d))
        return 2 * sum(q**j for j in range(r))

    def bound(s, r):
        return C / (em * n) + 2 * C / (em * n) * norm(s, r) ** 2 + 2 * 2 ** (-r / d)

    pairs = [(1, L)] + [
        (s, max(1, math.floor(d / s * math.log2(1 + em * n * ((s - 1) / d) ** 2))))
        for s in range(2, d + 1)
    ]
    if kind == "enlarged":
        for s in range(1, d + 1):  # the smallest minimiser over r = 1..L
            pairs.append((s, min(range(1, L + 1), key=lambda r: (bound(s, r), r))))
    out = []
    for s, r in pairs:
        q = 2 ** ((s - 1) / (2 * d))
        sig = [norm(s, r) / (em * q**j) for j in range(r)]
        delta = 4 * C / n * sum(sig[j] * 2 ** (-j / d) for j in range(r))
        out.append((s, r, sig, bound(s, r), delta))
    return L, out


def ref_scores(occ, n, d, em, cands, C=1.0):
    return np.array([
        C / (em * n) + 4 * C / n * sum(sig[j] * occ[j] * 2 ** (-j / d) for j in range(r))
        + 2 * 2 ** (-r / d)
        for _, r, sig, _, _ in cands
    ])


# ---------------------------------------------------------------- public candidates


@pytest.mark.parametrize("n,d,eps,kind", [
    (30000, 8, 1.0, "standard"), (30000, 10, 1.0, "enlarged"), (200, 4, 16.0, "enlarged"),
    (1000, 2, 0.5, "standard"), (50, 1, 3.0, "enlarged"),
])
def test_candidates_match_formulas(n, d, eps, kind):
    mech = AdaptivePrunedPMM(candidates=kind)
    em = 0.9 * eps
    L, ref = ref_candidates(n, d, em, kind)
    cands = mech.candidate_set(n, d, eps)
    assert mech.data_depth(n, d, eps) == L
    assert len(cands.s) == len(ref) == (2 * d if kind == "enlarged" else d)
    for a, (s, r, sig, bound, delta) in enumerate(ref):
        assert (cands.s[a], cands.depth[a]) == (s, r)
        np.testing.assert_allclose(cands.sigmas[a, :r], sig, rtol=1e-12)
        np.testing.assert_allclose(cands.bound[a], bound, rtol=1e-12)
        np.testing.assert_allclose(cands.sensitivity_terms[a], delta, rtol=1e-12)
        # the budget is spent exactly, and the schedule is packing(s) at ε_main (§A.8)
        np.testing.assert_allclose(2 * np.sum(1 / cands.sigmas[a, :r]), em, rtol=1e-12)
        if d == 4 and a < d:  # one case: each call compiles a few small kernels
            np.testing.assert_allclose(1 / packing_inverse_scales(em, r, d, s), sig, rtol=1e-10)
    # an r_s* equal to r_s° is an exact duplicate and is switched off, nothing else is
    expect_active = [True] * d + [ref[d + i][1] != ref[i][1] for i in range(len(ref) - d)]
    np.testing.assert_array_equal(cands.active, expect_active)
    np.testing.assert_allclose(cands.sensitivity, max(
        x[4] for x, on in zip(ref, expect_active) if on), rtol=1e-12)


def test_fig2_candidate_depths_by_hand():
    # d = 8, n = 30000, ε_main = 0.9: L = ⌊8 log2 27000⌋ = ⌊117.8⌋,
    # s = 2: ⌊4 log2(1 + 27000/64)⌋ = ⌊34.9⌋
    cands = MECH.candidate_set(30000, 8, 1.0)
    np.testing.assert_array_equal(cands.depth, [117, 34, 28, 23, 20, 17, 15, 14])
    assert MECH.data_depth(30000, 10, 1.0) == 147  # ⌊10 log2 27000⌋ = ⌊147.2⌋


def test_candidate_table(small):
    X, _ = small
    table = AdaptivePrunedPMM(candidates="enlarged").candidate_table(N, D, EPS, X)
    assert list(table.columns[:4]) == ["s", "depth", "kind", "active"]
    assert len(table) == 2 * D
    np.testing.assert_allclose(table.probability.sum(), 1.0, rtol=1e-6)
    assert (table.probability[~table.active] == 0).all()
    assert table.attrs["eps_main"] == pytest.approx(0.9 * EPS)


# ---------------------------------------------------------------- sensitivity


def _neighbours(X, rng):
    """Neighbouring data sets (one point replaced): random and adversarial replacements."""
    n, d = X.shape
    far = [np.ones(d), np.zeros(d), np.eye(d)[0]]
    for _ in range(60):
        i = rng.integers(n)
        yield i, rng.random(d)  # random replacement
    for i in rng.choice(n, 15, replace=False):
        for corner in far:
            yield i, corner  # move a point to a far corner
        yield i, X[rng.integers(n)]  # duplicate another point
        yield i, X[i] + 1e-12  # move by a hair (same cell at every level)
    yield n - 1, X[0]  # the isolated outlier (last point) into the cluster


@pytest.mark.parametrize("kind", ["standard", "enlarged"])
def test_score_sensitivity_bound(kind):
    rng = np.random.default_rng(1)
    n, d, eps = 150, 3, 1.0
    mech = AdaptivePrunedPMM(candidates=kind)
    L = mech.data_depth(n, d, eps)
    cands = mech.candidate_set(n, d, eps)
    uniform = rng.random((n, d))
    cluster = np.vstack([0.05 * rng.random((n - 1, d)), np.ones((1, d))])  # + one outlier
    for X in (uniform, cluster):
        base = cands.scores(DataTree.build(X, L).occupancy)
        for i, x in _neighbours(X, rng):
            Y = X.copy()
            Y[i] = np.clip(x, 0.0, 1.0)
            change = cands.scores(DataTree.build(Y, L).occupancy) - base
            assert np.all(np.abs(change) <= cands.sensitivity * (1 + 1e-12)), (i, x)
    # Near-tightness: the outlier is alone in its cell from level 1 on, so moving it into
    # the cluster lowers every O_j, j ≥ 1, by one; for s = 1 (which attains Δ) the score
    # drops by Δ minus the level-0 term, i.e. by Δ·(1 − 1/Σ_{j<L} 2^{−j/d}) ≈ 0.79 Δ.
    assert cands.sensitivity == cands.sensitivity_terms[0]
    j = np.arange(1, L)
    drop = 4 / n * np.sum(cands.sigmas[0, 1:L] * np.exp2(-j / d))
    np.testing.assert_allclose(change[0], -drop, rtol=1e-10)
    assert drop > 0.75 * cands.sensitivity


# ---------------------------------------------------------------- selection


def test_selection_frequencies_match_softmax(small):
    X, tree = small
    em, es = 0.9 * EPS, 0.1 * EPS
    _, ref = ref_candidates(N, D, em)
    scores = ref_scores(tree.occupancy, N, D, em, ref)
    delta = max(x[4] for x in ref)
    logits = -es * scores / (2 * delta)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    assert np.sort(p)[-3] > 0.1  # three non-degenerate candidates (about 0.15, 0.31, 0.54)

    sel = MECH.selection_not_private(tree, EPS)
    np.testing.assert_allclose(sel["scores"], scores, rtol=1e-10)
    np.testing.assert_allclose(sel["sensitivity"], delta, rtol=1e-12)
    np.testing.assert_allclose(sel["probabilities"], p, atol=2e-6)

    picked = _draws(sel, EPS)
    draws = len(picked)
    counts = np.bincount(picked, minlength=D)
    live = p * draws >= 5  # chi-square cells need expected counts ≥ 5
    assert counts[~live].sum() <= 1
    # Fixed key, so deterministic; the threshold is a 0.1% false alarm rate for a random key.
    stat = scipy.stats.chisquare(counts[live], p[live] / p[live].sum() * counts[live].sum())
    assert stat.pvalue > 1e-3


def test_intrinsic_dimension_argmin():
    """The score separates a line from the full cube (n = 30000, ε = 1).

    On a line the minimiser is ``s = 2``, not ``s = 1``: the ``s = 1`` candidate (depth L,
    flat schedule) has a noise term of order ``8 L^2/(ε_main n)`` (1.3 here) and overtakes
    ``s = 2`` only from ``εn ≈ 10^8`` at ``d = 4`` (module docstring).  On the cube the
    minimiser is the ambient ``s = d``.
    """
    n, eps = 30000, 1.0
    def argmin(X):
        n, d = X.shape
        sel = MECH.selection_not_private(DataTree.build(X, MECH.data_depth(n, d, eps)), eps)
        return int(np.argmin(sel["scores"])) + 1, sel["probabilities"]
    s_line, _ = argmin(datasets.load("subspace", n=n, d=4, k=1, key=0))
    s_cube4, p_cube4 = argmin(datasets.load("uniform", n=n, d=4, key=0))
    s_cube2, _ = argmin(datasets.load("uniform", n=n, d=2, key=0))
    assert (s_line, s_cube4, s_cube2) == (2, 4, 2)
    assert p_cube4[3] > 0.95  # ambient data: the gap to s = 3 is about 87 Δ, a sharp choice


# ---------------------------------------------------------------- release


@pytest.fixture(scope="module")
def batch(small):
    _, tree = small
    return release_batch(0, MECH, tree, [EPS, EPS / 2], seeds=2, diagnostics=True)


def test_batch_outputs_and_accounting(small, batch):
    _, tree = small
    out, diag = batch
    assert out.batch_shape == (2, 2) and out.mechanism == "adaptive-pruned-pmm"
    for e, eps in enumerate([EPS, EPS / 2]):
        sel = MECH.selection_not_private(tree, eps)
        np.testing.assert_array_equal(out.info["selected"][e], _draws(sel, eps)[:2])
        cand_depth = out.info["candidate_depths"][e, 1]
        np.testing.assert_array_equal(cand_depth, sel["candidates"].depth)
        np.testing.assert_array_equal(out.depth[e], cand_depth[out.info["selected"][e]])
        np.testing.assert_array_equal(out.info["candidate_s"][e, 0], np.arange(1, D + 1))
        np.testing.assert_allclose(diag["probabilities"][e, 1], sel["probabilities"], atol=1e-7)
        np.testing.assert_allclose(diag["scores"][e, 0], sel["scores"], rtol=1e-6)
        np.testing.assert_allclose(diag["sensitivity"][e], sel["sensitivity"], rtol=1e-6)
    # the two ε have different largest depths: the smaller one is padded, not mixed up
    assert out.info["candidate_depths"][1, 0, 0] < out.info["candidate_depths"][0, 0, 0]
    live = out.weights > 0
    assert np.all(np.where(live, out.leaf_depth == out.depth[..., None], True))
    np.testing.assert_allclose(out.weights.sum(-1), 1.0, rtol=1e-5)
    assert np.all(out.visited <= 1 + 2 * out.size * out.depth)
    acc = out.accounting
    assert acc["adjacency"] == "replacement"
    np.testing.assert_allclose(acc["eps_sel"] + acc["eps_main"], acc["epsilon"], rtol=1e-6)
    np.testing.assert_allclose(acc["epsilon"][:, 0], [EPS, EPS / 2])
    np.testing.assert_allclose(acc["eps_sel"], 0.1 * acc["epsilon"], rtol=1e-6)


def test_release_matches_batch(small, batch):
    """``release(fold_in(key, s))`` is replicate ``s`` of the batch; its root mass is
    ``max(1, n + LapZ(1/ε_main))`` drawn with the synthesis key ``main_key``."""
    _, tree = small
    for s in range(2):
        key = jax.random.fold_in(jax.random.key(0), s)
        one, one_diag = release(key, MECH, tree, EPS, diagnostics=True)
        many, many_diag = batch[0][0, s], batch[1]
        size = min(one.weights.shape[-1], many.weights.shape[-1])
        for a, b in [(one.weights, many.weights), (one.points, many.points)]:
            np.testing.assert_array_equal(a[:size], b[:size])
            assert not np.any(a[size:]) and not np.any(b[size:])
        np.testing.assert_array_equal(one.info["selected"], many.info["selected"])
        for name in ("probabilities", "scores", "sensitivity"):
            np.testing.assert_array_equal(one_diag[name], many_diag[name][0, s])
        assert (int(one.size), int(one.visited), int(one.depth)) == (
            int(many.size), int(many.visited), int(many.depth))
        synthesis = main_key(jax.random.key_data(key))
        assert int(one.size) == int(root_mass(synthesis, N, 0.9 * EPS))


def test_key_tags_are_distinct():
    """Every draw has its own counter tag (``keys`` docstring); tags fit in ``c0 >> 5``."""
    tags = [K.EXPAND, K.ROOT, K.LEAF, K.CHUNK, K.SELECT, K.SHIFT, K.MAIN]
    tags += [K.PLACE + t for t in range(8)] + [K.POINT + t for t in range(32)]
    assert len(set(tags)) == len(tags) and max(tags) < 2**27


@pytest.mark.slow
def test_deep_candidate_runs_in_linear_cost():
    """The ``s = 1`` candidate at ``d = 10``, ``n = 30000``, ``ε = 1``: depth ``L = 147``.

    A complete tree would have 2^147 nodes; the sparse run visits ``≤ 1 + 2 m L``.  The
    synthesis stage is sparse Pruned-PMM with the key ``main_key``, the candidate's
    schedule and depth: run directly, it releases the same measure.
    """
    n, d, eps = 30000, 10, 1.0
    X = datasets.load("subspace", n=n, d=d, k=1, key=0)
    tree = DataTree.build(X, MECH.data_depth(n, d, eps))
    cands = MECH.candidate_set(n, d, eps)
    assert cands.depth[0] == tree.depth == 147
    plan = MECH.plan(tree, [eps])
    forced = np.where(np.arange(d) == 0, 0.0, np.inf)[None]  # select s = 1 with probability 1
    plan = dataclasses.replace(plan, params={**plan.params, "gaps": forced.astype(np.float32)})
    key = jax.random.key_data(jax.random.key(3))[None]
    out = engine.run(plan, key)
    assert (int(out["selected"][0, 0]), int(out["depth"][0, 0])) == (0, 147)
    m, visited = int(out["size"][0, 0]), int(out["visited"][0, 0])
    assert 1 < visited <= 1 + 2 * m * 147
    assert 0 < int(out["leaves"][0, 0]) <= m
    np.testing.assert_allclose(float(out["weights"].sum()), 1.0, rtol=1e-5)
    direct = dataclasses.replace(
        plan, kernel=sparse_kernel, order=None, info_fields=(), diagnostic_fields=LEVEL_FIELDS,
        params={"inv_sigma": plan.params["inv_sigmas"][:, 0], "depth": np.array([147]),
                "inv_sigma0": plan.params["inv_sigma0"]},
    )
    again = engine.run(direct, np.asarray(main_key(key[0]))[None])
    for field in ("points", "weights", "size", "visited", "leaves", "level_gap"):
        np.testing.assert_array_equal(out[field], again[field])


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("kwargs,name", [
    (dict(eps_sel=0.0), "eps_sel"), (dict(eps_sel=1.0), "eps_sel"),
    (dict(eps_sel=float("nan")), "eps_sel"), (dict(eps_sel=-0.2), "eps_sel"),
    (dict(candidates="all"), "candidates"), (dict(C=0.0), "C"), (dict(C=float("inf")), "C"),
    (dict(placement="corner"), "placement"),
])
def test_bad_config(kwargs, name):
    with pytest.raises(ValueError, match=name):
        AdaptivePrunedPMM(**kwargs)


def test_too_little_budget():
    with pytest.raises(ValueError, match=r"eps_main \* n"):
        MECH.data_depth(2, 2, 1.0)  # ε_main n = 1.8 < 2
    with pytest.raises(ValueError, match=r"eps_main \* n"):
        release(0, MECH, np.full((3, 2), 0.5), 0.5)
    with pytest.raises(ValueError, match="eps"):
        release(0, MECH, np.full((3, 2), 0.5), -1.0)


def test_shallow_tree_refused(small):
    X, _ = small
    with pytest.raises(ValueError, match="depth"):
        MECH.selection_not_private(DataTree.build(X, 5), EPS)
