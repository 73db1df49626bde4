"""Certified full-data W1 (``js.w1(method="exact")``) against POT's exact ``emd2``.

Truth: ``ot.emd2`` on the full ``n × M`` cost matrix (n ≤ 3000).  Every case asserts that
the pair contains the exact value (up to POT's own float64 round-off, 1e-12) and meets
``rtol``.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import ot
import pytest

import jaxsynth as js
from jaxsynth.core import partition
from jaxsynth.core.measure import SyntheticMeasure, canonical_atoms
from jaxsynth.experiments.sweep import simulate
from jaxsynth.wasserstein import ctransform
from jaxsynth.wasserstein.exact import certificate, levels, passes, simplex
from jaxsynth.wasserstein.exact import solver as exact_w1
from jaxsynth.wasserstein.exact import prepare_exact, w1_exact
from jaxsynth.wasserstein.exact.certificate import coupling_upper

TOL = 1e-12  # POT's float64 round-off on values of order 1e-2


def truth(X, points, weights, metric):
    """Exact W1 by POT on the full cost matrix, per replicate of a [B, M, d] batch."""
    values = []
    for p, w in zip(np.asarray(points, np.float64), np.asarray(weights, np.float64)):
        keep = w > 0
        cost = ot.dist(X, p[keep], metric="chebyshev" if metric == "linf" else "euclidean")
        values.append(ot.emd2(np.full(len(X), 1 / len(X)), w[keep] / w[keep].sum(), cost,
                              numItermax=10**8))
    return np.array(values)


def check_pair(X, out, metric, rtol=0.01, **options):
    lower, upper = js.w1(X, out, method="exact", metric=metric, rtol=rtol, **options)
    points = np.asarray(out.points).reshape((-1,) + out.points.shape[-2:])
    weights = np.asarray(out.weights).reshape(-1, out.weights.shape[-1])
    exact = truth(X, points, weights, metric)
    lower, upper = lower.ravel(), upper.ravel()
    assert np.all(lower <= exact + TOL), (lower, exact)
    assert np.all(exact <= upper + TOL), (exact, upper)
    assert np.all(upper - lower <= rtol * upper), (lower, upper)
    return lower, upper, exact


MECHANISMS = {
    "pmm": js.PMM(),
    "pruned": js.PrunedPMM(),
    "adaptive": js.AdaptivePrunedPMM(),
    "privtree": js.PrivTree(),
    "privtree-shift": js.PrivTree(shift=True),
}


SLOW_DENSE = pytest.param("one LP", marks=pytest.mark.slow)
"""The one-LP route, in the slow run: the default run takes it in the adversarial cases,
d = 1 and the cases below that name it."""


def take_route(route, monkeypatch) -> dict:
    """The options of ``js.w1`` for a route: ``"levels"``, the default (column generation
    over blocks, then the points); ``"one LP"``, the points as the only level, solved
    densely at once (what data of at most ``clusters`` points take)."""
    if route == "levels":
        return {}
    monkeypatch.setattr(exact_w1, "DENSE_ARCS", 1 << 62)
    return {"clusters": 1 << 30}


@pytest.mark.parametrize("route", [SLOW_DENSE, "levels"])
@pytest.mark.parametrize("name", [
    "pmm", "pruned", "privtree-shift",
    *(pytest.param(name, marks=pytest.mark.slow) for name in ("adaptive", "privtree"))])
@pytest.mark.parametrize("metric", ["linf", "l2"])
def test_every_mechanism_on_the_spiral(name, metric, route, monkeypatch):
    options = take_route(route, monkeypatch)
    X = js.datasets.load("spiral", n=1500, key=1)
    out = js.release_batch(3, MECHANISMS[name], X, eps=[1.0], seeds=2)
    check_pair(X, out, metric, **options)


@pytest.mark.parametrize("route", [SLOW_DENSE, "levels"])
@pytest.mark.parametrize("d", [1, 3, *(pytest.param(d, marks=pytest.mark.slow)
                                     for d in (2, 5, 10))])
@pytest.mark.parametrize("metric", ["linf", "l2"])
def test_dimensions(d, metric, route, monkeypatch):
    options = take_route(route, monkeypatch)
    X = js.datasets.load("subspace", n=800, d=d, k=min(d, 2), key=2)
    for mech in (js.PrunedPMM(), js.PrivTree(shift=d > 1)):
        check_pair(X, js.release_batch(4, mech, X, eps=[2.0], seeds=1), metric,
                   **{"clusters": 256, **options})


def test_n_3000_coarse_blocks_smaller_than_the_data():
    # 3000 points in 1024 blocks: the column-generation path, not the dense coarse one
    X = js.datasets.load("two_moons", n=3000, key=0)
    out = js.release_batch(0, js.PMM(), X, eps=[1.0], seeds=2)
    lower, upper, exact = check_pair(X, out, "linf", rtol=0.001)
    assert np.all(upper - lower <= 1e-3 * exact + TOL)


@pytest.mark.parametrize("n", [pytest.param(600, marks=pytest.mark.slow), 3000])
@pytest.mark.parametrize("metric", ["linf", "l2"])
def test_coarsest_level_by_column_generation(n, metric, monkeypatch):
    # a coarsest level of more than DENSE_ARCS block-atom pairs is not solved densely;
    # n = 600: it is the points themselves, n = 3000: 1024 blocks, then the points
    monkeypatch.setattr(exact_w1, "DENSE_ARCS", 0)
    X = js.datasets.load("two_moons", n=n, key=3)
    for mech in (js.PMM(), js.PrivTree()):
        check_pair(X, js.release_batch(5, mech, X, eps=[1.0], seeds=2), metric)


@pytest.mark.parametrize("metric", ["linf", pytest.param("l2", marks=pytest.mark.slow)])
def test_coarsest_first_lp_holds_each_atoms_nearest_blocks(metric, monkeypatch):
    # the coarsest level's first LP (column generation) holds, for every atom, its
    # ATOM_CANDIDATES nearest blocks by a brute-force cost matrix (ties aside), besides
    # each block's nearest atoms; the pairs still contain POT's value
    monkeypatch.setattr(exact_w1, "DENSE_ARCS", 0)
    first = []
    solve_arcs = exact_w1.lp.solve_arcs

    def recording(a, b, rows, cols, costs, start=None, steps=0):
        if start is None:
            first.append((len(a), np.asarray(rows), np.asarray(cols)))
        return solve_arcs(a, b, rows, cols, costs, start, steps)

    monkeypatch.setattr(exact_w1.lp, "solve_arcs", recording)
    X = js.datasets.load("two_moons", n=3000, key=3)
    out = js.release_batch(5, js.PMM(), X, eps=[1.0], seeds=1)
    check_pair(X, out, metric)
    data = prepare_exact(X)
    p, _ = canonical_atoms(np.asarray(out.points[0, 0]), np.asarray(out.weights[0, 0]))
    coarsest = data.levels_for(len(p))[0]
    atoms = p[levels.morton_order(p)].astype(np.float32).astype(np.float64)
    (_, rows, cols), = [call for call in first if call[0] == coarsest.size]
    cost = certificate.cost_matrix(coarsest.centroids, atoms, metric)  # [blocks, atoms]
    k = exact_w1.ATOM_CANDIDATES
    beyond = np.sort(cost, axis=0)[k]  # each atom's (k+1)-th least cost
    has = np.zeros_like(cost, bool)
    has[rows, cols] = True
    # blocks among each atom's k nearest with a clear margin (the pass picks by float32
    # keys whose low bits hold the block, so near-ties within 2^-12 may go either way)
    clear = cost < beyond * (1 - 1e-3)
    assert clear.any(axis=0).mean() > 0.5
    assert np.all(has[clear])


def closed_curve(n: int, d: int, seed: int = 1) -> np.ndarray:
    """A closed smooth curve in [0,1]^d (coordinate k a sine of frequency k // 2 + 1), points
    uniform in its parameter with a little noise: data of intrinsic dimension one."""
    rng = np.random.default_rng(seed)
    t, k = rng.random(n)[:, None], np.arange(d)[None, :]
    x = 0.5 + 0.4 * np.sin(2 * np.pi * (k // 2 + 1) * t + k * np.pi / 2) / (1 + k // 2)
    return np.clip(x + 0.003 * rng.standard_normal((n, d)), 0, 1)


def test_the_probe_level_is_the_coarsest_blocks_merged():
    X = js.datasets.load("two_moons", n=10000, key=4)
    data = prepare_exact(X)  # 1024 blocks, 8192, the points
    probe, top = data.probe, data.levels[0]
    assert probe.size == -(-top.size // levels.PROBE)
    assert np.isin(probe.starts, top.starts).all()  # nested: unions of coarsest blocks
    parent = np.searchsorted(probe.starts, top.starts[:-1], side="right") - 1
    np.testing.assert_allclose(probe.masses, np.bincount(parent, top.masses), rtol=1e-12)
    means = np.stack([np.bincount(parent, top.masses * top.centroids[:, k])
                      for k in range(2)], 1) / probe.masses[:, None]
    np.testing.assert_allclose(probe.centroids, means, rtol=1e-12)
    assert data.levels_for(top.size - 1) == (probe, *data.levels)
    assert data.levels_for(top.size) is data.levels
    assert prepare_exact(X[:5000]).probe is None  # two levels: 1024 blocks, the points


def recorded_lp_rows(monkeypatch) -> list:
    """The rows (blocks) of every transport LP the solver runs from now on, in order."""
    rows = []
    for name in ("solve_dense", "solve_arcs"):
        solve = getattr(exact_w1.lp, name)
        monkeypatch.setattr(exact_w1.lp, name,
                            lambda a, *rest, solve=solve: rows.append(len(a)) or solve(a, *rest))
    return rows


def curve_release(n: int, clusters: int):
    """A closed curve in d = 3, two Pruned-PMM releases of it, its levels of ``clusters``
    coarsest blocks (three levels) and each release's atom count."""
    X = closed_curve(n, 3)
    out = js.release_batch(0, js.PrunedPMM(), X, eps=[1.0], seeds=2)
    data = prepare_exact(X, clusters=clusters)
    assert len(data.levels) == 3
    return X, out, data, (np.asarray(out.weights) > 0).sum(-1).ravel()


@pytest.mark.parametrize("metric", ["linf", pytest.param("l2", marks=pytest.mark.slow)])
def test_few_atoms_start_at_the_probe_level(metric, monkeypatch):
    # 3000 points in levels of 256 blocks, about 2100 and the points (clusters=256), and
    # fewer atoms (about 180) than 256: every replicate's first LP is on the probe level
    # (64 blocks), and POT's value is inside the pair
    rows = recorded_lp_rows(monkeypatch)
    X, out, data, atoms = curve_release(3000, 256)
    assert atoms.max() < data.levels[0].size
    check_pair(X, out, metric, clusters=256)
    assert rows.count(data.probe.size) >= 2
    assert set(rows) <= {data.probe.size, *(level.size for level in data.levels)}


@pytest.mark.parametrize("metric", ["linf", pytest.param("l2", marks=pytest.mark.slow)])
def test_the_coarsest_level_ends_once_its_pair_meets_rtol(metric, monkeypatch):
    # 800 points in levels of 64 blocks, about 540 and the points (clusters=64); a
    # Pruned-PMM release of a curve at rtol = 0.05 meets rtol at the coarsest level: its
    # lower end is the c-transform over all points of that level's duals, taken once
    # their dual value meets rtol, and POT's value is inside the pair
    rows = recorded_lp_rows(monkeypatch)
    X, out, data, atoms = curve_release(800, 64)
    assert atoms.min() >= data.levels[0].size  # no probe
    check_pair(X, out, metric, rtol=0.05, clusters=64)
    assert rows == [data.levels[0].size] * 2


def test_a_level_whose_upper_end_still_falls_takes_one_round_before_the_regions(monkeypatch):
    # 2000 uniform points in d = 3 (150 uniform atoms) in levels of 16 blocks, about 257
    # and the points, which go by regions (MAX_LP_BLOCKS = 256, regions of about 128
    # points): the upper end of the level of 257 blocks falls by more than UPPER_FALL
    # from the coarsest level's, so it takes one round (with the rule off, more), and
    # POT's value is inside the pair (blocks this small leave it wider than rtol: not
    # asserted)
    monkeypatch.setattr(levels, "MAX_LP_BLOCKS", 256)
    monkeypatch.setattr(exact_w1, "REGION", 128)
    rng = np.random.default_rng(0)
    X = rng.random((2000, 3))
    out = measure(rng.random((2, 150, 3)), rng.random((2, 150)))
    data = prepare_exact(X, clusters=16)
    by_regions = data.levels[1].size
    assert len(data.levels) == 3 and data.n > 256
    exact = truth(X, out.points, out.weights, "linf")
    rows, counts = recorded_lp_rows(monkeypatch), []
    for fall in (exact_w1.UPPER_FALL, 1.0):  # the rule, then the rule off
        monkeypatch.setattr(exact_w1, "UPPER_FALL", fall)
        rows.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lower, upper = js.w1(data, out, method="exact")
        assert np.all(lower.ravel() <= exact + TOL) and np.all(exact <= upper.ravel() + TOL)
        counts.append(rows.count(by_regions))
    assert counts[0] == 2 < counts[1]  # one LP a replicate


@pytest.mark.parametrize("data, metric, dense_arcs", [
    ("uniform", "linf", exact_w1.DENSE_ARCS), ("spiral", "l2", 0),
    pytest.param("uniform", "linf", 0, marks=pytest.mark.slow),
    pytest.param("spiral", "l2", exact_w1.DENSE_ARCS, marks=pytest.mark.slow)])
def test_levels_with_fewer_blocks_than_atoms_go_by_groups_of_atoms(data, metric, dense_arcs,
                                                                   monkeypatch):
    # 16 and 128 blocks above 1024 and the points, about 500-600 PMM atoms: with more
    # than GROUPED_FROM atoms a coarsest block (8 here), the levels with fewer than
    # m / ATOMS_PER_BLOCK blocks are solved against groups of atoms (densely, or by
    # column generation with DENSE_ARCS = 0), the next from their duals; with at most
    # GROUPED_FROM, none
    monkeypatch.setattr(exact_w1, "DENSE_ARCS", dense_arcs)
    monkeypatch.setattr(exact_w1, "GROUPED_FROM", 8)
    X = js.datasets.load(data, n=3000, key=0, **({"d": 3} if data == "uniform" else {}))
    out = js.release_batch(0, js.PMM(), X, eps=[1.0], seeds=2)
    data = prepare_exact(X, clusters=16)
    for w in np.asarray(out.weights).reshape(2, -1):
        m = int((w > 0).sum())
        assert m > 8 * 16 and exact_w1._first_level(data, m) >= 1
        assert exact_w1._first_level(data, 8 * 16) == 0
    check_pair(X, out, metric, clusters=16)


@pytest.mark.slow  # the jitted passes are the accelerator's (the host kernel's: test_hostpass)
@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("metric", ["linf", "l2"])
def test_pruned_pass_equals_the_dense_pass(d, metric, monkeypatch):
    # the boxes' pass must return the dense pass's c-transform bit for bit and best atoms
    # of the same reduced costs, also under steep potentials (far atoms win); both sets
    # are the true best (brute force), up to near-ties (the jitted passes, an
    # accelerator's: test_hostpass checks the host kernel's)
    monkeypatch.setattr(ctransform, "PRUNE_ATOMS", 0)
    monkeypatch.setattr(ctransform, "on_host", lambda chunks: False)
    rng = np.random.default_rng(d)
    X = rng.random((5000, d)) ** 2                                     # uneven density
    chunks = jnp.asarray(ctransform.point_chunks(X[levels.morton_order(X)]))
    m = 3000
    atoms = rng.random((m, d))
    atoms = atoms[levels.morton_order(atoms)]
    size = ctransform.atom_bucket(m)
    y = jnp.asarray(np.concatenate([atoms, np.repeat(atoms[:1], size - m, 0)]), jnp.float32)
    diam = 1.0 if metric == "linf" else np.sqrt(d)

    def reduced(best, v, sort=True):
        diff = np.abs(np.asarray(chunks, np.float64).reshape(-1, 1, d)
                      - np.asarray(y, np.float64)[best])
        cost = diff.max(-1) if metric == "linf" else np.sqrt((diff**2).sum(-1))
        return np.sort(cost - v[best], axis=1) if sort else cost - v[best]

    # potentials like transport duals (Lipschitz in the atom) plus noise; slope 2: atoms
    # far from a point can be its best
    slope = np.abs(np.asarray(y) - 0.3).max(axis=1)
    for scale in (0.2, 2.0):
        v = -scale * slope - 0.002 * rng.random(size)
        v[m:] = -4 * diam - 1                                          # padding atoms
        v = v.astype(np.float32)
        keep = np.asarray(ctransform._candidate_groups(metric)(chunks, y, jnp.asarray(v), 0.0))
        assert keep.mean() < 0.8  # the boxes' bounds prune (else this proves nothing)
        every = reduced(np.arange(size)[None, :], v, sort=False)       # brute force
        truth_best = np.sort(np.partition(every, 7, axis=1)[:, :8], axis=1)
        for k in (0, 4, 8):
            f_dense, b_dense = jax.device_get(
                ctransform._dense_pass(metric, k)(chunks, y, jnp.asarray(v)))
            f_pruned, b_pruned = ctransform.reduced_pass(chunks, y, jnp.asarray(v), metric, k)
            np.testing.assert_array_equal(f_pruned, f_dense)
            assert b_pruned.max(initial=0) < m
            # best atoms are chosen up to near-ties: a relative 2^(b - 23) with b the bits
            # of a column index (at most 8 here)
            np.testing.assert_allclose(reduced(b_pruned, v), reduced(b_dense, v),
                                       rtol=2.0**-14, atol=1e-6)
            if k:
                np.testing.assert_allclose(reduced(b_dense, v), truth_best[:, :k],
                                           rtol=2.0**-14, atol=1e-6)


@pytest.mark.parametrize("metric", ["linf", pytest.param("l2", marks=pytest.mark.slow)])
def test_pruned_pass_in_the_exact_w1(metric, monkeypatch):
    # every pass pruned (the host kernel's boxes, as at large atom counts): POT's value
    monkeypatch.setattr(ctransform, "HOST_PRUNE_ATOMS", 0)
    X = js.datasets.load("spiral", n=2500, key=4)
    for mech in (js.PMM(), js.PrivTree(shift=True)):
        check_pair(X, js.release_batch(6, mech, X, eps=[1.0], seeds=2), metric)


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["linf", "l2"])
def test_points_by_regions(metric, monkeypatch):
    # a points' level above MAX_LP_BLOCKS is solved by regions (6 of 512 points, below one
    # LP of 1024 or of 256 blocks; shifted sweeps where the gap stays above rtol): the
    # pair contains POT's value, and the regions' coupling (upper end) is within 2% of it
    # (what each region sends each atom is the blocks' plan's).  Where the gap stays above
    # rtol, the lower end comes from the plan-adapted level's duals: within 2% of POT's
    # value (1.1% the worst seen; the 256 blocks' own duals were up to 9% below on
    # PrivTree).  Regions solved by 3 threads give the same pair, bit for bit
    monkeypatch.setattr(exact_w1, "REGION", 512)
    X = js.datasets.load("spiral", n=3000, key=5)
    for mech in (js.PMM(), js.PrivTree(shift=True)):
        out = js.release_batch(7, mech, X, eps=[1.0], seeds=2)
        exact = truth(X, out.points[0], out.weights[0], metric)
        for clusters in (1024, 256):
            monkeypatch.setattr(levels, "MAX_LP_BLOCKS", clusters)
            data = prepare_exact(X, clusters)
            assert len(data.levels) == 2 and data.levels[0].size <= clusters
            for b, value in enumerate(exact):
                p, w = canonical_atoms(np.asarray(out.points[0, b]),
                                                np.asarray(out.weights[0, b]))
                with warnings.catch_warnings():  # the gap may miss rtol: not asserted
                    warnings.simplefilter("ignore")
                    low, up = exact_w1.w1_exact_replicate(data, p, w, metric)
                    assert exact_w1.w1_exact_replicate(data, p, w, metric,
                                                       threads=3) == (low, up)
                assert low <= value + TOL and value <= up + TOL
                assert up <= value * 1.02
                assert low >= value * 0.98


