"""Exact tree-metric W1 and its upper bound against POT on explicit cost matrices.

The reference builds the tree-metric cost matrix by brute force from per-coordinate cell
indices (``partition.cell_index``), independently of the Morton-code kernel: a data point
sits at the kept atom cell containing it (or, in a balanced tree, its depth-``r`` cell),
the distance of two nodes at depths ``a, b`` with lowest common ancestor at level ``l``
is ``diam(l) - (diam(a) + diam(b))/2`` (0 for the same cell), and ``ot.emd2`` solves the
transport exactly in float64.  Tolerance ``RTOL = 1e-5`` relative (``ATOL = 1e-7``): the
kernel works in float32 on float32 weights, measured error ≤ 3e-7 relative on these cases.

Unshifted trees run on the host kernel (``leaf_tree``; balanced ones of depth at most
``complete_tree.MAX_DEPTH`` on the complete grid) and shifted ones on the device kernel
(``tree._tree_levels``); the ``route`` fixture sends unshifted trees to the device kernel
too, so both face the same references.

Shapes are fixed per dimension (``N_DATA`` points, ``M_ATOMS`` atoms, depth ``DEPTH``) so
every test of one dimension reuses a single compilation (ℓ∞ and ℓ2 included).
"""

import jax
import jax.numpy as jnp
import numpy as np
import ot
import pytest

import jaxsynth as js
from jaxsynth.core import partition
from jaxsynth.core.datatree import DataTree
from jaxsynth.core.measure import SyntheticMeasure, check_measure
from jaxsynth.experiments import datasets
from jaxsynth.wasserstein import TreeData, leaf_tree, prepare_w1, w1
from jaxsynth.wasserstein import tree as T

RTOL, ATOL = 1e-5, 1e-7
DEPTH = 8
N_DATA = 48
M_ATOMS = 24
METRICS = ("linf", "l2")


# ----------------------------------------------------------------------------- fixtures


def make_measure(points, weights, leaf_depth, info=None) -> SyntheticMeasure:
    """A ``SyntheticMeasure`` with the given atoms (batch axes = leading axes of weights)."""
    batch = np.shape(weights)[:-1]
    zero = jnp.zeros(batch, jnp.int32)
    return SyntheticMeasure(
        points=jnp.asarray(points, jnp.float32),
        weights=jnp.asarray(weights, jnp.float32),
        leaf_depth=jnp.asarray(leaf_depth, jnp.int32),
        size=zero,
        visited=zero,
        leaves=zero,
        depth=zero,
        budget={"epsilon": jnp.ones(batch)},
        info=info or {},
    )


def tree_w1(data, out, metric, batch_size=None) -> T.TreeW1:
    """``tree.tree_w1_atoms`` of a measure's validated arrays (``check_measure``, as the
    router validates them), batch shape kept."""
    arrays = check_measure(out, T.data_points(data).shape[1])
    result = T.tree_w1_atoms(data, *arrays, metric, batch_size)
    return T.TreeW1(*(np.asarray(r).reshape(out.batch_shape) for r in result))


