"""Exact W1 in the tree metric of the mechanism's partition, and a certified upper bound.

``W_T = Σ_{v ≠ root} w_v |μ(Ω_v) − ν(Ω_v)|`` for the trees the mechanisms release: the
balanced trees of PMM and Pruned-PMM (Zare Moayedi, Asadi, Yassaee, Aminian,
"Geometry-Adaptive Mechanisms for Private Synthetic Data", arXiv 2609.33363, §3–§4) and
the unbalanced, possibly shifted trees of PrivTree (Y. He, "Intrinsic-Dimensional
Wasserstein Guarantees for Private Synthetic Measures" §2.3, §5, §6).  A node at level
``j`` hangs from its parent by an edge of weight ``w_j = (diam(j−1) − diam(j))/2``; the
upper bound adds the within-leaf term ``(E_μ diam(leaf(x)) + E_ν diam(leaf(y)))/2``.

``levels_w1`` weighs level statistics (``core.measure.LEVEL_FIELDS``, NOT PRIVATE): a
release kernel's, or those ``tree_w1_atoms`` computes from released atoms.  Balanced
trees (the PMM family) are summed up their complete grid of cells on the host, with no
sort (``complete_tree``).  Any tree: the data prepared once (``prepare``: sorted Morton
codes and each code's cell counts at every level); per replicate (unshifted trees, the
data prepared to at most ``leaf_tree.MAX_DEPTH`` levels, on the host, ``leaf_tree``; the
others on the device, ``_tree_levels``) the atoms are coded, sorted and placed between
their neighbouring data codes by a binary search, and each level sums over the atoms'
cells only (``O(M log M + M log U + M·L)``); the atoms' cells must form an antichain
(else ``TreeW1.valid`` is False).
Derivations, leaf rules, lemmas and the upper bound's proof:
``docs/theory/w1-methods.md``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.core import partition
from jaxsynth.core.datatree import DataTree, PreparedData
from jaxsynth.core.batching import capacity_bucket, chunked, device_memory, fitting_batch
from jaxsynth.core.measure import MAX_BITS_PER_COORDINATE, positive_atoms
from jaxsynth.core.partition import morton_words_of_sum
from jaxsynth.core.validate import check_data
from jaxsynth.wasserstein import leaf_tree
from jaxsynth.wasserstein.complete_tree import MAX_DEPTH, balanced, complete_levels

__all__ = [
    "TreeData",
    "TreeW1",
    "bytes_per_replicate",
    "data_points",
    "levels_w1",
    "metric_tables",
    "prepare",
    "tree_w1_atoms",
]

WORD_BITS = partition.WORD_BITS

DEFAULT_BATCH_SIZE = 64
"""Most replicates per vmapped chunk (fewer where ``bytes_per_replicate`` says so)."""
ATOM_BYTES = 96
"""Working memory of the kernel per atom of a replicate: its codes, weight, depth, sort
keys, neighbours' split levels and the level's cells (``_replicate``; measured by
``tests/wasserstein/test_memory.py``)."""
CELL_BYTES = 5
"""Memory per data code and level of a shifted replicate's own codes and level cells."""


@dataclasses.dataclass(frozen=True, eq=False)
class TreeData(PreparedData):
    """A data set prepared once for tree-metric W1 against many synthetic measures.

    Attributes:
      X: [n, d] float64 validated data.
      depth: code depth ``D``; measures with leaves deeper than ``D`` need a new ``prepare``.
      words: [U, W] uint32 sorted distinct depth-``D`` Morton codes, ``W = ceil(D/32)``
        (padded by repeating the last code).
      counts: [U] int32 data points per code (0 on padding).
      cells: [D + 1, U] int32 data points in each code's level-``j`` cell, every level.

    Examples:
      >>> import jaxsynth as js
      >>> from jaxsynth.wasserstein import prepare_w1
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> outs = js.release_batch(0, js.PMM(depth=5), X, [0.5, 2.0], seeds=3)
      >>> data = prepare_w1(X, depth=5)              # the data's codes, once
      >>> bool((js.w1(data, outs, "tree") == js.w1(X, outs, "tree")).all())
      True
    """

    X: np.ndarray
    depth: int
    words: np.ndarray
    counts: np.ndarray
    cells: np.ndarray

    @property
    def points(self) -> np.ndarray:
        """The data ``X``, named as in ``DataTree``."""
        return self.X