def measure(points, weights):
    points = np.asarray(points, np.float32)
    weights = np.asarray(weights, np.float32)
    one = np.ones(weights.shape[:-1], np.int32)
    return SyntheticMeasure(points=points, weights=weights / weights.sum(-1, keepdims=True),
                            leaf_depth=np.zeros(weights.shape, np.int32), size=one,
                            visited=one, leaves=one, depth=0 * one, budget={}, info={})


@pytest.mark.parametrize("path", ["one LP", "dense", "column generation", "regions"])
@pytest.mark.parametrize("metric", ["linf", "l2"])
def test_adversarial_cases(metric, path, monkeypatch):
    # the full LP at once; the coarsest level solved densely or by column generation; or
    # (levels of 64 and 512 blocks) the points by regions of 256, with the plan-adapted
    # level's lower end
    adapted = []
    options = take_route("one LP" if path == "one LP" else "levels", monkeypatch)
    if path not in ("one LP", "dense"):
        monkeypatch.setattr(exact_w1, "DENSE_ARCS", 0)
    if path == "regions":  # (blocks of equal counts: their regions leave the lower end
        options = dict(clusters=64)  # to the plan-adapted level, the path under test)
        monkeypatch.setattr(levels, "SNAP", 0.0)
        monkeypatch.setattr(levels, "MAX_LP_BLOCKS", 256)
        monkeypatch.setattr(exact_w1, "REGION", 256)
        split = levels.adapted_level
        monkeypatch.setattr(levels, "adapted_level",
                            lambda *args: adapted.append(1) or split(*args))
    rng = np.random.default_rng(0)
    base = rng.random((1200, 2))
    cases = {
        "duplicates": (np.repeat(base[:300], 4, axis=0), base[:50], rng.random(50)),
        "atoms on data points": (base, base[:40].astype(np.float32), rng.random(40)),
        "ties": (np.round(base * 8) / 8, np.round(base[:30] * 4) / 4, np.ones(30)),
        "tiny masses": (base, rng.random((60, 2)), np.r_[np.ones(59), 1e-7]),
        "single atom": (base, rng.random((1, 2)), np.ones(1)),
        "far atoms": (base * 0.1, 0.9 + 0.1 * rng.random((20, 2)), rng.random(20)),
    }
    for name, (X, points, weights) in cases.items():
        X = np.clip(X, 0, 1)
        check_pair(X, measure(np.clip(points, 0, 1)[None], weights[None]), metric, **options)
    assert (path == "regions") == bool(adapted)  # the path under test was taken


