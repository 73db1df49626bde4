"""The restartable network simplex (``exact.simplex``) against POT's ``ot.emd2``.

Truth: ``ot.emd2`` on the dense cost matrix, forbidden arcs at a cost no optimum uses;
and LP duality (a coupling with feasible, complementary duals is optimal), alone on an
LP too large for POT to solve in a test.
Tolerances: float64 round-off of sums of order-one costs and masses (1e-12).
"""

import numpy as np
import ot
import pytest

from jaxsynth.wasserstein.exact import simplex
from jaxsynth.wasserstein.exact.levels import northwest_arcs

TOL = 1e-12
BIG = 1e3


def problem(seed, q, m, density, *, equal=False, integer=False):
    """Masses, and the arcs of a random mask with the north-west arcs (a coupling)."""
    rng = np.random.default_rng(seed)
    a = np.full(q, 1.0 / q) if equal else rng.random(q) + 0.01
    b = np.full(m, 1.0 / m) if equal else rng.random(m) + 0.01
    a, b = a / a.sum(), b / b.sum()
    cost = rng.integers(0, 4, (q, m)).astype(float) if integer else rng.random((q, m))
    mask = rng.random((q, m)) < density
    mask[northwest_arcs(a, b)] = True
    rows, cols = np.nonzero(mask)
    return a, b, rows, cols, cost[rows, cols]


def reference(a, b, rows, cols, costs):
    dense = np.full((len(a), len(b)), BIG)
    dense[rows, cols] = costs
    return ot.emd2(a, b, dense, numItermax=10**8)


def check(a, b, rows, cols, costs, result, pot=True):
    """POT's optimal value (unless not ``pot``); a coupling on the arcs; feasible,
    complementary duals (which prove it optimal by LP duality, POT or not)."""
    plan_rows, plan_cols, mass, u, v, basis, _ = result
    m = len(b)
    index = np.searchsorted(rows * m + cols, plan_rows * m + plan_cols)
    np.testing.assert_array_equal(rows[index] * m + cols[index], plan_rows * m + plan_cols)
    if pot:
        assert mass @ costs[index] == pytest.approx(reference(a, b, rows, cols, costs), abs=TOL)
    assert np.all(mass > 0)
    np.testing.assert_allclose(np.bincount(plan_rows, mass, len(a)), a, rtol=0, atol=TOL)
    np.testing.assert_allclose(np.bincount(plan_cols, mass, m), b, rtol=0, atol=TOL)
    assert (costs - u[rows] - v[cols]).min() >= -TOL
    np.testing.assert_allclose(costs[index] - u[plan_rows] - v[plan_cols], 0, atol=TOL)
    assert len(basis.parent) == len(a) + m


def solve_sorted(a, b, rows, cols, costs, **kw):
    order = np.argsort(rows * len(b) + cols)
    return simplex.solve(a, b, rows[order], cols[order], costs[order], **kw)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("density", [0.05, 0.4, 1.0])
def test_random(seed, density):
    rng = np.random.default_rng(seed)
    a, b, r, c, costs = problem(seed, *rng.integers(1, 40, 2), density)
    check(a, b, r, c, costs, simplex.solve(a, b, r, c, costs))


@pytest.mark.parametrize("seed", range(12))
def test_degenerate(seed):
    """Equal masses, integer costs with many ties, zero costs."""
    q, m = [(5, 5), (10, 5), (7, 21), (30, 30)][seed % 4]
    a, b, r, c, costs = problem(seed, q, m, 0.5, equal=True, integer=True)
    check(a, b, r, c, costs, simplex.solve(a, b, r, c, costs))
    zero = np.zeros_like(costs)
    check(a, b, r, c, zero, simplex.solve(a, b, r, c, zero))


def test_split_masses():
    """A row split exactly over two columns, a column exactly over two rows."""
    a, b = np.array([0.5, 0.25, 0.25]), np.array([0.25, 0.25, 0.5])
    rows, cols = np.nonzero(np.ones((3, 3), bool))
    costs = np.abs(rows - cols).astype(float) + 0.125 * (rows == 1)
    result = simplex.solve(a, b, rows, cols, costs)
    check(a, b, rows, cols, costs, result)
    assert np.count_nonzero(result[0] == 0) == 2  # row 0 splits 0.25 + 0.25


