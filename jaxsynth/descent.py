"""Constant-time descent from a cell to its children, on device (SPEC §3, range slots).

A cell is a range ``[lo, hi)`` of the Morton-sorted data (``jaxsynth.datatree``).  Its two
children at the next level are ``[lo, p)`` and ``[p, hi)`` where ``p`` is found with one
range-minimum query on the split levels, or, when all points share the child bit, with
one read of the packed Morton words.  Ghost cells (true count 0, kept alive by noise) are
empty ranges and stay empty.  Every function here is elementwise over slots, so a level
of a sparse tree costs O(K) for K slots, with no per-point state.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxsynth.datatree import DataTree
from jaxsynth.partition import WORD_BITS


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DeviceTree:
    """The arrays of a ``DataTree`` that the descent reads, as JAX arrays.

    Attributes:
      words: [n, W] uint32 Morton words of the sorted data.
      split: [n] int32 split levels (``split[0] = -1``).
      table: [K, n] int32 range-minimum sparse table over ``split``.
      dim: the dimension ``d`` (static).
    """

    words: jax.Array
    split: jax.Array
    table: jax.Array
    dim: int = dataclasses.field(metadata=dict(static=True), default=1)

    @classmethod
    def from_tree(cls, tree: DataTree) -> "DeviceTree":
        return cls(
            words=jnp.asarray(tree.words),
            split=jnp.asarray(tree.split),
            table=jnp.asarray(tree.range_min_table),
            dim=tree.d,
        )


def morton_bit(dev: DeviceTree, index, level):
    """Bit ``b_level`` (int32 0/1) of the sorted points at ``index`` (clipped into range)."""
    n = dev.split.shape[0]
    i = jnp.clip(index, 0, n - 1)
    word = dev.words[i, level // WORD_BITS]
    shift = (WORD_BITS - 1 - level % WORD_BITS).astype(jnp.uint32)
    return ((word >> shift) & jnp.uint32(1)).astype(jnp.int32)


def _range_argmin(dev: DeviceTree, start, stop):
    """Argmin of ``split`` over ``[start, stop)``; requires ``stop > start``."""
    n = dev.split.shape[0]
    length = jnp.maximum(stop - start, 1)
    k = 31 - jax.lax.clz(length.astype(jnp.int32))
    a = dev.table[k, jnp.clip(start, 0, n - 1)]
    b = dev.table[k, jnp.clip(stop - (1 << k), 0, n - 1)]
    return jnp.where(dev.split[b] < dev.split[a], b, a)


def child_boundary(dev: DeviceTree, lo, hi, level):
    """Boundary ``p`` with children ``[lo, p)`` (bit 0) and ``[p, hi)`` (bit 1).

    ``lo, hi`` are [K] int32 ranges of level-``level`` cells (``level`` a traced int);
    the result is [K] int32 with ``lo ≤ p ≤ hi``.
    """
    p = _range_argmin(dev, lo + 1, hi)
    splits_here = (hi - lo >= 2) & (dev.split[jnp.clip(p, 0, dev.split.shape[0] - 1)] == level)
    upper = morton_bit(dev, lo, level) == 1  # all points share the bit
    return jnp.where(splits_here, p, jnp.where((hi > lo) & upper, lo, hi))