@pytest.mark.slow
def test_simulate_and_release_batch_agree_exactly():
    X = js.datasets.load("spiral", n=1200, key=0)
    mechs = [js.PrunedPMM(), js.PrivTree()]
    df = simulate(mechs, X, eps=[0.5, 1.0], seeds=3, key=7, progress=False)
    for mech, kind in zip(mechs, ("pruned-pmm", "privtree")):
        out = js.release_batch(jax.random.key(7), mech, X, eps=[0.5, 1.0], seeds=3)
        lower, upper = js.w1(X, out, method="exact")
        rows = df[df.kind == kind].sort_values(["eps", "seed"])
        np.testing.assert_array_equal(rows.w1_exact_lower.to_numpy(), lower.ravel())
        np.testing.assert_array_equal(rows.w1_exact_upper.to_numpy(), upper.ravel())


def test_prepared_data_and_batch_shapes():
    X = js.datasets.load("annulus", n=600, key=0)
    out = js.release_batch(1, js.PMM(), X, eps=[1.0, 2.0], seeds=3)
    data = prepare_exact(X, clusters=64)
    lower, upper = js.w1(data, out, method="exact")
    assert lower.shape == upper.shape == out.batch_shape
    flat = w1_exact(data, np.asarray(out.points).reshape(6, -1, 2),
                    np.asarray(out.weights).reshape(6, -1))
    np.testing.assert_array_equal(flat[0], lower.ravel())
    one = js.release(jax.random.fold_in(jax.random.key(1), 0), js.PMM(), X, 1.0)
    lo, up = js.w1(data, one, method="exact")
    assert lo.shape == up.shape == ()


