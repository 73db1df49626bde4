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

import concurrent.futures
import functools
import os

import numpy as np

from jaxsynth.core import partition
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
    pieces = np.linspace(0, batch, min(batch, os.cpu_count() or 1) + 1).astype(np.int64)

    def run(k):
        lo, hi = pieces[k], pieces[k + 1]
        _levels(heap, grid, *(a[lo:hi] for a in arrays), gap[lo:hi], top[lo:hi], ok[lo:hi])

    if len(pieces) == 2:
        run(0)
    else:
        with concurrent.futures.ThreadPoolExecutor(len(pieces) - 1) as pool:
            list(pool.map(run, range(len(pieces) - 1)))
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
def _coarser(level, d, resolution, out):
    """``out[c]``: the bisections of coordinate ``c`` below ``level`` (of ``resolution``)."""
    for c in range(d):
        out[c] = resolution[c] - (level - c + d - 1) // d  # partition.coordinate_resolution


@kernel
def _levels(heap, grid, points, weights, leaf_depth, gap, top, ok):
    """``complete_levels`` of a run of replicates: ``gap`` [B, depth + 1], each one's
    depth ``top`` [B] and whether it is balanced, ``ok`` [B] (else its ``gap`` is 0).

    Per replicate, one pass over its atoms: their depth (``r`` when balanced), total
    weight, and each one's weight summed into its slot (atom ``i`` in slot ``i mod 2^r``
    when its cell is that slot's, ``grid``'s level-``depth`` cell cut to ``r``; else the
    slot of its cell's bits).  Then per level, from ``r`` up, the data masses minus the
    atoms': the sum of ``|diff|`` and the fold of each slot's two children."""
    batch, size, d = points.shape
    depth = gap.shape[1] - 1
    width = min(size, 2**depth)
    mass = np.zeros(2**depth)  # the atoms' weights per slot, then the signed differences
    resolution = np.empty(d, np.int32)  # partition.coordinate_resolution(depth)
    scale = np.empty(d, np.float32)
    coarser = np.empty(d, np.int32)  # the bisections below an atom's level
    for c in range(d):
        resolution[c] = (depth - c + d - 1) // d
        scale[c] = 2.0 ** resolution[c]
    for b in range(batch):
        r, low, total = -1, depth + 1, 0.0  # positive atoms' depths
        outer, inner = -1, depth + 1  # zero-weight atoms' depths other than the root's
        level = -1
        for i in range(size):
            w, atom_level = weights[b, i], leaf_depth[b, i]
            if w <= 0:
                if atom_level != 0:
                    outer, inner = max(outer, atom_level), min(inner, atom_level)
                continue
            r, low, total = max(r, atom_level), min(low, atom_level), total + np.float64(w)
            if atom_level != level:
                level = min(atom_level, depth)
                _coarser(level, d, resolution, coarser)
            placed = i < width
            for c in range(d):
                if placed and (_cell(points[b, i, c], scale[c]) >> coarser[c]
                               != grid[i, c] >> coarser[c]):
                    placed = False
            slot = i & ((1 << level) - 1)
            if not placed:  # slot bit t = k d + c: coordinate c's k-th bisection
                slot = 0
                for c in range(d):
                    bits = resolution[c] - coarser[c]
                    coarse = _cell(points[b, i, c], scale[c]) >> coarser[c]
                    for k in range(bits):
                        slot |= ((coarse >> (bits - 1 - k)) & 1) << (k * d + c)
            mass[slot] += np.float64(w)
        top[b] = r
        ok[b] = 0 <= low == r and (outer < 0 or inner == outer == r)
        gap[b, :] = 0.0
        if not ok[b]:
            mass[:] = 0.0
            continue
        cells = 2**r
        for k in range(cells):
            mass[k] = heap[cells + k] - mass[k] / total
        for j in range(r, 0, -1):
            half, lower, upper = 2 ** (j - 1), 0.0, 0.0
            for k in range(half):
                lower += abs(mass[k])
                upper += abs(mass[k + half])
                mass[k] += mass[k + half]
            gap[b, j] = lower + upper
        mass[:cells] = 0.0
