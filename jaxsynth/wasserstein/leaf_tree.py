"""Tree W1 of any unshifted release from its sorted leaves (host, one pass a replicate).

The level statistics of ``tree._replicate`` (the same tree, the same rules for padding,
nesting and the data outside every leaf) for trees of any shape: PrivTree's (Zhang,
Xiao, Xie, SIGMOD 2016, Alg. 2; with leaf noise, Y. He, "Intrinsic-Dimensional
Wasserstein Guarantees for Private Synthetic Measures" §2.3) and balanced trees deeper
than the complete grid holds.  Per replicate the atoms' Morton codes (one 64-bit word,
``MAX_DEPTH`` levels) are sorted, each is placed between its neighbouring data codes by a
binary search, and one walk over the sorted atoms keeps a running sum per level: a cell
closes where the next atom's code leaves it, adds ``|μ(Ω) − ν(Ω)|`` to its level and
hands its sums to its parent.  Work ``O(M log M + M log U + M·L)`` in float64; each
replicate's numbers depend on its own atoms only, and replicates run on a thread per
core.  Shifted trees (a partition per replicate) stay on ``tree._tree_levels``.
"""

from __future__ import annotations

import numpy as np

from jaxsynth.core.batching import on_cores
from jaxsynth.numba_cache import helper, kernel

__all__ = ["MAX_DEPTH", "leaf_levels"]

MAX_DEPTH = 63
"""Deepest leaf whose cell fits one code word (a coordinate's cell index, at most
``2^63 − 1``, converts exactly from float32)."""


def leaf_levels(data, points, weights, leaf_depth, drop_zero: bool):
    """Level statistics of unshifted replicates of any shape, as ``tree._replicate``'s.

    Args:
      data: a ``tree.TreeData`` of depth ``D`` (at least the deepest leaf, at most
        ``MAX_DEPTH``).
      points: [B, M, d]; weights: [B, M]; leaf_depth: [B, M] (``check_measure``'s output).
      drop_zero: drop every zero-weight atom (a batch of balanced replicates), else only
        those at the root (the engine's padding): ``tree._drop_inert_atoms``' rule.

    Returns:
      ``(level_gap [B, D + 1], leaf_mass [B, D + 1], valid [B])``, float64 (and bool);
      ``level_gap`` at every level (``_replicate`` fills only those of positive weight,
      the only ones ``tree.levels_w1`` weighs).
    """
    depth = data.depth
    words = data.words.astype(np.uint64)
    codes = words[:, 0] << np.uint64(32)
    if words.shape[1] > 1:
        codes |= words[:, 1]
    arrays = tuple(np.ascontiguousarray(a, t) for a, t in
                   ((points, np.float32), (weights, np.float32), (leaf_depth, np.int32)))
    batch = len(weights)
    gap, leaf = np.zeros((batch, depth + 1)), np.zeros((batch, depth + 1))
    valid = np.zeros(batch, np.bool_)
    cells = np.ascontiguousarray(data.cells, np.int32)

    def run(lo, hi):
        _levels(codes, cells, *(a[lo:hi] for a in arrays), drop_zero, gap[lo:hi],
                leaf[lo:hi], valid[lo:hi])

    on_cores(batch, run)
    return gap, leaf, valid


@helper
def _prefix(a, b):
    """Leading bits two codes share (64 when equal)."""
    x = a ^ b
    if x == 0:
        return 64
    n = 0
    for bits in (32, 16, 8, 4, 2, 1):
        if x >> np.uint64(64 - bits) == 0:
            n += bits
            x = x << np.uint64(bits)
    return n


@helper
def _code(point, scale, resolution, depth, d):
    """Morton code of a float32 point's level-``depth`` cell, MSB first in 64 bits (as
    ``partition.morton_words_of_sum``: bisection ``t`` is digit ``t // d + 1`` of
    coordinate ``t mod d``; a coordinate at 1 is in the last cell)."""
    code = np.uint64(0)
    for c in range(d):
        if point[c] >= 1.0:
            cell = (np.uint64(1) << np.uint64(resolution[c])) - np.uint64(1)
        else:  # float32 times a power of two and its floor are exact in float64
            cell = np.uint64(np.floor(np.float64(point[c]) * scale[c]))
        for k in range(resolution[c]):
            bit = (cell >> np.uint64(resolution[c] - 1 - k)) & np.uint64(1)
            code |= bit << np.uint64(63 - (k * d + c))
    return code


@helper
def _data_in(cells, j, right, left, to_right, to_left):
    """Data points in an atom's level-``j`` cell: an interval of the code order, so it
    holds data iff one of the atom's two neighbouring data codes lies in it."""
    if to_right >= j:
        return cells[j, right]
    if to_left >= j:
        return cells[j, left]
    return 0