def test_arc_union_is_the_sorted_set_of_distinct_arcs():
    rng = np.random.default_rng(0)
    parts = [rng.integers(0, 500, size) for size in (0, 1, 300, 2000)]
    np.testing.assert_array_equal(levels.unique_arcs(*parts), np.unique(np.concatenate(parts)))
    np.testing.assert_array_equal(levels.unique_arcs(np.array([7, 7, 7])), [7])
    assert levels.unique_arcs(np.array([], np.int64)).size == 0


@pytest.mark.parametrize("bad, match", [
    (dict(rtol=0), "rtol"), (dict(rtol=1.5), "rtol"), (dict(rtol="x"), "rtol"),
    (dict(clusters=0), "clusters"), (dict(bogus=1), "unknown option"),
    (dict(stacked="yes"), "stacked"), (dict(stacked=1), "stacked"),
])
def test_refusals(bad, match):
    X = js.datasets.load("spiral", n=200, key=0)
    out = js.release(0, js.PMM(), X, 1.0)
    with pytest.raises(ValueError, match=match):
        js.w1(X, out, method="exact", **bad)


def test_exact_is_what_w1_measures_by_default():
    X = js.datasets.load("spiral", n=600, key=4)
    out = js.release_batch(1, js.PrivTree(), X, eps=[1.0], seeds=2)
    for a, b in zip(js.w1(X, out), js.w1(X, out, method="exact", metric="linf")):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("route", [SLOW_DENSE, "levels"])
