"""The two ends of the certified pair: a coupling's cost (upper), W1 on the line.

``coupling_upper`` prices the coupling of points a block plan stands for, in float64,
widened by the solver's marginal round-off; ``line_w1`` is the exact d = 1 value.  The
lower end (a c-transform over all atoms) is ``solver``'s, on ``ctransform.reduced_pass``.
Derivations: ``docs/theory/exact-w1.md``.
"""

from __future__ import annotations

import numpy as np

from jaxsynth.core import partition

__all__ = ["cost_matrix", "coupling_upper", "line_w1", "pair_cost"]


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


def _point_shares(level, plan):
    """A block plan as the coupling of points it stands for (each point of a block sends
    its mass as the block does): (Morton ranks, atoms, masses), one entry per point-arc."""
    rows, cols, mass = plan
    sizes = np.diff(level.starts)[rows]
    ranks = np.repeat(level.starts[rows] - np.cumsum(sizes) + sizes, sizes) + np.arange(
        sizes.sum())
    if level.ranks is not None:
        ranks = level.ranks[ranks]
    return ranks, np.repeat(cols, sizes), np.repeat(mass / sizes, sizes)


def coupling_upper(data, level, atoms, weights, plan, metric):
    """Certified upper end from a block plan: each point of a block sends its mass as the
    block does (a coupling of μ_X and ν); its float64 cost plus ``diam ·`` the marginal
    error left by the solver's round-off."""
    ranks, cols, share = _point_shares(level, plan)
    points = data.order[ranks]
    cost = float(np.dot(share, pair_cost(data.X[points], atoms[cols], metric)))
    miss = (np.abs(np.bincount(points, share, data.n) - 1.0 / data.n).sum()
            + np.abs(np.bincount(cols, share, len(weights)) - weights).sum())
    return cost * (1 + 2.0**-40) + float(partition.diameter(0, data.X.shape[1], metric)) * miss



def line_w1(x, atoms, w) -> float:
    """W1 on the line between the points ``x`` [n] (mass 1/n each) and atoms ``atoms``
    [M] of weights ``w``: ``∫ |F − G|`` over the merged breakpoints, float64."""
    values = np.concatenate([x, atoms])
    mass = np.concatenate([np.full(len(x), 1.0 / len(x)), -w])
    order = np.argsort(values, kind="stable")
    gaps = np.diff(values[order])
    return float(np.dot(np.abs(np.cumsum(mass[order])[:-1]), gaps))
