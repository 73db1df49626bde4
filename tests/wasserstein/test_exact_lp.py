"""The restricted transport LPs of the exact W1 (``exact.lp``) against POT's ``ot.emd2``.

Truth: ``ot.emd2`` on the dense cost matrix, with infinite cost off the allowed arcs
(a large finite cost that no optimum uses).  Tolerances: float64 round-off of sums of
order-one costs (1e-12 absolute).
"""

from pathlib import Path

import numpy as np
import ot
import pytest

from jaxsynth.wasserstein.exact import lp
from jaxsynth.wasserstein.exact.levels import northwest_arcs, unique_arcs

TOL = 1e-12
BIG = 1e3  # the cost of forbidden arcs in POT's dense reference: never worth using


def reference(a, b, rows, cols, costs):
    """POT's optimal value on the arcs (dense matrix, forbidden arcs at cost ``BIG``)."""
    dense = np.full((len(a), len(b)), BIG)
    dense[rows, cols] = costs
    return ot.emd2(a, b * (a.sum() / b.sum()), dense, numItermax=10**8)


def check(a, b, rows, cols, costs, plan, dual_tol=TOL):
    """Optimal value, a feasible plan on the arcs, feasible and complementary duals (to
    ``dual_tol``)."""
    arc_cost = dict(zip(zip(rows.tolist(), cols.tolist()), costs.tolist()))
    assert all(key in arc_cost for key in zip(plan.rows.tolist(), plan.cols.tolist()))
    value = sum(arc_cost[key] * x for key, x in zip(zip(plan.rows.tolist(),
                                                         plan.cols.tolist()), plan.mass))
    assert value == pytest.approx(reference(a, b, rows, cols, costs), abs=TOL)
    assert np.all(plan.mass > 0)
    np.testing.assert_allclose(np.bincount(plan.rows, plan.mass, len(a)), a, atol=TOL)
    np.testing.assert_allclose(np.bincount(plan.cols, plan.mass, len(b)),
                               b * (a.sum() / b.sum()), atol=TOL)
    reduced = costs - plan.u[rows] - plan.v[cols]
    assert reduced.min() >= -dual_tol
    on_plan = np.array([arc_cost[key] for key in zip(plan.rows.tolist(), plan.cols.tolist())])
    np.testing.assert_allclose(on_plan - plan.u[plan.rows] - plan.v[plan.cols], 0,
                               atol=dual_tol)
    return value


def restricted(rng, a, b, cost, per_row):
    """Arcs: each row's ``per_row`` random columns and the north-west coupling's arcs."""
    n, m = cost.shape
    picked = np.argsort(rng.random((n, m)), axis=1)[:, :per_row]
    nw_rows, nw_cols = northwest_arcs(a, b)
    arcs = unique_arcs((np.arange(n)[:, None] * m + picked).ravel(), nw_rows * m + nw_cols)
    rows, cols = np.divmod(arcs, m)
    return rows, cols, cost[rows, cols]


