"""PMM and Pruned-PMM: engines agree, laws match a NumPy reference, budgets are exact."""

import jax
import numpy as np
import pytest

import jaxsynth as js
from jaxsynth.core import partition
from jaxsynth.mechanisms import schedules
from tests.conftest import count_compiles
from tests.mechanisms import reference_pmm as ref

N_REPS = 2000


@pytest.fixture(scope="module")
def clustered():
    rng = np.random.default_rng(0)
    X = np.clip(0.3 + 0.08 * rng.standard_normal((200, 2)), 0, 1)
    X[:40] = rng.random((40, 2))
    return X


def _leaf_masses(out, depth):
    """Leaf masses [S, 2^depth] in Morton order of dense-engine releases (planar atoms)."""
    w = np.asarray(out.weights, np.float64)
    assert w.shape[-1] == 2**depth
    planar = np.rint(w * np.asarray(out.size)[..., None])
    morton = np.empty_like(planar)
    morton[..., partition.planar_to_morton(depth)] = planar
    return morton


@pytest.mark.parametrize(
    "schedule, k, depth, d",
    [("uniform", None, 9, 3), ("packing", None, 9, 3), ("packing", 1, 9, 3),
     ("profile", None, 9, 3), ("packing", None, 150, 10), ("packing", None, 600, 10)],
)
def test_schedules_spend_budget_exactly(schedule, k, depth, d):
    """``2 Σ 1/σ_j = ε`` in float64, also where σ exceeds every float (ν underflows to 0)."""
    occupancy = np.arange(1, depth + 2)
    nu = schedules.inverse_scales(schedule, 0.7, depth, d, k, occupancy)
    assert nu.shape == (depth,) and np.all(nu >= 0) and np.all(np.isfinite(nu))
    assert 2 * nu.sum() == pytest.approx(0.7, rel=1e-12)


def test_packing_matches_its_closed_form():
    """``σ_i = 2 S_r/(ε q^{i−1})`` with ``q = 2^{(k−1)/(2d)}`` (arXiv 2609.33363 §A.8)."""
    eps, r, d, k = 0.8, 12, 3, 2
    q = 2 ** ((k - 1) / (2 * d))
    sigma = 2 * np.sum(q ** np.arange(r)) / (eps * q ** np.arange(r))
    np.testing.assert_allclose(schedules.packing_inverse_scales(eps, r, d, k), 1 / sigma, rtol=1e-13)


@pytest.mark.parametrize("adjacency", ["replacement", "add_remove"])
def test_accounting_reported(clustered, adjacency):
    out = js.release(0, js.PMM(depth=4, adjacency=adjacency), clustered, eps=0.8)
    acc = out.accounting
    assert acc["adjacency"] == adjacency
    assert acc["epsilon"] == pytest.approx(0.8)
    assert acc["eps_levels"] + acc["eps_root"] == pytest.approx(0.8)
    nu = schedules.packing_inverse_scales(0.8, 4, 2, 2)
    levels = 2 * nu.sum() if adjacency == "replacement" else nu.sum()
    _, sigma0 = schedules.pmm_budget(0.8, adjacency)
    root = 0.0 if adjacency == "replacement" else 1 / sigma0
    assert levels + root == pytest.approx(0.8, rel=1e-12)
    # the scales the kernel draws with spend exactly the reported budget
    params = js.PMM(depth=4, adjacency=adjacency).plan(js.prepare(clustered, 4), [0.8]).params
    used = np.asarray(params["inv_sigma"][0], np.float64).sum()
    used *= 2 if adjacency == "replacement" else 1
    used += 0 if adjacency == "replacement" else float(params["inv_sigma0"][0])
    assert used == pytest.approx(0.8, rel=1e-6)


def test_explicit_root_scale_is_accounted(clustered):
    """Under add/remove the root count costs 1/σ_0; under replacement it is free."""
    out = js.release(0, js.PMM(depth=4, adjacency="add_remove", root_scale=4.0), clustered, 0.8)
    assert out.accounting["eps_root"] == pytest.approx(0.25)
    assert out.accounting["epsilon"] == pytest.approx(0.4 + 0.25)
    out = js.release(0, js.PMM(depth=4, root_scale=4.0), clustered, 0.8)
    assert out.accounting["eps_root"] == 0 and out.accounting["epsilon"] == pytest.approx(0.8)


def test_oracle_schedule_is_labelled(clustered):
    out = js.release(0, js.PMM(depth=4, schedule="profile"), clustered, eps=1.0)
    assert "ORACLE" in out.accounting["adjacency"]