def test_restart_after_adding_arcs():
    """Column generation: every round restarted from the last basis reaches the cold
    optimum of its arcs, and the last one POT's optimum of the full problem."""
    rng = np.random.default_rng(7)
    q, m = 60, 45
    a, b = rng.random(q) + 0.1, rng.random(m) + 0.1
    a, b = a / a.sum(), b / b.sum()
    cost = np.abs(rng.random((q, 1)) - rng.random((1, m)))
    keep = np.zeros((q, m), bool)
    keep[northwest_arcs(a, b)] = True
    keep[np.arange(q), np.argmin(cost, axis=1)] = True
    basis, rounds = None, 0
    while True:
        rows, cols = np.nonzero(keep)
        result = simplex.solve(a, b, rows, cols, cost[rows, cols], start=basis)
        check(a, b, rows, cols, cost[rows, cols], result)
        cold = simplex.solve(a, b, rows, cols, cost[rows, cols])
        assert result[2] @ cost[result[0], result[1]] == pytest.approx(
            cold[2] @ cost[cold[0], cold[1]], abs=TOL)
        basis, u, v = result[5], result[3], result[4]
        reduced = cost - u[:, None] - v[None, :]
        new = (reduced < -TOL) & ~keep
        if not new.any():
            break
        top = np.argsort(reduced, axis=1)[:, :2]  # a few of the most violated per row
        add = np.zeros_like(keep)
        add[np.arange(q)[:, None], top] = True
        keep |= add & new
        rounds += 1
    assert rounds >= 2
    assert result[2] @ cost[result[0], result[1]] == pytest.approx(ot.emd2(a, b, cost), abs=TOL)
    again = simplex.solve(a, b, rows, cols, cost[rows, cols], start=basis)
    assert again[6] == 0  # an optimal basis on the same arcs: no pivot


