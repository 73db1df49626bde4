"""A cold start's guide: a coarser level's column duals, scaled and balanced.

The network simplex's cold start (``simplex._hang_rows``) hangs each row on its arc of
least ``c − v`` under the guide ``v`` (a coarser level's column duals) and routes every
column's excess through big-M arcs of the root; each pivot after that moves about one
row.  Two steps make the guide better than the coarser duals as they are:

- ``scaled`` searches the ray from 0 (each row on its cheapest arc) to ``v`` for the best
  dual value of the LP on its arcs, each row's dual its least ``c − s·v``.  A coarser
  level's duals can overrate its atoms' differences at a finer level: a level left after
  one round has the duals of a restricted LP, which fix few atoms' prices well (and it
  spans blocks many times larger).
- ``balanced`` takes Jacobi steps on ``v``, as an auction would (Bertsekas): a column its
  rows' cheapest arcs overfill lowers its dual until as many rows' mass, of least regret
  (second-cheapest minus cheapest), would leave it; one they underfill raises its dual
  until as much mass of the rows with an arc to it, of least price difference, would
  come.

The LP's optimum does not depend on the guide, only the pivots to it do.
"""

from __future__ import annotations

import numpy as np

from jaxsynth.numba_cache import helper, kernel

__all__ = ["balanced", "cold_start", "scaled"]

TIE = 1e-12
"""A step goes this far past the price at which a row changes columns (ties)."""
ZERO = 1e-15
"""An excess or shortage up to this is the masses' round-off: no step."""
SCALES = (1.0, 0.5, 0.25, 0.0)
"""The points of the ray from 0 to the guide that ``scaled`` tries: each costs a pass
over the arcs, and the dual value is concave along the ray."""


def balanced(a, b, rows, cols, costs, v, steps: int) -> np.ndarray:
    """The guide ``v`` [M] after ``steps`` Jacobi steps on the LP from ``a`` [Q] to ``b``
    [M] (rescaled to ``a``'s total) on the arcs ``rows``, ``cols`` in key order (rows
    ascending) with float64 ``costs``."""
    return _balanced(*_contiguous(a, b, rows, cols, costs), np.array(v, np.float64),
                     np.int64(steps))


def scaled(a, b, rows, cols, costs, v) -> np.ndarray:
    """The guide ``v`` [M] times the factor in ``SCALES`` of the best dual value of the LP
    on these arcs (``_dual_value``): a line search of its dual along the ray from 0 to
    ``v``.  Arguments as ``balanced``'s."""
    lp = _contiguous(a, b, rows, cols, costs)
    v = np.asarray(v, np.float64)
    values = [_dual_value(*lp, s * v) for s in SCALES]
    return SCALES[int(np.argmax(values))] * v


def cold_start(a, b, rows, cols, costs, v, steps: int = 0) -> np.ndarray:
    """The guide of a cold start from a coarser level's column duals ``v`` [M]:
    ``scaled``, then ``steps`` Jacobi steps (``balanced``)."""
    v = scaled(a, b, rows, cols, costs, v)
    return balanced(a, b, rows, cols, costs, v, steps) if steps else v


def _contiguous(a, b, rows, cols, costs):
    """The LP's arrays as the kernels take them, ``b`` rescaled to ``a``'s total."""
    a = np.ascontiguousarray(a, np.float64)
    b = np.ascontiguousarray(b, np.float64) * (a.sum() / np.sum(b))
    return (a, b, np.ascontiguousarray(rows, np.int64), np.ascontiguousarray(cols, np.int64),
            np.ascontiguousarray(costs, np.float64))


@kernel
def _dual_value(a, b, rows, cols, costs, v):
    """The LP's dual objective at the column duals ``v`` and the rows' duals they imply
    (each row's least ``c − v`` on its arcs: a feasible dual of the LP on these arcs)."""
    value = 0.0
    for j in range(len(b)):
        value += b[j] * v[j]
    e, n_arcs = 0, len(rows)
    while e < n_arcs:
        r, low = rows[e], np.inf
        while e < n_arcs and rows[e] == r:
            low = min(low, costs[e] - v[cols[e]])
            e += 1
        value += a[r] * low
    return value


@kernel
def _balanced(a, b, rows, cols, costs, v, steps):
    """``balanced`` on contiguous arrays (``v`` updated in place and returned)."""
    q, m, n_arcs = len(a), len(b), len(rows)
    row_start, col_start = _starts(rows, q), _starts(cols, m)
    col_rows, col_costs = np.empty(n_arcs, np.int64), np.empty(n_arcs)
    filled = col_start[:-1].copy()
    for e in range(n_arcs):  # the arcs by column (a counting sort)
        col_rows[filled[cols[e]]], col_costs[filled[cols[e]]] = rows[e], costs[e]
        filled[cols[e]] += 1
    cheapest, regret, best = np.empty(q), np.empty(q), np.empty(q, np.int64)
    step = np.zeros(m)
    price = np.empty(n_arcs)  # scratch: a column's rows' prices
    mass = np.empty(n_arcs)
    for _ in range(steps):
        load = np.zeros(m)
        for r in range(q):
            low, second, at = np.inf, np.inf, -1
            for e in range(row_start[r], row_start[r + 1]):
                x = costs[e] - v[cols[e]]
                if x < low:
                    low, second, at = x, low, cols[e]
                elif x < second:
                    second = x
            cheapest[r], regret[r], best[r] = low, second - low, at
            if at >= 0:
                load[at] += a[r]
        for j in range(m):
            excess, k = load[j] - b[j], 0
            step[j] = 0.0
            if abs(excess) <= ZERO:
                continue
            for i in range(col_start[j], col_start[j + 1]):
                r = col_rows[i]
                if excess > 0 and best[r] == j:  # rows that may leave, at their regret
                    price[k], mass[k], k = regret[r], a[r], k + 1
                elif excess < 0 and best[r] != j:  # rows that may come, at their price
                    price[k], mass[k], k = col_costs[i] - v[j] - cheapest[r], a[r], k + 1
            step[j] = _price_for(price[:k], mass[:k], abs(excess))
            if excess > 0:
                step[j] = -step[j]
        v += step
    return v


@helper
def _starts(keys, count):
    """Offsets of each key's run in ``keys`` (``0..count-1``) sorted: counts, summed."""
    start = np.zeros(count + 1, np.int64)
    for key in keys:
        start[key + 1] += 1
    for i in range(count):
        start[i + 1] += start[i]
    return start


@helper
def _price_for(price, mass, need):
    """The least finite price at which the mass of prices at most it reaches ``need``
    (past it by ``TIE``); the largest finite price if none reaches it; 0 for no mass.
    ``price`` is used up.  The least prices are taken one by one: few rows change
    columns in a step."""
    total, last = 0.0, 0.0
    while total < need:
        at, low = -1, np.inf
        for i in range(len(price)):
            if price[i] < low:
                at, low = i, price[i]
        if at < 0:  # none left, or only infinite prices
            break
        total += mass[at]
        last, price[at] = low + TIE, np.inf
    return last
