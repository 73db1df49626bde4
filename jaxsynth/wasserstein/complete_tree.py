"""Tree W1 of balanced releases on their complete grid of cells (host, one pass).

A balanced replicate, its positive atoms all at one depth ``r`` (PMM's complete tree: He,
Vershynin, Zhu (COLT 2023), as in §3 of Zare Moayedi, Asadi, Yassaee, Aminian,
"Geometry-Adaptive Mechanisms for Private Synthetic Data", arXiv 2609.33363; Pruned-PMM's
frontier, §4.1 there), has the complete depth-``r`` tree whatever its atoms, so
``W_T = Σ_j w_j Σ_{level-j cells Ω} |μ(Ω) − ν(Ω)|`` needs only the signed cell masses at
level ``r``, summed pairwise up the levels: no sort, no search.

The cells are taken in *planar order*: slot ``i`` of level ``j`` is the cell whose path
bit ``b_t`` (the split below level ``t``) is bit ``t`` of ``i``, so the children of the
level-``j`` cell ``c`` are the slots ``c`` and ``c + 2^j`` of level ``j + 1``.  PMM's
kernel releases its leaves in that order, so atom ``i`` of its release usually sits in
slot ``i mod 2^r``: one test of its cell against the slot's places it; any other atom
(out of place, or of another release) finds its slot from its cell's bits.  The route
of an atom changes no number.  One numba kernel does it all per replicate, in float64,
in a fixed order (its value depends on its own atoms only); replicates run on a thread
per core.
"""

from __future__ import annotations

import functools

import numpy as np

from jaxsynth.core import partition
from jaxsynth.core.batching import on_cores
from jaxsynth.numba_cache import helper, kernel

__all__ = ["balanced", "complete_levels"]

MAX_DEPTH = 20
"""Deepest balanced tree measured on its complete grid (``2^depth`` float64 cells per
thread, and the data's cell masses at every level)."""


def balanced(weights, leaf_depth) -> bool:
    """Whether every replicate is balanced with inert zero-weight atoms: its positive
    atoms at one depth ``r``, its zero-weight ones at ``r`` or at the root (engine
    padding).  Host NumPy (the kernel tests every replicate again)."""
    positive = weights > 0
    top = np.max(np.where(positive, leaf_depth, -1), axis=1, keepdims=True)
    return bool(np.all(np.where(positive, leaf_depth == top,
                                (leaf_depth == top) | (leaf_depth == 0))))


@functools.lru_cache(maxsize=4)
def planar_morton(depth: int) -> np.ndarray:
    """Each level-``depth`` slot's Morton index (``partition.planar_to_morton``: its
    ``depth`` bits reversed), read-only (cached)."""
    morton = partition.planar_to_morton(depth)
    morton.flags.writeable = False
    return morton


@functools.lru_cache(maxsize=4)
def planar_cells(depth: int, d: int) -> np.ndarray:
    """The level-``depth`` cells in planar order: slot ``i``'s per-coordinate cell index
    (``partition.leaf_index_to_cells`` of its Morton index), [2^depth, d] int32,
    read-only (cached)."""
    cells = partition.leaf_index_to_cells(planar_morton(depth), depth, d).astype(np.int32)
    cells.flags.writeable = False
    return cells


def data_level_masses(counts) -> np.ndarray:
    """The data's mass in every cell of every level ``j ≤ depth``, in planar order, as one
    heap: level ``j``'s slot ``c`` at ``2^j + c`` ([2^(depth+1)] float64), from the data
    points per level-``depth`` cell in Morton order, ``counts`` [2^depth]."""
    depth = len(counts).bit_length() - 1
    mass = counts[planar_morton(depth)] / np.sum(counts)
    heap = np.zeros(2 ** (depth + 1))
    for j in range(depth, -1, -1):
        heap[2**j:2 ** (j + 1)] = mass
        mass = mass[: 2 ** (j - 1)] + mass[2 ** (j - 1):] if j else mass
    return heap


def complete_levels(counts, points, weights, leaf_depth):
    """Level statistics of balanced replicates, each on its complete tree of depth ``r``
    (its positive atoms' depth, at most ``depth``), or ``None`` if one is not balanced.

    Args:
      counts: [2^depth] data points per level-``depth`` cell, in Morton order; ``depth``
        at least the deepest leaf, at most ``MAX_DEPTH``.
      points: [B, M, d]; weights: [B, M]; leaf_depth: [B, M] (``check_measure``'s
        output; zero-weight atoms add nothing).

    Returns:
      ``(level_gap [B, depth + 1], leaf_mass [B, depth + 1], valid [B])`` float64 (and
      bool), as ``tree._replicate``'s: ``level_gap[j] = Σ_{level-j cells} |μ − ν|`` for
      ``1 ≤ j ≤ r``, ``leaf_mass[r] = 2`` (all data, all atoms at level ``r``).
    """
    heap = data_level_masses(counts)
    depth = len(heap).bit_length() - 2
    grid = planar_cells(depth, points.shape[-1])
    arrays = tuple(np.ascontiguousarray(a, t) for a, t in
                   ((points, np.float32), (weights, np.float32), (leaf_depth, np.int32)))
    batch = len(weights)
    gap, top = np.zeros((batch, depth + 1)), np.zeros(batch, np.int32)
    ok = np.zeros(batch, np.bool_)

    def run(lo, hi):
        _levels(heap, grid, *(a[lo:hi] for a in arrays), gap[lo:hi], top[lo:hi], ok[lo:hi])

    on_cores(batch, run)
    if not ok.all():
        return None
    leaf_mass = np.where(np.arange(depth + 1) == top[:, None], 2.0, 0.0)
    return gap, leaf_mass, np.ones(batch, bool)