def test_a_replicate_is_the_same_alone_and_in_a_shuffled_batch(route, monkeypatch):
    # the reproducibility promise: a replicate's pair is a function of the data and its
    # own measure, bit for bit, whatever else is in the batch and in which order
    options = take_route(route, monkeypatch)
    X = js.datasets.load("spiral", n=1500, key=8)
    out = js.release_batch(9, js.PrivTree(), X, eps=[0.5, 1.0, 2.0, 4.0], seeds=16)
    points = np.asarray(out.points).reshape(64, -1, 2)
    weights = np.asarray(out.weights).reshape(64, -1)
    data = prepare_exact(X, **options)
    lower, upper = w1_exact(data, points, weights)
    order = np.random.default_rng(0).permutation(64)
    lower_shuffled, upper_shuffled = w1_exact(data, points[order], weights[order], workers=3,
                                              stacked=True)  # passes stacked across replicates
    np.testing.assert_array_equal(lower_shuffled, lower[order])
    np.testing.assert_array_equal(upper_shuffled, upper[order])
    for b in (0, 37):
        alone = w1_exact(data, points[b:b + 1], weights[b:b + 1], workers=1)
        assert (alone[0][0], alone[1][0]) == (lower[b], upper[b])
    assert np.all(upper - lower <= 0.01 * upper)
    with pytest.raises(ValueError, match="workers"):
        w1_exact(data, points[:2], weights[:2], workers=0)
    with pytest.raises(ValueError, match="stacked"):
        w1_exact(data, points[:2], weights[:2], stacked="yes")
    with pytest.raises(ValueError, match="threads"):
        exact_w1.w1_exact_replicate(data, *canonical_atoms(points[0], weights[0]),
                                    threads=0)


