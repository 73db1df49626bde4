"""Constant-time descent from a cell to its children, on device (range slots).

The kernels use it to split a cell without per-point state.

A cell is a range ``[lo, hi)`` of the Morton-sorted data (``jaxsynth.core.datatree``).
Its two children at the next level are ``[lo, p)`` and ``[p, hi)``: within a cell the
level-``j`` bit of the sorted points is 0 then 1.  ``child_boundary`` finds ``p`` with one
range-minimum query on the split levels (or one read of the Morton words when all
points share the bit); ``child_boundary_search`` finds it by binary search on the bit,
for sorted codes that have no range-minimum table (the per-replicate data trees of the
shifted partition).  Ghost cells (true count 0, kept alive by noise) are empty ranges
and stay empty.  Everything is elementwise over slots.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxsynth.core.datatree import DeviceTree
from jaxsynth.core.partition import WORD_BITS


def code_bit(words, index, level):
    """Bit ``b_level`` (int32 0/1) of the sorted codes ``words`` [n, W] at ``index`` (clipped)."""
    i = jnp.clip(index, 0, words.shape[0] - 1)
    word = words[i, level // WORD_BITS]
    shift = (WORD_BITS - 1 - level % WORD_BITS).astype(jnp.uint32)
    return ((word >> shift) & jnp.uint32(1)).astype(jnp.int32)


def _range_argmin(dev: DeviceTree, start, stop):
    """Argmin of ``split`` over ``[start, stop)``; requires ``stop > start``."""
    n = dev.n
    length = jnp.maximum(stop - start, 1)
    k = 31 - jax.lax.clz(length.astype(jnp.int32))
    a = dev.table[k, jnp.clip(start, 0, n - 1)]
    b = dev.table[k, jnp.clip(stop - (1 << k), 0, n - 1)]
    return jnp.where(dev.split[b] < dev.split[a], b, a)


def child_boundary(dev: DeviceTree, lo, hi, level):
    """Boundary ``p`` with children ``[lo, p)`` (bit 0) and ``[p, hi)`` (bit 1).

    ``lo, hi`` are int32 ranges of level-``level`` cells (``level`` a traced int); the
    result has their shape, with ``lo ≤ p ≤ hi``.
    """
    occupied = hi > lo
    # empty (ghost) cells query slot 0: the answer is unused and the read stays in cache
    lo_q, hi_q = jnp.where(occupied, lo, 0), jnp.where(occupied, hi, 0)
    p = _range_argmin(dev, lo_q + 1, hi_q)
    splits_here = (hi_q - lo_q >= 2) & (dev.split[jnp.clip(p, 0, dev.n - 1)] == level)
    upper = code_bit(dev.words, lo_q, level) == 1  # all points share the bit
    return jnp.where(splits_here, p, jnp.where(occupied & upper, lo, hi))


def child_boundary_search(words, lo, hi, level):
    """``child_boundary`` by binary search on bit ``level`` of sorted codes ``words`` [n, W].

    ``⌈log2(n + 1)⌉`` dependent reads per cell; no range-minimum table needed.
    """
    steps = max(1, int(words.shape[0]).bit_length())

    def step(_, bounds):
        a, b = bounds  # the boundary lies in [a, b]
        mid = (a + b) // 2
        go_left = code_bit(words, mid, level) == 1
        active = a < b
        return jnp.where(active & ~go_left, mid + 1, a), jnp.where(active & go_left, mid, b)

    p, _ = jax.lax.fori_loop(0, steps, step, (lo, hi))
    return p