CASES = {
    "float masses": lambda rng: (rng.random(40), rng.random(25), rng.random((40, 25))),
    "integer-like masses": lambda rng: (rng.integers(1, 5, 30).astype(float),
                                        rng.integers(1, 5, 20).astype(float),
                                        rng.integers(0, 4, (30, 20)).astype(float)),
    "ties": lambda rng: (np.ones(30), np.ones(30), np.round(rng.random((30, 30)) * 2) / 2),
    "duplicates": lambda rng: (np.ones(24), np.ones(12),
                               np.repeat(np.repeat(rng.random((6, 6)), 4, 0), 2, 1)),
    "single atom": lambda rng: (rng.random(15), np.ones(1), rng.random((15, 1))),
    "single point": lambda rng: (np.ones(1), rng.random(9), rng.random((1, 9))),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("per_row", [None, 3])
def test_optimal_feasible_and_complementary(case, per_row):
    rng = np.random.default_rng(len(case))
    a, b, cost = CASES[case](rng)
    a, b = a / a.sum(), b / b.sum()
    if per_row is None or per_row >= cost.shape[1]:
        rows, cols = np.divmod(np.arange(cost.size), cost.shape[1])
        costs = cost.ravel()
        dense = lp.solve_dense(a, b, cost)
        check(a, b, rows, cols, costs, dense)
    else:
        rows, cols, costs = restricted(rng, a, b, cost, per_row)
    check(a, b, rows, cols, costs, lp.solve_arcs(a, b, rows, cols, costs))


@pytest.mark.parametrize("seed", range(4))
def test_warm_start_after_arcs_are_added(seed):
    # column generation: the previous round's basis restarts the LP on more arcs; the
    # optimum is POT's on the new arcs, and below (or at) the previous round's
    rng = np.random.default_rng(seed)
    n, m = 200, 60
    a, b = rng.random(n), rng.random(m)
    a, b = a / a.sum(), b / b.sum()
    cost = np.abs(rng.random((n, 1, 2)) - rng.random((1, m, 2))).max(-1)
    rows, cols, costs = restricted(rng, a, b, cost, 2)
    first = lp.solve_arcs(a, b, rows, cols, costs)
    before = check(a, b, rows, cols, costs, first)
    more = unique_arcs(rows * m + cols, rng.choice(n * m, 2000, replace=False))
    rows, cols = np.divmod(more, m)
    warm = lp.solve_arcs(a, b, rows, cols, cost[rows, cols], first)
    after = check(a, b, rows, cols, cost[rows, cols], warm)
    cold = lp.solve_arcs(a, b, rows, cols, cost[rows, cols])
    assert after == pytest.approx(check(a, b, rows, cols, cost[rows, cols], cold), abs=TOL)
    assert after <= before + TOL


def test_a_real_lp_that_cycled_on_round_off_is_solved_by_the_simplex():
    # a real coarsest-level LP (checkerboard, n = 30000, Pruned-PMM at r = 15: 1024
    # blocks, 3058 atoms) on which the simplex cycled when its pricing took any reduced
    # cost below an absolute tolerance: arcs of reduced cost zero entered on the
    # round-off of large potentials, degenerate pivot after pivot (POT's cold solve stood
    # in).  With the tolerance relative to the potentials it settles, in fewer pivots
    # than arcs and nodes, on its own optimal tree; the plan is optimal (POT's value; duals feasible
    # to their float64 round-off)
    data = np.load(Path(__file__).parent / "data" / "cycling_lp.npz")
    a, b, costs = data["a"], data["b"], data["costs"]
    rows, cols = data["rows"].astype(np.int64), data["cols"].astype(np.int64)
    plan = lp.solve_arcs(a, b, rows, cols, costs)
    assert plan.basis is not None  # the simplex's own, not POT's stand-in
    check(a, b, rows, cols, costs, plan, dual_tol=1e-10)
    pivots = lp.simplex.solve(a, b * (a.sum() / b.sum()), rows, cols, costs)[6]
    assert pivots < len(rows) + len(a) + len(b)


def test_fallback_is_optimal_on_the_restricted_arcs(monkeypatch):
    rng = np.random.default_rng(5)
    a, b = rng.random(50), rng.random(20)
    a, b = a / a.sum(), b / b.sum()
    rows, cols, costs = restricted(rng, a, b, rng.random((50, 20)), 4)

    def unsettled(*args, **kwargs):
        raise RuntimeError("network simplex: no optimum within 0 pivots")

    monkeypatch.setattr(lp.simplex, "solve", unsettled)
    plan = lp.solve_arcs(a, b, rows, cols, costs)
    assert plan.basis is None
    check(a, b, rows, cols, costs, plan)


@pytest.mark.parametrize("steps", [0, 2])
def test_a_guided_cold_start_takes_the_guide_scaled_and_balanced(steps, monkeypatch):
    # a start holding only column duals (lp.guided): the simplex starts cold from
    # guide.cold_start of them on this LP's arcs, and the plan is optimal (POT's value)
    rng = np.random.default_rng(3)
    a, b = rng.random(80), rng.random(25)
    a, b = a / a.sum(), 2 * b / b.sum()  # (other totals: the guide sees b rescaled)
    rows, cols, costs = restricted(rng, a, b, rng.random((80, 25)), 3)
    v = rng.random(25)
    guides, solve = [], lp.simplex.solve
    monkeypatch.setattr(lp.simplex, "solve",
                        lambda *args, **kwargs: guides.append(kwargs["guide"]) or
                        solve(*args, **kwargs))
    plan = lp.solve_arcs(a, b, rows, cols, costs, lp.guided(v), steps)
    np.testing.assert_array_equal(
        guides[0], lp.guide.cold_start(a, b, rows, cols, costs, v, steps))
    check(a, b / 2, rows, cols, costs, plan)
