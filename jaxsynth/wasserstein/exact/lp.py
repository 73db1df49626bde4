"""Exact transport LPs of a level: dense, or on candidate arcs keeping their basis.

``solve_dense`` is POT's network simplex (LEMON's, in C++) on the full cost matrix.
``solve_arcs`` keeps the work of column generation: it is ``simplex.solve``, which
restarts a round from the previous round's optimal spanning tree (POT's solvers can only
be seeded with potentials and rebuild their start every call), and a level's first LP
from the level above's tree refined (``simplex.refine``) or cold, guided by its column
duals made a better guide for this LP (``guide.cold_start``).  Should it
not settle within its pivot limit (round-off can make a degenerate LP cycle), POT's
public cold solve stands in.
Either way the plan is an optimal one of the restricted LP: the certificate does not
depend on the start or the solver.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from jaxsynth.wasserstein.exact import guide, simplex

__all__ = ["Plan", "guided", "solve_arcs", "solve_dense"]

MAX_ITER = 10**9
"""POT's network-simplex iterations before a solve is reported as failed."""


class Plan(NamedTuple):
    """An optimal plan of a transport LP: its arcs of positive mass, and the duals.

    Attributes:
      rows, cols, mass: the plan's arcs (block, atom) and their masses.
      u: [Q] row (block) duals; v: [M] column (atom) duals, ``c − u − v ≥ 0`` (up to
        round-off) on the LP's arcs.
      basis: the optimal spanning tree of ``solve_arcs`` (``simplex.Basis``), to restart
        from; ``None`` otherwise.
    """

    rows: np.ndarray
    cols: np.ndarray
    mass: np.ndarray
    u: np.ndarray
    v: np.ndarray
    basis: simplex.Basis | None = None


def guided(v, basis: simplex.Basis | None = None) -> Plan:
    """A start for ``solve_arcs`` that holds only a coarser LP's column duals ``v`` and,
    if given, a tree (``simplex.refine``'s) that restarts the simplex instead."""
    return Plan((), (), (), (), v, basis)


def solve_arcs(a, b, rows, cols, costs, start: Plan | None = None, steps: int = 0) -> Plan:
    """Optimal transport from ``a`` [Q] to ``b`` [M] on the arcs ``rows``, ``cols``
    (float64 ``costs``), which must admit a coupling (north-west arcs do).

    ``start``: a plan whose basis restarts the simplex (an earlier round's on the same
    masses, or a coarser level's tree refined to these rows), or any plan without one
    (``guided``, or POT's) whose column duals ``v`` guide a cold start, scaled and then
    given ``steps`` Jacobi steps on this LP (``guide.cold_start``); none: a cold start
    with each row on its cheapest arc.

    Raises:
      RuntimeError: the LP has no coupling on these arcs or is not solved.
    """
    costs = np.asarray(costs, np.float64)
    basis = None if start is None else start.basis
    duals = None if start is None or basis is not None else guide.cold_start(
        a, b, rows, cols, costs, start.v, steps)
    b = b * (a.sum() / b.sum())  # equal sums, as ot.emd makes them
    try:
        flow_rows, flow_cols, mass, u, v, basis, _ = simplex.solve(
            a, b, rows, cols, costs, start=basis, guide=duals)
    except RuntimeError:  # not settled (or no coupling, which POT then reports)
        return _pot_arcs(a, b, np.asarray(rows), np.asarray(cols), np.asarray(costs))
    return Plan(flow_rows, flow_cols, mass, u, v, basis)


def _pot_arcs(a, b, rows, cols, costs) -> Plan:
    """``solve_arcs`` by POT's public ``ot.emd`` on a ``scipy.sparse`` cost (cold)."""
    import ot
    import scipy.sparse as sp

    # every arc cost + 1: explicit zeros would drop arcs; the plan is unchanged
    matrix = sp.coo_matrix((costs + 1.0, (rows, cols)), shape=(len(a), len(b)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan, log = ot.emd(a, b, matrix, log=True, numItermax=MAX_ITER, check_marginals=False)
    if log.get("warning") is not None:
        raise RuntimeError(f"exact W1: the restricted transport LP failed ({log['warning']})")
    plan = plan.tocoo()
    keep = plan.data > 0
    return Plan(plan.row[keep].astype(np.int64), plan.col[keep].astype(np.int64),
                plan.data[keep], np.asarray(log["u"]) - 1.0, np.asarray(log["v"]))


def solve_dense(a, b, cost) -> Plan:
    """Optimal transport from ``a`` [Q] to ``b`` [M] on the full cost matrix [Q, M]."""
    import ot

    rows, cols = _shuffle(len(a)), _shuffle(len(b))
    plan, log = ot.emd(a[rows], b[cols], cost[np.ix_(rows, cols)], log=True, numItermax=MAX_ITER,
                       check_marginals=False)
    i, j = np.nonzero(plan > 0)
    u, v = np.empty(len(a)), np.empty(len(b))
    u[rows], v[cols] = log["u"], log["v"]
    return Plan(rows[i], cols[j], plan[i, j], u, v)


def _shuffle(size: int) -> np.ndarray:
    """A fixed permutation of ``range(size)`` (the same in every call: plans stay a
    function of the LP).  LEMON's block search for an entering arc, which POT runs, is
    several times slower on a dense problem whose rows and columns are in spatial (Morton)
    order than on one in scattered order."""
    return np.random.default_rng(size).permutation(size)
