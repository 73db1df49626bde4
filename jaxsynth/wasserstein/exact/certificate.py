"""The upper end of the certified pair: a coupling's cost.

``coupling_upper`` prices the coupling of points a block plan stands for, in float64,
widened by the solver's marginal round-off (the exact d = 1 value is the one 1-D code's,
``exact1d.line_w1``).  The lower end (a c-transform over all atoms) is ``solver``'s, on
``ctransform.reduced_pass``.
Derivations: ``docs/theory/exact-w1.md``.
"""

from __future__ import annotations

import math

import numpy as np

from jaxsynth.core import partition
from jaxsynth.numba_cache import kernel, ready

__all__ = ["arc_cost_sums", "cost_matrix", "coupling_upper", "pair_cost"]


def pair_cost(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """Row-wise ground cost ``c(a_k, b_k)`` in float64, [K] (a coordinate at a time: a
    reduction over a short last axis is several times slower)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    total = np.zeros(np.broadcast_shapes(a.shape, b.shape)[:-1])
    for k in range(a.shape[-1]):
        diff = np.abs(a[..., k] - b[..., k])
        if metric == "linf":
            np.maximum(total, diff, out=total)
        else:
            total += diff * diff
    return total if metric == "linf" else np.sqrt(total)


def cost_matrix(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """Ground costs ``c(a_i, b_j)`` [K, L] in float64 (``scipy``'s ``cdist``: no [K, L, d]
    temporary, many times faster than ``pair_cost`` broadcast)."""
    from scipy.spatial.distance import cdist

    return cdist(np.asarray(a, np.float64), np.asarray(b, np.float64),
                 "chebyshev" if metric == "linf" else "euclidean")


@kernel
def _arc_sums(X, index, starts, rows, cols, atoms, linf):
    """Per arc ``(rows[a], cols[a])``: the float64 sum of the costs from the points of
    block ``rows[a]`` (``X[index[starts[r]:starts[r + 1]]]``) to the atom ``atoms[cols[a]]``,
    compensated (Kahan: error within a few ulps of the sum, whatever the block's size)."""
    d = X.shape[1]
    sums = np.empty(len(rows))
    for a in range(len(rows)):
        y = atoms[cols[a]]
        total = carry = 0.0
        for position in range(starts[rows[a]], starts[rows[a] + 1]):
            x = X[index[position]]
            cost = 0.0
            for k in range(d):
                diff = abs(x[k] - y[k])
                cost = max(cost, diff) if linf else cost + diff * diff
            term = (cost if linf else np.sqrt(cost)) - carry
            step = total + term
            carry = (step - total) - term
            total = step
        sums[a] = total
    return sums


STAND_IN_PAIRS, STAND_IN_BLOCK = 2**22, 2**10
"""Point-arc pairs, and points a block, up to which the arc sums run on
``_arc_sums_numpy`` while the kernel is not in memory (a fraction of a second); more
wait for it."""


def _arc_sums_numpy(X, index, starts, rows, cols, atoms, linf):
    """``_arc_sums`` in NumPy, bit for bit: the same float64 operations (``pair_cost``'s
    are the kernel's), vectorised over the arcs (longest blocks first), a block's points
    in turn."""
    sizes = starts[rows + 1] - starts[rows]
    order = np.argsort(-sizes, kind="stable")
    sizes, first, y = sizes[order], starts[rows][order], atoms[cols][order]
    total, carry = np.zeros(len(rows)), np.zeros(len(rows))
    for position in range(int(sizes.max(initial=0))):
        live = int(np.searchsorted(-sizes, -position))  # the arcs with this many points
        cost = pair_cost(X[index[first[:live] + position]], y[:live], "linf" if linf else "l2")
        term = cost - carry[:live]
        step = total[:live] + term
        carry[:live] = (step - total[:live]) - term
        total[:live] = step
    sums = np.empty(len(rows))
    sums[order] = total
    return sums


def arc_cost_sums(data, level, rows, cols, atoms, metric) -> np.ndarray:
    """Per arc (block ``rows``, atom ``cols`` of ``level``): the sum over the block's points
    of their float64 costs to the atom (``_arc_sums``; few sums run on
    ``_arc_sums_numpy`` until it is in memory: ``numba_cache.ready``)."""
    index = data.order if level.ranks is None else data.order[level.ranks]
    args = (data.X, index, level.starts, np.asarray(rows, np.int64), np.asarray(cols, np.int64),
            np.asarray(atoms, np.float64), metric == "linf")
    sizes = np.diff(level.starts)[args[3]]
    small = sizes.sum() <= STAND_IN_PAIRS and sizes.max(initial=0) <= STAND_IN_BLOCK
    return (_arc_sums_numpy if small and not ready(_arc_sums, *args) else _arc_sums)(*args)


def coupling_upper(data, level, atoms, weights, plan, metric):
    """Certified upper end from a block plan: each point of a block sends its mass as the
    block does (a coupling of μ_X and ν); its float64 cost (sums compensated, then
    ``math.fsum``) plus ``diam ·`` the marginal error left by the solver's round-off."""
    rows, cols, mass = plan
    sizes = np.diff(level.starts)
    shares = mass / sizes[rows] * arc_cost_sums(data, level, rows, cols, atoms, metric)
    cost = math.fsum(shares)
    miss = (np.abs(np.bincount(rows, mass, level.size) - sizes / data.n).sum()
            + np.abs(np.bincount(cols, mass, len(weights)) - weights).sum())
    return cost * (1 + 2.0**-40) + float(partition.diameter(0, data.X.shape[1], metric)) * miss
