"""The balanced guide of a cold start (``exact.guide``).

Truth: the Jacobi step's rule written out in plain Python on small random LPs (each
column's rows, their prices, sorted), and POT's ``ot.emd2`` for the optimum that a cold
start from the balanced guide reaches (the guide changes only the pivots).
Tolerance: the same float64 operations in both (1e-15).
"""

import numpy as np
import pytest

from jaxsynth.wasserstein.exact import guide, simplex
from tests.wasserstein.test_exact_simplex import check, problem


def reference_step(a, b, rows, cols, costs, v):
    """One step of ``guide.balanced``'s rule, by brute force."""
    b = b * (a.sum() / b.sum())
    q, m = len(a), len(b)
    cheapest, regret, best = np.empty(q), np.empty(q), np.empty(q, int)
    for r in range(q):
        mine = np.flatnonzero(rows == r)
        prices = costs[mine] - v[cols[mine]]
        order = np.argsort(prices, kind="stable")
        cheapest[r], best[r] = prices[order[0]], cols[mine][order[0]]
        regret[r] = prices[order[1]] - prices[order[0]] if len(mine) > 1 else np.inf
    excess = np.bincount(best, a, m) - b
    step = np.zeros(m)
    for j in range(m):
        if abs(excess[j]) <= guide.ZERO:
            continue
        arcs = np.flatnonzero(cols == j)
        if excess[j] > 0:  # its own rows, at their regret
            take = arcs[best[rows[arcs]] == j]
            price = regret[rows[take]]
        else:  # rows of an arc to it, at what it must rise by to be their cheapest
            take = arcs[best[rows[arcs]] != j]
            price = costs[take] - v[j] - cheapest[rows[take]]
        mass = a[rows[take]]
        order = np.argsort(price, kind="stable")
        price, mass = price[order], mass[order]
        finite = np.isfinite(price)
        price, mass = price[finite], mass[finite]
        if len(price) == 0:
            continue
        reached = np.flatnonzero(np.cumsum(mass) >= abs(excess[j]))
        at = reached[0] if len(reached) else len(price) - 1
        step[j] = (price[at] + guide.TIE) * (-1 if excess[j] > 0 else 1)
    return v + step


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("steps", [1, 3])
def test_steps_follow_the_rule(seed, steps):
    a, b, r, c, costs = problem(seed, 40, 7, 0.4, equal=seed % 2 == 0)
    v = np.random.default_rng(seed).random(7) * 0.3
    expected = v
    for _ in range(steps):
        expected = reference_step(a, b, r, c, costs, expected)
    np.testing.assert_allclose(guide.balanced(a, b, r, c, costs, v, steps), expected,
                               rtol=0, atol=1e-15)
    assert steps > 1 or not np.array_equal(expected, v)  # the step moves something


def test_zero_steps_keep_the_guide():
    a, b, r, c, costs = problem(3, 20, 5, 0.5)
    v = np.linspace(0, 1, 5)
    np.testing.assert_array_equal(guide.balanced(a, b, r, c, costs, v, 0), v)


@pytest.mark.parametrize("seed", range(4))
def test_a_cold_start_from_it_is_optimal(seed):
    a, b, r, c, costs = problem(seed + 20, 60, 14, 0.3)
    v = guide.balanced(a, b, r, c, costs, np.zeros(14), 2)
    check(a, b, r, c, costs, simplex.solve(a, b, r, c, costs, guide=v))