@pytest.mark.slow  # the accelerator's route (off on the CPU); its unit test runs by default
@pytest.mark.parametrize("metric", ["linf", "l2"])
def test_stacked_passes_in_the_exact_w1(metric, monkeypatch):
    # the route an accelerator takes by default, through js.w1's option, against POT
    # (the arrays' passes taken as an accelerator's: stacked, not the host kernel's)
    monkeypatch.setattr(ctransform, "on_host", lambda chunks: False)
    X = js.datasets.load("pinwheel", n=2500, key=5)
    for mech in (js.PMM(), js.AdaptivePrunedPMM(), js.PrivTree(shift=True)):
        check_pair(X, js.release_batch(3, mech, X, eps=[0.5, 2.0], seeds=2), metric,
                   stacked=True)


@pytest.mark.parametrize("most", [None, 4])
def test_stacked_passes_are_the_passes_alone(most, monkeypatch):
    # the device thread's stacked calls (replicates on the same points together, at most
    # ``most`` a call) give every request reduced_pass's own result, bit for bit; the
    # requests are queued before it starts, so the stacks are known (the arrays' passes
    # taken as an accelerator's: stacked, not the host kernel's)
    monkeypatch.setattr(ctransform, "on_host", lambda chunks: False)
    if most:
        monkeypatch.setattr(passes, "MAX_STACKED", most * ctransform.CHUNK * 768)
    stacks = []
    run_stack = passes._run_stack
    monkeypatch.setattr(passes, "_run_stack",
                        lambda stack, *args: (stacks.append(len(stack)), run_stack(stack, *args)))
    rng = np.random.default_rng(3)
    X = rng.random((3000, 2))
    chunks = [jnp.asarray(ctransform.point_chunks(X)), jnp.asarray(ctransform.point_chunks(X[:1500]))]
    requests = []
    for size in [768] * 6 + [ctransform.PRUNE_ATOMS]:  # the last: the pruned pass, alone
        y = jnp.asarray(rng.random((size, 2)), jnp.float32)
        v = jnp.asarray(-0.3 * rng.random(size), jnp.float32)
        requests += [(chunks[0], y, v, "linf", 4), (chunks[0], y, v, "l2", 0),
                     (chunks[1], y, v, "linf", 4)]
    batcher = passes.BatchedPasses()
    futures = [batcher.submit(*request) for request in requests]
    with batcher:
        results = [future.result() for future in futures]
    assert sorted(stacks) == sorted([4, 2] * 3 if most else [6] * 3)
    for request, (fmin, best) in zip(requests, results):
        alone = ctransform.reduced_pass(*request)
        np.testing.assert_array_equal(fmin, alone[0])
        np.testing.assert_array_equal(best, alone[1])


