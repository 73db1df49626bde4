"""The data's levels of Morton blocks, and the arcs and plans that move between them.

``prepare_exact`` sorts the data along the Morton order and cuts it into levels of
contiguous blocks (``clusters`` blocks, ``REFINE`` times as many at each next level, the
points last), once per data set.  The helpers build candidate arcs (a level's parents'
plan, the north-west coupling) and carry plans between levels (``point_shares``,
``pushed``, ``adapted_level``).  Derivations: ``docs/theory/exact-w1.md``.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from jaxsynth.core import partition
from jaxsynth.core.validate import check_positive_int
from jaxsynth.wasserstein.ctransform import pass_chunks
from jaxsynth.wasserstein.exact.certificate import arc_cost_sums

__all__ = ["DEFAULT_CLUSTERS", "ExactData", "Level", "adapted_level", "inherited_arcs",
           "mean_costs", "morton_order", "northwest_arcs", "prepare_exact", "pushed",
           "unique_arcs"]

DEFAULT_CLUSTERS = 1024
"""Morton blocks of the coarsest level."""
MORTON_DEPTH = 64
"""Bits of the Morton code that order the data and the atoms."""
REFINE = 8
"""Blocks of a level per block of the level above."""
SNAP = 0.5
"""How far (a fraction of a block) a level's block boundary may move from equal counts
to a place where the data part into other cells: blocks of equal counts straddle the gaps
of structured data (a spiral's arms), whose centroids then lie between them."""
PROBE = 4
"""Blocks of the coarsest level merged into one block of the probe level
(``ExactData.probe``)."""
MAX_LP_BLOCKS = 1 << 17
"""The most blocks of a level solved as one LP: the last level above the points has at
most this many, and a points' level of more is solved by regions (``REGION``)."""


def morton_order(Z: np.ndarray) -> np.ndarray:
    """Indices sorting points of [0,1]^d along the cyclic partition's Morton order."""
    return _morton_sorted(Z)[0]


def _morton_sorted(Z: np.ndarray):
    """``morton_order`` and the Morton words [n, W] of the points in that order."""
    words = partition.morton_words(np.asarray(Z, np.float64), MORTON_DEPTH)
    order = np.lexsort(tuple(words[:, k] for k in reversed(range(words.shape[1]))))
    return order, words[order]


def _parting_depths(words: np.ndarray) -> np.ndarray:
    """[n - 1]: the depth (bits) of the deepest cell of the cyclic partition holding both
    of two consecutive points (Morton words in order): small where they part high."""
    xor = (words[1:] ^ words[:-1]).astype(np.uint64)
    first = np.argmax(xor != 0, axis=1)
    top = xor[np.arange(len(xor)), first]
    bits = np.where(top > 0, np.frexp(top.astype(np.float64))[1], 0)  # exact: < 2^32
    return np.where(top > 0, 32 * first + 32 - bits, 32 * words.shape[1]).astype(np.uint8)


def _snapped(parting: np.ndarray, targets: np.ndarray, reach: int, keep=()) -> np.ndarray:
    """Boundaries of consecutive points in Morton order (0 and ``n`` included): each of
    ``targets`` moved by at most ``reach`` to where the points part highest
    (``parting``, the nearest of equals), and those of ``keep``; sorted, distinct."""
    n = len(parting) + 1
    targets = np.asarray(targets, np.int64)
    if reach > 0 and len(targets):
        offsets = np.arange(-reach, reach + 1)
        offsets = offsets[np.argsort(np.abs(offsets), kind="stable")]  # nearest first
        candidates = np.clip(targets[:, None] + offsets, 1, n - 1)
        targets = candidates[np.arange(len(targets)),
                             np.argmin(parting[candidates - 1], axis=1)]
    return np.unique(np.concatenate([[0, n], targets, keep])).astype(np.int64)


def region_edges(data: ExactData, size: int, shift: int, snap: float) -> np.ndarray:
    """Edges [R + 1] (Morton ranks) of the points' regions: ``size`` consecutive points,
    the first ``size − shift``, each edge moved by at most ``snap`` of a region to where
    the data part into other cells (regions keep within the data's cells)."""
    return _snapped(data.parting, np.arange(size - shift, data.n, size), int(snap * size))


@dataclasses.dataclass(frozen=True, eq=False)
class Level:
    """One resolution of the data: ``Q`` blocks, contiguous in the order ``ranks``.

    Attributes:
      starts: [Q + 1] block boundaries, as positions in ``ranks``.
      centroids: [Q, d] float64 block centroids; masses: [Q] block masses (sizes / n).
      chunks: [C, CHUNK, d] float32 centroids padded to whole chunks, where the passes
        run (``ctransform.pass_chunks``).
      ranks: [n] the points' Morton ranks in block order; ``None`` (the levels of
        ``prepare_exact``): the Morton order itself.
    """

    starts: np.ndarray
    centroids: np.ndarray
    masses: np.ndarray
    chunks: np.ndarray | jax.Array
    ranks: np.ndarray | None = None

    @property
    def size(self) -> int:
        return len(self.masses)


@dataclasses.dataclass(frozen=True, eq=False)
class ExactData:
    """A data set prepared once for ``w1_exact`` against many measures.

    Attributes:
      X: [n, d] float64 data.
      order: the Morton order of the data (rank ``r`` is the point ``order[r]``).
      levels: coarsest first; block counts about ``clusters, 8·clusters, ...``, the last
        one the points themselves (one block per point, in Morton order).
      parting: [n − 1] uint8: the depth (bits) of the deepest cell of the cyclic partition
        that holds both of two consecutive points (``_parting_depths``).
      probe: the coarsest level's blocks merged ``PROBE`` at a time (a level above it,
        nested), solved first for a measure of fewer atoms than the coarsest level has
        blocks (``levels_for``); ``None`` with fewer than three levels.

    Examples:
      >>> import jaxsynth as js
      >>> from jaxsynth.wasserstein import prepare_exact
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> outs = js.release_batch(0, js.PMM(depth=5), X, [0.5, 2.0], seeds=3)
      >>> data = prepare_exact(X)                    # Morton order and levels, once
      >>> lower, upper = js.w1(data, outs)
      >>> bool((lower == js.w1(X, outs)[0]).all())
      True
    """

    X: np.ndarray
    order: np.ndarray
    levels: tuple
    parting: np.ndarray
    probe: Level | None = None

    @property
    def n(self) -> int:
        return self.X.shape[0]

    def levels_for(self, m: float) -> tuple:
        """The levels a measure of ``m`` atoms is solved on: ``probe`` first for fewer atoms
        than the coarsest level has blocks.  Such a coarsest level resolves more than rtol
        needs on data of low intrinsic dimension, or at a large W1 (small ε), and its dense
        LP is a large part of a replicate.  Data of two levels have no probe: there the
        coarsest level is the last above the points, whose duals give the lower end at
        once, often within rtol with no network simplex (whose compile a new
        environment's first call would wait for: ``docs/theory/exact-w1.md``)."""
        if self.probe is not None and m < self.levels[0].size:
            return (self.probe, *self.levels)
        return self.levels


def _level(X_sorted: np.ndarray, starts: np.ndarray) -> Level:
    n, d = X_sorted.shape
    sizes = np.diff(starts)
    centroids = np.add.reduceat(X_sorted, starts[:-1], axis=0) / sizes[:, None]
    return Level(starts, centroids, sizes / n, pass_chunks(centroids))


def prepare_exact(X: np.ndarray, clusters: int = DEFAULT_CLUSTERS) -> ExactData:
    """Morton order and the levels of blocks of validated data ``X`` [n, d].

    Levels: ``clusters`` blocks, each level ``REFINE`` times finer than the one above,
    then the points.  Data of more than ``MAX_LP_BLOCKS`` points reach a last level of
    ``MAX_LP_BLOCKS`` blocks in one step of at most ``REFINE²`` (1024, 8192, 131072
    blocks at 10^6 points): a level a step of less than ``REFINE`` below it cost more LP
    time than it saved (``docs/theory/exact-w1.md``).

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> data = js.wasserstein.prepare_exact(X, clusters=16)
      >>> data.n, data.levels[0].size <= 16, data.levels[-1].size
      (500, True, 500)
    """
    X = np.asarray(X, np.float64)
    n = X.shape[0]
    clusters = check_positive_int(clusters, "clusters")
    order, words = _morton_sorted(X)
    sizes = [min(clusters, n)]
    while sizes[-1] < n:  # up to MAX_LP_BLOCKS blocks, then the points
        finer = REFINE * sizes[-1]
        if finer >= n or sizes[-1] >= MAX_LP_BLOCKS:
            sizes.append(n)
        elif n > MAX_LP_BLOCKS and REFINE * finer > MAX_LP_BLOCKS:
            sizes.append(MAX_LP_BLOCKS)  # in one step of at most REFINE²
        else:
            sizes.append(finer)
    parting, starts = _parting_depths(words), [np.zeros(0, np.int64)]
    for q in sizes:  # equal counts, moved to where the data part (nested)
        starts.append(np.arange(n + 1) if q == n else _snapped(
            parting, (np.arange(1, q) * n) // q, int(SNAP * n / q), starts[-1]))
    top = starts[1]
    probe = _level(X[order], np.r_[top[:-1:PROBE], top[-1]]) if len(starts) > 3 else None
    return ExactData(X, order, tuple(_level(X[order], s) for s in starts[1:]), parting, probe)


def inherited_arcs(coarse: Level, fine: Level, rows, cols, m: int) -> np.ndarray:
    """Arcs (``block · m + atom``) of each fine block to the atoms that the coarse blocks
    holding its first and last point send mass to (``rows``, ``cols``: the coarse plan)."""
    order = np.argsort(rows, kind="stable")
    rows, cols = rows[order], cols[order]
    indptr = np.searchsorted(rows, np.arange(coarse.size + 1))
    arcs = []
    for rank in (fine.starts[:-1], fine.starts[1:] - 1):
        parent = np.searchsorted(coarse.starts, rank, side="right") - 1
        count = indptr[parent + 1] - indptr[parent]
        first = np.repeat(indptr[parent] - np.cumsum(count) + count, count)
        arcs.append(np.repeat(np.arange(fine.size), count) * m
                    + cols[first + np.arange(count.sum())])
    return np.concatenate(arcs)


def unique_arcs(*parts) -> np.ndarray:
    """Sorted distinct arc indices of the concatenated ``parts`` (a sort: NumPy's hashing
    ``np.unique`` of integers is many times slower on arrays this large).  The parts are
    runs in nearly row-major order (a round's sorted arcs, then its new arcs block by
    block), which NumPy's stable sort (timsort) merges as runs, where its quicksort
    sorts them anew (``docs/theory/exact-w1.md``, the glue between LPs)."""
    arcs = np.sort(np.concatenate(parts), kind="stable")
    first = np.ones(len(arcs), bool)
    first[1:] = arcs[1:] != arcs[:-1]
    return arcs[first]


def northwest_arcs(a, b):
    """Arcs (rows, cols) of the north-west-corner coupling of the weights ``a`` and ``b``
    in their orders: a coupling, so the arcs make any transport LP feasible."""
    ca, cb = np.cumsum(a), np.cumsum(b)
    ca[-1] = cb[-1] = 1.0
    starts = np.unique(np.concatenate([[0.0], ca, cb]))[:-1]
    i = np.minimum(np.searchsorted(ca, starts, side="right"), len(a) - 1)
    j = np.minimum(np.searchsorted(cb, starts, side="right"), len(b) - 1)
    return i, j


def adapted_level(data: ExactData, coarse: Level, plan, m: int):
    """The blocks of ``coarse`` split by the atom each of their points sends most mass to
    under the points' coupling ``plan`` (rows: Morton ranks): blocks whose points the
    plan sends alike.  Returns the level and the arcs (``block · m + atom``) that carry
    ``plan`` on it."""
    rows, cols, mass = plan
    order = np.lexsort((-mass, rows))
    first = order[np.r_[True, rows[order][1:] != rows[order][:-1]]]
    main = np.empty(data.n, np.int64)
    main[rows[first]] = cols[first]
    parent = np.searchsorted(coarse.starts, np.arange(data.n), side="right") - 1
    keys = parent * m + main
    ranks = np.argsort(keys, kind="stable")  # parents stay contiguous, Morton order inside
    keys = keys[ranks]
    starts = np.r_[np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]), data.n]
    sizes = np.diff(starts)
    centroids = np.add.reduceat(data.X[data.order[ranks]], starts[:-1], axis=0) / sizes[:, None]
    level = Level(starts, centroids, sizes / data.n,
                  pass_chunks(centroids), ranks)
    position = np.empty(data.n, np.int64)
    position[ranks] = np.arange(data.n)
    block = np.searchsorted(starts, position, side="right") - 1
    return level, unique_arcs(block[rows] * m + cols)


def mean_costs(data: ExactData, level: Level, rows, cols, atoms, metric):
    """Arc costs of blocks ``rows`` to atoms ``cols``: the mean cost of the blocks' points
    (float64), so a block plan's cost is that of the coupling of points it stands for."""
    return arc_cost_sums(data, level, rows, cols, atoms, metric) / np.diff(level.starts)[rows]


def _point_shares(level: Level, plan):
    """A block plan as the coupling of points it stands for (each point of a block sends
    its mass as the block does): (Morton ranks, atoms, masses), one entry per point-arc."""
    rows, cols, mass = plan
    sizes = np.diff(level.starts)[rows]
    ranks = np.repeat(level.starts[rows] - np.cumsum(sizes) + sizes, sizes) + np.arange(
        sizes.sum())
    if level.ranks is not None:
        ranks = level.ranks[ranks]
    return ranks, np.repeat(cols, sizes), np.repeat(mass / sizes, sizes)


def pushed(coarse: Level, level: Level, plan, m: int):
    """The coupling ``_upper`` certifies (``_point_shares`` of the coarse plan), summed
    over the blocks of a finer ``level``: its plan (rows, cols, mass)."""
    ranks, cols, share = _point_shares(coarse, plan)
    keys = (np.searchsorted(level.starts, ranks, side="right") - 1) * m + cols
    order = np.argsort(keys, kind="stable")
    keys, share = keys[order], share[order]
    first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    fine_rows, fine_cols = np.divmod(keys[first], m)
    return fine_rows, fine_cols, np.add.reduceat(share, first)