def make_data(rng, d, n=N_DATA):
    """Uniform points plus points on dyadic cell boundaries, 0 and 1."""
    X = rng.random((n, d))
    X[: n // 4] = rng.integers(0, 17, (n // 4, d)) / 16.0
    X[0], X[1] = 1.0, 0.0
    return X


def _cell_box(code, level, d):
    cells = partition.leaf_index_to_cells(np.array([code]), level, d)
    lower = partition.cell_lower_corner(cells, level)[0]
    return lower, partition.cell_side(level, d)


def _inside(rng, lower, side):
    """The center or a uniform point well inside the box (float32-exact either way)."""
    if rng.random() < 0.5:
        return lower + side / 2
    return lower + side * rng.uniform(0.05, 0.95, lower.shape)


def pad_atoms(points, weights, leaf_depth, size=M_ATOMS):
    """Zero padding as the engines pad releases: point 0, weight 0, depth 0 (root)."""
    pad = size - len(weights)
    assert pad >= 0
    d = points.shape[1]
    return (
        np.concatenate([points, np.zeros((pad, d))]).astype(np.float32),
        np.concatenate([weights, np.zeros(pad)]),
        np.concatenate([leaf_depth, np.zeros(pad, int)]),
    )


def _random_weights(rng, m):
    w = rng.random(m) ** 2
    w[rng.random(m) < 0.25] = 0.0  # zero-weight leaves are real leaves
    w[rng.integers(m)] += 0.5
    return w / w.sum()


def balanced_replicate(rng, d, r, m):
    """``m`` distinct random depth-``r`` cells with atoms, PMM-style (Morton-sorted)."""
    codes = np.sort(rng.choice(2**r, m, replace=False))
    points = np.array([_inside(rng, *_cell_box(c, r, d)) for c in codes])
    return pad_atoms(points, _random_weights(rng, m), np.full(m, r))


def in_place_replicate(rng, d, r):
    """A complete depth-``r`` release in PMM's planar order: slot ``i`` holds an atom of
    the cell whose path bit ``b_t`` is bit ``t`` of ``i`` (built from the bits here, not
    from ``complete_tree.planar_cells``), root-padded."""
    slots = np.arange(2**r)
    codes = sum(((slots >> t) & 1) << (r - 1 - t) for t in range(r))  # Morton: b_0 first
    points = np.array([_inside(rng, *_cell_box(c, r, d)) for c in codes])
    return pad_atoms(points, _random_weights(rng, 2**r), np.full(2**r, r))


def grow_tree(rng, n_leaves, max_depth):
    """Leaves ``(code, level)`` of a random tree grown by splitting random leaves."""
    leaves = [(0, 0)]
    while len(leaves) < n_leaves:
        i = rng.integers(len(leaves))
        code, level = leaves[i]
        if level < max_depth:
            leaves[i : i + 1] = [(2 * code, level + 1), (2 * code + 1, level + 1)]
    return leaves


def unbalanced_replicate(rng, d, n_leaves, shift=None):
    """A PrivTree-like output: every leaf carries an atom, shuffled, root-padded.

    With ``shift`` (``U``) the tree lives on ``z = (x + U)/2``; leaves disjoint from the
    window ``[U/2, (1+U)/2]`` are discarded, atoms lie in ``Q ∩ window`` mapped back.
    """
    points, depths = [], []
    for code, level in grow_tree(rng, n_leaves, DEPTH):
        lower, side = _cell_box(code, level, d)
        if shift is not None:
            a, b = np.maximum(lower, shift / 2), np.minimum(lower + side, (1 + shift) / 2)
            if np.any(a >= b):
                continue
            lower, side = a, b - a
        points.append(_inside(rng, lower, side))
        depths.append(level)
    points = np.array(points)
    if shift is not None:
        points = 2 * points - shift
    perm = rng.permutation(len(depths))
    return pad_atoms(points[perm], _random_weights(rng, len(depths)), np.array(depths)[perm])


def stack(replicates):
    return tuple(np.stack(a) for a in zip(*replicates))


@pytest.fixture(params=["host", "device"])
def route(request, monkeypatch):
    """Unshifted trees of any shape on the host kernel, or (its depth limit lowered below
    every tree) on the device kernel."""
    if request.param == "device":
        monkeypatch.setattr(leaf_tree, "MAX_DEPTH", -1)
    return request.param


def caterpillar_replicate(rng, d, depth):
    """A tree split ``depth`` times towards the origin: the sibling of every level's cell
    at the origin is a leaf, and so is the deepest such cell (``depth + 1`` leaves, with
    atoms at their centres, exact in float32), shuffled, some weights 0, root-padded."""
    points = []
    for level in range(1, depth + 1):
        axis = (level - 1) % d
        cell = np.zeros(d, np.int64)
        cell[axis] = 1
        side = partition.cell_side(level, d)
        points.append(partition.cell_lower_corner(cell, level) + side / 2)
    points.append(partition.cell_side(depth, d) / 2)
    depths = np.append(np.arange(1, depth + 1), depth)
    perm = rng.permutation(depth + 1)
    return pad_atoms(np.array(points)[perm], _random_weights(rng, depth + 1), depths[perm],
                     size=2 * depth + 2)


def data_near_origin(rng, d, depth, n=N_DATA):
    """Points at every scale down to the deepest cells of ``caterpillar_replicate``."""
    X = rng.random((n, d)) * np.ldexp(1.0, -rng.integers(0, depth // d + 1, (n, 1)))
    X[0], X[1] = 1.0, 0.0
    return X


# ---------------------------------------------------------------------------- reference


def reference(X, points, weights, leaf_depth, metric, shift=None, depth=DEPTH):
    """(tree W1, its upper bound, exact W1) by brute force and POT, float64; cells are
    resolved to ``depth`` levels (at least the deepest leaf)."""
    X, P = np.asarray(X, np.float64), np.asarray(points, np.float64)
    w = np.asarray(weights, np.float64) / np.sum(weights)
    mu = np.full(len(X), 1 / len(X))
    ground = "chebyshev" if metric == "linf" else "euclidean"
    exact = ot.emd2(mu, w, ot.dist(X, P, metric=ground))
    scale = 1.0
    if shift is not None:
        X, P, scale = (X + shift) / 2, (P + shift) / 2, 2.0
    levels = np.arange(depth + 1)
    # path[l, i]: the level-l cell of point i (per-coordinate indices), compared as rows
    path_x = np.stack([partition.cell_index(X, lv) for lv in levels])
    path_p = np.stack([partition.cell_index(P, lv) for lv in levels])
    common_xp = np.all(path_x[:, :, None] == path_p[:, None], -1).sum(0) - 1  # [n, m]
    common_pp = np.all(path_p[:, :, None] == path_p[:, None], -1).sum(0) - 1  # [m, m]
    depth_p = np.asarray(leaf_depth)
    # kept atoms: not (zero weight and strictly containing another atom's cell)
    holds = (common_pp >= depth_p[:, None]) & (depth_p[None, :] > depth_p[:, None])
    kept = (w > 0) | ~holds.any(1)
    inside = kept[None] & (common_xp >= depth_p[None])  # data i in the cell of atom a
    depth_x = np.where(inside.any(1), depth_p[np.argmax(inside, 1)], depth_p[kept].max())
    lca = np.minimum(common_xp, np.minimum(depth_x[:, None], depth_p[None]))
    diam = partition.diameter(levels, X.shape[1], metric)
    cost = np.where(inside, 0.0, diam[lca] - (diam[depth_x][:, None] + diam[depth_p][None]) / 2)
    tree = ot.emd2(mu, w, cost)
    within = 0.5 * (np.mean(diam[depth_x]) + np.sum(w * diam[depth_p]))
    return scale * tree, scale * (tree + within), exact


def check_against_reference(X, out, metric, shift=None):
    """Kernel vs ``reference`` for every replicate of ``out`` (flat batch)."""
    result = tree_w1(prepare_w1(X, DEPTH, size=len(X)), out, metric)
    assert np.all(np.asarray(result.valid))
    P, w, lv = (np.asarray(a) for a in (out.points, out.weights, out.leaf_depth))
    for b in range(len(w)):
        u = None if shift is None else shift[b]
        tree, upper, exact = reference(X, P[b], w[b], lv[b], metric, u)
        np.testing.assert_allclose(float(result.value[b]), tree, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(float(result.upper[b]), upper, rtol=RTOL, atol=ATOL)
        assert exact <= upper * (1 + 1e-6)  # the certified upper bound
    return result


# -------------------------------------------------------------------------------- tests


def test_morton_words_of_sum_exact():
    """Host (float64) and device (float32) codes of shifted points equal
    ``partition.morton_words`` of the exact sums (checked bit by bit in
    ``test_partition_datatree``)."""
    rng = np.random.default_rng(0)
    for d, depth in ((1, 33), (2, 0), (2, 70), (3, 7)):
        X = make_data(rng, d, 200).astype(np.float32).astype(np.float64)
        u = rng.random(d).astype(np.float32).astype(np.float64)
        np.testing.assert_array_equal(  # float32 inputs: the float64 sums are exact
            np.stack(partition.morton_words_of_sum(np, X, u, depth, True), -1),
            partition.morton_words((X + u) / 2, depth),
        )
    device = jax.jit(partition.morton_words_of_sum, static_argnums=(0, 3, 4))
    X = make_data(rng, 3, 200).astype(np.float32)
    u = rng.random(3).astype(np.float32)
    for shift in (np.zeros(3, np.float32), u):
        codes = device(jnp, jnp.asarray(X), jnp.asarray(shift), 70, True)
        expect = partition.morton_words((X.astype(np.float64) + shift) / 2, 70)
        np.testing.assert_array_equal(np.stack(codes, -1), expect)
    # x + U not representable in float32: the digits follow the exact real sum.
    x = np.array([[0.5 + 2.0**-23]], np.float32)
    u = np.array([0.5 - 2.0**-25], np.float32)
    assert np.float32(x[0, 0] + u[0]) != x[0, 0] + np.float64(u[0])
    np.testing.assert_array_equal(
        np.stack(partition.morton_words_of_sum(np, x, u, 40, True), -1),
        partition.morton_words((x.astype(np.float64) + u) / 2, 40),
    )


@pytest.mark.parametrize("d", [1, 2, 3])
def test_tree_w1_matches_pot(d, route):
    """Balanced (PMM-like) and unbalanced (PrivTree-like) trees, both metrics, vs POT."""
    rng = np.random.default_rng(d)
    X = make_data(rng, d)
    replicates = [balanced_replicate(rng, d, r, m) for r, m in ((DEPTH, 16), (5, 12), (DEPTH, 1))]
    replicates += [unbalanced_replicate(rng, d, k) for k in (2, 9, 17)]
    out = make_measure(*stack(replicates))
    for metric in METRICS:
        check_against_reference(X, out, metric)


@pytest.mark.parametrize("d", [2, 3])
def test_shifted_partition_matches_pot(d):
    """PrivTree ``shift=True``: tree of ``(x + U)/2``, distances doubled."""
    rng = np.random.default_rng(10 + d)
    X = make_data(rng, d)
    shift = rng.random((4, d)).astype(np.float32)
    replicates = [
        unbalanced_replicate(rng, d, k, s.astype(np.float64)) for k, s in zip((3, 8, 12, 17), shift)
    ]
    out = make_measure(*stack(replicates), info={"shift": jnp.asarray(shift)})
    for metric in METRICS:
        check_against_reference(X, out, metric, shift.astype(np.float64))


def test_closed_forms():
    """A root-only tree gives (0, diam(0)); a balanced tree's upper bound is tree W1 +
    diam(r); synthetic = data (one atom per point, depth r) gives 0."""
    rng = np.random.default_rng(5)
    X = make_data(rng, 2)
    root = pad_atoms(np.array([[0.3, 0.7]]), np.ones(1), np.zeros(1, int))
    reps = [root] + [balanced_replicate(rng, 2, 6, 10) for _ in range(5)]
    out = make_measure(*stack(reps))
    for metric in METRICS:
        result = tree_w1(prepare_w1(X, DEPTH, size=N_DATA), out, metric)
        assert float(result.value[0]) == 0.0
        assert float(result.upper[0]) == pytest.approx(partition.diameter(0, 2, metric), rel=1e-6)
        np.testing.assert_allclose(
            result.upper[1:] - result.value[1:], partition.diameter(6, 2, metric), rtol=1e-5
        )
    twice = np.repeat(X[:M_ATOMS], 2, axis=0)  # N_DATA points, each atom's point twice
    same = [
        (X[:M_ATOMS].astype(np.float32), np.full(M_ATOMS, 1 / M_ATOMS), np.full(M_ATOMS, DEPTH))
    ]
    result = tree_w1(prepare_w1(twice, DEPTH, size=N_DATA), make_measure(*stack(same * 6)), "l2")
    np.testing.assert_allclose(result.value, 0.0, atol=1e-7)
    np.testing.assert_allclose(result.upper, partition.diameter(DEPTH, 2, "l2"), rtol=1e-6)


def test_batched_equals_per_replicate():
    """Batch axes [2, 3], one replicate at a time (``batch_size=1``) and unbatched agree
    (the unbatched call with weights scaled by 3: ν is normalised like in exact1d)."""
    rng = np.random.default_rng(7)
    X = make_data(rng, 2)
    reps = [balanced_replicate(rng, 2, DEPTH, 10) for _ in range(3)]
    reps += [unbalanced_replicate(rng, 2, k) for k in (4, 7, 11)]
    P, w, lv = stack(reps)
    data = prepare_w1(X, DEPTH, size=N_DATA)
    grid = make_measure(P.reshape(2, 3, M_ATOMS, 2), w.reshape(2, 3, -1), lv.reshape(2, 3, -1))
    batched = tree_w1(data, grid, "l2")
    one_by_one = tree_w1(data, make_measure(P, w, lv), "l2", batch_size=1)
    single = tree_w1(data, make_measure(P[4], 3 * w[4], lv[4]), "l2")  # weights normalised
    assert batched.value.shape == (2, 3) and single.value.shape == ()
    for field in ("value", "upper", "valid"):
        np.testing.assert_allclose(
            getattr(batched, field).reshape(-1), getattr(one_by_one, field), rtol=1e-6
        )
    assert float(single.value) == pytest.approx(float(one_by_one.value[4]), rel=1e-6)
    dispatched = w1(data, make_measure(P[4], w[4], lv[4]), "tree", "l2")
    assert isinstance(dispatched, np.ndarray) and dispatched.shape == ()
    assert float(dispatched) == pytest.approx(float(single.value), rel=1e-6)


@pytest.mark.parametrize("depth, m", [(0, 5), (20, 300), (32, 2304), (45, 1000), (64, 70),
                                      (96, 40000)])
def test_codes_sort_as_numpy_lexsorts_them(depth, m):
    """``tree._sort_codes`` (one packed key, or a radix sort of such keys) against NumPy's
    stable lexicographic sort of the codes' ``depth`` bits, with many ties."""
    rng = np.random.default_rng(depth + m)
    words = rng.integers(0, 2**32, (T.n_words(max(depth, 1)), m), dtype=np.uint64)
    words[:, rng.random(m) < 0.3] = words[:, :1]  # ties
    if depth % 32:  # bits past depth are ignored
        words[-1] = words[-1] >> np.uint64(32 - depth % 32) << np.uint64(32 - depth % 32)
        noise = rng.integers(0, 2 ** (32 - depth % 32), m, dtype=np.uint64)
    words = words.astype(np.uint32)
    truth = np.lexsort(words[::-1]) if depth else np.arange(m)
    if depth % 32:
        words[-1] |= noise.astype(np.uint32)
    perm = jax.jit(T._sort_codes, static_argnums=1)(tuple(jnp.asarray(w) for w in words), depth)
    np.testing.assert_array_equal(np.asarray(perm), truth)


def test_dropping_inert_atoms_changes_nothing():
    """Balanced batches lose their zero-weight atoms before the kernel (fewer atoms,
    ``tree._drop_inert_atoms``); a batch with one unbalanced replicate keeps them all.
    Both must give the same values for the balanced replicates."""
    rng = np.random.default_rng(15)
    X = make_data(rng, 2)
    balanced = [
        balanced_replicate(rng, 2, r, m)
        for r, m in ((DEPTH, 6), (6, 9), (3, 4), (DEPTH, 2), (5, 3))
    ]
    P, w, lv = stack(balanced)
    assert T._drop_inert_atoms(P, w, lv)[1].shape[1] < M_ATOMS
    data = prepare_w1(X, DEPTH, size=N_DATA)
    compact = tree_w1(data, make_measure(P, w, lv), "l2")
    full = tree_w1(data, make_measure(*stack(balanced + [unbalanced_replicate(rng, 2, 5)])), "l2")
    for field in ("value", "upper"):
        np.testing.assert_allclose(getattr(compact, field), getattr(full, field)[:5], rtol=1e-6)


@pytest.mark.parametrize("trailing", [True, False])
def test_unbalanced_trees_lose_only_their_root_padding(trailing, monkeypatch, route):
    """An unbalanced batch (PrivTree-like, padded far past its leaves) loses the engine's
    root padding before the kernel (cut off where it trails the leaves, as releases pad,
    else gathered out) and keeps its zero-weight leaves: the values equal the brute-force
    reference and the kernel's on every atom."""
    rng = np.random.default_rng(16)
    X = make_data(rng, 2)
    reps = [pad_atoms(*(a[a_live] for a in rep[:3]), size=4 * M_ATOMS)
            for rep in (unbalanced_replicate(rng, 2, k) for k in (5, 11, 17))
            for a_live in [(rep[1] > 0) | (rep[2] > 0)]]
    if not trailing:
        reps = [tuple(a[order] for a in rep)
                for rep in reps for order in [rng.permutation(4 * M_ATOMS)]]
    P, w, lv = stack(reps)
    dropped = T._drop_inert_atoms(P, w, lv)
    assert dropped[1].shape[1] < 2 * M_ATOMS
    assert ((w == 0) & (lv > 0)).any()
    for i in range(len(reps)):  # every leaf kept in its order, zero-weight ones too
        live = (w[i] > 0) | (lv[i] > 0)
        for kept, original in zip(dropped, (P, w, lv)):
            np.testing.assert_array_equal(kept[i][:live.sum()], original[i][live])
    data = prepare_w1(X, DEPTH, size=N_DATA)
    compact = tree_w1(data, make_measure(P, w, lv), "l2")
    monkeypatch.setattr(T, "_drop_inert_atoms", lambda *atoms: atoms)
    full = tree_w1(data, make_measure(P, w, lv), "l2")
    for i in range(len(reps)):
        tree, upper, _ = reference(X, P[i], w[i], lv[i], "l2")
        assert float(compact.value[i]) == pytest.approx(tree, rel=1e-5)
        assert float(compact.upper[i]) == pytest.approx(upper, rel=1e-5)
    for field in ("value", "upper", "valid"):
        np.testing.assert_array_equal(getattr(compact, field), getattr(full, field))


@pytest.mark.parametrize("metric", METRICS)
def test_in_place_releases_against_pot(metric, monkeypatch):
    """Balanced releases whose atoms sit in planar order, and the same atoms out of place
    (two slots swapped, an atom moved to another cell of its level, a permutation of a
    PMM-style release), all on the complete grid (``complete_tree``: the general kernel
    is not called), against the brute-force POT reference."""
    rng = np.random.default_rng(21)
    X = make_data(rng, 2)
    reps = [in_place_replicate(rng, 2, r) for r in (4, 3, 4)]
    swapped = [a.copy() for a in in_place_replicate(rng, 2, 4)]
    swapped[0][[2, 5]] = swapped[0][[5, 2]]
    moved = [a.copy() for a in in_place_replicate(rng, 2, 3)]
    moved[0][1] = moved[0][6]  # two atoms in one cell, another cell empty
    shuffled = [a.copy() for a in in_place_replicate(rng, 2, 4)]
    order = np.concatenate([rng.permutation(16), np.arange(16, M_ATOMS)])
    shuffled = [a[order] for a in shuffled]
    monkeypatch.setattr(T, "_tree_levels", None)
    check_against_reference(X, make_measure(*stack(reps + [swapped, moved, shuffled])), metric)


def test_no_recompile_across_weights_metrics_and_data_sets(monkeypatch):
    """The device kernel: one compilation per shape; new weights, ℓ∞/ℓ2 and another data
    set reuse it."""
    monkeypatch.setattr(leaf_tree, "MAX_DEPTH", -1)
    rng = np.random.default_rng(8)
    kernel = T._chunk_kernel(DEPTH, False)

    def run(metric):
        out = make_measure(*stack([unbalanced_replicate(rng, 3, 10) for _ in range(6)]))
        tree_w1(prepare_w1(make_data(rng, 3), DEPTH, size=N_DATA), out, metric)

    run("linf")
    before = kernel._cache_size()
    run("l2")
    run("linf")
    assert kernel._cache_size() == before


@pytest.mark.parametrize("d, depth", [(1, 8), (2, 8), (3, 8), (1, 63), (2, 40), (3, 45)])
def test_host_kernel_is_the_device_kernel(d, depth, monkeypatch):
    """``leaf_tree`` against ``tree._tree_levels`` on the same batches: unbalanced and
    balanced trees, zero-weight leaves, root padding, atoms of one cell, nested and
    uncovered trees, and trees down to ``leaf_tree.MAX_DEPTH`` levels (two code words on
    the device).  Both give the level statistics of one tree, so the values agree to the
    device's float32 sums (``RTOL``) and validity exactly; where ``partition.cell_index``
    resolves the cells (at most 62 digits a coordinate), the values are POT's too."""
    rng = np.random.default_rng(100 * d + depth)
    if depth == DEPTH:
        X = make_data(rng, d)
        reps = [unbalanced_replicate(rng, d, k) for k in (2, 9, 17, 17)]
        reps += [balanced_replicate(rng, d, r, m) for r, m in ((DEPTH, 16), (5, 3))]
        twice = [a.copy() for a in unbalanced_replicate(rng, d, 6)]
        for a in twice:  # a leaf's atom twice: one cell, half the weight each
            a[-1] = a[0]
        twice[1][[0, -1]] = twice[1][0] / 2
        reps += [twice]
        cells = [_cell_box(code, level, d) for code, level in ((0, 2), (1, 2), (1, 1))]
        reps += [pad_atoms(  # two zero-weight atoms of one cell, one next to a deeper atom
            np.array([[0.01] * d, [0.02] * d] + [lower + side / 2 for lower, side in cells]),
            np.array([0, 0, 0.25, 0.25, 0.5]), np.array([1, 1, 2, 2, 1])),
                 pad_atoms(np.array([[0.3] * d, [0.1] * d]), np.array([0.5, 0.5]),
                           np.array([1, 4])),  # nested
                 pad_atoms(np.array([[0.25] * d, [0.75] * d]), np.array([0.5, 0.5]),
                           np.array([2, 3]))]  # data outside every leaf
    else:
        X = data_near_origin(rng, d, depth)
        reps = [caterpillar_replicate(rng, d, depth) for _ in range(4)]
    out = make_measure(*stack(reps))
    data = prepare_w1(X, depth, size=len(X))
    for metric in METRICS:
        host = tree_w1(data, out, metric)
        monkeypatch.setattr(leaf_tree, "MAX_DEPTH", -1)
        device = tree_w1(data, out, metric)
        monkeypatch.undo()
        np.testing.assert_array_equal(host.valid, device.valid)
        valid = np.asarray(host.valid)
        assert valid.sum() >= 4
        for field in ("value", "upper"):
            np.testing.assert_allclose(getattr(host, field)[valid],
                                       getattr(device, field)[valid], rtol=RTOL, atol=ATOL)
        if depth // d + 1 <= 62:
            P, w, lv = (np.asarray(a) for a in (out.points, out.weights, out.leaf_depth))
            for b in np.flatnonzero(valid):
                tree, upper, _ = reference(X, P[b], w[b], lv[b], metric, depth=depth)
                np.testing.assert_allclose(float(host.value[b]), tree, rtol=RTOL, atol=ATOL)
                np.testing.assert_allclose(float(host.upper[b]), upper, rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_accuracy_large_balanced():
    """n = 20000, depth 14, d = 2 vs a float64 per-level reference (balanced trees:
    W_T = Σ_j w_j Σ_cells |μ - ν|, cells grouped with np.unique)."""
    rng = np.random.default_rng(9)
    n, r, d = 20000, 14, 2
    X = np.clip(0.5 + 0.15 * rng.standard_normal((n, d)), 0, 1)
    codes = partition.morton_words(X, r)[:, 0] >> np.uint32(32 - r)
    occupied, counts = np.unique(codes, return_counts=True)
    mass = np.maximum(counts + rng.laplace(0, 3, len(counts)), 0)
    cells = partition.leaf_index_to_cells(occupied, r, d)
    P = (partition.cell_lower_corner(cells, r) + partition.cell_side(r, d) / 2).astype(np.float32)
    w = (mass / mass.sum()).astype(np.float32)
    result = tree_w1(X, make_measure(P, w, np.full(len(w), r)), "l2")
    diam = partition.diameter(np.arange(r + 1), d, "l2")
    signed = np.concatenate([np.full(n, 1 / n), -w.astype(np.float64)])
    expect = 0.0
    for j in range(1, r + 1):
        keys = np.concatenate([codes, occupied]) >> np.uint32(r - j)
        _, cell = np.unique(keys, return_inverse=True)
        expect += (diam[j - 1] - diam[j]) / 2 * np.abs(np.bincount(cell, signed)).sum()
    assert float(result.value) == pytest.approx(expect, rel=2e-6)


def test_datatree_and_prepared_inputs_agree():
    """``X``, a ``TreeData`` and a ``DataTree`` (deeper, cut to the leaves' depth, or too
    shallow, rebuilt from its points) give the same W1, for unbalanced trees and, on the
    complete grid's route, for balanced ones."""
    rng = np.random.default_rng(11)
    X = make_data(rng, 2)
    out = make_measure(*stack([unbalanced_replicate(rng, 2, k) for k in (5, 9, 3, 4, 6, 2)]))
    plain = w1(X, out, "tree")
    np.testing.assert_allclose(w1(prepare_w1(X, DEPTH, size=N_DATA), out, "tree"), plain, rtol=1e-6)
    np.testing.assert_allclose(w1(DataTree.build(X, 40), out, "tree"), plain, rtol=1e-6)  # cut
    np.testing.assert_allclose(w1(DataTree.build(X, 2), out, "tree"), plain, rtol=1e-6)
    balanced = make_measure(*stack([balanced_replicate(rng, 2, DEPTH, k) for k in (5, 9, 3)]))
    plain = w1(X, balanced, "tree")  # the complete grid's route: its data histogram
    for data in (prepare_w1(X, DEPTH, size=N_DATA), DataTree.build(X, 40), DataTree.build(X, 2)):
        np.testing.assert_array_equal(w1(data, balanced, "tree"), plain)


def test_malformed_trees_are_rejected(route):
    """Nested positive-weight leaves, or data outside every leaf of an unbalanced tree."""
    rng = np.random.default_rng(12)
    X = make_data(rng, 2)
    nested = pad_atoms(np.array([[0.3, 0.3], [0.1, 0.1]]), np.array([0.5, 0.5]), np.array([1, 4]))
    uncovered = pad_atoms(
        np.array([[0.25, 0.25], [0.75, 0.25]]), np.array([0.5, 0.5]), np.array([2, 3])
    )
    fine = pad_atoms(np.array([[0.25, 0.5], [0.75, 0.5]]), np.array([0.5, 0.5]), np.array([1, 1]))
    out = make_measure(*stack([nested, uncovered, fine, fine, fine, fine]))
    data = prepare_w1(X, DEPTH, size=N_DATA)
    valid = np.asarray(tree_w1(data, out, "linf").valid)
    np.testing.assert_array_equal(valid, [False, False, True, True, True, True])
    for method in ("tree", "tree_upper", "bracket"):
        with pytest.raises(ValueError, match="out"):
            w1(data, out, method)


def _replace(measure, **fields):
    return SyntheticMeasure(**{**measure.__dict__, **fields})


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda m: _replace(m, weights=m.weights.at[0, 0].set(jnp.nan)), "weights"),
        (lambda m: _replace(m, leaf_depth=m.leaf_depth.at[0, 0].set(-1)), "leaf_depth"),
        (lambda m: _replace(m, points=m.points[..., :1]), "points"),
        (lambda m: _replace(m, points=m.points + 2.0), "points"),
        (lambda m: _replace(m, info={"shift": jnp.ones(3)}), "shift"),
        (lambda m: "not a measure", "out"),
    ],
)
def test_bad_measures_raise(mutate, match):
    rng = np.random.default_rng(13)
    out = make_measure(*stack([balanced_replicate(rng, 2, 4, 5) for _ in range(2)]))
    with pytest.raises(ValueError, match=match):
        w1(make_data(rng, 2), mutate(out), "tree")


def test_bad_arguments_raise():
    rng = np.random.default_rng(14)
    X = make_data(rng, 2)
    out = make_measure(*balanced_replicate(rng, 2, 6, 5))
    with pytest.raises(ValueError, match="metric"):
        w1(X, out, "tree", "l1")
    with pytest.raises(ValueError, match="depth"):
        w1(prepare_w1(X, 3), out, "tree")
    with pytest.raises(ValueError, match="depth"):
        prepare_w1(X, -1)
    with pytest.raises(ValueError, match="size"):
        prepare_w1(X, 8, size=2)
    with pytest.raises(ValueError, match="X"):
        prepare_w1(X + 1, 4)
    assert isinstance(prepare_w1(X, 4), TreeData)


@pytest.mark.parametrize("mech", [
    pytest.param(js.PMM(depth=6), id="pmm"),
    pytest.param(js.PrunedPMM(depth=9, engine="sparse"), id="pruned-sparse"),
    pytest.param(js.PrivTree(), id="privtree"),
    pytest.param(js.PrivTree(shift=True), id="privtree-shift", marks=pytest.mark.slow)])
def test_kernels_fused_tree_w1_is_tree_w1(mech):
    """The level statistics a kernel sums while it descends, weighed by the tree method
    (``diag["tree_<metric>"]``), are the tree W1 and upper bound that ``tree_w1`` computes from the released atoms."""
    X = datasets.load("spiral", n=1500, key=4)
    out, diag = js.release_batch(2, mech, X, eps=[0.5, 2.0], seeds=3, diagnostics=True)
    data = prepare_w1(X, int(np.max(np.asarray(out.leaf_depth))))
    for metric in partition.GROUND_METRICS:
        truth = tree_w1(data, out, metric)
        assert np.asarray(truth.valid).all()
        np.testing.assert_allclose(diag[f"tree_{metric}"], truth.value, rtol=2e-5, atol=1e-7)
        np.testing.assert_allclose(diag[f"upper_{metric}"], truth.upper, rtol=2e-5, atol=1e-7)