def test_d1_pair_meets_a_tight_rtol_and_a_wider_pair_warns():
    # d = 1: the exact formula in float64 meets rtol = 1e-6 (the float32 formula's margin
    # did not, silently); a pair wider than rtol always warns
    X = js.datasets.load("subspace", n=2000, d=1, k=1, key=3)
    out = js.release_batch(2, js.PrunedPMM(), X, eps=[1.0], seeds=3)
    lower, upper, exact = check_pair(X, out, "linf", rtol=1e-6)
    np.testing.assert_allclose(lower, exact, rtol=1e-6)
    with pytest.warns(UserWarning, match="relative gap") as caught:
        lower, upper = js.w1(X, out, method="exact", rtol=1e-15)
    # one warning naming every replicate with its gap, as the user indexes ``out``
    assert len(caught) == 1
    message = str(caught[0].message)
    for s in range(3):
        assert f"out[0, {s}]: {(upper[0, s] - lower[0, s]) / upper[0, s]:.3g}" in message
    # a sweep names a replicate by its ε and seed
    with pytest.warns(UserWarning, match=r"for 2 of 2 replicates \(ε = 1, seed 5: .*; ε = 1, "
                                         r"seed 6: "):
        js.simulate(js.PrunedPMM(), X, eps=[1.0], seeds=[5, 6],
                    methods=[("exact", {"rtol": 1e-15})], progress=False)


@pytest.mark.parametrize("metric", ["linf", "l2"])
def test_levels_start_from_the_refined_tree(metric, monkeypatch):
    # every level below the coarsest (solved by column generation: it keeps its tree)
    # starts from the level above's optimal tree refined (simplex.refine: its blocks nest),
    # and the restart takes it; the pairs contain POT's value
    monkeypatch.setattr(exact_w1, "DENSE_ARCS", 0)
    refined, taken = [], []
    refine, restart = simplex.refine, simplex._restart
    monkeypatch.setattr(simplex, "refine",
                        lambda *args: refined.append(refine(*args)) or refined[-1])
    monkeypatch.setattr(simplex, "_restart", lambda a, b, keys, start: taken.append(
        any(start is tree for tree in refined)) or restart(a, b, keys, start))
    X = js.datasets.load("spiral", n=1500, key=6)
    out = js.release_batch(8, js.PrunedPMM(), X, eps=[1.0], seeds=2)
    check_pair(X, out, metric, clusters=24)  # levels of about 24, 192 and 1500
    assert refined and all(tree is not None for tree in refined)  # (a pair met at 192
    assert sum(taken) == len(refined)                            # blocks skips the points)
    refined.clear()  # in d = 3 (above REFINED_MAX_D) every level starts cold
    X3 = js.datasets.load("subspace", n=800, d=3, k=2, key=2)
    check_pair(X3, js.release_batch(4, js.PrunedPMM(), X3, eps=[2.0], seeds=1), metric,
               clusters=16)
    assert refined == []
    # a level capped by MAX_LP_BLOCKS (the points then by regions) holds the boundaries
    # of the level above (blocks nest): it starts from the refined tree as well
    refined.clear()
    monkeypatch.setattr(levels, "MAX_LP_BLOCKS", 50)
    # (7 blocks are fewer than a quarter of the atoms: that level would be solved against
    # groups of atoms, which keep no tree to refine)
    monkeypatch.setattr(exact_w1, "ATOMS_PER_BLOCK", 1 << 30)
    data = prepare_exact(X, 7)
    assert len(data.levels) == 3 and np.isin(data.levels[0].starts, data.levels[1].starts).all()
    exact = truth(X, out.points[0], out.weights[0], metric)
    for b, value in enumerate(exact):
        p, w = canonical_atoms(np.asarray(out.points[0, b]),
                               np.asarray(out.weights[0, b]))
        with warnings.catch_warnings():  # the regions' gap may miss rtol: not asserted
            warnings.simplefilter("ignore")
            low, up = exact_w1.w1_exact_replicate(data, p, w, metric)
        assert low <= value + TOL and value <= up + TOL
    assert refined and all(tree is not None for tree in refined)


def test_level_layout(monkeypatch):
    # steps of REFINE down to the points; above MAX_LP_BLOCKS points, a last level of
    # MAX_LP_BLOCKS blocks reached in one step of at most REFINE² (no level a step of
    # less than REFINE below it); every level's blocks partition the points (the block
    # counts of equal-count blocks: boundaries unmoved)
    monkeypatch.setattr(levels, "MAX_LP_BLOCKS", 1000)
    monkeypatch.setattr(levels, "SNAP", 0.0)
    X = np.random.default_rng(3).random((5000, 2))
    below = prepare_exact(X[:900], 4)
    assert [level.size for level in below.levels] == [4, 32, 256, 900]
    above = prepare_exact(X, 4)  # the capped level holds the boundaries of the one above
    sizes = [level.size for level in above.levels]
    assert sizes[:2] == [4, 32] and 1000 <= sizes[2] <= 1000 + 32 and sizes[3] == 5000
    sizes = [level.size for level in prepare_exact(X, 200).levels]
    assert sizes[0] == 200 and 1000 <= sizes[1] <= 1200 and sizes[2] == 5000
    for level in above.levels:
        assert level.starts[0] == 0 and level.starts[-1] == 5000
        assert np.all(np.diff(level.starts) > 0)
        np.testing.assert_allclose(level.masses.sum(), 1.0)