def data_points(X) -> np.ndarray:
    """The validated data [n, d] float64 of an array, a ``TreeData`` or a ``DataTree``."""
    if isinstance(X, PreparedData):
        return X.points
    return check_data(X, "X")


def n_words(depth: int) -> int:
    """Packed uint32 words for a ``depth``-bit Morton code (at least one)."""
    return max(1, -(-depth // WORD_BITS))


def _check_depth(depth, d: int) -> int:
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 0:
        raise ValueError(f"depth must be an integer >= 0; got {depth!r}")
    if depth // d + 1 > MAX_BITS_PER_COORDINATE:
        raise ValueError(
            f"depth={depth} needs {depth // d + 1} digits per coordinate in d={d}; "
            f"at most {MAX_BITS_PER_COORDINATE} are supported"
        )
    return int(depth)


def _unique_codes(words: np.ndarray, size: int | None = None):
    """Sorted distinct rows of ``words`` [n, W] and their multiplicities.

    Padded to ``size`` rows (default: ``frontier.capacity_bucket`` of the distinct count,
    so data sets of similar size share a compilation) by repeating the last code with
    count 0; zero-count entries carry no mass and never change a cell's sums.
    """
    words = words[np.lexsort(words.T[::-1])]
    start = np.concatenate([[True], np.any(words[1:] != words[:-1], axis=1)])
    uniq = words[start]
    counts = np.diff(np.append(np.flatnonzero(start), len(words)))
    pad = (capacity_bucket(len(counts)) if size is None else size) - len(counts)
    if pad < 0:
        raise ValueError(f"size={size} is below the {len(counts)} distinct cells of the data")
    uniq = np.concatenate([uniq, np.repeat(uniq[-1:], pad, axis=0)])
    return uniq.astype(np.uint32), np.pad(counts, (0, pad)).astype(np.int32)


def _truncate(words: np.ndarray, depth: int) -> np.ndarray:
    """Codes [n, W] cut to their first ``depth`` bits (the level-``depth`` cells)."""
    words = words[:, : n_words(depth)].copy()
    if depth % WORD_BITS:
        words[:, -1] &= np.uint32((2**WORD_BITS - 1) ^ (2 ** (WORD_BITS - depth % WORD_BITS) - 1))
    elif depth == 0:
        words[:] = 0
    return words


def prepare(X, depth: int, size: int | None = None) -> TreeData:
    """Validate ``X`` and compute its sorted depth-``depth`` Morton codes (host, once).

    Args:
      X: [n, d] data inside [0,1]^d, or a mechanism's ``DataTree`` (its Morton words,
        cut to ``depth`` bits, are reused when it is at least ``depth`` levels deep).
      depth: code depth ``D ≥`` the deepest leaf of every measure it will be used with.
      size: pad the distinct codes to this many entries (e.g. ``n``, so that every data
        set of ``n`` points shares one compilation); default: the distinct count rounded
        up by ``frontier.capacity_bucket``.

    Returns:
      a ``TreeData`` to pass to ``js.w1`` (methods ``"tree"``, ``"tree_upper"``,
      ``"bracket"``) instead of ``X``.

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> data = js.wasserstein.prepare_w1(X, depth=8)
      >>> data.n, data.depth
      (500, 8)
    """
    if isinstance(X, DataTree):
        if X.depth >= depth:
            depth = _check_depth(depth, X.points.shape[1])
            return _tree_data(X.points, depth, _truncate(X.words, depth), size)
        X = X.points
    X = check_data(X, "X")
    depth = _check_depth(depth, X.shape[1])
    if X.shape[0] >= 2**31:
        raise ValueError(f"X has {X.shape[0]} points; at most 2^31 - 1 are supported")
    return _tree_data(X, depth, partition.morton_words(X, depth), size)


def _tree_data(X, depth: int, words, size) -> TreeData:
    words, counts = _unique_codes(words, size)
    cells = np.asarray(_data_cells(words, counts, depth=depth))
    return TreeData(X=X, depth=depth, words=words, counts=counts, cells=cells)


def _split_level(a, b):
    """Length of the common prefix of two tuples of code words (``32·W`` when equal)."""
    level = jnp.full(a[0].shape, WORD_BITS * len(a), jnp.int32)
    for w in reversed(range(len(a))):
        x = a[w] ^ b[w]
        level = jnp.where(x != 0, WORD_BITS * w + jax.lax.clz(x).astype(jnp.int32), level)
    return level


def _lex_less(a, b):
    less = jnp.zeros(a[0].shape, bool)
    equal = jnp.ones(a[0].shape, bool)
    for aw, bw in zip(a, b):
        less = less | (equal & (aw < bw))
        equal = equal & (aw == bw)
    return less


def _count_less(table, query):
    """For each query code, the number of rows of the sorted ``table`` strictly below it."""
    size = table[0].shape[0]
    lo = jnp.zeros(query[0].shape, jnp.int32)
    hi = jnp.full(query[0].shape, size, jnp.int32)

    def step(_, bounds):
        lo, hi = bounds
        mid = (lo + hi) // 2
        less = _lex_less(tuple(t[jnp.minimum(mid, size - 1)] for t in table), query)
        active = lo < hi
        return jnp.where(active & less, mid + 1, lo), jnp.where(active & ~less, mid, hi)

    lo, _ = jax.lax.fori_loop(0, max(1, int(size).bit_length()), step, (lo, hi))
    return lo


def _sort_codes(words, depth: int):
    """Permutation sorting the codes' ``depth`` bits, ties in index order: one packed
    uint32 key (the bits, then the index) when it fits, else a least-significant-digit
    radix sort of such keys, a digit of ``32 − log2 M`` bits at a time (each pass a sort
    of plain integers, several times faster on a CPU than one sort carrying the index)."""
    m = words[0].shape[0]
    index_bits = max(1, (m - 1).bit_length())
    index = jnp.arange(m, dtype=jnp.uint32)
    low = jnp.uint32((1 << index_bits) - 1)
    digit = WORD_BITS - index_bits
    perm = index
    for end in range(depth, 0, -digit):  # the digit of code bits [start, end)
        start = max(0, end - digit)
        key = _code_bits(words, start, end - start)[perm]
        perm = perm[jnp.sort((key << jnp.uint32(index_bits)) | index) & low]
    return perm.astype(jnp.int32)


def _code_bits(words, start: int, count: int):
    """Bits ``[start, start + count)`` of codes (bit 0 the most significant of
    ``words[0]``) as uint32, ``0 < count ≤ 32``."""
    word, offset = divmod(start, WORD_BITS)
    bits = words[word] << jnp.uint32(offset) if offset else words[word]
    if offset + count > WORD_BITS:
        bits = bits | (words[word + 1] >> jnp.uint32(WORD_BITS - offset))
    return bits >> jnp.uint32(WORD_BITS - count)


class MetricTables(NamedTuple):
    """The ground metric as arrays, so one compilation serves ℓ∞ and ℓ2.

    Attributes:
      diam: [D+1] float32 cell diameters by level.
      levels: [D] int32 levels ``j`` with ``w_j > 0`` first (ℓ∞: ``j ≡ 0 mod d``), padded.
      weight: [D] float32 their edge weights ``w_j = (diam(j-1) - diam(j))/2``, padded with 0.
      count: int32 number of levels with ``w_j > 0``.
    """

    diam: jax.Array
    levels: jax.Array
    weight: jax.Array
    count: jax.Array


def metric_tables(depth: int, d: int, metric: str) -> MetricTables:
    """``MetricTables`` of the cyclic partition to ``depth`` in ``d`` dimensions."""
    diam = partition.diameter(np.arange(depth + 1), d, metric)
    edge = partition.edge_weights(depth, d, metric)[1:]
    levels = np.flatnonzero(edge > 0) + 1
    pad = max(depth, 1) - len(levels)
    return MetricTables(
        diam=jnp.asarray(diam, jnp.float32),
        levels=jnp.asarray(np.pad(levels, (0, pad)), jnp.int32),
        weight=jnp.asarray(np.pad(edge[levels - 1], (0, pad)), jnp.float32),
        count=jnp.asarray(len(levels), jnp.int32),
    )


class TreeW1(NamedTuple):
    """Tree-metric W1 of a (batch of) synthetic measure(s); arrays of the batch shape.

    Attributes:
      value: exact W1 in the partition's tree metric (float32 level sums weighed in
        float64).
      upper: ``value`` plus the within-leaf term, an upper bound on W1 in the metric
        (``js.w1(..., method="tree_upper")`` adds a rounding margin).
      valid: ``False`` where the kept leaves are not an antichain or an unbalanced tree
        left data outside every leaf (then ``value`` and ``upper`` are meaningless).
    """

    value: jax.Array
    upper: jax.Array
    valid: jax.Array


def _cell_counts(dwords, dcounts, depth: int):
    """Data points in the level-``j`` cell of each sorted data code, every ``j ≤ depth``:
    int32 [depth + 1, U] (a segment sum per level over runs of equal ``j``-bit prefixes)."""
    words = tuple(dwords[:, w] for w in range(dwords.shape[1]))
    split = jnp.concatenate([jnp.array([-1]), _split_level(tuple(w[:-1] for w in words),
                                                          tuple(w[1:] for w in words))])

    def level(j):
        cell = jnp.cumsum(split < j) - 1
        total = jax.ops.segment_sum(dcounts, cell, dcounts.shape[0], indices_are_sorted=True)
        return total[cell]

    return jax.lax.map(level, jnp.arange(depth + 1))


_data_cells = jax.jit(_cell_counts, static_argnames="depth")


def _replicate(levels, count, dwords, dcounts, cells, points, weights, leaf_depth, shift, *,
               depth):
    """Level statistics and validity of one replicate's tree (module docstring).

    Args:
      levels: [D] int32 the levels with ``w_j > 0`` first (``MetricTables.levels``);
        count: how many.
      dwords: [U, W] uint32 sorted data codes; dcounts: [U] int32 multiplicities; cells:
        [D + 1, U] int32 their level cells' counts (``_cell_counts``), or ``None`` (then
        computed here: a shifted replicate's data codes are its own).
      points: [M, d] float32; weights: [M]; leaf_depth: [M] int32.
      shift: [d] float32 partition shift ``U``, or ``None``.

    Returns:
      ``(level_gap [D + 1], leaf_mass [D + 1], valid)``: the ``core.measure.LEVEL_FIELDS``
      a release kernel reports (``level_gap`` at the levels ``levels`` only).
    """
    size, m = dcounts.shape[0], weights.shape[0]
    n = jnp.sum(dcounts)
    if cells is None:
        cells = _cell_counts(dwords, dcounts, depth)
    weights = weights / jnp.sum(weights)  # as exact1d and scipy: ν normalised to mass 1
    awords = morton_words_of_sum(
        jnp, points, 0.0 if shift is None else shift, depth, shift is not None
    )
    perm = _sort_codes(awords, depth)
    awords = tuple(w[perm] for w in awords)
    wt, lvl = weights[perm], leaf_depth[perm]

    # Padding: a zero-weight atom whose cell strictly contains another atom's cell.  Such
    # an atom's block of equal cells borders a deeper atom inside the cell; propagate
    # the flag over each block of consecutive equal cells.
    split = _split_level(tuple(w[:-1] for w in awords), tuple(w[1:] for w in awords))
    split_prev = jnp.concatenate([jnp.array([-1]), split])  # with atom i - 1
    split_next = jnp.concatenate([split, jnp.array([-1])])  # with atom i + 1
    lvl_prev = jnp.concatenate([jnp.array([-1]), lvl[:-1]])
    lvl_next = jnp.concatenate([lvl[1:], jnp.array([-1])])
    same_cell = (lvl == lvl_prev) & (split_prev >= lvl)
    holds_deeper = ((split_prev >= lvl) & (lvl_prev > lvl)) | (
        (split_next >= lvl) & (lvl_next > lvl)
    )
    block = jnp.cumsum(~same_cell) - 1
    holds_deeper = jax.ops.segment_max(holds_deeper, block, m, indices_are_sorted=True)[block]
    kept = (wt > 0) | ~holds_deeper
    top = jnp.max(jnp.where(kept, lvl, -1))
    balanced = jnp.all(~kept | (lvl == top))

    # Each kept atom against the previous kept atom: the antichain test, and the first
    # atom of each leaf cell (kept atoms of one cell are consecutive).
    kept_before = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(kept, dtype=jnp.int32)])
    previous = jnp.zeros(m + 1, jnp.int32).at[jnp.where(kept, kept_before[:-1], m)].set(
        jnp.arange(m))[jnp.clip(kept_before[:-1] - 1, 0, m - 1)]
    exists = kept_before[:-1] > 0
    split_kept = _split_level(awords, tuple(w[previous] for w in awords))
    level_kept = lvl[previous]
    nested = kept & exists & (split_kept >= jnp.minimum(level_kept, lvl)) & (level_kept != lvl)
    leaf_start = kept & ~(exists & (level_kept == lvl) & (split_kept >= lvl))

    # The data next to each atom in code order; an atom's level-j cell holds data iff one
    # of these two lies in it (the cell is an interval of the order), and then its count
    # is that neighbour's level-j cell count.
    dwords = tuple(dwords[:, w] for w in range(dwords.shape[1]))
    rank = _count_less(dwords, awords)
    right, left = jnp.minimum(rank, size - 1), jnp.maximum(rank - 1, 0)
    s_right = jnp.where(rank < size, _split_level(awords, tuple(w[right] for w in dwords)), -1)
    s_left = jnp.where(rank > 0, _split_level(awords, tuple(w[left] for w in dwords)), -1)

    def data_in_cell(j):
        return jnp.where(s_right >= j, cells[j, right], jnp.where(s_left >= j, cells[j, left], 0))

    # Leaves: each leaf cell's data (once), the data outside every leaf (orphans: at the
    # deepest level of a balanced tree; in an unbalanced one, a malformed output).
    at = jnp.clip(lvl, 0, depth)
    in_leaf = jnp.where(leaf_start, data_in_cell(at), 0)
    orphans = n - jnp.sum(in_leaf)
    valid = ~jnp.any(nested) & (balanced | (orphans == 0))
    data_leaf = jax.ops.segment_sum(in_leaf, at, depth + 1).at[jnp.maximum(top, 0)].add(orphans)
    leaf_mass = data_leaf / n + jax.ops.segment_sum(jnp.where(kept, wt, 0.0), at, depth + 1)

    def level_gap(i, gap):  # Σ over the level-j nodes of T (cells holding a leaf at ≥ j)
        j = levels[i]
        cell = jnp.cumsum(split_prev < j) - 1
        node = kept & (lvl >= j)
        # each cell's synthetic mass and node count (one segment sum), read at its last
        # atom, where its data count is read too (the lemma: the same at all its atoms)
        sums = jax.ops.segment_sum(jnp.stack([jnp.where(node, wt, 0.0), node.astype(wt.dtype)],
                                             -1), cell, m, indices_are_sorted=True)[cell]
        closes = (split_next < j) & (sums[:, 1] > 0)
        mu = jnp.where(closes, data_in_cell(j), 0)
        # a balanced tree's empty leaves: the data outside the atoms' cells, at every level
        empty = jnp.where(balanced & (j <= top), (n - jnp.sum(mu)) / n, 0.0)
        return gap.at[j].set(jnp.sum(jnp.where(closes, jnp.abs(mu / n - sums[:, 0]), 0.0))
                             + empty)

    gap = jax.lax.fori_loop(0, count, level_gap, jnp.zeros(depth + 1, jnp.float32))
    scale = 1.0 if shift is None else 2.0
    return scale * gap, scale * leaf_mass, valid


