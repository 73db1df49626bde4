"""The frontier engine shared by the sparse mechanisms.

Its cost follows the visited nodes, the quantity bounded in the runtime analysis of
[ZAYA26] §A.9.  A frontier is the set of tree nodes of one level that a replicate still
expands, held in fixed-capacity slots and processed in *pieces* of ``P`` consecutive
slots: every parent is split into its two children (``expand``; a piece at a time,
``expand_piece``), the mechanism decides
each child's fate, and the kept children are appended, order kept, to the next level
(``compact`` then ``write``); a node that keeps exactly one child can be stepped in place
(``descend``).  A level with ``A`` nodes costs ``⌈A/P⌉`` pieces, never the capacity.

Kernels run under the engine's ``vmap`` over replicates; loop trip counts are batch
maxima (``batch_max``), the two levels in flight live in two buffers that swap roles
(``level_pairs``), and node arrays have the node axis last.  ``barrier`` makes XLA's CPU
fuser compute a shared producer once instead of copying it into every consumer.  The
layout in full: the documentation's theory page "Noise and random words".
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxsynth.core import keys as K
from jaxsynth.core.batching import capacity_bucket

REPLICATES = "replicates"
"""Name of the engine's vmap axis over replicates."""


def batch_max(x):
    """Maximum of ``x`` over the replicates of the running batch (unbatched result)."""
    return jax.lax.pmax(x, REPLICATES)


def barrier(tree, token):
    """``tree`` unchanged, computed once: a conditional on the runtime-true ``token``."""
    return jax.lax.cond(
        token, lambda t: t, lambda t: jax.tree_util.tree_map(jnp.zeros_like, t), tree
    )


def fixed_sum(x, axis: int = -1):
    """Sum along ``axis`` in a fixed pairwise order (static halvings, zero padding).

    XLA may order a reduction differently for different batch sizes, which moves a float
    sum in its last bits; elementwise additions in an order fixed by the code keep every
    replicate's value the same whatever its chunk (``engine`` promise).
    """
    return fixed_reduce(x, jnp.add, 0, axis)


def fixed_reduce(x, op, fill, axis: int = -1):
    """``op`` (associative, elementwise, e.g. ``jnp.add``, ``jnp.maximum``,
    ``jnp.logical_and``) along ``axis`` in static halvings, padded with ``fill`` (its
    identity).  The order is fixed by the code; on a CPU these elementwise passes also
    run several times faster than XLA's reduction along a long last axis."""
    x = jnp.moveaxis(x, axis, -1)
    size = capacity_bucket(x.shape[-1], per_octave=1, minimum=1)
    x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, size - x.shape[-1])], constant_values=fill)
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = op(x[..., :half], x[..., half:])
    return x[..., 0]