@helper
def _cell(x, scale):
    """``partition.cell_index`` of one coordinate ``x`` (float32, in [0, 1]) of ``scale =
    2^k`` cells: the product is exact, so truncation is the floor."""
    return min(np.int32(x * scale), np.int32(scale) - 1)


@helper
def _slot_of_bits(point, scale, resolution, coarser, d):
    """The planar slot of ``point``'s cell cut to its level (``coarser`` bisections below
    it): slot bit ``t = k d + c`` is coordinate ``c``'s ``k``-th bisection."""
    slot = 0
    for c in range(d):
        bits = resolution[c] - coarser[c]
        coarse = _cell(point[c], scale[c]) >> coarser[c]
        for k in range(bits):
            slot |= ((coarse >> (bits - 1 - k)) & 1) << (k * d + c)
    return slot


@helper
def _fold(mass, r, gap):
    """``gap[j] = Σ_k |mass[k]|`` over level ``j``'s slots, ``r ≥ j ≥ 1``, folding each
    slot's two children into it (``mass[:2^r]`` the level-``r`` signed differences, left
    holding the root's).  Four running sums, two slots a step, so that the additions do
    not wait on each other as one sum's chain does (the order is fixed, so is the value)."""
    for j in range(r, 0, -1):
        half = 2 ** (j - 1)
        a0 = a1 = b0 = b1 = 0.0
        k = 0
        while k + 2 <= half:
            x0, x1, y0, y1 = mass[k], mass[k + 1], mass[k + half], mass[k + half + 1]
            a0, a1, b0, b1 = a0 + abs(x0), a1 + abs(x1), b0 + abs(y0), b1 + abs(y1)
            mass[k], mass[k + 1] = x0 + y0, x1 + y1
            k += 2
        if k < half:  # the root's level: one slot
            a0, b0 = a0 + abs(mass[k]), b0 + abs(mass[k + half])
            mass[k] += mass[k + half]
        gap[j] = (a0 + a1) + (b0 + b1)


@kernel
def _levels(heap, grid, points, weights, leaf_depth, gap, top, ok):
    """``complete_levels`` of a run of replicates: ``gap`` [B, depth + 1], each one's
    depth ``top`` [B] and whether it is balanced, ``ok`` [B] (else its ``gap`` is 0).

    Per replicate, one pass over its weights and depths: the positive atoms' depth
    (``r`` when balanced), total weight and places.  Then each positive atom's weight
    summed into its slot (atom ``i`` in slot ``i mod 2^r`` when its cell is that slot's,
    ``grid``'s level-``depth`` cell cut to ``r``; else the slot of its cell's bits), and
    per level, from ``r`` up, the data masses minus the atoms' (``_fold``)."""
    batch, size, d = points.shape
    depth = gap.shape[1] - 1
    width = min(size, 2**depth)
    mass = np.zeros(2**depth)  # the atoms' weights per slot, then the signed differences
    kept = np.empty(size, np.int64)  # a replicate's positive atoms
    resolution = np.empty(d, np.int32)  # partition.coordinate_resolution(depth)
    scale = np.empty(d, np.float32)
    coarser = np.empty(d, np.int32)  # the bisections below the atoms' level
    for c in range(d):
        resolution[c] = (depth - c + d - 1) // d
        scale[c] = 2.0 ** resolution[c]
    for b in range(batch):
        r, low, total = -1, depth + 1, 0.0  # positive atoms' depths
        outer, inner = -1, depth + 1  # zero-weight atoms' depths other than the root's
        count = 0
        for i in range(size):
            w, atom_level = weights[b, i], leaf_depth[b, i]
            kept[count] = i  # kept only if positive (a store, not a branch)
            if w > 0:
                r, low, total = max(r, atom_level), min(low, atom_level), total + np.float64(w)
                count += 1
            elif atom_level != 0:
                outer, inner = max(outer, atom_level), min(inner, atom_level)
        top[b] = r
        ok[b] = 0 <= low == r and (outer < 0 or inner == outer == r)
        gap[b, :] = 0.0
        if not ok[b]:
            continue
        level = min(r, depth)
        for c in range(d):
            coarser[c] = resolution[c] - (level - c + d - 1) // d  # coordinate_resolution
        for k in range(count):  # the atoms' reads, in order and free of branches' stalls
            i = kept[k]
            placed = i < width
            for c in range(d):
                if placed and (_cell(points[b, i, c], scale[c]) >> coarser[c]
                               != grid[i, c] >> coarser[c]):
                    placed = False
            slot = i & ((1 << level) - 1) if placed else _slot_of_bits(
                points[b, i], scale, resolution, coarser, d)
            mass[slot] += np.float64(weights[b, i])
        cells = 2**r
        for k in range(cells):
            mass[k] = heap[cells + k] - mass[k] / total
        _fold(mass, r, gap[b])
        mass[:cells] = 0.0
