"""Exact W1 in the tree metric of the mechanism's partition, and a certified upper bound.

Implements SPEC §7 ("Exact tree W1"), for the trees of SPEC §2–§5 (seed 001 §3–§4;
seed 000 §2.3, §5, §6).

**The tree metric.**  The mechanism's tree ``T`` is the set of its leaf cells and all
their ancestors in the cyclic binary partition (SPEC §0).  A node ``v ≠ root`` at level
``j`` is joined to its parent by an edge of weight
``w_j = (diam(j-1) - diam(j)) / 2`` (ℓ∞ or ℓ2 cell diameters, ``partition.diameter``).
Path lengths telescope: two leaves at depths ``a`` and ``b`` whose lowest common ancestor
is at level ``l`` are ``diam(l) - (diam(a) + diam(b))/2`` apart (``diam(l) - diam(r)``
in a depth-``r`` balanced tree).  For any two measures carried by the nodes of ``T``,
the transport cost in this metric is (Kantorovich on a tree)

    W_T(μ, ν) = Σ_{v ≠ root} w_v |μ(Ω_v) − ν(Ω_v)|.

Here ``μ`` is the data (weights ``1/n``) and ``ν = Σ_a w_a δ_{y_a}`` the synthetic
measure; each atom ``y_a`` sits at its leaf cell (level ``leaf_depth[a]``) and each data
point ``x`` at the leaf of ``T`` that contains it.

**Which cells are leaves.**  The measure's atoms define the tree:

* Zero-weight padding: an atom of weight 0 whose cell strictly contains another atom's
  cell is ignored (``batching.pad_atoms`` pads with ``leaf_depth = 0``, the root cell,
  which contains every cell).  All other atoms, zero weight included, are *kept*: a
  PrivTree leaf with zero released mass is still a leaf.
* The kept atoms' cells must form an antichain (two cells are equal or disjoint).
  Otherwise the replicate is flagged invalid (``TreeW1.valid``); ``js.w1`` raises.
* A data point lies in at most one kept cell (antichain); that cell is its leaf.  A data
  point in no kept cell (an *orphan*) is placed in its level-``r`` cell, ``r`` the
  largest kept leaf depth.  For balanced trees (all kept atoms at depth ``r``: the
  PMM family) this is exactly the complete depth-``r`` tree, whose empty leaves carry
  no atom.  For unbalanced trees (PrivTree) every leaf that can hold data carries an
  atom, so an orphan means a malformed output and the replicate is flagged invalid.
  Under the antichain property the orphans' level-``r`` cells are disjoint from every
  kept cell (a kept cell meeting one would contain it, hence the orphan), so the leaves
  still form an antichain and ``T`` is a tree.

**Algorithm** (per replicate, ``O((n + M)·D + (n + M) log(n + M))``, no ``n × M``
matrix).  Data are prepared once on the host (``prepare``): exact float64 Morton codes to
depth ``D`` (``partition.morton_words``), sorted, with duplicates merged into counts.  On
the device: the atoms' Morton codes are computed from their float32 coordinates (exact,
see ``morton_words_of_sum``), the atoms sorted, merged into the data order by a binary
search, and the *split level* of consecutive entries (leading zeros of the xor of their
codes) computed.  A level-``j`` cell is a maximal run of consecutive entries with split
level ``≥ j``.  Then

* a data point's leaf is found from its two neighbouring kept atoms in merged order:
  *Lemma.* if the kept cells form an antichain and ``x`` lies in a kept cell ``L``
  then the nearest kept atom before or after ``x`` lies in ``L``.  *Proof.* ``L`` is an
  interval of the Morton order containing ``x`` and at least one kept atom ``a``; the
  nearest kept atom on ``a``'s side of ``x`` lies between ``x`` and ``a``, hence in
  ``L``.  Conversely a neighbour ``b`` with ``split(x, b) ≥ leaf_depth[b]`` contains
  ``x``.  So ``x``'s leaf is the neighbour whose cell contains it, or none (orphan);
* the antichain test needs only consecutive kept atoms: if ``cell(a) ⊋ cell(b)``, walk
  from ``a`` to ``b`` through the kept atoms between them (all inside ``cell(a)``, an
  interval): the first pair that is neither equal nor disjoint is nested;
* level ``j`` contributes ``w_j Σ_runs |Σ_{e in run, depth_e ≥ j} s_e|`` with signed
  masses ``s = count/n`` (data) and ``−w_a`` (atoms).  Entries whose leaf is shallower
  than ``j`` are excluded: they are not below any level-``j`` node of ``T`` (under the
  antichain property such an entry is alone in its level-``j`` run).  Run sums are
  segment sums (each rounded relative to its own cell's mass, never a difference of
  global prefix sums).  For ℓ∞ only levels ``j ≡ 0 (mod d)`` have ``w_j > 0``.

**Upper bound.**  ``W1 ≤ W_T + (E_μ diam(leaf(x)) + E_ν diam(leaf(y)))/2``.  *Proof.*
Take an optimal coupling ``π`` for ``W_T``.  For ``x`` in leaf ``A`` and ``y`` in leaf
``B`` both lie in the lowest common ancestor cell, so ``‖x − y‖ ≤ diam(lca)
= d_T(A, B) + (diam(A) + diam(B))/2`` (also when ``A = B``, where ``d_T = 0``).
Integrating against ``π``, whose marginals are ``μ`` and ``ν``, gives the bound.  For a
balanced depth-``r`` tree the extra term is ``diam(r)`` (SPEC §7).  It is computed per
leaf (data and atoms weighted by their mass), which is never worse than the largest
diameter among occupied leaves.

**Shifted partitions** (PrivTree ``shift=True``, seed 000 §6).  When ``out.info`` has
``"shift"`` (``U`` [..., d] in [0,1]^d), the tree is the cyclic partition of
``[0,2]^d`` translated by ``−U``.  The map ``x ↦ (x + U)/2`` sends it onto the partition
of ``[0,1]^d`` and scales every distance by ``1/2``; so codes are computed from
``(x + U)/2`` and both the tree distance and the upper bound are multiplied by 2.  The
data codes then depend on ``U`` and are computed per replicate on the host (float64,
exact digits of ``x + U``); ``x_c + U_c = 2`` belongs to the last cell.

Numerics: codes and leaf assignment are exact; masses are float32 (each level is a sum
of non-negative per-cell terms, each cell's signed mass summed within the cell), so the
value carries float32 rounding only (measured ≲ 1e-6 relative against float64 POT).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth import partition
from jaxsynth._validate import check_data
from jaxsynth.measure import SyntheticMeasure

__all__ = ["TreeData", "TreeW1", "prepare", "tree_w1", "morton_words_of_sum", "check_measure"]

WORD_BITS = partition.WORD_BITS
MAX_BITS_PER_COORDINATE = 100
"""Digits per coordinate supported (float32 ``x·2^k`` must not overflow)."""

DEFAULT_BATCH_SIZE = 64
"""Replicates per vmapped chunk (memory ~ batch_size × (n + M) × 60 bytes)."""


@dataclasses.dataclass(frozen=True, eq=False)
class TreeData:
    """A data set prepared once for tree-metric W1 against many synthetic measures.

    Attributes:
      X: [n, d] float64 validated data.
      depth: code depth ``D``; measures with leaves deeper than ``D`` need a new ``prepare``.
      words: [U, W] uint32 sorted distinct depth-``D`` Morton codes, ``W = ceil(D/32)``.
      counts: [U] int32 data points per code.
    """

    X: np.ndarray
    depth: int
    words: np.ndarray
    counts: np.ndarray

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]


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


def _unique_codes(words: np.ndarray):
    """Sorted distinct rows of ``words`` [n, W] and their multiplicities."""
    uniq, counts = np.unique(words, axis=0, return_counts=True)
    return uniq.astype(np.uint32), counts.astype(np.int32)


def prepare(X, depth: int) -> TreeData:
    """Validate ``X`` and compute its sorted depth-``depth`` Morton codes (host, once).

    Args:
      X: [n, d] data inside [0,1]^d.
      depth: code depth ``D ≥`` the deepest leaf of every measure it will be used with.

    Returns:
      a ``TreeData`` to pass to ``tree_w1`` / ``bracket`` / ``js.w1`` instead of ``X``.
    """
    X = check_data(X, "X")
    depth = _check_depth(depth, X.shape[1])
    if X.shape[0] >= 2**31:
        raise ValueError(f"X has {X.shape[0]} points; at most 2^31 - 1 are supported")
    words, counts = _unique_codes(partition.morton_words(X, depth))
    return TreeData(X=X, depth=depth, words=words, counts=counts)


def morton_words_of_sum(xp, x, u, depth: int, halve: bool):
    """Exact Morton words of the real points ``z = (x + u) / 2^halve`` (SPEC §0 digits).

    ``x + u`` is computed as ``s + e`` exactly (Knuth's TwoSum).  With ``g = s·2^k`` (an
    exact scaling), ``⌊(s + e)·2^k⌋ = ⌊g⌋ + [g integer]·⌊e·2^k⌋``: if ``g`` is not an
    integer, ``s`` has a bit below ``2^-k`` so its ulp is ``< 2^-k`` and
    ``|e| ≤ ulp(s)/2`` cannot cross the integer nearest to ``g``.  Coordinates with
    ``s + e ≥ 2^halve`` (``z_c ≥ 1``) get all ones, like ``x = 1`` in SPEC §0.  Works
    for NumPy float64 on the host and JAX float32 on the device alike.

    Args:
      xp: ``numpy`` or ``jax.numpy``.
      x: [..., d] float points.
      u: [d] (or broadcastable) shift, or 0.
      depth: number of Morton bits.
      halve: map ``x + u ∈ [0,2]^d`` to ``[0,1]^d`` (shifted partitions).

    Returns:
      tuple of ``W`` uint32 arrays [...], MSB-first, ``W = ceil(depth/32)``.
    """
    d = x.shape[-1]
    s = x + u
    bb = s - x
    e = (x - (s - bb)) + (u - bb)
    top = 2.0 if halve else 1.0
    full = (s > top) | ((s == top) & (e >= 0))
    words = []
    for w in range(n_words(depth)):
        word = xp.zeros(x.shape[:-1], xp.uint32)
        for t in range(w * WORD_BITS, min(depth, (w + 1) * WORD_BITS)):
            c, k = t % d, t // d + 1 - int(halve)
            g = xp.ldexp(s[..., c], k)
            fg = xp.floor(g)
            low = xp.mod(xp.floor(xp.ldexp(e[..., c], k)), 2.0)
            bit = xp.mod(xp.fmod(fg, 2.0) + xp.where(g == fg, low, 0.0), 2.0)
            bit = xp.where(full[..., c], 1.0, bit)
            word = word | (bit.astype(xp.uint32) << xp.uint32(WORD_BITS - 1 - t % WORD_BITS))
        words.append(word)
    return tuple(words)


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
        return (jnp.sort((code << jnp.uint32(index_bits)) | index) & ((1 << index_bits) - 1)).astype(
            jnp.int32
        )
    return jax.lax.sort((*words, index), num_keys=len(words))[-1].astype(jnp.int32)


def _previous_true(flags):
    """Index of the last ``True`` strictly before each position (-1 if none)."""
    idx = jnp.where(flags, jnp.arange(flags.shape[0]), -1)
    return jnp.concatenate([jnp.array([-1]), jax.lax.cummax(idx)[:-1]])


def _next_true(flags):
    """Index of the first ``True`` strictly after each position (``len`` if none)."""
    size = flags.shape[0]
    idx = jnp.where(flags, jnp.arange(size), size)
    return jnp.concatenate([jax.lax.cummin(idx, reverse=True)[1:], jnp.array([size])])


def _level_weights(depth: int, d: int, metric: str):
    """Diameters [D+1] and edge weights ``w_j = (diam(j-1) - diam(j))/2``, ``j = 1..D``."""
    diam = partition.diameter(np.arange(depth + 1), d, metric)
    return diam, (diam[:-1] - diam[1:]) / 2


class TreeW1(NamedTuple):
    """Tree-metric W1 of a (batch of) synthetic measure(s); arrays of the batch shape.

    Attributes:
      value: exact W1 in the partition's tree metric (float32 rounding).
      upper: ``value`` plus the within-leaf term, an upper bound on W1 in the metric.
      valid: ``False`` where the leaves are not an antichain or an unbalanced tree left
        data outside every leaf (then ``value``/``upper`` are meaningless).
    """

    value: jax.Array
    upper: jax.Array
    valid: jax.Array


def _replicate(dwords, dcounts, points, weights, leaf_depth, shift, *, depth, metric):
    """Tree W1, upper bound and validity for one replicate (see the module docstring)."""
    d = points.shape[-1]
    n_data, m = dcounts.shape[0], weights.shape[0]
    diam, edge = _level_weights(depth, d, metric)
    scale = 1.0 if shift is None else 2.0
    awords = morton_words_of_sum(jnp, points, 0.0 if shift is None else shift, depth, shift is not None)
    perm = _sort_codes(awords, depth)
    awords = tuple(w[perm] for w in awords)
    wt, lvl = weights[perm], leaf_depth[perm]

    # Zero-weight atoms whose cell strictly contains another atom's cell are padding.
    split = _split_level(tuple(w[:-1] for w in awords), tuple(w[1:] for w in awords))
    split_prev = jnp.concatenate([jnp.array([-1]), split])  # with atom i-1
    split_next = jnp.concatenate([split, jnp.array([-1])])  # with atom i+1
    lvl_prev = jnp.concatenate([lvl[:1], lvl[:-1]])
    lvl_next = jnp.concatenate([lvl[1:], lvl[-1:]])
    same_cell = (lvl == lvl_prev) & (split_prev >= lvl)
    holds_deeper = ((split_prev >= lvl) & (lvl_prev > lvl)) | ((split_next >= lvl) & (lvl_next > lvl))
    run = jnp.cumsum(~same_cell) - 1
    holds_deeper = jax.ops.segment_max(holds_deeper, run, m, indices_are_sorted=True)[run]
    kept = (wt > 0) | ~holds_deeper
    top = jnp.max(jnp.where(kept, lvl, -1))
    balanced = jnp.all(~kept | (lvl == top))

    def split_with(ref, index, size):  # split level with entry ``index`` of the sorted atoms
        inside = (index >= 0) & (index < size)
        other = tuple(w[jnp.clip(index, 0, size - 1)] for w in awords)
        return jnp.where(inside, _split_level(ref, other), -1)

    prev_kept = _previous_true(kept)
    s_prev = split_with(awords, prev_kept, m)
    l_prev = lvl[jnp.maximum(prev_kept, 0)]
    nested = kept & (prev_kept >= 0) & (s_prev >= jnp.minimum(lvl, l_prev)) & (lvl != l_prev)

    # Merge the data (sorted) into the atom order: atom i goes before data k iff rank_i <= k.
    dwords = tuple(dwords[:, w] for w in range(dwords.shape[1]))
    rank = _count_less(dwords, awords)
    before = jnp.cumsum(jnp.zeros(n_data + 1, jnp.int32).at[rank].add(1))[:n_data]
    # Kept neighbours of each data point: last kept atom with index < before, first >= before.
    last_kept = jnp.concatenate([jnp.array([-1]), jax.lax.cummax(jnp.where(kept, jnp.arange(m), -1))])
    first_kept = jnp.concatenate([jax.lax.cummin(jnp.where(kept, jnp.arange(m), m), reverse=True), jnp.array([m])])
    left, right = last_kept[before], first_kept[before]
    in_left = (left >= 0) & (split_with(dwords, left, m) >= lvl[jnp.maximum(left, 0)])
    in_right = (right < m) & (split_with(dwords, right, m) >= lvl[jnp.minimum(right, m - 1)])
    data_depth = jnp.where(
        in_left, lvl[jnp.maximum(left, 0)], jnp.where(in_right, lvl[jnp.minimum(right, m - 1)], top)
    )
    orphan = ~in_left & ~in_right & (dcounts > 0)
    valid = ~jnp.any(nested) & (balanced | ~jnp.any(orphan))

    n = jnp.sum(dcounts).astype(jnp.float32)
    diam32 = jnp.asarray(diam, jnp.float32)
    within = 0.5 * (
        jnp.sum(dcounts * diam32[jnp.clip(data_depth, 0, depth)]) / n
        + jnp.sum(jnp.where(kept, wt, 0.0) * diam32[jnp.clip(lvl, 0, depth)])
    )

    # Merged order: data k at k + before[k], atom i at i + rank[i].
    size = n_data + m
    source = (
        jnp.zeros(size, jnp.int32)
        .at[jnp.arange(n_data) + before].set(jnp.arange(n_data))
        .at[jnp.arange(m) + rank].set(n_data + jnp.arange(m))
    )
    mwords = tuple(jnp.concatenate([dw, aw])[source] for dw, aw in zip(dwords, awords))
    mass = jnp.concatenate([dcounts / n, -wt])[source]
    entry_depth = jnp.concatenate([data_depth, jnp.where(kept, lvl, -1)])[source]
    msplit = _split_level(tuple(w[:-1] for w in mwords), tuple(w[1:] for w in mwords))
    value = jnp.zeros((), jnp.float32)
    for j in range(1, depth + 1):
        if edge[j - 1] <= 0:
            continue
        start = jnp.concatenate([jnp.array([True]), msplit < j])
        cell = jnp.cumsum(start) - 1
        cell_mass = jax.ops.segment_sum(
            jnp.where(entry_depth >= j, mass, 0.0), cell, size, indices_are_sorted=True
        )
        value = value + jnp.float32(edge[j - 1]) * jnp.sum(jnp.abs(cell_mass))
    return TreeW1(scale * value, scale * (value + within), valid)


@functools.partial(jax.jit, static_argnames=("depth", "metric", "batch_size"))
def _tree_batch(dwords, dcounts, points, weights, leaf_depth, shift, *, depth, metric, batch_size):
    """``_replicate`` over a flat batch [B, ...]; data shared unless ``shift`` is given."""
    kernel = functools.partial(_replicate, depth=depth, metric=metric)
    if shift is None:
        return jax.lax.map(
            lambda rep: kernel(dwords, dcounts, *rep, None),
            (points, weights, leaf_depth),
            batch_size=batch_size,
        )
    return jax.lax.map(
        lambda rep: kernel(*rep), (dwords, dcounts, points, weights, leaf_depth, shift), batch_size=batch_size
    )


def check_measure(out, d: int, name: str = "out"):
    """Host checks of a ``SyntheticMeasure`` against data dimension ``d``.

    Returns:
      (points [B, M, d] float32, weights [B, M] float32, leaf_depth [B, M] int32,
      shift [B, d] float64 or None) as NumPy arrays with the batch axes flattened.
    """
    if not isinstance(out, SyntheticMeasure):
        raise ValueError(f"{name} must be a jaxsynth.SyntheticMeasure; got {type(out).__name__}")
    points = np.asarray(out.points, np.float32)
    weights = np.asarray(out.weights, np.float32)
    leaf_depth = np.asarray(out.leaf_depth)
    if points.ndim < 2 or points.shape[-1] != d:
        raise ValueError(f"{name}.points must have shape (..., M, {d}) to match X; got {points.shape}")
    if weights.shape != points.shape[:-1] or leaf_depth.shape != weights.shape:
        raise ValueError(
            f"{name}.weights {weights.shape} and {name}.leaf_depth {leaf_depth.shape} must "
            f"have shape {points.shape[:-1]}"
        )
    if not np.all(np.isfinite(points)) or points.min(initial=0) < 0 or points.max(initial=0) > 1:
        raise ValueError(f"{name}.points must be finite and inside [0,1]^d")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError(f"{name}.weights must be finite and non-negative")
    if not np.issubdtype(leaf_depth.dtype, np.integer) or np.any(leaf_depth < 0):
        raise ValueError(f"{name}.leaf_depth must hold non-negative integers")
    shift = out.info.get("shift") if isinstance(out.info, dict) else None
    batch = points.shape[:-2]
    if shift is not None:
        shift = np.asarray(shift, np.float64)
        if shift.shape != batch + (d,) or not np.all((shift >= 0) & (shift <= 1)):
            raise ValueError(f"{name}.info['shift'] must have shape {batch + (d,)} with values in [0, 1]")
        shift = shift.reshape(-1, d)
    m = points.shape[-2]
    return (
        points.reshape(-1, m, d),
        weights.reshape(-1, m),
        leaf_depth.astype(np.int32).reshape(-1, m),
        shift,
    )


def _shifted_data(data: TreeData, shift: np.ndarray):
    """Per-replicate sorted distinct codes of ``(X + U)/2``, padded to a common length."""
    per_rep = [
        _unique_codes(np.stack(morton_words_of_sum(np, data.X, u, data.depth, True), axis=-1))
        for u in shift
    ]
    size = max(c.shape[0] for _, c in per_rep)
    words = np.stack([np.concatenate([w, np.repeat(w[-1:], size - len(w), 0)]) for w, _ in per_rep])
    counts = np.stack([np.pad(c, (0, size - len(c))) for _, c in per_rep])
    return words, counts


def tree_w1(data, out, metric: str = "linf", *, batch_size: int = DEFAULT_BATCH_SIZE) -> TreeW1:
    """Exact tree-metric W1 between data and a (batch of) synthetic measure(s).

    Args:
      data: a ``TreeData`` from ``prepare`` (depth ≥ the deepest leaf of ``out``), or
        data [n, d], prepared on the fly to ``out``'s deepest leaf.
      out: ``SyntheticMeasure`` with points [..., M, d]; ``out.info["shift"]`` [..., d]
        marks a shifted partition.
      metric: ``"linf"`` or ``"l2"`` cell diameters.
      batch_size: replicates per vmapped chunk (memory control; results do not depend on it).

    Returns:
      ``TreeW1`` of jax arrays with shape ``out.batch_shape``.

    Implements SPEC §7 (exact tree W1 and its upper bound).
    """
    if metric not in ("linf", "l2"):
        raise ValueError(f"metric must be 'linf' or 'l2'; got {metric!r}")
    d = data.d if isinstance(data, TreeData) else check_data(data, "X").shape[1]
    points, weights, leaf_depth, shift = check_measure(out, d)
    deepest = int(leaf_depth.max(initial=0))
    if not isinstance(data, TreeData):
        data = prepare(data, deepest)
    elif deepest > data.depth:
        raise ValueError(
            f"X was prepared to depth {data.depth} but out has leaves at depth {deepest}; "
            f"prepare(X, depth>={deepest})"
        )
    if shift is None:
        dwords, dcounts = data.words, data.counts
    else:
        dwords, dcounts = _shifted_data(data, shift)
    result = _tree_batch(
        jnp.asarray(dwords),
        jnp.asarray(dcounts),
        jnp.asarray(points),
        jnp.asarray(weights),
        jnp.asarray(leaf_depth),
        None if shift is None else jnp.asarray(shift, jnp.float32),
        depth=data.depth,
        metric=metric,
        batch_size=int(batch_size),
    )
    return TreeW1(*(r.reshape(out.batch_shape) for r in result))