@functools.cache
def _chunk_kernel(depth: int, shifted: bool):
    """Jitted ``_replicate`` vmapped over a chunk; data shared unless shifted."""
    kernel = functools.partial(_replicate, depth=depth)
    if shifted:
        return jax.jit(jax.vmap(
            lambda lv, c, dw, dc, p, w, ld, u: kernel(lv, c, dw, dc, None, p, w, ld, u),
            in_axes=(None, None, 0, 0, 0, 0, 0, 0)))
    return jax.jit(jax.vmap(
        lambda lv, c, dw, dc, cells, p, w, ld: kernel(lv, c, dw, dc, cells, p, w, ld, None),
        in_axes=(None, None, None, None, None, 0, 0, 0)))


def _cell_histogram(data, depth: int) -> np.ndarray:
    """Data points per level-``depth`` cell, in Morton order ([2^depth]): from the codes
    of a ``TreeData`` or of a deep enough ``DataTree``, else of the data's points."""
    if isinstance(data, TreeData):
        words, counts = data.words[:, 0], data.counts
    elif isinstance(data, DataTree) and data.depth >= depth:
        words, counts = data.words[:, 0], None
    else:
        words, counts = partition.morton_words(data_points(data), depth)[:, 0], None
    cells = words >> np.uint32(WORD_BITS - depth) if depth else np.zeros(len(words), np.uint32)
    return np.bincount(cells, counts, minlength=2**depth)


