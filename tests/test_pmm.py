"""PMM and Pruned-PMM: engines agree, laws match a NumPy reference, budgets are exact."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsynth as js
from jaxsynth import batching, schedules
from tests import reference_pmm as ref

N_REPS = 2000


@pytest.fixture(scope="module")
def clustered():
    rng = np.random.default_rng(0)
    X = np.clip(0.3 + 0.08 * rng.standard_normal((200, 2)), 0, 1)
    X[:40] = rng.random((40, 2))
    return X


def _leaf_masses(out, depth):
    """Leaf masses [S, 2^depth] of dense-engine releases (atoms are the leaves in Morton order)."""
    w = np.asarray(out.weights, np.float64)
    assert w.shape[-1] == 2**depth
    return np.rint(w * np.asarray(out.size)[..., None])


@pytest.mark.parametrize(
    "schedule, k", [("uniform", None), ("packing", None), ("packing", 1), ("profile", None)]
)
def test_schedules_spend_budget_exactly(schedule, k):
    tree = js.prepare(np.random.default_rng(1).random((500, 3)), 9)
    sig = schedules.level_scales(schedule, 0.7, 9, 3, k, tree.occupancy)
    assert float(2 * jnp.sum(1 / sig)) == pytest.approx(0.7, rel=1e-5)


@pytest.mark.parametrize("adjacency", ["replacement", "add_remove"])
def test_accounting_reported(clustered, adjacency):
    out = js.release(0, js.PMM(depth=4, adjacency=adjacency), clustered, eps=0.8)
    acc = out.accounting
    assert acc["adjacency"] == adjacency
    assert acc["epsilon"] == pytest.approx(0.8)
    assert acc["eps_levels"] + acc["eps_root"] == pytest.approx(0.8)
    budget, sigma0 = schedules.pmm_budget(0.8, adjacency)
    sig = schedules.packing_scales(0.8, 4, 2, 2)
    levels = float(jnp.sum(1 / sig)) * (2 if adjacency == "replacement" else 1)
    root = 0.0 if adjacency == "replacement" else 1 / sigma0
    assert levels + root == pytest.approx(0.8, rel=1e-5)


def test_oracle_schedule_is_labelled(clustered):
    out = js.release(0, js.PMM(depth=4, schedule="profile"), clustered, eps=1.0)
    assert "ORACLE" in out.accounting["adjacency"]


@pytest.mark.parametrize("placement", ["center", "uniform"])
def test_sparse_and_dense_pruned_identical(clustered, placement):
    kwargs = dict(depth=6, placement=placement)
    a = js.release_batch(3, js.PrunedPMM(engine="sparse", **kwargs), clustered, [0.5, 2.0], seeds=6)
    b = js.release_batch(3, js.PrunedPMM(engine="dense", **kwargs), clustered, [0.5, 2.0], seeds=6)
    c = js.release_batch(
        3, js.PMM(consistency="zero_respecting", **kwargs), clustered, [0.5, 2.0], seeds=6
    )
    for e in range(2):
        for s in range(6):
            wa, wb, wc = (np.asarray(o.weights[e, s]) for o in (a, b, c))
            np.testing.assert_array_equal(wa[wa > 0], wb[wb > 0])
            np.testing.assert_array_equal(wc[wc > 0], wb[wb > 0])
            pa, pb = np.asarray(a.points[e, s]), np.asarray(b.points[e, s])
            np.testing.assert_array_equal(pa[wa > 0], pb[wb > 0])
    np.testing.assert_array_equal(np.asarray(a.visited), np.asarray(b.visited))
    np.testing.assert_array_equal(np.asarray(a.size), np.asarray(c.size))


@pytest.mark.parametrize("mech, pruned", [(js.PMM(depth=4), False), (js.PrunedPMM(depth=4), True)])
def test_law_matches_numpy_reference(clustered, mech, pruned):
    """Mean and spread of every leaf mass agree within 5 standard errors."""
    eps = 1.0
    out = js.release_batch(11, mech, clustered, eps, seeds=N_REPS)[0]
    ours = _leaf_masses(out, 4)
    sig = np.asarray(schedules.packing_scales(eps, 4, 2, 2), np.float64)
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


def test_same_key_same_replicate_any_batch_or_chunk(clustered):
    mech = js.PrunedPMM(depth=6, engine="sparse")
    big = js.release_batch(5, mech, clustered, [0.5, 1.0], seeds=8)
    chunked = js.release_batch(5, mech, clustered, [0.5, 1.0], seeds=8, memory_bytes=1)
    subset = js.release_batch(5, mech, clustered, [1.0], seeds=[6, 2])
    np.testing.assert_array_equal(np.asarray(big.weights), np.asarray(chunked.weights))
    np.testing.assert_array_equal(np.asarray(big.weights[1, 6]), np.asarray(subset.weights[0, 0]))
    one = js.release(jax.random.fold_in(jax.random.PRNGKey(5), 2), mech, clustered, 1.0)
    np.testing.assert_array_equal(np.asarray(big.points[1, 2]), np.asarray(one.points))


def test_no_recompile_when_eps_changes(clustered):
    """ε is traced: a new list of budgets reuses the compiled batch kernel."""
    from jaxsynth import pmm

    tree = js.prepare(clustered, 5)
    js.release_batch(0, js.PMM(depth=5), tree, [0.5, 1.0], seeds=4)
    compiled = batching._vmapped(pmm._dense_kernel("proportional", False, 0), (0, 0, None, None))
    cached = (batching._vmapped.cache_info().currsize, compiled._cache_size())
    js.release_batch(1, js.PMM(depth=5), tree, [0.7, 3.0], seeds=4)
    assert (batching._vmapped.cache_info().currsize, compiled._cache_size()) == cached


def test_default_depth_is_ambient_rule(clustered):
    out = js.release_batch(0, js.PMM(), clustered, [1.0, 4.0], seeds=2)
    np.testing.assert_array_equal(np.asarray(out.depth)[:, 0], [8, 10])  # ⌈log2(εn)⌉


def test_deep_sparse_tree_costs_follow_active_nodes():
    """Depth 150 in d = 10 runs without 2^r work; visited ≤ 1 + 2mr."""
    X = js.datasets.load("subspace", n=30000, d=10, k=1, key=0)
    out = js.release(0, js.PrunedPMM(depth=150, engine="sparse", schedule="uniform"), X, 1.0)
    m, visited = int(out.size), int(out.visited)
    assert 1 < visited <= 1 + 2 * m * 150
    assert int(out.leaves) <= m and float(np.sum(np.asarray(out.weights))) == pytest.approx(1, rel=1e-5)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda X: js.release(0, js.PMM(depth=3), X, 0.0), "eps"),
        (lambda X: js.release(0, js.PMM(depth=3), X, float("nan")), "eps"),
        (lambda X: js.release(0, js.PMM(depth=3), X[:0], 1.0), "empty"),
        (lambda X: js.release(0, js.PMM(depth=3), X + 1.0, 1.0), "outside"),
        (lambda X: js.release(0, js.PMM(depth=40), X, 1.0), "PrunedPMM\\(engine='sparse'\\)"),
        (lambda X: js.release(0, js.PMM(depth=3), X, 1e-9), "eps"),
        (lambda X: js.PMM(depth=0), "depth"),
        (lambda X: js.PMM(schedule="geometric"), "schedule"),
        (lambda X: js.PMM(placement="corner"), "placement"),
        (lambda X: js.PrunedPMM(engine="gpu"), "engine"),
        (lambda X: js.PMM(adjacency="swap"), "adjacency"),
        (lambda X: js.release_batch(0, js.PMM(depth=3), X, 1.0, seeds=0), "seeds"),
    ],
)
def test_bad_input_rejected(clustered, call, match):
    with pytest.raises(ValueError, match=match):
        call(clustered)