def test_blocks_and_regions_keep_within_the_data_cells():
    # two clusters in opposite quadrants (all of one, then all of the other, in Morton
    # order): an equal-count block straddles the gap between them; moved by at most
    # SNAP of a block to where the points part highest (truth: the common prefix of their
    # Morton codes, bit by bit), no block or region does, and the levels nest
    rng = np.random.default_rng(5)
    X = np.concatenate([0.25 * rng.random((1030, 2)), 0.75 + 0.25 * rng.random((970, 2))])
    data = prepare_exact(X, clusters=16)
    words = partition.morton_words(X[data.order], levels.MORTON_DEPTH)
    codes = [int("".join(f"{w:032b}" for w in row), 2) for row in words]
    common = [levels.MORTON_DEPTH - (a ^ b).bit_length() for a, b in zip(codes, codes[1:])]
    np.testing.assert_array_equal(data.parting, common)
    gap = 1030
    for coarse, fine in zip(data.levels, data.levels[1:]):
        assert np.isin(coarse.starts, fine.starts).all()  # nested
    for level in data.levels[:-1]:
        step = data.n / 16 / levels.REFINE ** data.levels.index(level)
        assert gap in level.starts
        moved = np.abs(level.starts[:, None] - np.arange(0, data.n + 1, step)[None]).min(1)
        assert moved.max() <= levels.SNAP * data.n / 16 + 1
    for shift in (0, 300):
        edges = levels.region_edges(data, 500, shift, 0.5)
        assert gap in edges and edges[0] == 0 and edges[-1] == data.n
        assert np.all(np.diff(edges) > 0)
    equal = (np.arange(17) * data.n) // 16
    assert not np.isin(gap, equal)  # (equal counts would straddle it)


@pytest.mark.parametrize("metric", ["linf", "l2"])
def test_the_arc_sums_until_the_kernel_is_ready_are_the_kernels(metric, monkeypatch):
    # arc_cost_sums runs a NumPy stand-in until its kernel is loaded or compiled
    # (numba_cache.ready): the kernel's float64 operations, compensated alike, so its
    # sums bit for bit; blocks of 1 to ~900 points, repeated arcs, any order; more work
    # than its bounds waits for the kernel
    rng = np.random.default_rng(3)
    for d in (1, 3, 6):
        X = rng.random((4000, d)) ** 3
        starts = np.unique(np.r_[0, rng.choice(4000, 60, replace=False), 3999, 4000])
        index = rng.permutation(4000)
        rows = rng.integers(0, len(starts) - 1, 500)
        cols, atoms = rng.integers(0, 50, 500), rng.random((50, d))
        args = (X, index, starts, rows, cols, atoms, metric == "linf")
        np.testing.assert_array_equal(certificate._arc_sums_numpy(*args),
                                      certificate._arc_sums(*args))
    data = prepare_exact(X)
    level, compiled = data.levels[0], []
    for ready in (True, False):
        monkeypatch.setattr(certificate, "ready", lambda *args, ready=ready: ready)
        monkeypatch.setattr(certificate, "_arc_sums_numpy", lambda *args: compiled[0] + 1)
        compiled.append(certificate.arc_cost_sums(data, level, [0, 1], [2, 2], atoms, metric))
    np.testing.assert_array_equal(compiled[1], compiled[0] + 1)
    monkeypatch.setattr(certificate, "STAND_IN_BLOCK", 1)  # past the bound: the kernel
    np.testing.assert_array_equal(
        certificate.arc_cost_sums(data, level, [0, 1], [2, 2], atoms, metric), compiled[0])


@pytest.mark.parametrize("metric", ["linf", "l2"])
def test_a_block_plans_costs_are_its_coupling_of_points(metric):
    # coupling_upper and the plan-adapted level's mean arc costs against the coupling of
    # points built densely (each point of a block sends its mass as the block does) and
    # priced on POT's cost matrix; on Morton blocks and on blocks of scattered ranks
    rng = np.random.default_rng(7)
    X = rng.random((700, 3))
    data = prepare_exact(X, clusters=40)
    atoms = rng.random((30, 3)).astype(np.float32).astype(np.float64)
    cost = ot.dist(X, atoms, metric="chebyshev" if metric == "linf" else "euclidean")
    blocks = data.levels[0]
    ranks = rng.permutation(data.n)                 # blocks of the adapted kind: any ranks
    scattered = levels.Level(blocks.starts, blocks.centroids, blocks.masses, blocks.chunks,
                             ranks)
    for level in (blocks, scattered):
        rows = np.repeat(np.arange(level.size), 3)
        cols = rng.integers(0, 30, len(rows))
        mass = rng.random(len(rows))
        mass *= np.repeat(level.masses / np.add.reduceat(mass, np.arange(0, len(rows), 3)), 3)
        coupling = np.zeros((data.n, 30))
        position = np.arange(data.n) if level.ranks is None else level.ranks
        for r, c, w in zip(rows, cols, mass):
            points = data.order[position[level.starts[r]:level.starts[r + 1]]]
            coupling[points, c] += w / len(points)
        weights = coupling.sum(axis=0)
        upper = coupling_upper(data, level, atoms, weights, (rows, cols, mass), metric)
        exact = float((coupling * cost).sum())
        assert exact <= upper <= exact * (1 + 1e-12)
        means = levels.mean_costs(data, level, rows, cols, atoms, metric)
        for r, c, value in zip(rows[:40], cols[:40], means[:40]):
            points = data.order[position[level.starts[r]:level.starts[r + 1]]]
            np.testing.assert_allclose(value, cost[points, c].mean(), rtol=1e-13)