def _drop_inert_atoms(points, weights, leaf_depth):
    """Drop the atoms that cannot change a tree: every zero-weight atom when every
    replicate is balanced (PMM-family outputs), else the engine's padding (zero weight at
    the root, whose cell holds every other atom: no tree's node or leaf).

    A balanced replicate's tree (``complete_tree.balanced``) is the complete depth-``r``
    tree whatever zero-weight atoms exist (root padding is ignored, depth-``r`` ones are
    empty leaves), so dropping them changes nothing but the work.  Unbalanced trees keep
    their zero-weight leaves below the root (PrivTree's empty leaves): zero-mass leaves
    matter.
    The new atom count is ``batching.capacity_bucket`` of the most kept atoms of a
    replicate: the first slots where the dropped ones trail (a release's padding), else
    ``core.measure.positive_atoms`` (host NumPy; a slot past a replicate's atoms repeats
    its first with weight 0, in that atom's cell, which changes nothing).
    """
    keep = weights > 0
    if not balanced(weights, leaf_depth):
        keep |= leaf_depth > 0
    width = capacity_bucket(int(keep.sum(axis=1).max(initial=1)))
    if width >= weights.shape[1]:
        return points, weights, leaf_depth
    if not keep[:, width:].any():  # the padding trails every replicate's atoms: a cut
        return points[:, :width], weights[:, :width], leaf_depth[:, :width]
    weights, points, leaf_depth, _ = positive_atoms(weights, points, leaf_depth, width=width,
                                                    keep=keep)
    return points, weights, leaf_depth


