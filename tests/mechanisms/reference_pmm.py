"""A slow, obviously correct NumPy reference of PMM and Pruned-PMM (one node at a time).

Independent of the engine: its own RNG (NumPy geometric variates), brute-force counts
from ``partition.cell_index``, recursion over the tree.  Used to check the jitted
engines in law.
"""

import numpy as np

from jaxsynth.core import partition


def lapz(rng, sigma):
    p = 1.0 - np.exp(-1.0 / sigma)
    return int(rng.geometric(p) - rng.geometric(p))


def proportional(m, a, b, coin):
    if a + b == 0:
        return m // 2 + (m % 2) * (1 - coin)
    lo, hi = (max(0, m - b), min(a, m)) if a + b >= m else (a, m - b)
    return min(max(round(m * a / (a + b)), lo), hi)


def zero_respecting(m, a, b, coin):
    if a == 0 and b > 0:
        return 0
    if b == 0 and a > 0:
        return m
    if a == 0 and b == 0:
        return m * (1 - coin)
    return proportional(m, a, b, coin)


def release(rng, X, depth, sigmas, sigma0, rule, pruned):
    """Leaf masses [2^depth] (Morton order) and visited nodes of one replicate."""
    n, d = X.shape
    codes = [partition.cell_index(X, j) for j in range(depth + 1)]

    def count(level, index):
        cell = partition.leaf_index_to_cells(np.array([index]), level, d)[0]
        return int(np.all(codes[level] == cell, axis=1).sum())

    leaves = np.zeros(2**depth, dtype=np.int64)
    m_root = max(1, n + lapz(rng, sigma0))
    visited = 1 if pruned else 2 ** (depth + 1) - 1
    stack = [(0, 0, m_root)]
    while stack:
        level, index, m = stack.pop()
        if level == depth:
            leaves[index] = m
            continue
        if pruned and m == 0:
            continue
        if pruned:
            visited += 2
        a, b = (max(count(level + 1, 2 * index + c) + lapz(rng, sigmas[level]), 0) for c in (0, 1))
        m0 = rule(m, a, b, int(rng.integers(2)))
        stack += [(level + 1, 2 * index, m0), (level + 1, 2 * index + 1, m - m0)]
    return leaves, visited