def _atoms(out, e, s):
    """(points, weights) of the positive atoms of replicate [e, s], sorted by point."""
    w = np.asarray(out.weights[e, s])
    p = np.asarray(out.points[e, s])[w > 0]
    order = np.lexsort(p.T)
    return p[order], w[w > 0][order]


@pytest.mark.parametrize("placement", [pytest.param("center", marks=pytest.mark.slow),
                                       "uniform"])
def test_sparse_and_dense_pruned_identical(clustered, placement):
    kwargs = dict(depth=6, placement=placement)
    a, da = js.release_batch(3, js.PrunedPMM(engine="sparse", **kwargs), clustered, [0.5, 2.0],
                             seeds=6, diagnostics=True)
    b, db = js.release_batch(3, js.PrunedPMM(engine="dense", **kwargs), clustered, [0.5, 2.0],
                             seeds=6, diagnostics=True)
    c = js.release_batch(
        3, js.PMM(consistency="zero_respecting", **kwargs), clustered, [0.5, 2.0], seeds=6
    )
    for e in range(2):
        for s in range(6):
            pa, wa = _atoms(a, e, s)
            pb, wb = _atoms(b, e, s)
            pc, wc = _atoms(c, e, s)
            np.testing.assert_array_equal(wa, wb)
            np.testing.assert_array_equal(pa, pb)
            np.testing.assert_array_equal(wc, wb)
    np.testing.assert_array_equal(np.asarray(a.visited), np.asarray(b.visited))
    np.testing.assert_array_equal(np.asarray(a.size), np.asarray(c.size))
    for field in ("tree_linf", "tree_l2", "upper_linf", "upper_l2"):
        np.testing.assert_allclose(da[field], db[field], rtol=1e-6)


@pytest.mark.parametrize("mech, pruned", [(js.PMM(depth=4), False), (js.PrunedPMM(depth=4), True)])
def test_law_matches_numpy_reference(clustered, mech, pruned):
    """Mean and spread of every leaf mass agree within 5 standard errors.

    The reference draws its noise with NumPy's geometric variates, independently of the
    engine's words, so this checks the laws, not the bits.
    """
    eps = 1.0
    out = js.release_batch(11, mech, clustered, eps, seeds=N_REPS)[0]
    ours = _leaf_masses(out, 4)
    sig = 1 / schedules.packing_inverse_scales(eps, 4, 2, 2)
    rule = ref.zero_respecting if pruned else ref.proportional
    rng = np.random.default_rng(12)
    theirs = np.array([ref.release(rng, clustered, 4, sig, 1 / eps, rule, pruned)[0] for _ in range(N_REPS)])
    se = np.sqrt((ours.var(0) + theirs.var(0)) / N_REPS) + 1e-9
    assert np.all(np.abs(ours.mean(0) - theirs.mean(0)) <= 5 * se + 1e-6)
    sd_o, sd_t = ours.std(0), theirs.std(0)
    se_sd = np.sqrt((sd_o**2 + sd_t**2) / (2 * N_REPS)) * 1.5 + 1e-9  # 1.5: heavy tails
    assert np.all(np.abs(sd_o - sd_t) <= 5 * se_sd + 1e-6)
    # visited nodes: fixed for PMM, in law for Pruned-PMM
    v_ref = np.array([ref.release(rng, clustered, 4, sig, 1 / eps, rule, pruned)[1] for _ in range(300)])
    v = np.asarray(out.visited)
    assert abs(v.mean() - v_ref.mean()) <= 5 * np.sqrt(v.var() / len(v) + v_ref.var() / len(v_ref)) + 1e-9


def test_measure_is_valid(clustered):
    out = js.release_batch(0, js.PMM(depth=5, placement="uniform"), clustered, [0.3, 3.0], seeds=4)
    w = np.asarray(out.weights)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)
    pts = np.asarray(out.points)
    assert pts.min() >= 0 and pts.max() < 1
    # every unit of mass sits in a distinct uniform point: weights are 1/m
    m = np.asarray(out.size)
    np.testing.assert_allclose(np.sort(w, -1)[..., -1], 1 / m, rtol=1e-6)
    assert np.all(np.asarray(out.visited) == 2**6 - 1)
    assert np.all(np.asarray(out.leaf_depth) == 5)


