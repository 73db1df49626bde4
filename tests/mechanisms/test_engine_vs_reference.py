"""Engines vs the per-node NumPy reference (``tests/reference``), replicate by replicate.

The reference draws exactly the random words the engines draw (its own Threefry, counter
layout, chunk keys and path words) and walks the tree one node at a time, so every
replicate must agree: integer masses, synthetic sizes, visited counts, leaf sets, the
selected candidate, PrivTree trees, levels and noisy leaf masses exactly; reconstructed
weights and the in-kernel tree W1 values to float32 rounding (rtol 1e-5).

Replicate ``s`` of ``release_batch(KEY, ...)`` is compared with the reference run on the
raw key of ``fold_in(key(KEY), s)``; ``release`` on that key and a batch with a different
``memory_bytes`` (a different chunking) must give the identical replicate.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry_2x32

import jaxsynth as js
from jaxsynth.core.keys import replicate_keys
from jaxsynth.core.partition import cell_index
from tests.reference import adaptive as radaptive
from tests.reference import pmm as rpmm
from tests.reference import privtree as rprivtree
from tests.reference import rng as rrng
from tests.reference import tree as rtree

KEY = 7
W1_FIELDS = ("tree_linf", "tree_l2", "upper_linf", "upper_l2")

# ------------------------------------------------------------------ data


def _data(name: str) -> np.ndarray:
    g = np.random.default_rng(sum(map(ord, name)))
    if name == "d1":
        return g.random((300, 1))
    if name == "d2":  # a cluster plus background
        X = np.clip(0.3 + 0.08 * g.standard_normal((300, 2)), 0.0, 1.0)
        X[:60] = g.random((60, 2))
        return X
    if name == "d3":
        X = g.random((250, 3))
        X[:100, 2] = 0.5  # a flat slab: repeated digits along one coordinate
        return X
    if name == "few2":
        return g.random((12, 2))
    if name == "one2":
        return np.array([[0.3, 0.7]])
    if name == "line10":  # a line in [0,1]^10
        X = np.full((200, 10), 0.5)
        X[:, 3] = g.random(200)
        X[:, 7] = g.random(200) * 0.25
        return X
    if name == "adapt3":
        X = g.random((200, 3))
        X[:, 1] = X[:, 0] ** 2
        return X
    raise KeyError(name)


DATA = {}


def data(name: str) -> np.ndarray:
    if name not in DATA:
        DATA[name] = _data(name)
    return DATA[name]


# ------------------------------------------------------------------ helpers


def _np(x):
    return np.asarray(x)


def assert_same_replicate(a: js.SyntheticMeasure, b: js.SyntheticMeasure):
    """Two unbatched releases are the same measure, field by field.

    Atoms: weights everywhere, points and leaf depths of the released atoms (positive
    weight, or among the first ``leaves`` atoms, which PrivTree's zero-weight leaves are).
    Zero-weight padding slots are not compared: their contents are unspecified and do
    change with the chunking (observed for the sparse Pruned-PMM kernel at depth 40).
    Every other field, the float32 W1 diagnostics included, must be bit-identical.
    """
    for field in ("weights", "size", "visited", "leaves", "depth"):
        np.testing.assert_array_equal(_np(getattr(a, field)), _np(getattr(b, field)), err_msg=field)
    w = _np(a.weights)
    atoms = (w > 0) | (np.arange(w.shape[-1]) < int(a.leaves))
    for field in ("points", "leaf_depth"):
        np.testing.assert_array_equal(_np(getattr(a, field))[atoms], _np(getattr(b, field))[atoms],
                                      err_msg=field)
    assert set(a.info) == set(b.info)
    for k in a.info:
        x, y = _np(a.info[k]), _np(b.info[k])
        if x.ndim and x.shape == w.shape:  # per-atom diagnostics (PrivTree's noisy_mass)
            x, y = x[atoms], y[atoms]
        np.testing.assert_array_equal(x, y, err_msg=k)


def check_release_and_chunking(mech, X, eps_list, e, out, seeds):
    """A batch chunked one replicate at a time (``memory_bytes`` for one replicate)
    reproduces every ``out[e, s]`` exactly, and so does ``release(fold_in(key, s))``."""
    tree = js.prepare(X, mech.data_depth(X.shape[0], X.shape[1], eps_list))
    plan = mech.plan(tree, eps_list)
    small = js.release_batch(KEY, mech, X, eps=eps_list, seeds=seeds,
                             memory_bytes=int(1.5 * plan.bytes_per_replicate))
    for i in range(len(eps_list)):
        for s in range(seeds):
            assert_same_replicate(small[i, s], out[i, s])
    eps, s = eps_list[e], seeds - 1
    one = js.release(jax.random.fold_in(jax.random.key(KEY), s), mech, X, eps=eps)
    assert_same_replicate(one, out[e, s])


def check_w1(info, ref_w1, e, s):
    for field in W1_FIELDS:
        np.testing.assert_allclose(float(info[field][e, s]), ref_w1[field], rtol=1e-5,
                                   err_msg=field)


def pmm_atoms(o: js.SyntheticMeasure, depth: int) -> dict:
    """{leaf cell: integer mass} of one PMM-family replicate (atoms with positive weight)."""
    w, p = _np(o.weights), _np(o.points)
    keep = w > 0
    assert np.all(_np(o.leaf_depth)[keep] == depth)
    cells = [tuple(c) for c in cell_index(p[keep].astype(np.float64), depth).tolist()]
    masses = np.rint(w[keep].astype(np.float64) * int(o.size)).astype(np.int64)
    assert len(set(cells)) == len(cells), "two atoms in one leaf"
    np.testing.assert_allclose(w[keep] * int(o.size), masses, atol=1e-3)
    return dict(zip(cells, masses.tolist()))


def ambient_depth(eps: float, n: int) -> int:
    """``⌈log2(εn)⌉``, the ambient-depth rule (arXiv 2609.33363 §7)."""
    return max(1, math.ceil(math.log2(eps * n)))


# ------------------------------------------------------------------ RNG


def test_threefry_matches_jax():
    g = np.random.default_rng(0)
    for _ in range(5):
        k = g.integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32)
        c = g.integers(0, 2**32, 256, dtype=np.uint64).astype(np.uint32)
        x0, x1 = rrng.threefry2x32(k[0], k[1], c[:128], c[128:])
        ref = np.asarray(threefry_2x32((jnp.uint32(k[0]), jnp.uint32(k[1])), jnp.asarray(c)))
        np.testing.assert_array_equal(np.concatenate([x0, x1]), ref)
    # edge values
    c = np.array([0, 0xFFFFFFFF, 1, 0x80000000], np.uint32)
    x0, x1 = rrng.threefry2x32(0xFFFFFFFF, 0, c[:2], c[2:])
    ref = np.asarray(threefry_2x32((jnp.uint32(0xFFFFFFFF), jnp.uint32(0)), jnp.asarray(c)))
    np.testing.assert_array_equal(np.concatenate([x0, x1]), ref)


def test_replicate_keys_are_fold_in():
    raw = np.asarray(replicate_keys(KEY, np.arange(3)))
    for s in range(3):
        assert tuple(int(x) for x in raw[s]) == rrng.replicate_key(KEY, s)


def test_chunk_keys_and_path_words():
    """Path words are left-aligned; chunk keys chain every 32 levels."""
    assert rrng.pack_bits((1,)) == 0x80000000
    assert rrng.pack_bits((0, 1, 1)) == 0x60000000
    addr = rrng.Addresser((1, 2))
    bits = tuple(int(b) for b in np.random.default_rng(3).integers(0, 2, 70))
    key32 = rrng.draw((1, 2), rrng.CHUNK, 0, rrng.pack_bits(bits[:32]))
    key64 = rrng.draw(tuple(int(k) for k in key32), rrng.CHUNK, 0, rrng.pack_bits(bits[32:64]))
    k, w = addr.address(bits)
    assert k == tuple(int(x) for x in key64) and w == rrng.pack_bits(bits[64:])
    k, w = addr.address(bits[:32])
    assert k == tuple(int(x) for x in key32) and w == 0
    k, w = addr.address(bits[:31])
    assert k == (1, 2) and w == rrng.pack_bits(bits[:31])


# ------------------------------------------------------------------ PMM family

PMM_CASES = {
    # id: (mechanism, data, eps list, seeds, rule, pruned, chunking check)
    "pmm-d1-r6-uniform": (
        js.PMM(depth=6, schedule="uniform"), "d1", [0.5, 2.0], 3, "proportional", False, True),
    "pmm-d2-r5-packing-addremove": (
        js.PMM(depth=5, adjacency="add_remove"), "d2", [0.5, 2.0], 3, "proportional", False,
        False),
    "pmm-d2-ambient-depths-3-5": (
        js.PMM(schedule="uniform"), "d2", [0.025, 0.1], 3, "proportional", False, False),
    "pmm-d3-r4-zero-respecting": (
        js.PMM(depth=4, consistency="zero_respecting"), "d3", [0.5, 2.0], 3,
        "zero_respecting", True, False),
    "pruned-dense-d3-r4": (
        js.PrunedPMM(depth=4, engine="dense"), "d3", [0.5, 2.0], 3, "zero_respecting", True,
        False),
    "pruned-sparse-d3-r4": (
        js.PrunedPMM(depth=4, engine="sparse"), "d3", [0.5, 2.0], 3, "zero_respecting", True,
        False),
    "pruned-sparse-d2-r40": (
        js.PrunedPMM(depth=40, engine="sparse"), "few2", [1.0, 4.0], 4, "zero_respecting", True,
        True),
    "pruned-sparse-n1": (
        js.PrunedPMM(depth=9, engine="sparse", schedule="uniform"), "one2", [0.3, 4.0], 6,
        "zero_respecting", True, False),
}


def _pmm_reference(mech, X, eps_list, seeds, rule, pruned, plan):
    n, d = X.shape
    counts = rtree.Counts(X)
    results = {}
    for e, eps in enumerate(eps_list):
        depth = mech.depth if mech.depth is not None else ambient_depth(eps, n)
        inv, inv0 = rpmm.pmm_scales(mech.schedule, eps, depth, d, mech.adjacency,
                                    mech.packing_k, mech.root_scale)
        # the reference's own schedule is the engine's, to the bit
        np.testing.assert_array_equal(inv, plan.params["inv_sigma"][e, :depth])
        assert inv0 == plan.params["inv_sigma0"][e]
        for s in range(seeds):
            key = rrng.replicate_key(KEY, s)
            results[e, s] = rpmm.release(key, counts, depth, inv, inv0, rule, pruned)
    return results


def _compare_pmm(out, diag, results):
    for (e, s), ref in results.items():
        o = out[e, s]
        assert int(o.size) == ref.size, (e, s)
        assert int(o.depth) == ref.depth, (e, s)
        assert int(o.visited) == ref.visited, (e, s)
        assert int(o.leaves) == len(ref.leaves), (e, s)
        assert pmm_atoms(o, ref.depth) == ref.leaves, (e, s)
        np.testing.assert_allclose(float(_np(o.weights).sum()), 1.0, rtol=1e-5)
        check_w1(diag, ref.w1, e, s)


SLOW_CASES = {"pruned-sparse-d2-r40", "pruned-sparse-n1", "pmm-d1-r6-uniform"}
"""The longest reference comparisons, in the slow run (their shorter siblings stay)."""


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CASES
                                  else c for c in PMM_CASES])
def test_pmm_family_matches_reference(case):
    mech, name, eps_list, seeds, rule, pruned, chunking = PMM_CASES[case]
    X = data(name)
    out, diag = js.release_batch(KEY, mech, X, eps=eps_list, seeds=seeds, diagnostics=True)
    plan = mech.plan(js.prepare(X, mech.data_depth(*X.shape, eps_list)), eps_list)
    results = _pmm_reference(mech, X, eps_list, seeds, rule, pruned, plan)
    _compare_pmm(out, diag, results)
    sizes = {r.size for r in results.values()}
    if name == "one2":  # the root mass 1 (a unit at the root) and larger masses both occur
        assert 1 in sizes and max(sizes) > 1
    if chunking:
        check_release_and_chunking(mech, X, eps_list, len(eps_list) - 1, out, seeds)


def test_pmm_uniform_placement_matches_reference():
    """Uniform placement: the ``j``-th point of a leaf comes from the leaf's ``POINT`` key,
    and every leaf holds as many points as its reference mass.  Points are grouped by the
    cell that holds them (a leaf's points are consecutive, in rank order)."""
    X = data("d2")
    d = X.shape[1]
    mech = js.PMM(depth=5, placement="uniform")
    eps_list, seeds = [1.0], 3
    out, diag = js.release_batch(KEY, mech, X, eps=eps_list, seeds=seeds, diagnostics=True)
    plan = mech.plan(js.prepare(X, 5), eps_list)
    results = _pmm_reference(mech, X, eps_list, seeds, "proportional", False, plan)
    for (e, s), ref in results.items():
        o = out[e, s]
        m = ref.size
        assert int(o.size) == m and int(o.leaves) == len(ref.leaves)
        w, p = _np(o.weights), _np(o.points).astype(np.float64)
        np.testing.assert_array_equal(w[:m], np.float32(1.0) / np.float32(m))
        assert np.all(w[m:] == 0)
        cells = [tuple(c) for c in cell_index(p[:m], 5).tolist()]
        assert Counter(cells) == Counter(ref.leaves)
        want = rpmm.uniform_points(rrng.replicate_key(KEY, s), ref.leaves, 5, d)
        for cell, points in want.items():
            got = p[:m][[c == cell for c in cells]]
            np.testing.assert_allclose(got, points, rtol=0, atol=1e-7)
        check_w1(diag, ref.w1, e, s)


def test_sparse_uniform_placement_at_depth_32():
    """Leaves at level 32 (the first level of the second chunk): their path word is empty."""
    X = data("few2")
    d = X.shape[1]
    mech = js.PrunedPMM(depth=32, engine="sparse", placement="uniform")
    eps_list, seeds = [2.0], 2
    out = js.release_batch(KEY, mech, X, eps=eps_list, seeds=seeds)
    plan = mech.plan(js.prepare(X, 32), eps_list)
    results = _pmm_reference(mech, X, eps_list, seeds, "zero_respecting", True, plan)
    for (e, s), ref in results.items():
        m = ref.size
        p = _np(out.points[e, s])[:m].astype(np.float64)
        cells = [tuple(c) for c in cell_index(p, 32).tolist()]
        assert Counter(cells) == Counter(ref.leaves)
        want = rpmm.uniform_points(rrng.replicate_key(KEY, s), ref.leaves, 32, d)
        for cell, points in want.items():
            got = p[[c == cell for c in cells]]
            np.testing.assert_allclose(got, points, rtol=0, atol=1e-7)


@pytest.mark.slow
def test_pruned_pmm_depth_150_in_d10_matches_reference():
    """Default packing schedule at depth 150 in d = 10: scales beyond 1e20, counts saturate."""
    X = data("line10")
    mech = js.PrunedPMM(depth=150, engine="sparse")
    eps_list, seeds = [1.0], 2
    out, diag = js.release_batch(KEY, mech, X, eps=eps_list, seeds=seeds, diagnostics=True)
    plan = mech.plan(js.prepare(X, 150), eps_list)
    sigma = 1.0 / plan.params["inv_sigma"][0].astype(np.float64)
    assert sigma.max() > 1e20 and sigma.max() > 2.0**30
    results = _pmm_reference(mech, X, eps_list, seeds, "zero_respecting", True, plan)
    assert any(r.saturated for r in results.values())  # the σ-unit ratio path is exercised
    _compare_pmm(out, diag, results)


# ------------------------------------------------------------------ Adaptive Pruned-PMM


@pytest.mark.slow
def test_adaptive_pruned_pmm_matches_reference():
    X = data("adapt3")
    n, d = X.shape
    mech = js.AdaptivePrunedPMM()
    eps_list, seeds = [0.5, 2.0], 6
    out, diag = js.release_batch(KEY, mech, X, eps=eps_list, seeds=seeds, diagnostics=True)
    plan = mech.plan(js.prepare(X, mech.data_depth(n, d, eps_list)), eps_list)
    counts = rtree.Counts(X)
    selected = set()
    for e, eps in enumerate(eps_list):
        cands = radaptive.candidates(counts, eps)
        np.testing.assert_array_equal(_np(out.info["candidate_depths"][e, 0]), cands.depth)
        np.testing.assert_allclose(_np(diag["scores"][e, 0]), cands.scores, rtol=1e-6)
        np.testing.assert_allclose(float(diag["sensitivity"][e, 0]), cands.sensitivity,
                                   rtol=1e-6)
        for a, inv in enumerate(cands.inv_sigma):
            np.testing.assert_array_equal(inv.astype(np.float32),
                                          plan.params["inv_sigmas"][e, a, : len(inv)])
        for s in range(seeds):
            key = rrng.replicate_key(KEY, s)
            a, margin, _, ref = radaptive.release(key, counts, eps)
            assert margin > 1e-5, "a float32 tie in the race: pick another seed"
            selected.add(a)
            o = out[e, s]
            assert int(o.info["selected"]) == a, (e, s)
            assert int(o.depth) == cands.depth[a] == ref.depth
            assert int(o.size) == ref.size and int(o.visited) == ref.visited, (e, s)
            assert int(o.leaves) == len(ref.leaves)
            assert pmm_atoms(o, ref.depth) == ref.leaves, (e, s)
            check_w1(diag, ref.w1, e, s)
    assert len(selected) >= 2  # several candidates (depths) are exercised
    check_release_and_chunking(mech, X, eps_list, 1, out, seeds)


# ------------------------------------------------------------------ PrivTree


def _engine_cell(point, level: int, d: int, shift) -> tuple:
    """Cell of the level-``level`` partition holding an atom (with a shift: of ``(p+U)/2``)."""
    if shift is None:
        return tuple(cell_index(np.asarray(point, np.float64)[None], level)[0].tolist())
    k = rtree.resolution(level, d)
    return tuple(
        math.floor((Fraction(float(point[c])) + Fraction(float(shift[c]))) * 2 ** k[c] / 2)
        for c in range(d)
    )


def privtree_cap(n: int, d: int, eps: float) -> int:
    """Default depth cap ``d·(⌈log2(εn)⌉ + 1)``, at most ``22·d``."""
    return min(22, math.ceil(math.log2(eps * n)) + 1) * d


def _check_privtree(mech, X, eps_list, seeds, caps):
    """Every replicate of a PrivTree batch against the reference; returns the batch."""
    n, d = X.shape
    shift, placement = mech.shift, mech.placement
    out, diag = js.release_batch(KEY, mech, X, eps=eps_list, seeds=seeds, diagnostics=True)
    noisy_mass = _np(out.info["noisy_mass"])  # the released p̃_Q [E, S, M]
    counts = rtree.Counts(X)
    for e, (eps, cap) in enumerate(zip(eps_list, caps)):
        assert int(out.info["depth_cap"][e, 0]) == cap
        for s in range(seeds):
            key = rrng.replicate_key(KEY, s)
            ref = rprivtree.release(key, counts, eps, cap, shift, placement)
            o = out[e, s]
            U = None
            if shift:
                U = _np(o.info["shift"])
                np.testing.assert_array_equal(U, ref.shift.astype(np.float32))
            n_leaves = int(o.leaves)
            assert n_leaves == len(ref.leaves), (e, s)
            assert int(o.visited) == len(ref.nodes), (e, s)
            assert int(o.info["cap_hits"]) == ref.cap_hits, (e, s)
            assert int(o.depth) == max(level for level, _ in ref.leaves)
            points = _np(o.points)[:n_leaves]
            levels = _np(o.leaf_depth)[:n_leaves]
            noisy = noisy_mass[e, s, :n_leaves]
            weights = _np(o.weights)
            assert np.all(weights[n_leaves:] == 0)
            total = float(sum(float(v.mass) for v in ref.leaves.values()))
            seen = set()
            for i in range(n_leaves):
                cell = (int(levels[i]), _engine_cell(points[i], int(levels[i]), d, U))
                assert cell in ref.leaves, (e, s, cell)
                seen.add(cell)
                v = ref.leaves[cell]
                # p̃_Q = (c_Q + Lap)/n: the noisy count agrees exactly; the kernel's division
                # by the constant n is compiled as a product with fl(1/n), so the quotient
                # may differ from the correctly rounded one by 1 ulp
                want = np.float32(v.noisy) / np.float32(n)
                assert abs(noisy[i] - want) <= np.spacing(abs(want)), (e, s, cell)
                np.testing.assert_allclose(weights[i], float(v.mass) / total, rtol=1e-5,
                                           atol=1e-7)
                if placement == "center":
                    np.testing.assert_array_equal(points[i], v.point.astype(np.float32))
                else:
                    np.testing.assert_allclose(points[i], v.point, rtol=0, atol=2e-7)
                    a, b = v.box
                    assert all(a[c] <= Fraction(float(points[i][c])) < b[c] for c in range(d))
            assert seen == set(ref.leaves)
            assert int(o.size) == sum(1 for v in ref.leaves.values() if v.mass > 0)
            check_w1(diag, ref.w1, e, s)
    return out


PRIVTREE_CASES = [(False, "center"), pytest.param(False, "uniform", marks=pytest.mark.slow),
                  (True, "center"), pytest.param(True, "uniform", marks=pytest.mark.slow)]


@pytest.mark.parametrize("shift, placement", PRIVTREE_CASES)
def test_privtree_matches_reference(shift, placement):
    X = data("d2")
    n, d = X.shape
    mech = js.PrivTree(shift=shift, placement=placement)
    eps_list, seeds = [0.5, 2.0], 3
    out = _check_privtree(mech, X, eps_list, seeds, [privtree_cap(n, d, e) for e in eps_list])
    if shift and placement == "uniform":
        check_release_and_chunking(mech, X, eps_list, 1, out, seeds)


@pytest.mark.parametrize("cap", [33, pytest.param(32, marks=pytest.mark.slow)])
def test_privtree_leaves_past_a_chunk_boundary(cap):
    """Duplicated points grow the tree to the cap: LEAF and PLACE words of leaves in the
    second 32-level chunk (level 33), and on the boundary itself (level 32)."""
    X = np.repeat(np.array([[0.3, 0.6], [0.7, 0.2]]), 100, axis=0)
    mech = js.PrivTree(depth_cap=cap, placement="uniform")
    out = _check_privtree(mech, X, [8.0], 1, [cap])
    assert np.any(_np(out.leaf_depth) == cap)


# ------------------------------------------------------------------ threshold oracles


@pytest.mark.parametrize("kind, theta, delta, cap", [
    ("hard", 0.037, 0.0, None), ("soft", 0.013, 0.0031, 12),
])
def test_threshold_oracles_match_brute_force(kind, theta, delta, cap):
    X = data("d2")
    n, d = X.shape
    if kind == "hard":
        out = js.oracle.hard_threshold(X, theta, depth_cap=cap)
    else:
        out = js.oracle.soft_threshold(X, theta, delta, depth_cap=cap)
    leaves, reached, cap_hits = rprivtree.threshold_tree(
        rtree.Counts(X), theta, delta, 22 * d if cap is None else cap
    )
    k = int(out.leaves)
    assert k == len(leaves)
    assert int(out.visited) == reached
    assert int(out.info["cap_hits"]) == cap_hits
    w, p, lv = _np(out.weights), _np(out.points), _np(out.leaf_depth)
    assert np.all(w[k:] == 0)
    engine = {}
    for i in range(k):
        cell = (int(lv[i]), _engine_cell(p[i], int(lv[i]), d, None))
        engine[cell] = int(np.rint(float(w[i]) * n))
        np.testing.assert_allclose(w[i], leaves[cell] / n, rtol=1e-6)
    assert engine == leaves
