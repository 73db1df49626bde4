"""Exact transport LPs of a level: dense, or on candidate arcs from given potentials.

Both call POT's network simplex (LEMON's, in C++).  ``solve_arcs`` keeps the work of
column generation: it starts from the duals of the previous round, through POT's
lower-level sparse solver (``ot.lp.emd_wrap.emd_c_sparse``, which takes initial
potentials; ``ot.emd`` does not pass them through).  That function is not public: it is
used only while its signature is the one tested (``POT_WARM_START``), and the public
cold solve stands in otherwise.  Either way the plan is an optimal one of the restricted
LP: the certificate does not depend on the start.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

__all__ = ["Plan", "solve_arcs", "solve_dense"]

MAX_ITER = 10**9
"""Network-simplex iterations before a solve is reported as failed."""


class Plan(NamedTuple):
    """An optimal plan of a transport LP: its arcs of positive mass, and the duals.

    Attributes:
      rows, cols, mass: the plan's arcs (block, atom) and their masses.
      u: [Q] row (block) duals; v: [M] column (atom) duals, ``c − u − v ≥ 0`` (up to
        round-off) on the LP's arcs.
    """

    rows: np.ndarray
    cols: np.ndarray
    mass: np.ndarray
    u: np.ndarray
    v: np.ndarray


def _warm_solver():
    """POT's sparse network simplex with initial potentials, or ``None`` if this POT has
    none (the cold public path is then used)."""
    try:
        from ot.lp.emd_wrap import emd_c_sparse
    except ImportError:
        return None
    return emd_c_sparse


POT_WARM_START = _warm_solver()
"""``emd_c_sparse(a, b, sources, targets, costs, max_iter, alpha, beta)`` of POT ≥ 0.9.7
(its result: flow rows, cols, masses, cost, alpha, beta, status), or ``None``."""


def solve_arcs(a, b, rows, cols, costs, start: Plan | None = None) -> Plan:
    """Optimal transport from ``a`` [Q] to ``b`` [M] on the arcs ``rows``, ``cols``
    (float64 ``costs``), which must admit a coupling (north-west arcs do).

    ``start``: a plan of an earlier round on the same masses, whose duals start the
    simplex (a warm start: fewer pivots, the same optimum).

    Raises:
      RuntimeError: the LP is reported infeasible or unsolved.
    """
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    b = b * (a.sum() / b.sum())  # equal sums, as ot.emd makes them
    if POT_WARM_START is not None:
        args = (a, b, rows.astype(np.uint64), cols.astype(np.uint64),
                np.asarray(costs, np.float64), MAX_ITER)
        if start is not None:
            args += (np.asarray(start.u, np.float64), np.asarray(start.v, np.float64))
        flow_rows, flow_cols, mass, _, u, v, status = POT_WARM_START(*args)
        if status != 1:
            raise RuntimeError(f"exact W1: the restricted transport LP failed (status {status})")
        keep = mass > 0
        return Plan(flow_rows[keep].astype(np.int64), flow_cols[keep].astype(np.int64),
                    mass[keep], np.asarray(u), np.asarray(v))
    return _cold_arcs(a, b, rows, cols, costs)


def _cold_arcs(a, b, rows, cols, costs) -> Plan:
    """``solve_arcs`` through the public ``ot.emd`` on a ``scipy.sparse`` cost (cold)."""
    import ot
    import scipy.sparse as sp

    # every arc cost + 1: explicit zeros would drop arcs; the plan is unchanged
    matrix = sp.coo_matrix((np.asarray(costs) + 1.0, (rows, cols)), shape=(len(a), len(b)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan, log = ot.emd(a, b, matrix, log=True, numItermax=MAX_ITER, check_marginals=False)
    if log.get("warning") is not None:
        raise RuntimeError(f"exact W1: the restricted transport LP failed ({log['warning']})")
    plan = plan.tocoo()
    keep = plan.data > 0
    return Plan(plan.row[keep], plan.col[keep], plan.data[keep],
                np.asarray(log["u"]) - 1.0, np.asarray(log["v"]))


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