@pytest.mark.parametrize("engine", [pytest.param("sparse", marks=pytest.mark.slow), "dense"])
def test_same_key_same_replicate_any_batch_or_chunk(clustered, engine):
    mech = js.PrunedPMM(depth=6, engine=engine)
    big, dbig = js.release_batch(5, mech, clustered, [0.5, 1.0], seeds=8, diagnostics=True)
    chunked, dchunked = js.release_batch(5, mech, clustered, [0.5, 1.0], seeds=8,
                                         memory_bytes=2**22, diagnostics=True)
    subset = js.release_batch(5, mech, clustered, [1.0], seeds=[6, 2])
    np.testing.assert_array_equal(np.asarray(big.weights), np.asarray(chunked.weights))
    for field in ("tree_linf", "upper_l2"):
        np.testing.assert_array_equal(np.asarray(dbig[field]), np.asarray(dchunked[field]))
    # a different ε list may pad the atoms differently (capacity follows the root scale)
    for a, b in ((big[1, 6], subset[0, 0]),
                 (big[1, 2], js.release(jax.random.fold_in(jax.random.key(5), 2), mech, clustered, 1.0))):
        wa, wb = np.asarray(a.weights), np.asarray(b.weights)
        size = min(wa.size, wb.size)
        np.testing.assert_array_equal(wa[:size], wb[:size])
        assert not wa[size:].any() and not wb[size:].any()
        np.testing.assert_array_equal(np.asarray(a.points)[:size][wa[:size] > 0],
                                      np.asarray(b.points)[:size][wb[:size] > 0])


@pytest.mark.parametrize("mech", [
    pytest.param(js.PMM(depth=5), id="pmm"),
    pytest.param(js.PrunedPMM(depth=9, engine="sparse"), id="sparse"),
    pytest.param(js.PMM(), id="pmm-default"),
    pytest.param(js.PrivTree(), id="privtree"),
    pytest.param(js.PrivTree(shift=True), id="shifted", marks=pytest.mark.slow),
    pytest.param(js.AdaptivePrunedPMM(), id="adaptive", marks=pytest.mark.slow)])
def test_no_recompile_for_new_eps_or_seed_count(clustered, mech):
    """ε is traced and chunks have one shape: a new ε list or seed count reuses the kernel.

    Only the small assembly of the [E, S] outputs (and the seed-key hash, per power of two
    of seeds) compiles again for a new grid shape.  Default depths are static shapes: the
    complete tree of ``PMM()`` is as deep as the largest ``⌈log2(εn)⌉``, PrivTree's
    default cap is ``d(⌈log2(εn)⌉ + 1)``, and these budgets all give ``⌈log2(εn)⌉ = 8``;
    Adaptive's candidate depths are padded to a bucket of levels.
    """
    tree = js.prepare(clustered, 9)
    js.release_batch(0, mech, tree, [0.65, 1.0], seeds=5)
    with count_compiles() as compiles:
        js.release_batch(1, mech, tree, [0.7, 0.9], seeds=7)
        js.release_batch(2, mech, tree, [0.8], seeds=13)
    assert compiles["_run_chunk"] == 0
    assert set(compiles) <= {"_assemble", "_fold_in"}


def test_default_depth_is_ambient_rule(clustered):
    out = js.release_batch(0, js.PMM(), clustered, [1.0, 4.0], seeds=2)
    np.testing.assert_array_equal(np.asarray(out.depth)[:, 0], [8, 10])  # ⌈log2(εn)⌉


@pytest.mark.slow
def test_in_kernel_tree_w1_equals_the_general_formula(clustered):
    """The W1 a kernel accumulates while it descends equals ``js.w1`` (atoms sorted again)."""
    for mech in (js.PMM(depth=6), js.PrunedPMM(depth=6, engine="sparse"), js.PrunedPMM(depth=12)):
        out, diag = js.release_batch(4, mech, clustered, [0.5, 2.0], seeds=3, diagnostics=True)
        for metric in ("linf", "l2"):
            general = js.w1(clustered, out, method="tree", metric=metric)
            np.testing.assert_allclose(diag[f"tree_{metric}"], general, rtol=2e-5, atol=1e-7)
            upper = js.w1(clustered, out, method="tree_upper", metric=metric)
            np.testing.assert_allclose(diag[f"upper_{metric}"], upper, rtol=1e-4)


@pytest.mark.slow
def test_deep_sparse_tree_costs_follow_active_nodes():
    """Depth 150 in d = 10 runs without 2^r work; visited ≤ 1 + 2mr."""
    X = js.datasets.load("subspace", n=30000, d=10, k=1, key=0)
    out = js.release(0, js.PrunedPMM(depth=150, engine="sparse", schedule="uniform"), X, 1.0)
    m, visited = int(out.size), int(out.visited)
    assert 1 < visited <= 1 + 2 * m * 150
    assert int(out.leaves) <= m and float(np.sum(np.asarray(out.weights))) == pytest.approx(1, rel=1e-5)


