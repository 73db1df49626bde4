"""The complete-grid kernel of balanced releases (``wasserstein.complete_tree``) against
brute force: per level, the cells' data and atom masses grouped by their per-coordinate
cell indices (``partition.cell_index``, independent of the kernel's planar slots and
bit arithmetic), in float64.  The kernel sums in float64 in another order: agreement
within ``RTOL = 1e-12`` relative (a wrong slot or level moves a level's sum by at least
one atom's mass, far above it)."""

import numpy as np
import pytest

from jaxsynth.core import partition
from jaxsynth.wasserstein import complete_tree as C

RTOL = 1e-12


def brute_levels(X, points, weights, r):
    """``level_gap`` [r + 1] of one balanced replicate of depth ``r``: per level ``j ≥ 1``,
    Σ over cells of |data mass − atom mass|, cells grouped by their index rows."""
    gap = np.zeros(r + 1)
    mu = np.full(len(X), 1 / len(X))
    nu = np.asarray(weights, np.float64) / np.sum(weights, dtype=np.float64)
    for j in range(1, r + 1):
        cells = np.concatenate([partition.cell_index(X, j),
                                partition.cell_index(np.asarray(points, np.float64), j)])
        _, group = np.unique(cells, axis=0, return_inverse=True)
        gap[j] = np.abs(np.bincount(group.ravel(), np.concatenate([mu, -nu]))).sum()
    return gap


def in_place_atoms(rng, r, d):
    """A depth-``r`` release in planar order built from the path bits (slot ``i``'s cell
    has ``b_t`` = bit ``t`` of ``i``): a point inside each cell, random weights, some 0."""
    slots = np.arange(2**r)
    cells = np.zeros((2**r, d), np.int64)
    for t in range(r):
        cells[:, t % d] = 2 * cells[:, t % d] + ((slots >> t) & 1)
    side = np.ldexp(1.0, -partition.coordinate_resolution(r, d))
    points = (cells + rng.uniform(0.05, 0.95, cells.shape)) * side
    weights = rng.random(2**r) ** 2
    weights[rng.random(2**r) < 0.3] = 0.0
    weights[0] = 1.0
    return points.astype(np.float32), weights.astype(np.float32)


def batch(replicates, width):
    """Stack ``(points, weights, r)`` replicates, root-padded (weight 0, depth 0) to
    ``width`` slots."""
    d = replicates[0][0].shape[1]
    P = np.zeros((len(replicates), width, d), np.float32)
    W = np.zeros((len(replicates), width), np.float32)
    L = np.zeros((len(replicates), width), np.int32)
    for b, (p, w, r) in enumerate(replicates):
        P[b, :len(w)], W[b, :len(w)], L[b, :len(w)] = p, w, r
    return P, W, L


def histogram(X, depth):
    codes = partition.morton_words(X, depth)[:, 0] >> np.uint32(32 - depth)
    return np.bincount(codes, minlength=2**depth)


