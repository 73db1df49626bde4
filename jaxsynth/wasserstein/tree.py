"""Exact W1 in the tree metric of the mechanism's partition, and a certified upper bound.

``W_T = Σ_{v ≠ root} w_v |μ(Ω_v) − ν(Ω_v)|`` for the trees the mechanisms release: the
balanced trees of PMM and Pruned-PMM (Zare Moayedi, Asadi, Yassaee, Aminian,
"Geometry-Adaptive Mechanisms for Private Synthetic Data", arXiv 2609.33363, §3–§4) and
the unbalanced, possibly shifted trees of PrivTree (Y. He, "Intrinsic-Dimensional
Wasserstein Guarantees for Private Synthetic Measures" §2.3, §5, §6).  A node at level
``j`` hangs from its parent by an edge of weight ``w_j = (diam(j−1) − diam(j))/2``; the
upper bound adds the within-leaf term ``(E_μ diam(leaf(x)) + E_ν diam(leaf(y)))/2``.

Two routes give the same quantity.  ``tree_w1`` measures released atoms: data prepared
once on the host (``prepare``: sorted Morton codes), atoms coded, sorted and merged into
the data order on the device, one segment sum per level with positive weight; the
atoms' cells must form an antichain (else ``TreeW1.valid`` is False).  ``levels_w1``
weighs the level statistics a release kernel reports (``core.measure.LEVEL_FIELDS``,
NOT PRIVATE).  The derivation, the leaf rules, the lemmas behind the merge and the
proof of the upper bound are in ``docs/theory/w1-methods.md``.
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
from jaxsynth.core.batching import capacity_bucket, chunked, fitting_batch
from jaxsynth.core.measure import MAX_BITS_PER_COORDINATE, check_measure
from jaxsynth.core.partition import morton_words_of_sum
from jaxsynth.core.validate import check_data, check_positive_int

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

PIECE_BITS = 24
"""Digits extracted per float-to-integer conversion (exact below 2^24 in float32)."""

DEFAULT_BATCH_SIZE = 64
"""Most replicates per vmapped chunk (fewer where ``bytes_per_replicate`` says so)."""
ENTRY_BYTES = 60
"""Working memory of the kernel per merged entry (a data cell or an atom) of a replicate:
codes, masses, depths, split levels and positions (``_replicate``)."""


@dataclasses.dataclass(frozen=True, eq=False)
class TreeData(PreparedData):
    """A data set prepared once for tree-metric W1 against many synthetic measures.

    Attributes:
      X: [n, d] float64 validated data.
      depth: code depth ``D``; measures with leaves deeper than ``D`` need a new ``prepare``.
      words: [U, W] uint32 sorted distinct depth-``D`` Morton codes, ``W = ceil(D/32)``
        (padded by repeating the last code).
      counts: [U] int32 data points per code (0 on padding).
    """

    X: np.ndarray
    depth: int
    words: np.ndarray
    counts: np.ndarray

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
      a ``TreeData`` to pass to ``tree_w1`` / ``bracket`` / ``js.w1`` instead of ``X``.
    """
    if isinstance(X, DataTree):
        if X.depth >= depth:
            depth = _check_depth(depth, X.points.shape[1])
            words, counts = _unique_codes(_truncate(X.words, depth), size)
            return TreeData(X=X.points, depth=depth, words=words, counts=counts)
        X = X.points
    X = check_data(X, "X")
    depth = _check_depth(depth, X.shape[1])
    if X.shape[0] >= 2**31:
        raise ValueError(f"X has {X.shape[0]} points; at most 2^31 - 1 are supported")
    words, counts = _unique_codes(partition.morton_words(X, depth), size)
    return TreeData(X=X, depth=depth, words=words, counts=counts)


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
    """Permutation sorting codes lexicographically; one packed uint32 key when it fits."""
    m = words[0].shape[0]
    index = jnp.arange(m, dtype=jnp.uint32)
    index_bits = max(1, (m - 1).bit_length())
    if depth + index_bits <= WORD_BITS:
        code = words[0] >> jnp.uint32(WORD_BITS - depth) if depth else jnp.zeros_like(index)
        return (
            jnp.sort((code << jnp.uint32(index_bits)) | index) & ((1 << index_bits) - 1)
        ).astype(jnp.int32)
    return jax.lax.sort((*words, index), num_keys=len(words))[-1].astype(jnp.int32)


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
      value: exact W1 in the partition's tree metric (float32 rounding).
      upper: ``value`` plus the within-leaf term, an upper bound on W1 in the metric
        (float32 rounding; ``js.w1(..., method="tree_upper")`` adds a rounding margin).
      valid: ``False`` where the kept leaves are not an antichain or an unbalanced tree
        left data outside every leaf (then ``value`` and ``upper`` are meaningless).
    """

    value: jax.Array
    upper: jax.Array
    valid: jax.Array


def _replicate(tables, dwords, dcounts, points, weights, leaf_depth, shift, *, depth):
    """Tree W1, upper bound and validity for one replicate (see the module docstring).

    Args:
      dwords: [U, W] uint32 sorted data codes; dcounts: [U] int32 multiplicities.
      points: [M, d] float32; weights: [M]; leaf_depth: [M] int32.
      shift: [d] float32 partition shift ``U``, or ``None``.
      tables: the ground metric (``metric_tables``).
    """
    n_data, m = dcounts.shape[0], weights.shape[0]
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

    # kept_before[b]: kept atoms among sorted atoms 0..b-1; kept_at[r]: index of the r-th.
    kept_before = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(kept, dtype=jnp.int32)])
    kept_at = (
        jnp.zeros(m + 1, jnp.int32).at[jnp.where(kept, kept_before[:-1], m)].set(jnp.arange(m))
    )
    n_kept = kept_before[m]

    def neighbour(ref, b, side):
        """The last kept atom before sorted atom position ``b`` (side 0) or the first at or
        after it (side 1): whether it exists, its split level with codes ``ref``, its depth."""
        rank = kept_before[b] - 1 + side
        atom = kept_at[jnp.clip(rank, 0, m - 1)]
        split = _split_level(ref, tuple(w[atom] for w in awords))
        return (rank >= 0) & (rank < n_kept), split, lvl[atom]

    # Antichain: each kept atom against the previous kept atom.
    exists, split, level = neighbour(awords, jnp.arange(m), 0)
    nested = kept & exists & (split >= jnp.minimum(level, lvl)) & (level != lvl)

    # Merge the sorted data into the atom order: atom i precedes data k iff rank_i <= k.
    dwords = tuple(dwords[:, w] for w in range(dwords.shape[1]))
    rank = _count_less(dwords, awords)
    before = jnp.cumsum(jnp.zeros(n_data + 1, jnp.int32).at[rank].add(1))[:n_data]
    exists, split, left_level = neighbour(dwords, before, 0)
    in_left = exists & (split >= left_level)
    exists, split, right_level = neighbour(dwords, before, 1)
    in_right = exists & (split >= right_level)
    data_depth = jnp.where(in_left, left_level, jnp.where(in_right, right_level, top))
    orphan = ~in_left & ~in_right & (dcounts > 0)
    valid = ~jnp.any(nested) & (balanced | ~jnp.any(orphan))

    n = jnp.sum(dcounts).astype(jnp.float32)
    within = 0.5 * (
        jnp.sum(dcounts * tables.diam[jnp.clip(data_depth, 0, depth)]) / n
        + jnp.sum(jnp.where(kept, wt, 0.0) * tables.diam[jnp.clip(lvl, 0, depth)])
    )

    # Merged order: data k at k + before[k], atom i at i + rank[i].
    size = n_data + m
    source = (
        jnp.zeros(size, jnp.int32)
        .at[jnp.arange(n_data) + before]
        .set(jnp.arange(n_data))
        .at[jnp.arange(m) + rank]
        .set(n_data + jnp.arange(m))
    )
    mwords = tuple(jnp.concatenate([dw, aw])[source] for dw, aw in zip(dwords, awords))
    mass = jnp.concatenate([dcounts / n, -wt])[source]
    entry_depth = jnp.concatenate([data_depth, jnp.where(kept, lvl, -1)])[source]
    msplit = jnp.concatenate(
        [jnp.array([-1]), _split_level(tuple(w[:-1] for w in mwords), tuple(w[1:] for w in mwords))]
    )

    def level_term(i, total):  # only levels with w_j > 0 (ℓ∞ skips d - 1 of every d)
        j = tables.levels[i]
        cell = jnp.cumsum(msplit < j) - 1
        cell_mass = jax.ops.segment_sum(
            jnp.where(entry_depth >= j, mass, 0.0), cell, size, indices_are_sorted=True
        )
        return total + tables.weight[i] * jnp.sum(jnp.abs(cell_mass))

    value = jax.lax.fori_loop(0, tables.count, level_term, jnp.zeros((), jnp.float32))
    scale = 1.0 if shift is None else 2.0
    return TreeW1(scale * value, scale * (value + within), valid)


@functools.cache
def _chunk_kernel(depth: int, shifted: bool):
    """Jitted ``_replicate`` vmapped over a chunk; data shared unless shifted."""
    kernel = functools.partial(_replicate, depth=depth)
    if shifted:
        return jax.jit(jax.vmap(kernel, in_axes=(None, 0, 0, 0, 0, 0, 0)))
    return jax.jit(
        jax.vmap(
            lambda t, dw, dc, p, w, lv: kernel(t, dw, dc, p, w, lv, None),
            in_axes=(None, None, None, 0, 0, 0),
        )
    )


def compact_atoms(points, weights, leaf_depth, keep):
    """Move the atoms marked ``keep`` [B, M] to the front and cut the padding.

    The new atom count is ``frontier.capacity_bucket`` of the largest kept count (so
    sweeps see few distinct shapes); slots beyond a replicate's kept atoms repeat its
    first kept atom with weight 0.  Returns the arrays unchanged when nothing is saved.
    """
    count = keep.sum(axis=1)
    size = capacity_bucket(int(count.max(initial=1)))
    if size >= weights.shape[1]:
        return points, weights, leaf_depth
    order = np.argsort(~keep, axis=1, kind="stable")[:, :size]
    points = np.take_along_axis(points, order[..., None], axis=1)
    weights = np.take_along_axis(weights, order, axis=1)
    leaf_depth = np.take_along_axis(leaf_depth, order, axis=1)
    pad = np.arange(size)[None] >= count[:, None]
    return (
        np.where(pad[..., None], points[:, :1], points),
        np.where(pad, 0.0, weights).astype(weights.dtype),
        np.where(pad, leaf_depth[:, :1], leaf_depth),
    )


def _drop_inert_atoms(points, weights, leaf_depth):
    """Drop zero-weight atoms when every replicate is balanced (PMM-family outputs).

    A replicate is balanced here when its positive atoms share one depth ``r`` and its
    zero-weight atoms sit at depth ``r`` or at the root (engine padding).  Its
    tree is then the complete depth-``r`` tree whatever zero-weight atoms exist (root
    padding is ignored, depth-``r`` ones are empty leaves), so dropping them changes
    nothing but the work.  Unbalanced trees keep every atom: zero-mass leaves matter.
    """
    positive = weights > 0
    top = np.max(np.where(positive, leaf_depth, -1), axis=1, keepdims=True)
    level_ok = np.where(positive, leaf_depth == top, (leaf_depth == top) | (leaf_depth == 0))
    if not level_ok.all():
        return points, weights, leaf_depth
    return compact_atoms(points, weights, leaf_depth, positive)


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
      batch_size: replicates per vmapped chunk (``None``: as many as fit
        ``engine.device_memory()`` under ``bytes_per_replicate``, at most
        ``DEFAULT_BATCH_SIZE``); the values do not depend on it.

    Returns:
      ``TreeW1`` of [B] jax arrays.

    Raises:
      ValueError: when a ``TreeData`` is shallower than the deepest leaf.
    """
    d = points.shape[-1]
    deepest = int(leaf_depth.max(initial=0))
    if not isinstance(data, TreeData):
        data = prepare(data, deepest)
    elif deepest > data.depth:
        raise ValueError(
            f"X was prepared to depth {data.depth} but out has leaves at depth {deepest}; "
            f"prepare(X, depth>={deepest})"
        )
    points, weights, leaf_depth = _drop_inert_atoms(points, weights, leaf_depth)
    shared = (metric_tables(data.depth, d, metric),)
    if shift is None:
        shared, per_rep = shared + (jnp.asarray(data.words), jnp.asarray(data.counts)), ()
    else:
        per_rep = _shifted_data(data, shift) + (shift,)
    kernel = _chunk_kernel(data.depth, shift is not None)
    arrays = per_rep[:2] + (points, weights, leaf_depth) + per_rep[2:]
    if batch_size is None:
        from jaxsynth.engine import device_memory

        batch_size = fitting_batch(_replicate_bytes(data.n, weights.shape[1], shift is not None),
                                   device_memory(), DEFAULT_BATCH_SIZE)
    return TreeW1(*chunked(lambda *chunk: kernel(*shared, *chunk), arrays, batch_size))


def bytes_per_replicate(data, atom_bytes: float) -> float:
    """The tree W1's memory model: working memory per replicate measured from its atoms
    (``atom_bytes`` of release), for data ``data`` (an array, ``TreeData`` or
    ``DataTree``); the route from the level statistics needs none."""
    d = data_points(data).shape[1]
    return _replicate_bytes(data_points(data).shape[0], atom_bytes / (4.0 * (d + 2)), False)


def _replicate_bytes(n: int, atoms: float, shifted: bool) -> float:
    """``ENTRY_BYTES`` per merged entry; a shifted replicate holds its own data codes."""
    return ENTRY_BYTES * (n + atoms) * (2 if shifted else 1)


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