def test_restart_that_does_not_fit_is_cold():
    """A basis on other masses, or on arcs that are gone, starts cold: same optimum."""
    a, b, r, c, costs = problem(3, 20, 15, 0.5)
    basis = simplex.solve(a, b, r, c, costs)[5]
    other = np.roll(a, 1)
    check(other, b, r, c, costs, simplex.solve(other, b, r, c, costs, start=basis))
    nw = np.zeros((20, 15), bool)
    nw[northwest_arcs(a, b)] = True
    tree = basis.keys[basis.keys >= 0]
    gone = tree[~nw[tree // 15, tree % 15]][0]  # a tree arc that is not north-west
    keep = r * 15 + c != gone
    check(a, b, r[keep], c[keep], costs[keep],
          simplex.solve(a, b, r[keep], c[keep], costs[keep], start=basis))


def test_guide():
    """A cold start guided by column duals (of a coarser LP, or any) is optimal."""
    a, b, r, c, costs = problem(5, 50, 12, 0.3)
    guide = np.random.default_rng(0).random(12)
    check(a, b, r, c, costs, simplex.solve(a, b, r, c, costs, guide=guide))


def test_unsorted_arcs():
    a, b, r, c, costs = problem(11, 15, 9, 0.6)
    order = np.random.default_rng(1).permutation(len(r))
    result = simplex.solve(a, b, r[order], c[order], costs[order])
    check(a, b, r, c, costs, result)


def test_deterministic():
    a, b, r, c, costs = problem(2, 40, 30, 0.3, equal=True, integer=True)
    first, second = simplex.solve(a, b, r, c, costs), simplex.solve(a, b, r, c, costs)
    for x, y in zip(first[:5] + tuple(first[5]), second[:5] + tuple(second[5])):
        np.testing.assert_array_equal(x, y)


def test_errors():
    a, b = np.array([0.75, 0.25]), np.array([0.5, 0.5])
    with pytest.raises(RuntimeError, match="coupling"):  # row 0 reaches column 0 only
        simplex.solve(a, b, np.array([0, 1, 1]), np.array([0, 0, 1]), np.ones(3))
    a, b, r, c, costs = problem(4, 30, 30, 1.0)
    with pytest.raises(RuntimeError, match="pivots"):
        simplex.solve(a, b, r, c, costs, max_iter=1)


def coarse_and_fine(seed, q, m, per_row, *, equal=False, integer=False):
    """A fine transport problem (rows: points of [0,1]^2, ℓ∞ costs to the columns') and
    the coarse one whose rows are groups of ``per_row`` consecutive fine rows (centroid
    costs), both on all arcs; the coarse optimal tree."""
    rng = np.random.default_rng(seed)
    n = q * per_row
    x, y = rng.random((n, 2)), rng.random((m, 2))
    if integer:  # many ties
        x, y = np.round(x * 4) / 4, np.round(y * 4) / 4
    a = np.full(n, 1.0 / n) if equal else rng.random(n) + 0.01
    b = np.full(m, 1.0 / m) if equal else rng.random(m) + 0.01
    a, b = a / a.sum(), b / b.sum()
    groups = np.arange(q + 1) * per_row
    coarse_a = np.add.reduceat(a, groups[:-1])
    centroids = np.add.reduceat(x * a[:, None], groups[:-1]) / coarse_a[:, None]
    rows, cols = np.divmod(np.arange(q * m), m)
    coarse = simplex.solve(coarse_a, b, rows, cols,
                           np.abs(centroids[rows] - y[cols]).max(axis=1))
    fine_rows, fine_cols = np.divmod(np.arange(n * m), m)
    fine_costs = np.abs(x[fine_rows] - y[fine_cols]).max(axis=1)
    return a, b, groups, x, y, coarse, (fine_rows, fine_cols, fine_costs)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["float", "ties"])
def test_refine(seed, kind):
    """The refined tree spans the fine problem, its flows are a coupling that splits each
    coarse row's sends among its rows (only to the columns those sends reach), and the
    fine solve restarts from it to POT's optimum."""
    q, m, per_row = [(6, 5), (10, 7), (3, 12), (8, 8)][seed % 4][0], 9, 1 + seed % 4
    equal = kind == "ties"
    a, b, groups, x, y, coarse, (rows, cols, costs) = coarse_and_fine(
        seed, q, m, per_row, equal=equal, integer=equal)
    basis = coarse[5]
    tree = simplex.refine(basis, groups, a, x, y, coarse[4], "linf")
    n = len(a)
    assert tree is not None and len(tree.parent) == n + m
    # a spanning tree: every node reaches the root (n + m) without a cycle
    for u in range(n + m):
        seen, w = set(), u
        while w != n + m:
            assert w not in seen
            seen.add(w)
            w = tree.parent[w]
    real = tree.keys >= 0
    r, c = np.divmod(tree.keys[real], m)
    np.testing.assert_allclose(np.bincount(r, tree.flow[real], n), a, rtol=0, atol=TOL)
    np.testing.assert_allclose(np.bincount(c, tree.flow[real], m), b, rtol=0, atol=TOL)
    assert np.all(tree.flow >= 0)
    coarse_row = np.searchsorted(groups, r, side="right") - 1
    reached = set((coarse[0] * m + coarse[1]).tolist()) | set(
        basis.keys[basis.keys >= 0].tolist())
    assert set((coarse_row * m + c).tolist()) <= reached
    assert simplex._restart(a, b, rows * m + cols, tree) is not None  # it fits: a warm start
    check(a, b, rows, cols, costs, simplex.solve(a, b, rows, cols, costs, start=tree))


def test_refine_that_does_not_fit():
    """Other rows or columns than the coarse tree's, masses that end elsewhere, a coarse
    row without finer rows: no tree."""
    a, b, groups, x, y, coarse, _ = coarse_and_fine(0, 6, 5, 3)
    basis, v = coarse[5], coarse[4]
    assert simplex.refine(basis, groups, a, x, y, v, "l2") is not None
    assert simplex.refine(basis, groups[:-1], a[:groups[-2]], x, y, v, "l2") is None
    assert simplex.refine(basis, groups, a, x, y[:-1], v[:-1], "l2") is None
    assert simplex.refine(basis, groups, a[:-1], x, y, v, "l2") is None
    empty = groups.copy()
    empty[1] = 0
    assert simplex.refine(basis, empty, a, x, y, v, "l2") is None


@pytest.mark.parametrize("q", [3000, simplex.LARGE_LP])
@pytest.mark.parametrize("restart", [False, True])
def test_many_leaf_rows(restart, q):
    """A points-like LP: ``q`` rows of equal mass, 40 columns of unequal mass, costs the
    distances of random points to random atoms.  Nearly every row of a basis is a leaf,
    so most pivots move leaf rows in and out of the core, over several of its rebuilds
    (more than ``CORE_REBUILD`` pivots); restarted, from the optimum of fewer arcs.  With
    ``LARGE_LP`` rows, a large LP (a cold start's larger pricing blocks), checked by its
    duals alone (POT takes seconds on it)."""
    rng = np.random.default_rng(12)
    m = 40
    x, y = rng.random((q, 2)), rng.random((m, 2))
    a, b = np.full(q, 1.0 / q), rng.random(m) + 0.2
    b /= b.sum()
    cost = np.linalg.norm(x[:, None] - y[None], axis=-1)
    keep = rng.random((q, m)) < 0.25
    keep[northwest_arcs(a, b)] = True
    start = None
    if restart:
        fewer = keep & (rng.random((q, m)) < 0.5)
        fewer[northwest_arcs(a, b)] = True
        rows, cols = np.nonzero(fewer)
        start = simplex.solve(a, b, rows, cols, cost[rows, cols])[5]
    rows, cols = np.nonzero(keep)
    result = simplex.solve(a, b, rows, cols, cost[rows, cols], start=start)
    assert result[6] > simplex.CORE_REBUILD
    check(a, b, rows, cols, cost[rows, cols], result, pot=q < simplex.LARGE_LP)
