"""Cyclic binary partition of [0,1]^d: geometry and exact dyadic digits.

A cell at level ``j`` is bisected at its midpoint along coordinate ``c = j mod d``.
Child bit 0 is the lower half, bit 1 the upper half; the splitting hyperplane belongs
to the upper child and ``x_c = 1`` belongs to the last cell.  The level-``j`` cell of
``x`` is the bit string ``b_0 ... b_{j-1}`` where ``b_t`` is the ``(t//d + 1)``-th dyadic
digit of coordinate ``t mod d`` (interleaved, Morton order).

Digits are computed on the host from float64 data, exactly: ``x * 2**t`` is an exact
power-of-two scaling, so no depth limit comes from a machine word.  ``morton_words_of_sum``
computes exact digits of shifted points ``(x + u)/2`` on the host (NumPy) or on a device
(JAX float32) alike, and so do ``coordinate_resolution`` and ``cell_side`` (``xp``).  The
kernels' cell corners are ``lower_corners`` from ``bisection`` (JAX, loaded on first use:
the host geometry imports none).  Everything else is NumPy; the engines receive its results
as arrays.

Node orders.  *Morton order* lists the level-``j`` cells by their path bits read as a
binary number ``b_0 b_1 … b_{j-1}``.  The complete-tree engine stores a level in *planar
order* instead: index ``Σ_t b_t 2^t`` (``b_0`` least significant), so the children of the
parents ``0 … 2^j − 1`` are the two contiguous halves ``[0, 2^j)`` (bit 0) and
``[2^j, 2^{j+1})`` (bit 1) of the next level; ``planar_to_morton`` converts.
"""

from __future__ import annotations

import numpy as np

WORD_BITS = 32
"""Bits per packed Morton word (uint32, so JAX needs no 64-bit mode)."""
GROUND_METRICS = ("linf", "l2")
"""The ground metrics, ℓ∞ and ℓ2: their names are defined here only.  They are the
``metric=`` of ``js.w1`` and ``js.simulate``, ``jaxsynth simulate --metric`` and the
``metric`` column of a result table (how W1 is measured is the *method*)."""


def coordinate_resolution(level, d: int, xp=np):
    """Number of bisections ``k_c(j) = j//d + [c < j mod d]`` of each coordinate, [..., d].

    ``level`` is an int or an integer array (e.g. [N, 1]); with ``xp = jax.numpy`` it may
    be traced and the result is int32 (int64 on the host).
    """
    below = xp.arange(d) < level % d
    return level // d + below.astype(np.int64 if xp is np else xp.int32)