def pieces(count, size: int):
    """Trip count covering ``[0, count)`` in pieces of ``size``, the batch maximum."""
    return batch_max((count + size - 1) // size)


class Nodes(NamedTuple):
    """Frontier nodes; every array has the node axis last.

    Attributes:
      lo, hi: [N] int32 data range in the sorted data (``lo = hi`` for ghost cells).
      key0, key1: [N] uint32 chunk key (``keys`` module docstring).
      path: [W, N] uint32 path bits, 32 levels per word, left-aligned.
      extra: mechanism fields (a pytree of [..., N] arrays), e.g. the PMM mass.
    """

    lo: jax.Array
    hi: jax.Array
    key0: jax.Array
    key1: jax.Array
    path: jax.Array
    extra: object


def path_words(max_depth: int) -> int:
    """Words ``W`` of paths of up to ``max_depth`` levels.

    A node at level ``32t`` owns the (empty) word ``t``, so ``⌊max_depth/32⌋ + 1`` words.
    """
    return max_depth // K.LEVELS_PER_CHUNK + 1


def root(key, n, max_depth: int, extra) -> Nodes:
    """The root node (level 0): all ``n`` points, the replicate key, the empty path."""
    return Nodes(
        lo=jnp.zeros(1, jnp.int32), hi=jnp.full(1, n, jnp.int32),
        key0=key[0][None], key1=key[1][None],
        path=jnp.zeros((path_words(max_depth), 1), jnp.uint32), extra=extra,
    )


def path_bit(path, t):
    """Bit ``b_t`` [N] (uint32, 0 or 1) of nodes with paths [W, N] (``t`` may be traced)."""
    word = path[t // K.LEVELS_PER_CHUNK]
    return (word >> (31 - t % K.LEVELS_PER_CHUNK).astype(jnp.uint32)) & jnp.uint32(1)


def _new_chunk(level):
    return level % K.LEVELS_PER_CHUNK == K.LEVELS_PER_CHUNK - 1


def child_keys(key, word, level, bit):
    """Chunk key and current path word of the child ``bit`` of nodes at ``level``.

    ``word`` is the parents' current path word; a child at level ``32(t+1)`` keeps the
    completed word in its path and starts a new chunk (``keys.next_chunk_key``).
    """
    full = K.child_word(word, level, bit)
    new_key = jax.lax.cond(
        _new_chunk(level), lambda: K.next_chunk_key(key, full), lambda: key
    )
    return new_key, full


def expand(parents: Nodes, level, boundary):
    """Split level-``level`` parents [N] into their children [2N] (planar: bit 0, then bit 1).

    Args:
      parents: the nodes to split.
      level: their level (unbatched traced int32).
      boundary: ``(lo, hi, level) -> p``, the child boundary in the sorted data.

    Returns:
      ``(children, counts, words)``: the children (``extra`` = None), their true counts
      [2N] int32, and the parents' expansion words ``(w0, w1)`` [N] (``keys.EXPAND``).
    """
    lo, hi, key = parents.lo, parents.hi, (parents.key0, parents.key1)
    row = level // K.LEVELS_PER_CHUNK
    word = parents.path[row]
    p = boundary(lo, hi, level)
    w0, w1 = K.draw(key, K.EXPAND, level, word)
    (key0, word0), (key1, word1) = (child_keys(key, word, level, b) for b in (0, 1))
    path = jnp.concatenate([parents.path.at[row].set(word0), parents.path.at[row].set(word1)], -1)
    children = Nodes(
        lo=jnp.concatenate([lo, p]), hi=jnp.concatenate([p, hi]),
        key0=jnp.concatenate([key0[0], key1[0]]), key1=jnp.concatenate([key0[1], key1[1]]),
        path=path, extra=None,
    )
    return children, jnp.concatenate([p - lo, hi - p]), (w0, w1)


class Piece(NamedTuple):
    """One piece of a frontier level, split into children (``expand_piece``).

    Attributes:
      parents: the piece's nodes [P] as read (``extra`` included).
      children: their children [2P], bit 0 then bit 1 (``expand``; ``extra`` None).
      counts: [2P] int32 true counts of the children.
      words: ``(w0, w1)`` [P] the parents' expansion words.
      valid: [2P] the children of the level's real nodes, on a live level.
    """

    parents: Nodes
    children: Nodes
    counts: jax.Array
    words: tuple
    valid: jax.Array


def expand_piece(src, i, size: int, count, live, level, boundary) -> Piece:
    """Read piece ``i`` (slots ``[i·size, (i+1)·size)``) of a level of ``count`` nodes in
    the buffer ``src`` and split its nodes (``expand``, at ``level`` with ``boundary``).

    Slots past ``count`` hold stale nodes, and a replicate whose level is not ``live``
    (past its depth, or stopped) splits nothing real: ``valid`` masks both.
    """
    start = i * size
    parents = read(src, start, size)
    real = live & (start + jnp.arange(size) < count)
    children, counts, words = expand(parents, level, boundary)
    return Piece(parents, children, counts, words, jnp.concatenate([real, real]))


def compact(keep, tree):
    """Move the entries with ``keep`` [N] to the front, order kept; returns (count, tree).

    Every array of ``tree`` has the entry axis last.  Entries past ``count`` are
    unspecified (they repeat entry 0).
    """
    n = keep.shape[0]
    pos = jnp.where(keep, jnp.cumsum(keep) - 1, n)
    source = jnp.zeros(n, jnp.int32).at[pos].set(jnp.arange(n, dtype=jnp.int32), mode="drop")
    return jnp.sum(keep, dtype=jnp.int32), jax.tree_util.tree_map(lambda a: a[..., source], tree)


def read(buffer, start, size: int):
    """Slots ``[start, start + size)`` of a buffer tree (slot axis last)."""
    return jax.tree_util.tree_map(
        lambda a: jax.lax.dynamic_slice_in_dim(a, start, size, axis=-1), buffer
    )


def write(buffer, start, block):
    """Write a block tree at slot ``start`` (the buffer's capacity must allow the block)."""
    return jax.tree_util.tree_map(
        lambda a, b: jax.lax.dynamic_update_slice_in_dim(a, b, start, axis=-1), buffer, block
    )


def allocate(template, capacity: int):
    """A buffer tree with ``capacity`` slots shaped like ``template`` (slot axis last)."""
    return jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape[:-1] + (capacity,), a.dtype), template)


def level_pairs(n_levels, level, a, b, carry):
    """Run ``level(j, src, dst, carry) -> (dst, carry)`` for ``j < n_levels``, alternating buffers.

    Level ``j`` reads ``a`` and writes ``b`` when ``j`` is even, the reverse when odd; the
    levels run in pairs so the loop carry never swaps (and never copies) a buffer.
    ``level`` must leave ``dst`` and ``carry`` unchanged for ``j ≥`` its own depth.

    Returns:
      ``(a, b, carry)``; level ``r`` is in ``a`` for even ``r``, in ``b`` for odd (``final``).
    """

    def pair(p, state):
        a, b, carry = state
        b, carry = level(2 * p, a, b, carry)
        a, carry = level(2 * p + 1, b, a, carry)
        return a, b, carry

    return jax.lax.fori_loop(0, (n_levels + 1) // 2, pair, (a, b, carry))


def final(a, b, depth):
    """The buffer holding level ``depth`` after ``level_pairs`` (per replicate)."""
    return jax.tree_util.tree_map(lambda x, y: jnp.where(depth % 2 == 0, x, y), a, b)
