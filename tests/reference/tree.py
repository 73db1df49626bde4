"""Cells, brute-force counts and tree-metric weights of the cyclic dyadic partition.

A node is identified by its path bits ``(b_0, …, b_{j−1})``; bit ``b_t`` is the next
binary digit of coordinate ``t mod d``.  Its per-coordinate cell index is read off the
bits; counts are found by comparing every data point's cell index with it.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np

from jaxsynth.core.partition import cell_index


def resolution(level: int, d: int) -> list:
    """Bisections of each coordinate at ``level``: ``⌊j/d⌋ + [c < j mod d]``."""
    return [level // d + (1 if c < level % d else 0) for c in range(d)]


def cell_of_bits(bits, d: int) -> tuple:
    """Per-coordinate cell index of the node with path ``bits``."""
    cell = [0] * d
    for t, b in enumerate(bits):
        cell[t % d] = 2 * cell[t % d] + int(b)
    return tuple(cell)


def bits_of_cell(cell, level: int, d: int) -> tuple:
    """Inverse of ``cell_of_bits`` at ``level``."""
    k = resolution(level, d)
    return tuple((cell[t % d] >> (k[t % d] - 1 - t // d)) & 1 for t in range(level))


def lower_corner(cell, level: int, d: int) -> list:
    """Exact lower corner (Fractions) of a cell."""
    k = resolution(level, d)
    return [Fraction(cell[c], 2 ** k[c]) for c in range(d)]


def side(level: int, d: int) -> list:
    return [Fraction(1, 2**k) for k in resolution(level, d)]


def diameter(level: int, d: int, metric: str) -> float:
    """ℓ∞ diameter ``max side``; ℓ2 diameter ``sqrt(Σ side²)``."""
    sides = [2.0 ** -k for k in resolution(level, d)]
    if metric == "linf":
        return max(sides)
    return math.sqrt(sum(s * s for s in sides))


def edge_weight(level: int, d: int, metric: str) -> float:
    """``w_j = (diam(j−1) − diam(j))/2`` of the edge from a level-``j`` node to its parent."""
    return (diameter(level - 1, d, metric) - diameter(level, d, metric)) / 2.0


class Counts:
    """True cell counts of a data set, brute force per level (cells of ``partition.cell_index``)."""

    def __init__(self, X):
        self.X = np.asarray(X, np.float64)
        self.n, self.d = self.X.shape
        self._levels = {}

    def level(self, j: int) -> Counter:
        if j not in self._levels:
            self._levels[j] = Counter(map(tuple, cell_index(self.X, j).tolist()))
        return self._levels[j]

    def count(self, bits) -> int:
        return self.level(len(bits)).get(cell_of_bits(bits, self.d), 0)

    def occupancy(self, j: int) -> int:
        return len(self.level(j))


class ShiftedCounts(Counts):
    """Counts of ``y = (x + U)/2`` on the standard partition, with exact rational digits."""

    def __init__(self, X, U, max_bisections: int):
        super().__init__(X)
        self.K = max_bisections
        # floor((x_c + U_c)·2^(K−1)) exactly, then digits by integer shifts
        self.scaled = [
            [math.floor((Fraction(float(x)) + Fraction(float(u))) * 2 ** (self.K - 1))
             for x, u in zip(row, U)]
            for row in self.X
        ]

    def level(self, j: int) -> Counter:
        if j not in self._levels:
            k = resolution(j, self.d)
            assert max(k) <= self.K
            # floor(y·2^k) = floor((x+U)·2^(k−1)) = floor(floor((x+U)·2^(K−1)) / 2^(K−k))
            self._levels[j] = Counter(
                tuple(row[c] >> (self.K - k[c]) for c in range(self.d)) for row in self.scaled
            )
        return self._levels[j]