@kernel
def _levels(codes, cells, points, weights, leaf_depth, drop_zero, gap, leaf, valid):
    """``leaf_levels`` of a run of replicates into ``gap``, ``leaf`` [B, D + 1], ``valid``."""
    batch, size, d = points.shape
    depth = gap.shape[1] - 1
    count = len(codes)
    n = cells[0, 0]  # the root cell holds every point
    resolution = np.empty(d, np.int64)  # partition.coordinate_resolution(depth)
    scale = np.empty(d, np.float64)
    for c in range(d):
        resolution[c] = (depth - c + d - 1) // d
        scale[c] = 2.0 ** resolution[c]
    index = np.empty(size, np.int64)
    raw = np.empty(size, np.uint64)
    code = np.empty(size, np.uint64)
    level = np.empty(size, np.int64)
    wt = np.empty(size)
    split = np.empty(size, np.int64)  # shared leading bits with the next atom
    held = np.empty(size, np.bool_)
    kept = np.empty(size, np.bool_)
    right = np.empty(size, np.int64)
    left = np.empty(size, np.int64)
    to_right = np.empty(size, np.int64)
    to_left = np.empty(size, np.int64)
    acc_w = np.zeros(depth + 1)  # open cells' synthetic mass, one per level
    acc_n = np.zeros(depth + 1, np.int64)  # and their nodes
    mu_sum = np.zeros(depth + 1, np.int64)
    data_leaf = np.zeros(depth + 1, np.int64)
    for b in range(batch):
        # the atoms that can change the tree, sorted by code (ties in index order)
        m, total = 0, 0.0
        for i in range(size):
            total += np.float64(weights[b, i])
            if weights[b, i] > 0 or (not drop_zero and leaf_depth[b, i] > 0):
                index[m] = i
                raw[m] = _code(points[b, i], scale, resolution, depth, d)
                m += 1
        order = np.argsort(raw[:m], kind="mergesort")
        for k in range(m):
            i = index[order[k]]
            code[k], level[k], wt[k] = raw[order[k]], leaf_depth[b, i], weights[b, i] / total
        for k in range(m - 1):
            split[k] = _prefix(code[k], code[k + 1])
        split[m - 1] = -1
        # padding: a zero-weight atom whose cell holds a deeper atom (flag shared by each
        # run of atoms of one cell and level)
        for k in range(m):
            held[k] = ((k > 0 and split[k - 1] >= level[k] and level[k - 1] > level[k])
                       or (split[k] >= level[k] and level[k + 1] > level[k]))
        start = 0
        for k in range(1, m + 1):
            if k == m or level[k] != level[k - 1] or split[k - 1] < level[k]:
                flag = False
                for q in range(start, k):
                    flag |= held[q]
                for q in range(start, k):
                    kept[q] = wt[q] > 0 or not flag
                start = k
        top = -1
        for k in range(m):
            if kept[k]:
                top = max(top, level[k])
        is_balanced = True
        for k in range(m):
            if kept[k] and level[k] != top:
                is_balanced = False
        # each atom's data neighbours; the leaves (antichain test against the previous
        # kept atom, a leaf's data counted at its first atom)
        data_leaf[:] = 0
        leaf[b, :] = 0.0
        nested, previous, covered = False, -1, 0
        for k in range(m):
            rank = np.searchsorted(codes, code[k])
            right[k], left[k] = min(rank, count - 1), max(rank - 1, 0)
            to_right[k] = _prefix(code[k], codes[right[k]]) if rank < count else -1
            to_left[k] = _prefix(code[k], codes[left[k]]) if rank > 0 else -1
            if not kept[k]:
                continue
            starts = True
            if previous >= 0:
                shared, other = _prefix(code[k], code[previous]), level[previous]
                if shared >= min(other, level[k]) and other != level[k]:
                    nested = True
                starts = not (other == level[k] and shared >= level[k])
            previous = k
            at = min(level[k], depth)
            if starts:
                inside = _data_in(cells, at, right[k], left[k], to_right[k], to_left[k])
                data_leaf[at] += inside
                covered += inside
            leaf[b, at] += wt[k]
        orphans = n - covered
        valid[b] = not nested and (is_balanced or orphans == 0)
        data_leaf[max(top, 0)] += orphans
        for j in range(depth + 1):
            leaf[b, j] += data_leaf[j] / n
        # the nodes: each level's open cell closes where the next atom's code leaves it
        gap[b, :] = 0.0
        mu_sum[:] = 0
        open_top = 0
        for k in range(m):
            if kept[k]:
                acc_w[level[k]] += wt[k]
                acc_n[level[k]] += 1
                open_top = max(open_top, level[k])
            if split[k] < open_top:
                for j in range(open_top, max(split[k], 0), -1):
                    if acc_n[j] > 0:
                        mu = _data_in(cells, j, right[k], left[k], to_right[k], to_left[k])
                        gap[b, j] += abs(mu / n - acc_w[j])
                        mu_sum[j] += mu
                        acc_w[j - 1] += acc_w[j]
                        acc_n[j - 1] += acc_n[j]
                        acc_w[j], acc_n[j] = 0.0, 0
                open_top = max(split[k], 0)
        acc_w[0], acc_n[0] = 0.0, 0
        if is_balanced:  # a balanced tree's empty cells: the data outside the atoms' cells
            for j in range(1, top + 1):
                gap[b, j] += (n - mu_sum[j]) / n