def _shifted_data(data: TreeData, shift: np.ndarray):
    """Per-replicate sorted distinct codes of ``(X + U)/2`` [B, n, W], counts [B, n]."""
    per_rep = [
        _unique_codes(np.stack(morton_words_of_sum(np, data.X, u, data.depth, True), -1), data.n)
        for u in shift.astype(np.float64)
    ]
    return np.stack([w for w, _ in per_rep]), np.stack([c for _, c in per_rep])


def tree_w1_atoms(data, points, weights, leaf_depth, shift, metric: str,
                  batch_size: int | None = None) -> TreeW1:
    """Exact tree-metric W1 between data and a batch of synthetic measures (validated
    flat arrays: ``core.measure.check_measure``'s output).

    Args:
      data: a ``TreeData`` (depth ≥ the deepest leaf), or data [n, d] / a ``DataTree``
        prepared here to the deepest leaf.
      points: [B, M, d]; weights: [B, M]; leaf_depth: [B, M]; shift: [B, d] partition
        shifts, or ``None``.
      metric: the ground metric (checked by the router).
      batch_size: replicates per vmapped chunk of the general route (``None``: as many
        as fit ``device_memory()`` under ``bytes_per_replicate``, at most
        ``DEFAULT_BATCH_SIZE``; unshifted trees run on the host kernels of
        ``complete_tree`` and ``leaf_tree``);
        the values do not depend on it.

    Returns:
      ``TreeW1`` of float64 [B] (``levels_w1`` of the replicates' level statistics).

    Raises:
      ValueError: when a ``TreeData`` is shallower than the deepest leaf.
    """
    points, weights, leaf_depth = (np.asarray(a) for a in (points, weights, leaf_depth))
    d = points.shape[-1]
    deepest = int(leaf_depth.max(initial=0))
    if isinstance(data, TreeData) and deepest > data.depth:
        raise ValueError(
            f"X was prepared to depth {data.depth} but out has leaves at depth {deepest}; "
            f"prepare(X, depth>={deepest})"
        )
    levels = None
    if shift is None and deepest <= MAX_DEPTH and balanced(weights[:1], leaf_depth[:1]):
        levels = complete_levels(_cell_histogram(data, deepest), points, weights, leaf_depth)
    if levels is None:
        if not isinstance(data, TreeData):
            data = prepare(data, deepest)
        if shift is None and data.depth <= leaf_tree.MAX_DEPTH:
            levels = leaf_tree.leaf_levels(data, points, weights, leaf_depth,
                                           balanced(weights, leaf_depth))
        else:
            levels = _tree_levels(data, points, weights, leaf_depth, shift, metric, batch_size)
    gap, leaf, valid = levels
    tree, upper = levels_w1({"level_gap": gap, "leaf_mass": leaf}, d, metric)
    return TreeW1(tree, upper, np.asarray(valid))