def diameter(level, d: int, metric: str = "linf"):
    """Diameter of a level-``j`` cell: ℓ∞ ``2^{-⌊j/d⌋}``, ℓ2 ``sqrt(Σ_c 4^{-k_c(j)})``.

    ``level`` may be an integer or an integer array; the result has its shape.
    """
    j = np.asarray(level)
    if metric == "linf":
        return np.ldexp(1.0, -(j // d))
    if metric == "l2":
        q, rem = j // d, j % d
        # rem coordinates have k = q + 1, the other d - rem have k = q.
        return np.sqrt((rem * 0.25 + (d - rem)) * np.ldexp(1.0, -2 * q))
    raise ValueError(f"metric must be one of {GROUND_METRICS}, got {metric!r}")


def digit(x: np.ndarray, t: int) -> np.ndarray:
    """The ``t``-th dyadic digit (``t >= 1``) of ``x`` in [0,1], with ``x = 1`` all ones."""
    x = np.asarray(x, dtype=np.float64)
    bits = np.fmod(np.floor(np.ldexp(x, t)), 2.0).astype(np.uint8)
    return np.where(x >= 1.0, np.uint8(1), bits)


def morton_bit(X: np.ndarray, level: int) -> np.ndarray:
    """Bit ``b_level`` of every point: the child (0 lower, 1 upper) of its level cell, [n]."""
    d = X.shape[1]
    return digit(X[:, level % d], level // d + 1)


def morton_words(X: np.ndarray, depth: int) -> np.ndarray:
    """Morton codes of depth ``depth``, packed MSB-first into uint32 words, shape [n, W].

    ``W = ceil(depth / 32)``; bit ``b_t`` (``morton_bit``) sits in word ``t // 32`` at
    position ``31 - t % 32``, so lexicographic order of the rows is the Morton order.
    The digits are read ``PIECE_BITS`` at a time per coordinate
    (``morton_words_of_sum`` with no shift), not one level at a time.
    """
    X = np.asarray(X, dtype=np.float64)
    return np.stack(morton_words_of_sum(np, X, 0.0, depth, False), axis=-1)


def cell_index(X: np.ndarray, level: int) -> np.ndarray:
    """Per-coordinate cell index ``min(⌊x_c 2^{k_c}⌋, 2^{k_c} - 1)`` at ``level``, [n, d] int64.

    Valid while every ``k_c(level) <= 62``; deeper cells are addressed by Morton words.
    """
    X = np.asarray(X, dtype=np.float64)
    k = coordinate_resolution(level, X.shape[1])
    if k.max(initial=0) > 62:
        raise ValueError(f"level={level} exceeds 62 bisections per coordinate for cell_index")
    top = np.ldexp(1.0, k) - 1.0
    return np.minimum(np.floor(np.ldexp(X, k)), top).astype(np.int64)


def leaf_index_to_cells(index: np.ndarray, level: int, d: int) -> np.ndarray:
    """Per-coordinate cell indices [N, d] of level-``level`` cells given by Morton index.

    ``index`` holds the bit strings ``b_0 ... b_{level-1}`` as integers (``level <= 62``).
    """
    index = np.asarray(index, dtype=np.int64)
    cells = np.zeros(index.shape + (d,), dtype=np.int64)
    for t in range(level):
        bit = (index >> (level - 1 - t)) & 1
        cells[..., t % d] = 2 * cells[..., t % d] + bit
    return cells


def edge_weights(depth: int, d: int, metric: str = "linf") -> np.ndarray:
    """Tree-metric edge weights ``w_j = (diam(j−1) − diam(j))/2`` for ``j = 0..depth`` (``w_0 = 0``).

    The weights of the ultrametric tree metric of ``jaxsynth.wasserstein.tree``: two
    leaves of a depth-``r`` tree whose lowest common ancestor is at level ``l`` are
    ``diam(l) − diam(r)`` apart.
    """
    diam = diameter(np.arange(depth + 1), d, metric)
    return np.concatenate([[0.0], (diam[:-1] - diam[1:]) / 2.0])


def planar_to_morton(level: int) -> np.ndarray:
    """Morton index of every planar index at ``level`` (the bit reversal of ``level`` bits)."""
    index = np.arange(2**level, dtype=np.int64)
    morton = np.zeros_like(index)
    for t in range(level):
        morton |= ((index >> t) & 1) << (level - 1 - t)
    return morton


def cell_lower_corner(cells: np.ndarray, level: int) -> np.ndarray:
    """Lower corner of cells with per-coordinate indices ``cells`` [..., d] at ``level``."""
    d = cells.shape[-1]
    return np.ldexp(cells.astype(np.float64), -coordinate_resolution(level, d))


def cell_side(level, d: int, xp=np):
    """Side lengths ``2^{-k_c(level)}`` [..., d] of level-``level`` cells.

    On the host float64, exact.  With ``xp = jax.numpy`` (``level`` may be traced) float32
    from XLA's ``exp2``, the values every kernel releases: on a CPU they fall a few ulps
    short of the power of two from ``2^-13`` on.
    """
    k = coordinate_resolution(level, d, xp)
    if xp is np:
        return np.ldexp(1.0, -k)
    return xp.exp2(-k.astype(xp.float32))


def bisection(t, d: int):
    """The split below level ``t``, on a device: the coordinate ``t mod d`` it halves, and
    the halves' side ``2^{-(⌊t/d⌋+1)}`` along it (float32, from ``exp2`` as ``cell_side``),
    by which the upper child's lower corner moves; ``t`` may be traced."""
    import jax.numpy as jnp

    return t % d, jnp.exp2(-(t // d + 1).astype(jnp.float32))


def lower_corners(bit, depth, d: int, count: int):
    """Lower corners [count, d] float32 of level-``depth`` cells, on a device.

    ``bit(t)`` gives the bits ``b_t`` [count] (0 or 1) of the cells' paths for ``t < depth``
    (from path words, planar indices, ...); ``depth`` may be traced.  The corner is the
    sum, in level order, of the ``bisection`` sides of the levels whose bit is 1.
    """
    import jax  # the device geometry: JAX loads on first use
    import jax.numpy as jnp

    return jax.lax.fori_loop(0, depth, _corner_step(bit, d), jnp.zeros((count, d), jnp.float32))


def lower_corner_levels(bit, depth: int, d: int, count: int):
    """Lower corners [depth + 1, count, d] float32 of the cells' level-``r`` ancestors,
    ``r = 0..depth`` (static ``depth``), on a device.

    Row ``r`` is ``lower_corners`` with the bits ``b_t``, ``t ≥ r``, set to 0, bit for
    bit: the same additions in the same order (the later ones add ``+0``).  One pass
    serves every depth ``r`` at once (a complete tree's leaves, whatever a replicate's
    depth).
    """
    import jax
    import jax.numpy as jnp

    step = _corner_step(bit, d)
    zeros = jnp.zeros((count, d), jnp.float32)

    def level(lower, t):
        lower = step(t, lower)
        return lower, lower

    _, rows = jax.lax.scan(level, zeros, jnp.arange(depth, dtype=jnp.int32))
    return jnp.concatenate([zeros[None], rows])


def _corner_step(bit, d: int):
    """``lower_corners``' step: the corner after the split below level ``t``."""
    import jax.numpy as jnp

    def level(t, lower):
        axis, side = bisection(t, d)
        return lower + bit(t)[:, None].astype(jnp.float32) * (side * (jnp.arange(d) == axis))

    return level


PIECE_BITS = 24
"""Digits extracted per float-to-integer conversion (exact below 2^24 in float32)."""


def morton_words_of_sum(xp, x, u, depth: int, halve: bool):
    """Exact Morton words of the real points ``z = (x + u) / 2^halve``.

    ``x + u`` is computed as ``s + e`` exactly (Knuth's TwoSum).  With ``g = s·2^k`` (an
    exact scaling), ``⌊(s + e)·2^k⌋ = ⌊g⌋ + [g integer]·⌊e·2^k⌋``: if ``g`` is not an
    integer, ``s`` has a bit below ``2^-k`` so its ulp is ``< 2^-k`` and
    ``|e| ≤ ulp(s)/2`` cannot cross the integer nearest to ``g``.  Digits are taken
    ``PIECE_BITS`` at a time as integers ``⌊z·2^k⌋ mod 2^PIECE_BITS`` (exact in float32),
    then interleaved.  Coordinates with ``s + e ≥ 2^halve`` (``z_c ≥ 1``) get all ones,
    like ``x = 1`` (the last cell, as above).  Works for NumPy float64 on the host and
    JAX float32 on the device alike.

    Args:
      xp: ``numpy`` or ``jax.numpy``.
      x: [..., d] float points.
      u: [d] (or broadcastable) shift, or 0.
      depth: number of Morton bits.
      halve: map ``x + u ∈ [0,2]^d`` to ``[0,1]^d`` (shifted partitions).

    Returns:
      tuple of ``W`` uint32 arrays [...], MSB-first, ``W = ceil(depth/32)``.
    """
    d, h = x.shape[-1], int(halve)
    s = x + u
    bb = s - x
    e = (x - (s - bb)) + (u - bb)
    full = (s > 2.0**h) | ((s == 2.0**h) & (e >= 0))
    mask = xp.uint32(2**PIECE_BITS - 1)
    pieces = {}

    def piece(c, p):  # digits with exponents in (p·P - h, (p+1)·P - h], as an integer
        if (c, p) not in pieces:
            top = (p + 1) * PIECE_BITS - h
            g = xp.ldexp(s[..., c], top)
            floor_g = xp.floor(g)
            high = xp.fmod(floor_g, 2.0**PIECE_BITS).astype(xp.uint32)
            low = xp.mod(xp.floor(xp.ldexp(e[..., c], top)), 2.0**PIECE_BITS).astype(xp.uint32)
            value = (high + xp.where(g == floor_g, low, xp.uint32(0))) & mask
            pieces[c, p] = xp.where(full[..., c], mask, value)
        return pieces[c, p]

    words = []
    for w in range(max(1, -(-depth // WORD_BITS))):
        word = xp.zeros(x.shape[:-1], xp.uint32)
        for t in range(w * WORD_BITS, min(depth, (w + 1) * WORD_BITS)):
            k = t // d + 1  # digit index of coordinate t mod d
            p = (k - 1) // PIECE_BITS
            bit = (piece(t % d, p) >> xp.uint32((p + 1) * PIECE_BITS - k)) & xp.uint32(1)
            word = word | (bit << xp.uint32(WORD_BITS - 1 - t % WORD_BITS))
        words.append(word)
    return tuple(words)
