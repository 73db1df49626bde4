"""A cold start's guide, balanced: column duals under which rows' cheapest arcs come
closer to the columns' masses.

The network simplex's cold start (``simplex._hang_rows``) hangs each row on its arc of
least ``c − v`` under the guide ``v`` (a coarser level's column duals) and routes every
column's excess through big-M arcs of the root; each pivot after that moves about one
row.  ``balanced`` takes Jacobi steps on ``v`` first, as an auction would (Bertsekas):
a column its rows' cheapest arcs overfill lowers its dual until as many rows' mass, of
least regret (second-cheapest minus cheapest), would leave it; one they underfill raises
its dual until as much mass of the rows with an arc to it, of least price difference,
would come.  The LP's optimum does not depend on the guide, only the pivots to it do.
"""

from __future__ import annotations

import numpy as np

from jaxsynth.numba_cache import helper, kernel

__all__ = ["balanced"]

TIE = 1e-12
"""A step goes this far past the price at which a row changes columns (ties)."""
ZERO = 1e-15
"""An excess or shortage up to this is the masses' round-off: no step."""


def balanced(a, b, rows, cols, costs, v, steps: int) -> np.ndarray:
    """The guide ``v`` [M] after ``steps`` Jacobi steps on the LP from ``a`` [Q] to ``b``
    [M] (rescaled to ``a``'s total) on the arcs ``rows``, ``cols`` in key order (rows
    ascending) with float64 ``costs``."""
    a = np.ascontiguousarray(a, np.float64)
    b = np.ascontiguousarray(b, np.float64) * (a.sum() / np.sum(b))
    return _balanced(a, b, np.ascontiguousarray(rows, np.int64),
                     np.ascontiguousarray(cols, np.int64),
                     np.ascontiguousarray(costs, np.float64),
                     np.array(v, np.float64), np.int64(steps))


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