def _tree_levels(data: TreeData, points, weights, leaf_depth, shift, metric, batch_size):
    """Level statistics of any trees (``_replicate``), on the device in vmapped chunks."""
    points, weights, leaf_depth = _drop_inert_atoms(points, weights, leaf_depth)
    tables = metric_tables(data.depth, points.shape[-1], metric)
    shared = (tables.levels, tables.count)
    if shift is None:
        shared, per_rep = shared + (data.words, data.counts, data.cells), ()
    else:
        per_rep = _shifted_data(data, shift) + (shift,)
    kernel = _chunk_kernel(data.depth, shift is not None)
    arrays = per_rep[:2] + (points, weights, leaf_depth) + per_rep[2:]
    if batch_size is None:
        batch_size = fitting_batch(
            _replicate_bytes(data, weights.shape[1], shift is not None), device_memory(),
            DEFAULT_BATCH_SIZE)
    return chunked(lambda *chunk: kernel(*shared, *chunk), arrays, batch_size)


def bytes_per_replicate(data, atom_bytes: float) -> float:
    """The tree W1's memory model: working memory per replicate measured from its atoms
    (``atom_bytes`` of release), for data ``data`` (an array, ``TreeData`` or
    ``DataTree``); the route from the level statistics needs none."""
    d = data_points(data).shape[1]
    return _replicate_bytes(data, atom_bytes / (4.0 * (d + 2)), False)