@pytest.mark.parametrize("d", [1, 2, 3, 5])
def test_levels_of_balanced_replicates_are_the_brute_force_sums(d):
    """Replicates of several depths in one batch: in planar order (atom ``i`` in its slot),
    shuffled (every atom placed from its cell's bits), two atoms moved into one cell,
    a sparse frontier (Pruned-PMM-like), and atoms on the cube's upper faces."""
    rng = np.random.default_rng(d)
    depth = 7
    X = rng.random((300, d))
    X[:40] = rng.integers(0, 9, (40, d)) / 8.0  # on cell boundaries, 0 and 1
    reps = []
    for r in (depth, 4, 0, 6):
        p, w = in_place_atoms(rng, r, d)
        reps.append((p, w, r))
    p, w = in_place_atoms(rng, depth, d)
    order = rng.permutation(len(w))
    reps.append((p[order], w[order], depth))  # shuffled
    p, w = in_place_atoms(rng, 5, d)
    p[3] = p[7]
    reps.append((p, w, 5))  # moved: two atoms in one cell
    keep = rng.random(2**depth) < 0.2
    keep[0] = True
    p, w = in_place_atoms(rng, depth, d)
    reps.append((p[keep], w[keep], depth))  # a sparse frontier
    p, w = in_place_atoms(rng, 3, d)
    p[:4] = 1.0  # the upper faces: the last cell of each coordinate
    reps.append((p, w, 3))
    P, W, L = batch(reps, 2**depth + 5)
    gap, leaf_mass, valid = C.complete_levels(histogram(X, depth), P, W, L)
    assert valid.all()
    for b, (p, w, r) in enumerate(reps):
        expect = np.zeros(depth + 1)
        expect[:r + 1] = brute_levels(X, p, w, r)
        np.testing.assert_allclose(gap[b], expect, rtol=RTOL, atol=1e-15)
        np.testing.assert_array_equal(leaf_mass[b], np.where(np.arange(depth + 1) == r, 2.0, 0))


def test_a_replicate_is_the_same_alone_and_in_any_batch():
    """Bit for bit: alone, in a batch split over the threads, and in another order."""
    rng = np.random.default_rng(3)
    X = rng.random((500, 2))
    reps = [(*in_place_atoms(rng, r, 2), r) for r in (6, 5, 6, 2, 6, 4, 1)]
    P, W, L = batch(reps, 64)
    counts = histogram(X, 6)
    together = C.complete_levels(counts, P, W, L)[0]
    order = rng.permutation(len(reps))
    shuffled = C.complete_levels(counts, P[order], W[order], L[order])[0]
    np.testing.assert_array_equal(shuffled, together[order])
    for b in range(len(reps)):
        alone = C.complete_levels(counts, P[b:b + 1], W[b:b + 1], L[b:b + 1])[0]
        np.testing.assert_array_equal(alone[0], together[b])


@pytest.mark.parametrize("depths", [
    [3, 3, 2, 3],  # positive atoms at two depths
    [3, 3, 3, 1],  # a zero-weight atom neither at the leaves' depth nor the root
])
def test_an_unbalanced_replicate_gives_none(depths):
    rng = np.random.default_rng(4)
    p, w = in_place_atoms(rng, 3, 2)
    P, W, L = batch([(p, w, 3), (p, w, 3)], 8)
    L[1, :4] = depths
    W[1, 3] = 0.0 if depths[3] == 1 else W[1, 3]
    assert C.complete_levels(histogram(rng.random((50, 2)), 3), P, W, L) is None
    assert not C.balanced(W, L) and C.balanced(W[:1], L[:1])


def test_data_masses_per_level_are_the_cells_counts():
    """The heap's level ``j`` slot ``c`` holds the share of points whose level-``j`` cell
    has path bits ``b_t`` = bit ``t`` of ``c`` (``partition.morton_bit``)."""
    rng = np.random.default_rng(5)
    X = rng.random((400, 3))
    X[:50] = rng.integers(0, 5, (50, 3)) / 4.0
    depth = 6
    heap = C.data_level_masses(histogram(X, depth))
    for j in range(depth + 1):
        slot = np.zeros(len(X), np.int64)
        for t in range(j):
            slot |= partition.morton_bit(X, t).astype(np.int64) << t
        expect = np.bincount(slot, minlength=2**j) / len(X)
        np.testing.assert_allclose(heap[2**j:2 ** (j + 1)], expect, rtol=RTOL, atol=1e-15)


def test_planar_cells_are_the_slots_path_bits():
    rng = np.random.default_rng(6)
    for d in (1, 2, 4):
        points, _ = in_place_atoms(rng, 7, d)
        np.testing.assert_array_equal(C.planar_cells(7, d),
                                      partition.cell_index(points.astype(np.float64), 7))
        assert not C.planar_cells(7, d).flags.writeable
