"""Cyclic binary partition of [0,1]^d: geometry and exact dyadic digits (SPEC §0).

A cell at level ``j`` is bisected at its midpoint along coordinate ``c = j mod d``.
Child bit 0 is the lower half, bit 1 the upper half; the splitting hyperplane belongs
to the upper child and ``x_c = 1`` belongs to the last cell.  The level-``j`` cell of
``x`` is the bit string ``b_0 ... b_{j-1}`` where ``b_t`` is the ``(t//d + 1)``-th dyadic
digit of coordinate ``t mod d`` (interleaved, Morton order).

Digits are computed on the host from float64 data, exactly: ``x * 2**t`` is an exact
power-of-two scaling, so no depth limit comes from a machine word.  Everything in this
module is pure NumPy; the JAX engines receive its results as arrays.
"""

from __future__ import annotations

import numpy as np

WORD_BITS = 32
"""Bits per packed Morton word (uint32, so JAX needs no 64-bit mode)."""


def coordinate_resolution(level: int, d: int) -> np.ndarray:
    """Number of bisections ``k_c(j) = j//d + [c < j mod d]`` of each coordinate, shape [d]."""
    c = np.arange(d)
    return level // d + (c < level % d).astype(np.int64)


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
    raise ValueError(f"metric must be 'linf' or 'l2', got {metric!r}")


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

    ``W = ceil(depth / 32)``; bit ``b_t`` sits in word ``t // 32`` at position
    ``31 - t % 32``, so lexicographic order of the rows is the Morton order.
    """
    n = X.shape[0]
    n_words = max(1, -(-depth // WORD_BITS))
    words = np.zeros((n, n_words), dtype=np.uint32)
    for t in range(depth):  # one vectorised pass per level, never per point
        words[:, t // WORD_BITS] |= morton_bit(X, t).astype(np.uint32) << np.uint32(
            WORD_BITS - 1 - t % WORD_BITS
        )
    return words


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


def cell_lower_corner(cells: np.ndarray, level: int) -> np.ndarray:
    """Lower corner of cells with per-coordinate indices ``cells`` [..., d] at ``level``."""
    d = cells.shape[-1]
    return np.ldexp(cells.astype(np.float64), -coordinate_resolution(level, d))


def cell_side(level: int, d: int) -> np.ndarray:
    """Side lengths ``2^{-k_c(level)}`` of a level cell, shape [d]."""
    return np.ldexp(1.0, -coordinate_resolution(level, d))