def _replicate_bytes(data, atoms: float, shifted: bool) -> float:
    """``ATOM_BYTES`` per atom; a shifted replicate holds its own data codes and their
    level cells (``CELL_BYTES`` per code and level)."""
    if not shifted:
        return ATOM_BYTES * atoms
    n, depth = data_points(data).shape[0], getattr(data, "depth", MAX_BITS_PER_COORDINATE)
    return ATOM_BYTES * atoms + CELL_BYTES * n * (depth + 1)


def levels_w1(levels, d: int, metric: str):
    """Tree W1 and its upper bound from a kernel's level statistics (float64, host).

    ``W_T = Σ_j w_j level_gap[j]`` and ``W_T + ½ Σ_j diam(j) leaf_mass[j]``, summed
    level by level in order, so trailing empty levels change no bit.

    Args:
      levels: ``level_gap`` and ``leaf_mass`` (``core.measure.LEVEL_FIELDS``), [..., L+1].
      d: the data dimension.
      metric: the ground metric.

    Returns:
      ``(tree, upper)``, float64 arrays [...].
    """
    gap = np.asarray(levels["level_gap"], np.float64)
    leaf = np.asarray(levels["leaf_mass"], np.float64)
    depth = gap.shape[-1] - 1
    weight = partition.edge_weights(depth, d, metric)
    half_diam = 0.5 * partition.diameter(np.arange(depth + 1), d, metric)
    tree = np.cumsum(gap * weight, axis=-1)[..., -1]
    return tree, tree + np.cumsum(leaf * half_diam, axis=-1)[..., -1]
