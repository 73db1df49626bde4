"""The guide of a cold start (``exact.guide``): balanced, and scaled.

Truth: the Jacobi step's rule written out in plain Python on small random LPs (each
column's rows, their prices, sorted); LP duality against POT's ``ot.emd2`` (a dual value
at most the optimum, equal to it at optimal duals, which the line search must then find
on any ray through them); and POT's optimum for the plan that a cold start from the guide
reaches (the guide changes only the pivots).
Tolerance: the same float64 operations in both (1e-15), or LP round-off (1e-12).
"""

import numpy as np
import pytest

from jaxsynth.wasserstein.exact import guide, simplex
from tests.wasserstein.test_exact_simplex import check, problem, reference, solve_sorted


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


def dual_value(a, b, rows, cols, costs, v):
    """The LP's dual value at ``v``, each row's dual its least ``c − v``: by brute force."""
    u = [np.min(costs[rows == r] - v[cols[rows == r]]) for r in range(len(a))]
    return a @ u + b @ v


@pytest.mark.parametrize("seed", range(4))
def test_dual_values_bound_the_optimum(seed):
    a, b, r, c, costs = problem(seed + 30, 30, 6, 0.4)
    optimum = reference(a, b, r, c, costs)
    for v in np.random.default_rng(seed).normal(0, 0.5, (5, 6)):
        value = guide._dual_value(a, b, r, c, costs, v)
        assert value == pytest.approx(dual_value(a, b, r, c, costs, v), abs=1e-12)
        assert value <= optimum + 1e-12


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("factor", [1.0, 2.0, 4.0])
def test_scaled_finds_optimal_duals_on_their_ray(seed, factor):
    a, b, r, c, costs = problem(seed + 40, 30, 6, 0.4)
    optimal = solve_sorted(a, b, r, c, costs)[4]
    assert dual_value(a, b, r, c, costs, optimal) == pytest.approx(
        reference(a, b, r, c, costs), abs=1e-12)
    np.testing.assert_allclose(guide.scaled(a, b, r, c, costs, factor * optimal), optimal,
                               rtol=0, atol=1e-15)


def test_scaled_prefers_no_guide_to_a_reversed_one():
    a, b, r, c, costs = problem(50, 30, 6, 0.4)
    optimal = solve_sorted(a, b, r, c, costs)[4]
    reversed_ = -(optimal - optimal.mean())
    assert guide._dual_value(a, b, r, c, costs, reversed_) < dual_value(
        a, b, r, c, costs, np.zeros(6))
    np.testing.assert_array_equal(guide.scaled(a, b, r, c, costs, reversed_), np.zeros(6))


def test_cold_start_is_scaled_then_balanced():
    a, b, r, c, costs = problem(51, 40, 7, 0.4)
    v = np.random.default_rng(51).random(7)
    expected = guide.balanced(a, b, r, c, costs, guide.scaled(a, b, r, c, costs, v), 2)
    np.testing.assert_array_equal(guide.cold_start(a, b, r, c, costs, v, 2), expected)
    check(a, b, r, c, costs, simplex.solve(a, b, r, c, costs, guide=expected))
