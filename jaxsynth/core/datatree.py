"""The data tree: every cell count of a data set, computed once.

The data are sorted once by their deepest Morton code.  Then every cell at every level
is a contiguous range of the sorted array, and the *split level* of consecutive sorted
points (the first level at which their cells differ) encodes the whole occupied tree:

* the occupied level-``j`` cells are the maximal runs with ``split ≥ j``, so
  ``O_j = 1 + #{i ≥ 1 : split(i) < j}``;
* inside a level-``j`` cell ``[lo, hi)`` the boundary between its two children is the
  unique ``p`` with ``split(p) = j``, i.e. the position of the range minimum of ``split``
  over ``(lo, hi)`` when that minimum equals ``j``; otherwise all points share bit
  ``b_j``, read from the packed Morton words.

A sparse table answers range-minimum queries in O(1), so a mechanism can descend any
cell to its children in constant time without per-point state.  All of this is host
NumPy, exact in float64 and integer arithmetic, and shared by every seed and ε.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

import jax
import jax.numpy as jnp

from jaxsynth.core import partition
from jaxsynth.core.validate import check_data, check_positive_int

MAX_DEPTH = 4096
"""Largest code depth accepted (a guard against typos; memory is checked separately)."""


def _leading_zeros32(x: np.ndarray) -> np.ndarray:
    """Leading zero bits of uint32 values (32 for zero), exactly via frexp on float64."""
    _, exponent = np.frexp(x.astype(np.float64))
    return (32 - exponent).astype(np.int32)


class PreparedData:
    """``n`` and ``d`` of a data set prepared once (its [n, d] ``points``)."""

    @property
    def n(self) -> int:
        return self.points.shape[0]

    @property
    def d(self) -> int:
        return self.points.shape[1]


@dataclasses.dataclass(frozen=True, eq=False)
class DataTree(PreparedData):
    """Morton-sorted data with split levels, occupancy profile and range-min table.

    Attributes:
      points: [n, d] float64 data in Morton order.
      order: [n] int64 permutation with ``points = X[order]``.
      depth: code depth ``L`` (levels ``0..L`` are addressable).
      words: [n, W] uint32 Morton codes, ``W = ceil(L/32)``, MSB first.
      split: [n] int32; ``split[0] = -1``, ``split[i]`` the first level whose cells of
        sorted points ``i-1`` and ``i`` differ (``L`` if they agree to depth ``L``).

    Built by ``DataTree.build(X, depth)`` or ``js.prepare(X, depth)``, which validate ``X``
    (a ``ValueError`` names the argument); pass it instead of ``X`` to reuse the sort.

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> tree = js.prepare(X, 8)
      >>> tree.n, tree.d, tree.depth
      (500, 2, 8)
      >>> tree.occupancy.tolist()        # occupied cells per level, O_0..O_8
      [1, 2, 4, 8, 15, 25, 42, 64, 83]
    """

    points: np.ndarray
    order: np.ndarray
    depth: int
    words: np.ndarray
    split: np.ndarray

    @classmethod
    def build(cls, X, depth: int) -> "DataTree":
        """Sort ``X`` [n, d] in Morton order to ``depth`` levels and compute split levels."""
        X = check_data(X)
        depth = check_positive_int(depth, "depth")
        if depth > MAX_DEPTH:
            raise ValueError(f"depth={depth} exceeds the supported maximum {MAX_DEPTH}")
        words = partition.morton_words(X, depth)
        order = np.lexsort(words.T[::-1])
        words = words[order]
        diff = words[1:] ^ words[:-1]
        nonzero = diff != 0
        first = np.argmax(nonzero, axis=1)
        lead = _leading_zeros32(diff[np.arange(len(diff)), first])
        split = np.where(nonzero.any(axis=1), first * partition.WORD_BITS + lead, depth)
        split = np.concatenate([[-1], split]).astype(np.int32)
        return cls(points=X[order], order=order, depth=depth, words=words, split=split)

    @functools.cached_property
    def device(self) -> "DeviceTree":
        """The arrays the device descent reads (``DeviceTree``), on the default device, cached."""
        return DeviceTree(
            words=jnp.asarray(self.words),
            split=jnp.asarray(self.split),
            table=jnp.asarray(self.range_min_table),
            dim=self.d,
        )

    @functools.cached_property
    def occupancy(self) -> np.ndarray:
        """Occupancy profile ``O_j`` for ``j = 0..depth`` (occupied cells per level), int64."""
        hist = np.bincount(self.split[1:], minlength=self.depth + 1)[: self.depth + 1]
        return 1 + np.concatenate([[0], np.cumsum(hist)[:-1]])

    def level_counts(self, level: int) -> np.ndarray:
        """Counts of the occupied level-``level`` cells in Morton order, int64."""
        starts = np.flatnonzero(self.split < level)
        return np.diff(np.append(starts, self.n))

    def dense_counts(self, depth: int) -> list[np.ndarray]:
        """Counts of every node of the complete tree in Morton order, int32 [2^j] per level ``j ≤ depth``."""
        if depth > min(self.depth, 62):
            raise ValueError(f"depth={depth} exceeds the dense-count limit min(tree depth, 62)")
        index = np.zeros(self.n, dtype=np.int64)
        for t in range(depth):
            word = self.words[:, t // partition.WORD_BITS]
            bit = (word >> np.uint32(partition.WORD_BITS - 1 - t % partition.WORD_BITS)) & 1
            index = 2 * index + bit.astype(np.int64)
        counts = [np.bincount(index, minlength=2**depth)]
        for _ in range(depth):
            counts.append(counts[-1].reshape(-1, 2).sum(axis=1))
        return [c.astype(np.int32) for c in counts[::-1]]

    def planar_counts(self, depth: int) -> np.ndarray:
        """Counts of the complete tree, levels ``0..depth`` in planar order, flat int32 [2^{depth+1} − 1].

        Level ``j`` occupies ``[2^j − 1, 2^{j+1} − 1)`` (``partition.planar_to_morton``).
        """
        return np.concatenate([
            counts[partition.planar_to_morton(j)] for j, counts in enumerate(self.dense_counts(depth))
        ])

    @functools.cached_property
    def range_min_table(self) -> np.ndarray:
        """Sparse table [K, n] int32: ``T[k, i]`` = argmin of ``split[i : i + 2^k]`` (clipped).

        ``K = floor(log2(n)) + 1``; ranges running past the end are clipped, which the
        descent never queries.
        """
        n = self.n
        levels = max(1, int(n).bit_length())
        table = np.empty((levels, n), dtype=np.int32)
        table[0] = np.arange(n, dtype=np.int32)
        for k in range(1, levels):
            prev = table[k - 1]
            half = 1 << (k - 1)
            right = prev[np.minimum(np.arange(n) + half, n - 1)]
            take_right = self.split[right] < self.split[prev]
            table[k] = np.where(take_right, right, prev)
        return table


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DeviceTree:
    """The arrays of a ``DataTree`` that the descent reads (``jaxsynth.core.descent``).

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

    @property
    def n(self) -> int:
        return self.split.shape[0]
