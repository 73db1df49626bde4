"""Partition geometry and data-tree counts against brute force."""

import numpy as np
import pytest

from jaxsynth.core import partition
from jaxsynth.core.datatree import DataTree, DeviceTree


def _boundary_data(rng, n, d):
    """Random points with many exactly on dyadic boundaries and at 0 and 1."""
    X = rng.random((n, d))
    X[: n // 3] = rng.integers(0, 9, size=(n // 3, d)) / 8.0
    X[n // 3 : n // 3 + 5] = 1.0
    X[n // 3 + 5 : n // 3 + 10] = 0.0
    return X


def _brute_counts(X, level):
    _, counts = np.unique(partition.cell_index(X, level), axis=0, return_counts=True)
    return np.sort(counts)


def test_resolution_and_diameters():
    d = 3
    for j in range(12):
        k = partition.coordinate_resolution(j, d)
        assert k.sum() == j
        assert partition.diameter(j, d, "linf") == pytest.approx(2.0 ** -(j // d))
        assert partition.diameter(j, d, "l2") == pytest.approx(np.sqrt(np.sum(4.0 ** -k)))
    with pytest.raises(ValueError, match="metric"):
        partition.diameter(1, 2, "l1")


def test_boundary_conventions():
    # the splitting hyperplane belongs to the upper child; x = 1 to the last cell
    X = np.array([[0.5, 0.25], [1.0, 1.0], [0.0, 0.0], [np.nextafter(0.5, 0), 0.75]])
    idx = partition.cell_index(X, 4)  # k = (2, 2)
    np.testing.assert_array_equal(idx, [[2, 1], [3, 3], [0, 0], [1, 3]])
    np.testing.assert_array_equal(partition.morton_bit(X, 0), [1, 1, 0, 0])


@pytest.mark.parametrize("d", [1, 2, 3, 10])
def test_morton_words_are_the_bits_packed(d):
    """Words read a piece of digits at a time hold ``morton_bit`` level by level."""
    X = _boundary_data(np.random.default_rng(d), 300, d)
    X[-3:] = np.ldexp(np.floor(X[-3:] * 2.0**40), -40) + 2.0**-52  # digits past 2^-40
    for depth in (0, 1, 31, 32, 33, 64, 100):
        bits = np.zeros((len(X), 32 * max(1, -(-depth // 32))), np.uint8)  # whole words
        for t in range(depth):
            bits[:, t] = partition.morton_bit(X, t)
        packed = np.packbits(bits, axis=-1).view(">u4").astype(np.uint32)  # MSB first
        np.testing.assert_array_equal(partition.morton_words(X, depth), packed)


@pytest.mark.parametrize("d", [1, 2, 3, 5])
def test_counts_match_brute_force(d):
    rng = np.random.default_rng(d)
    X = _boundary_data(rng, 400, d)
    tree = DataTree.build(X, 14)
    np.testing.assert_array_equal(tree.points, X[tree.order])
    for level in range(15):
        np.testing.assert_array_equal(np.sort(tree.level_counts(level)), _brute_counts(X, level))
        assert tree.occupancy[level] == len(_brute_counts(X, level))
    dense = tree.dense_counts(8)
    for level in range(9):
        assert dense[level].shape == (2**level,)
        assert dense[level].sum() == len(X)
        np.testing.assert_array_equal(np.sort(dense[level][dense[level] > 0]), _brute_counts(X, level))


def test_dense_counts_are_in_morton_order():
    rng = np.random.default_rng(0)
    X = rng.random((300, 2))
    level = 6
    counts = DataTree.build(X, level).dense_counts(level)[level]
    cells = partition.leaf_index_to_cells(np.arange(2**level), level, 2)
    for index in rng.choice(2**level, 20, replace=False):
        inside = np.all(partition.cell_index(X, level) == cells[index], axis=1)
        assert counts[index] == inside.sum()


def _brute_planar_index(X, level):
    """Planar index ``Σ_t b_t 2^t`` of every point's level cell, from ``cell_index``:
    ``b_t`` is the last bit of the coordinate-``t mod d`` index at level ``t + 1``."""
    d = X.shape[1]
    index = np.zeros(len(X), np.int64)
    for t in range(level):
        index |= (partition.cell_index(X, t + 1)[:, t % d] & 1) << t
    return index


@pytest.mark.parametrize("d", [1, 2, 3])
def test_planar_counts_match_brute_force(d):
    rng = np.random.default_rng(10 + d)
    X = _boundary_data(rng, 300, d)
    depth = 7
    tree = DataTree.build(X, 12)
    flat = tree.planar_counts(depth)
    assert flat.dtype == np.int32 and flat.shape == (2 ** (depth + 1) - 1,)
    for level in range(depth + 1):
        counts = flat[2**level - 1 : 2 ** (level + 1) - 1]
        expect = np.bincount(_brute_planar_index(X, level), minlength=2**level)
        np.testing.assert_array_equal(counts, expect)
        # the same cells in Morton order are the dense counts
        morton = np.zeros(2**level, np.int64)
        morton[partition.planar_to_morton(level)] = counts
        np.testing.assert_array_equal(morton, tree.dense_counts(depth)[level])
    # planar order: the children of parent p are p (bit 0) and p + 2^j (bit 1)
    for level in range(depth):
        parents = flat[2**level - 1 : 2 ** (level + 1) - 1]
        children = flat[2 ** (level + 1) - 1 : 2 ** (level + 2) - 1]
        np.testing.assert_array_equal(children[: 2**level] + children[2**level :], parents)


def test_planar_to_morton_is_bit_reversal():
    for level in range(0, 11):
        ref = [int(f"{i:0{level}b}"[::-1], 2) if level else 0 for i in range(2**level)]
        np.testing.assert_array_equal(partition.planar_to_morton(level), ref)


@pytest.mark.parametrize("d", [1, 2, 3, 5])
@pytest.mark.parametrize("metric", ["linf", "l2"])
def test_edge_weights(d, metric):
    """``w_0 = 0``, ``w_j = (diam(j−1) − diam(j))/2`` with diameters of cells whose sides
    are counted bisection by bisection; leaf distances telescope."""
    depth = 17
    w = partition.edge_weights(depth, d, metric)
    assert w.shape == (depth + 1,) and w[0] == 0.0 and np.all(w >= 0)
    side, diam = np.ones(d), []
    for j in range(depth + 1):
        diam.append(side.max() if metric == "linf" else np.sqrt(np.sum(side**2)))
        side[j % d] /= 2  # the level-j cell is bisected along coordinate j mod d
    diam = np.array(diam)
    np.testing.assert_allclose(w[1:], (diam[:-1] - diam[1:]) / 2, rtol=1e-12, atol=0)
    if metric == "linf":  # only levels j ≡ 0 (mod d) shrink the ℓ∞ diameter
        j = np.arange(1, depth + 1)
        assert np.all((w[1:] > 0) == (j % d == 0))
    # two depth-r leaves with lowest common ancestor at level l: 2 Σ_{l<i≤r} w_i apart
    for lca in range(depth):
        assert 2 * w[lca + 1 :].sum() == pytest.approx(diam[lca] - diam[depth], rel=1e-12)


@pytest.mark.parametrize("level, d", [(7, 3), (12, 1), (40, 2)])
def test_device_geometry_is_the_host_cells(level, d):
    """``lower_corners`` from planar bits and from path words, and ``cell_side`` on the
    device, against the host's cells (``leaf_index_to_cells``, ``cell_lower_corner``,
    ``cell_side``: exact float64).  Equal while a coordinate has at most 12 bisections;
    beyond, XLA's float32 ``exp2`` falls a few ulps short of the power of two on a CPU, so
    the tolerance there is 8 float32 ulps, relative."""
    import jax
    import jax.numpy as jnp

    from jaxsynth.core.frontier import path_bit

    count = 64
    planar = np.random.default_rng(level).integers(0, 2**min(level, 62), count)
    planar[:2] = (0, 2**min(level, 62) - 1)
    bits = (planar[:, None] >> np.arange(level)) & 1  # [N, level]: b_t at column t
    cells = np.zeros((count, d), np.int64)
    for t in range(level):  # b_t is the (t//d + 1)-th digit of coordinate t mod d
        cells[:, t % d] = 2 * cells[:, t % d] + bits[:, t]
    host = partition.cell_lower_corner(cells, level)
    words = np.zeros((level // 32 + 1, count), np.uint32)
    for t in range(level):
        words[t // 32] |= (bits[:, t].astype(np.uint32) << np.uint32(31 - t % 32))

    @jax.jit
    def device(planar_hi, planar_lo, path):
        def planar_bit(t):
            return jnp.where(t < 31, (planar_lo >> jnp.minimum(t, 30)) & 1,
                             (planar_hi >> jnp.clip(t - 31, 0, 30)) & 1)

        from_planar = partition.lower_corners(planar_bit, level, d, count)
        from_path = partition.lower_corners(lambda t: path_bit(path, t), jnp.int32(level),
                                            d, count)
        return from_planar, from_path, partition.cell_side(jnp.int32(level), d, jnp)

    lo, hi = (planar & (2**31 - 1)).astype(np.int32), (planar >> 31).astype(np.int32)
    from_planar, from_path, side = map(np.asarray, device(hi, lo, jnp.asarray(words)))
    np.testing.assert_array_equal(from_planar, from_path)
    exact = partition.coordinate_resolution(level, d).max() <= 12
    tolerance = 0.0 if exact else 8 * np.finfo(np.float32).eps
    np.testing.assert_allclose(from_path, host, rtol=tolerance, atol=0)
    np.testing.assert_allclose(side, partition.cell_side(level, d), rtol=tolerance, atol=0)


@pytest.mark.parametrize("depth, d", [(9, 3), (20, 1), (26, 2)])
def test_corners_of_every_level_are_the_corners(depth, d):
    """Row ``r`` of ``lower_corner_levels`` is ``lower_corners`` of the bits ``t < r``
    (the complete-tree kernel reads its leaves' corners from it, whatever their depth):
    equal bit for bit, past the depths where XLA's ``exp2`` is inexact too."""
    import jax
    import jax.numpy as jnp

    count = 200
    slots = np.random.default_rng(depth).integers(0, 2**depth, count).astype(np.int32)
    slots[:2] = (0, 2**depth - 1)

    @jax.jit
    def device(slots, depths):
        rows = partition.lower_corner_levels(lambda t: (slots >> t) & 1, depth, d, count)
        one = jax.vmap(lambda r: partition.lower_corners(
            lambda t: ((slots >> t) & 1) * (t < r), depth, d, count))(depths)
        return rows, one

    rows, one = map(np.asarray, device(jnp.asarray(slots), jnp.arange(depth + 1)))
    assert rows.shape == (depth + 1, count, d)
    np.testing.assert_array_equal(rows, one)
    assert np.all(rows[1:] >= rows[:-1]) and np.any(rows[-1] > 0)


def test_device_tree():
    rng = np.random.default_rng(3)
    tree = DataTree.build(rng.random((60, 3)), 40)
    dev = tree.device
    assert isinstance(dev, DeviceTree) and dev.dim == 3 and dev.n == 60
    np.testing.assert_array_equal(np.asarray(dev.words), tree.words)
    np.testing.assert_array_equal(np.asarray(dev.split), tree.split)
    np.testing.assert_array_equal(np.asarray(dev.table), tree.range_min_table)
    assert tree.device is dev


def test_deep_codes_beyond_one_word():
    """Depth 200 in d = 64 and in d = 1: split levels from bits past 64 are exact."""
    rng = np.random.default_rng(1)
    X = rng.random((50, 64))
    Y = X.copy()
    Y[:, 63] = np.where(X[:, 63] < 0.5, 0.25, 0.75)  # coordinate 63 bit 1 at level 63
    tree = DataTree.build(np.vstack([X, Y]), 200)
    assert tree.words.shape == (100, 7)
    base = np.array([0.25, 0.25 + 2.0**-40])  # first differ at digit 40 (no carry)
    tree1 = DataTree.build(base[:, None], 200)
    assert tree1.split[1] == 39  # levels 0..39 agree; the 40th digit is bit b_39
    assert tree1.occupancy[39] == 1 and tree1.occupancy[40] == 2


def test_duplicates_split_at_depth():
    X = np.full((5, 2), 0.3)
    tree = DataTree.build(X, 30)
    assert np.all(tree.split[1:] == 30)
    assert np.all(tree.occupancy == 1)


def test_range_min_table():
    rng = np.random.default_rng(2)
    tree = DataTree.build(rng.random((97, 2)), 20)
    table = tree.range_min_table
    for k in range(table.shape[0]):
        for i in range(0, tree.n - 2**k + 1, 7):
            assert tree.split[table[k, i]] == tree.split[i : i + 2**k].min()


@pytest.mark.parametrize(
    "X, match",
    [
        (np.zeros((0, 2)), "empty"),
        (np.zeros(5), "rank"),
        (np.array([[0.1, np.nan]]), "NaN"),
        (np.array([[0.1, 1.5]]), "outside"),
        (np.array([[-0.1, 0.5]]), "outside"),
        (np.array([[0.1, np.inf]]), "inf"),
    ],
)
def test_bad_data_rejected(X, match):
    with pytest.raises(ValueError, match=match):
        DataTree.build(X, 4)


def test_bad_depth_rejected():
    with pytest.raises(ValueError, match="depth"):
        DataTree.build(np.zeros((3, 2)), 0)