@pytest.mark.slow
def test_deep_packing_beyond_int32_scales_runs():
    """Packing at depth 150 in d = 10: the top scales reach ~1e21 (beyond int32 counts).

    The release runs; at the root level the noisy counts are pure noise, so a child is
    pruned (noisy count 0) with probability 1/2 whatever its count, and the first split
    sends all the mass to one child in half of the replicates.
    """
    nu = schedules.packing_inverse_scales(1.0, 150, 10, 10)
    assert 1 / nu.min() > 2.0**60
    X = js.datasets.load("subspace", n=2000, d=10, k=2, key=0)
    out = js.release_batch(0, js.PrunedPMM(depth=150), X, 1.0, seeds=64)
    w = np.asarray(out.weights)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)
    lower = np.asarray(out.points)[..., 0]  # coordinate 0 is split at level 0
    one_side = np.array([(lo[wi > 0] < 0.5).all() or (lo[wi > 0] >= 0.5).all()
                         for lo, wi in zip(lower[0], w[0])])
    # P(exactly one of two pure-noise counts is 0) + P(both 0) = 3/4: 48 of 64 expected
    assert 30 <= one_side.sum() <= 62


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda X: js.release(0, js.PMM(depth=3), X, 0.0), "eps"),
        (lambda X: js.release(0, js.PMM(depth=3), X, float("nan")), "eps"),
        (lambda X: js.release(0, js.PMM(depth=3), X, True), "eps"),
        (lambda X: js.release(0, js.PMM(depth=3), X[:0], 1.0), "empty"),
        (lambda X: js.release(0, js.PMM(depth=3), X + 1.0, 1.0), "outside"),
        (lambda X: js.release(0, js.PMM(depth=40), X, 1.0), "PrunedPMM\\(engine='sparse'\\)"),
        (lambda X: js.release(0, js.PMM(depth=3, root_scale=1e12), X, 1.0), "root_scale"),
        (lambda X: js.PMM(depth=0), "depth"),
        (lambda X: js.PMM(depth=2.5), "depth"),
        (lambda X: js.PMM(schedule="geometric"), "schedule"),
        (lambda X: js.PMM(placement="corner"), "placement"),
        (lambda X: js.PrunedPMM(engine="gpu"), "engine"),
        (lambda X: js.PMM(adjacency="swap"), "adjacency"),
        (lambda X: js.PMM(root_scale="x"), "root_scale"),
        (lambda X: js.release_batch(0, js.PMM(depth=3), X, 1.0, seeds=0), "seeds"),
        (lambda X: js.release_batch(0, js.PMM(depth=3), X, 1.0, seeds=1.5), "seeds"),
        (lambda X: js.release_batch("abc", js.PMM(depth=3), X, 1.0), "key"),
        (lambda X: js.release(0, "pmm", X, 1.0), "mech"),
        (lambda X: js.release_batch(0, js.PMM(depth=3), X, 1.0, memory_bytes=0), "memory_bytes"),
        (lambda X: js.release(0, js.PMM(depth=3), X.astype(complex), 1.0), "real"),
    ],
)
def test_bad_input_rejected(clustered, call, match):
    with pytest.raises(ValueError, match=match):
        call(clustered)


@pytest.mark.slow
def test_fitted_capacity_reruns_overflows_identically(clustered):
    """A frontier sized below the root mass overflows, is rerun safely, changes nothing."""
    import dataclasses

    from jaxsynth import engine
    from jaxsynth.core.keys import replicate_keys

    tree = js.prepare(clustered, 12)
    safe = js.PrunedPMM(depth=12, engine="sparse").plan(tree, [0.5, 2.0])
    assert safe.shrink is not None and safe.static.capacity >= 200
    tight = dataclasses.replace(safe, static=dataclasses.replace(safe.static, capacity=16))
    keys = replicate_keys(9, 8)
    overflow = engine._run_chunk(
        tight.kernel, tight.static, ("overflow",), np.tile(keys, (2, 1)),
        np.repeat(np.arange(2, dtype=np.int32), 8), engine._padded_params(tight.params),
        tight.shared, True,
    )["overflow"]
    assert 0 < int(np.sum(overflow)) < 16  # some replicates fit in 16 slots, some do not
    reference = engine.run(safe, keys, chunk=16)
    for chunk in (1, 4):  # the first chunk sizes the others; overflowing ones are rerun
        for plan in (safe, tight):
            out = engine.run(plan, keys, chunk=chunk)
            for field in ("weights", "points", "size", "visited", "level_gap", "leaf_mass"):
                np.testing.assert_array_equal(out[field], reference[field])
