"""A primal network simplex for sparse transport LPs that restarts from a basis.

Column generation re-solves a transport LP after adding arcs, many rounds per level.
POT's network simplex (LEMON's, in C++) can only be seeded with potentials and rebuilds
its start every call.  This one returns its optimal spanning tree (``Basis``) and, given
it on a superset of the arcs (same masses), starts there.

The pivots are LEMON's (which POT runs), in its steps: block search pricing
(``_find_entering``: blocks of ``sqrt(arcs)`` arcs, larger on large cold starts), then
``_pivot``'s find join, find leaving arc, change flow, update tree, update potentials,
on a strongly feasible tree (no cycling on degenerate pivots) kept as LEMON's arrays
(``Tree``), so a pivot costs its cycle and the smaller side of the tree.  Those arrays hold only the
tree's *core* (the columns and the rows with children): a row's potential is its
parent's minus its tree arc's cost, read when pricing, so the leaf rows (nearly all,
when points far outnumber atoms) never shift; a leaf row enters the core when a pivot
makes it internal and leaves at a rebuild every ``CORE_REBUILD`` pivots or more.  The
start: an artificial root with big-M arcs, each row hung on its arc of least
``c − guide`` (column duals, e.g. a coarser LP's); or a given tree (a round's last, or a
coarser LP's ``refine``-d).  Derivation and measurements: ``docs/theory/exact-w1.md``.

Conventions: rows ``0..Q-1`` and columns ``Q..Q+M-1`` are the nodes, ``Q+M`` the root;
arcs are uncapacitated and rows are sources (the arc above a row points to its parent,
the one above a column away from it, but for a column's arc to the root); a tree arc's
flow is kept on its lower node.  Potentials ``pi`` give the reduced cost
``c + pi[row] - pi[col]`` (so ``u = -pi`` on rows, ``v = pi`` on columns).
"""

from __future__ import annotations

import enum
from typing import NamedTuple

import numpy as np

from jaxsynth.numba_cache import helper, kernel

__all__ = ["Basis", "Status", "refine", "solve"]

PIVOTS_PER_SIZE = 4
"""Pivots (per arc and node) before a solve is reported as failed: real solves take
about one per node, and at most 1.1 per arc and node were seen on the benchmarks' LPs;
a solve that round-off makes cycle is cut short (``lp.solve_arcs`` then asks POT)."""
TOL = 1e-14
"""Reduced costs above ``-TOL · max(1, max |cost|)``, times their potentials' magnitude
(at least 1: ``_find_entering``), count as non-negative."""
ZERO = 1e-15
"""Flows up to this are zero to the pivots (round-off of masses that sum to 1)."""
FLOW_TOL = 1e-12
"""Largest flow left on an artificial arc (the masses' round-off) at an optimum."""
CORE_REBUILD = 1024
"""Pivots between two rebuilds of the core (rows that became leaves leave it): at least
this many, and at least a 32nd of the nodes, so that a rebuild costs a few node visits a
pivot."""
LARGE_LP = 1 << 16
"""Nodes (rows and columns) from which a cold start prices blocks of ``BLOCK_COLD``
times LEMON's ``sqrt(arcs)`` arcs: there a pivot's tree update costs more than pricing a
block, and the steeper arcs of larger blocks take fewer pivots from the big-M start
(below, and on restarts, the larger blocks were slower)."""
BLOCK_COLD = 2.0
"""A large LP's pricing block from a cold start, times ``sqrt(arcs)``."""


class Basis(NamedTuple):
    """The optimal spanning tree of a solve, to restart one on more arcs (same masses).

    Attributes:
      parent: [Q+M] each node's parent (``Q+M``: the root).
      keys: [Q+M] the key ``row · M + col`` of the arc above each node; for an arc of
        the root, ``-2`` if it runs from a column to the root, else ``-1``.
      flow: [Q+M] the flow on that arc.
    """

    parent: np.ndarray
    keys: np.ndarray
    flow: np.ndarray


class Status(enum.IntEnum):
    """How ``_simplex`` ended."""

    OPTIMAL = 0
    OUT_OF_PIVOTS = 1
    """``max_iter`` pivots without an optimum."""
    INFEASIBLE = 2
    """The arcs admit no coupling of the masses (mass left on an artificial arc), or a
    cycle without a blocking arc."""


class Arcs(NamedTuple):
    """An LP's arcs (nodes: rows ``0..Q-1``, columns ``Q..Q+M-1``, the root ``Q+M``).

    Attributes:
      src: [A] int32 each real arc's row; tgt: [A] int32 its column.
      cost: [A + 2(Q+M)] the real arcs' costs, then the artificial arcs': ``A + u`` is
        row ``u``'s arc to the root (cost 0) or the root's to column ``u`` (big M
        ``+ guide``), ``A + Q + M + u`` column ``u``'s to the root (``−guide``).
    """

    src: np.ndarray
    tgt: np.ndarray
    cost: np.ndarray


class Tree(NamedTuple):
    """The spanning tree a solve pivots, LEMON's arrays ([Q+M+1] unless said).

    Attributes:
      parent, pred, flow: each node's parent (the root's: -1), the index in ``Arcs.cost``
        of the arc above it, and that arc's flow (kept on the lower node).
      thread, rev, succ, last: the core's preorder (cyclic through the root), its reverse,
        subtree sizes (0 marks a leaf row outside the core) and last successors.
      pi: the core's potentials (reduced cost ``c + pi[row] − pi[col]``).
      rowc: [Q] each row's tree arc's cost: a row's potential is its parent's minus it.
      dirty: scratch of ``_update_tree`` (thread entries whose reverse it sets again).
    """

    parent: np.ndarray
    pred: np.ndarray
    flow: np.ndarray
    thread: np.ndarray
    rev: np.ndarray
    succ: np.ndarray
    last: np.ndarray
    pi: np.ndarray
    rowc: np.ndarray
    dirty: np.ndarray


def refine(basis: Basis, groups, a, row_points, col_points, guide, metric: str
           ) -> Basis | None:
    """The optimal tree ``basis`` of a coarser LP as a spanning tree of a finer one.

    The finer LP has the same columns; its rows (masses ``a`` [Q']) refine the coarse
    rows: coarse row ``i`` is the finer rows ``groups[i]:groups[i+1]``.  What each coarse
    row sends on its tree arcs (to its parent and its children among the columns) is
    shared out among its finer rows by the least-cost rule (pairs in increasing order of
    ``c − guide``, each taking what its row and column have left, until one of them is
    spent), which joins the finer rows and those columns by ``rows + arcs − 1`` arcs, a
    tree (an arc of zero flow joins what a tie would cut apart).  Costs ``c`` are the
    ``metric`` distances (``"linf"`` or ``"l2"``) between ``row_points`` [Q', d] and
    ``col_points`` [M, d]; ``guide``: column duals (the coarser LP's).  The tree's
    coupling is the coarse plan, each coarse row's sends split among its finer rows: a
    start near the finer optimum for ``solve``, whose arcs must hold the tree's real
    arcs (``keys ≥ 0``).  ``None`` where the coarse tree does not fit ``groups`` and the
    columns, or a coarse row has no finer rows.
    """
    q, m = len(groups) - 1, len(col_points)
    if len(basis.parent) != q + m or groups[-1] != len(a):
        return None
    fits, parent, keys, flow = _refine(
        np.asarray(groups, np.int64), np.ascontiguousarray(a, np.float64), q, m,
        np.asarray(basis.keys, np.int64),
        np.asarray(basis.flow, np.float64), np.ascontiguousarray(row_points, np.float64),
        np.ascontiguousarray(col_points, np.float64), np.ascontiguousarray(guide, np.float64),
        metric == "linf")
    return Basis(parent, keys, flow) if fits else None


@helper
def _distance(x, y, linf):
    """The ℓ∞ (``linf``) or ℓ2 distance of two points."""
    total = 0.0
    for k in range(len(x)):
        diff = abs(x[k] - y[k])
        if linf:
            total = max(total, diff)
        else:
            total += diff * diff
    return total if linf else np.sqrt(total)


@kernel
def _refine(groups, a, q, m, keys, flow, row_points, col_points, guide, linf):
    """``refine``'s tree: (fits, parent, keys, flow) over the finer rows and the columns."""
    n = groups[-1]
    root = n + m
    # each coarse row's tree arcs (column, flow), grouped by row
    first = np.zeros(q + 1, np.int64)
    for u in range(q + m):
        if keys[u] >= 0:
            first[keys[u] // m + 1] += 1
    for i in range(q):
        first[i + 1] += first[i]
    fill = first[:-1].copy()
    arc_col = np.empty(first[q], np.int64)
    arc_flow = np.empty(first[q])
    for u in range(q + m):
        if keys[u] >= 0:
            i = keys[u] // m
            arc_col[fill[i]], arc_flow[fill[i]] = keys[u] % m, flow[u]
            fill[i] += 1
    # the finer tree's edges, undirected: (node, node or root, flow, code of the key)
    ends = np.empty((root, 2), np.int64)
    edge_flow = np.empty(root)
    code = np.zeros(root, np.int64)  # an artificial arc's code (-1, -2); 0: a real arc
    e = 0
    for j in range(m):
        if keys[q + j] < 0:  # a column on the root stays there
            ends[e, 0], ends[e, 1], edge_flow[e], code[e] = n + j, root, flow[q + j], keys[q + j]
            e += 1
    for i in range(q):
        lo, hi, t0, t1 = groups[i], groups[i + 1], first[i], first[i + 1]
        s, t = hi - lo, t1 - t0
        need = s if t == 0 else s + t - 1 + (1 if keys[i] < 0 else 0)
        if s == 0 or e + need > root:  # (not the tree of a coarser LP on these rows)
            return False, ends[:, 0], code, edge_flow
        if t == 0:  # a row on the root: its finer rows too
            for r in range(lo, hi):
                ends[e, 0], ends[e, 1], edge_flow[e], code[e] = r, root, a[r], -1
                e += 1
            continue
        if keys[i] < 0:  # the row hangs on the root by an empty arc: its first row does
            ends[e, 0], ends[e, 1], edge_flow[e], code[e] = lo, root, 0.0, -1
            e += 1
        # least cost first: s + t - 1 arcs, a tree
        reduced = np.empty(s * t)
        for r in range(s):
            for k in range(t):
                j = arc_col[t0 + k]
                reduced[r * t + k] = _distance(row_points[lo + r], col_points[j], linf) - guide[j]
        left, sent = a[lo:hi].copy(), arc_flow[t0:t1].copy()
        row_open, col_open = np.ones(s, np.bool_), np.ones(t, np.bool_)
        rows_open, cols_open = s, t
        for pair in np.argsort(reduced, kind="mergesort"):
            r, k = pair // t, pair % t
            if not (row_open[r] and col_open[k]):
                continue
            done = rows_open == 1 and cols_open == 1
            x = left[r] if done else max(0.0, min(left[r], sent[k]))  # the last takes the rest
            ends[e, 0], ends[e, 1], edge_flow[e] = lo + r, n + arc_col[t0 + k], x
            e += 1
            if done:
                break
            left[r] -= x
            sent[k] -= x
            if rows_open > 1 and (cols_open == 1 or left[r] <= sent[k]):
                row_open[r] = False
                rows_open -= 1
            else:
                col_open[k] = False
                cols_open -= 1
    if e != root:
        return False, ends[:, 0], code, edge_flow
    # orient the edges from the root (breadth first)
    start = np.zeros(root + 2, np.int64)
    for x in range(root):
        start[ends[x, 0] + 1] += 1
        start[ends[x, 1] + 1] += 1
    for u in range(root + 1):
        start[u + 1] += start[u]
    incident = np.empty(2 * root, np.int64)
    fill = start[:-1].copy()
    for x in range(root):
        for side in range(2):
            incident[fill[ends[x, side]]] = x
            fill[ends[x, side]] += 1
    parent = np.full(root, -1, np.int64)
    tree_keys = np.empty(root, np.int64)
    tree_flow = np.empty(root)
    seen = np.zeros(root + 1, np.bool_)
    queue = np.empty(root + 1, np.int64)
    queue[0], seen[root] = root, True
    head, tail = 0, 1
    while head < tail:
        u = queue[head]
        head += 1
        for slot in range(start[u], start[u + 1]):
            x = incident[slot]
            w = ends[x, 0] if ends[x, 1] == u else ends[x, 1]
            if seen[w]:
                continue
            seen[w] = True
            queue[tail] = w
            tail += 1
            parent[w], tree_flow[w] = u, edge_flow[x]
            tree_keys[w] = code[x] if code[x] < 0 else ends[x, 0] * m + ends[x, 1] - n
    return tail == root + 1, parent, tree_keys, tree_flow


def solve(a, b, rows, cols, costs, start: Basis | None = None, guide=None,
          max_iter: int | None = None):
    """Optimal transport from ``a`` [Q] to ``b`` [M] on the arcs ``rows``, ``cols``
    (unique pairs, float64 ``costs``), which must admit a coupling.

    ``start``: the ``Basis`` of an earlier solve with the same ``a`` and ``b`` on a subset
    of these arcs; ignored (a cold start) if it does not fit.  ``guide``: [M] column
    duals that a cold start begins from (those of a coarser LP): each row first sends
    its mass on its arc of least ``c − guide``.

    Returns ``(rows, cols, mass, u, v, basis, pivots)``: the plan's arcs of positive mass
    in key order, duals with ``c − u − v ≥ 0`` on every arc (0 on the plan's), the basis.

    Raises:
      RuntimeError: no coupling on these arcs, or no optimum within ``max_iter`` pivots.
    """
    a, b = np.ascontiguousarray(a, np.float64), np.ascontiguousarray(b, np.float64)
    q, m = len(a), len(b)
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    keys = rows * m + cols
    if np.any(keys[1:] <= keys[:-1]):
        order = np.argsort(keys)
        rows, cols, keys = rows[order], cols[order], keys[order]
        costs = np.asarray(costs, np.float64)[order]
    costs = np.ascontiguousarray(costs, np.float64)
    if max_iter is None:
        max_iter = PIVOTS_PER_SIZE * (len(keys) + q + m)
    tol = TOL * max(1.0, float(np.abs(costs).max(initial=0.0)))
    guide = np.zeros(m) if guide is None else np.ascontiguousarray(guide, np.float64)
    # big M: small (potentials stay small, pricing sees no round-off of it); _simplex
    # raises it while an optimum still sends mass through the root
    art = 4.0 * (np.abs(costs).max() + np.abs(guide).max() + 1.0) if len(keys) else 1.0
    arcs = Arcs(rows.astype(np.int32), (cols + q).astype(np.int32),
                _arc_costs(costs, guide, q, art))
    basis = None if start is None else _restart(a, b, keys, start)
    tree = _new_tree(q, m, basis)
    if basis is None:
        _hang_rows(q, a, b, arcs, guide, tree)
    status, pivots, pi = _simplex(q, arcs, tree, guide, art, basis is None, tol, max_iter)
    if status == Status.OUT_OF_PIVOTS:
        raise RuntimeError(f"network simplex: no optimum within {max_iter} pivots")
    if status == Status.INFEASIBLE:
        raise RuntimeError("network simplex: the arcs admit no coupling of the masses")
    parent, pred, flow = tree.parent[:-1], tree.pred[:-1], tree.flow[:-1]
    real = pred < len(keys)
    arcs_used = np.sort(pred[real & (flow > 0)])
    arc_flow = np.zeros(len(keys))
    arc_flow[pred[real]] = flow[real]
    codes = np.where(pred < len(keys) + q + m, -1, -2)
    basis = Basis(parent.copy(), np.where(real, keys[np.where(real, pred, 0)], codes),
                  flow.copy())
    return (rows[arcs_used], cols[arcs_used], arc_flow[arcs_used], -pi[:q], pi[q:q + m], basis,
            pivots)


def _arc_costs(costs, guide, q: int, art: float) -> np.ndarray:
    """``Arcs.cost``: the real arcs' ``costs``, then the artificial arcs' (big M ``art``)."""
    n_arcs, root = len(costs), q + len(guide)
    cost = np.zeros(n_arcs + 2 * root)
    cost[:n_arcs] = costs
    cost[n_arcs + q:n_arcs + root] = art + guide
    cost[n_arcs + root + q:] = -guide
    return cost


def _new_tree(q: int, m: int, basis) -> Tree:
    """A ``Tree`` holding the basis ``(parent, pred, flow)`` (``_restart``'s), or to be
    filled by ``_hang_rows`` (``basis`` None)."""
    n = q + m + 1
    if basis is None:
        basis = np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n)
    parent, pred, flow = basis
    return Tree(parent, pred, flow, *(np.empty(n, np.int32) for _ in range(4)), np.empty(n),
                np.empty(q), np.empty(n, np.int32))


def _restart(a, b, keys, start: Basis):
    """The tree of ``start`` on the arcs ``keys`` (``Tree``'s parent, pred, flow), or None
    if it does not fit (an arc gone, other masses)."""
    q, m = len(a), len(b)
    if len(start.parent) != q + m:
        return None
    real = start.keys >= 0
    index = np.searchsorted(keys, start.keys[real])
    if np.any(index >= len(keys)) or np.any(keys[np.minimum(index, len(keys) - 1)]
                                             != start.keys[real]):
        return None
    parent = np.append(np.asarray(start.parent, np.int32), -1).astype(np.int32)
    nodes = np.arange(q + m)
    artificial = np.where(start.keys == -1, len(keys) + nodes, len(keys) + q + m + nodes)
    pred = np.append(artificial, -1).astype(np.int32)
    pred[:-1][real] = index
    flow = np.append(np.asarray(start.flow, np.float64), 0.0)
    # the tree's flows must balance these masses: rows send a, columns receive b
    up = (np.arange(q + m) < q) | (start.keys == -2)
    signed = flow[:-1] * np.where(up, 1.0, -1.0)
    net = signed - np.bincount(parent[:-1], signed, q + m + 1)[:q + m]
    if max(np.abs(net[:q] - a).max(initial=0.0), np.abs(net[q:] + b).max(initial=0.0)) > FLOW_TOL:
        return None
    return parent, pred, flow


@kernel
def _hang_rows(q, a, b, arcs, guide, tree):
    """A cold start: each row on its arc of least ``cost − guide``, each column on the
    root (an arc to the root for its excess, from it for its shortage), rows without
    arcs on the root; strongly feasible (the arcs of zero flow point to the root)."""
    parent, pred, flow = tree.parent, tree.pred, tree.flow
    src, tgt, cost = arcs.src, arcs.tgt, arcs.cost
    root = len(parent) - 1
    n_arcs = len(src)
    n_up = n_arcs + root
    cheapest = np.empty(q, np.int64)
    best = np.empty(q)
    for r in range(q):
        cheapest[r] = -1
    for e in range(n_arcs):
        r = src[e]
        if cheapest[r] < 0 or cost[e] - guide[tgt[e] - q] < best[r]:
            cheapest[r], best[r] = e, cost[e] - guide[tgt[e] - q]
    excess = np.empty(root - q)
    for j in range(root - q):
        excess[j] = -b[j]
    for r in range(q):
        e = cheapest[r]
        if e < 0:
            parent[r], pred[r] = root, n_arcs + r
        else:
            parent[r], pred[r] = tgt[e], e
            excess[tgt[e] - q] += a[r]
        flow[r] = a[r]
    for j in range(q, root):
        parent[j] = root
        if excess[j - q] < 0:
            pred[j], flow[j] = n_arcs + j, -excess[j - q]
        else:
            pred[j], flow[j] = n_up + j, excess[j - q]
    parent[root] = -1


@kernel
def _simplex(q, arcs, tree, guide, art, cold, tol, max_iter):
    """Pivot from the basis in ``tree`` (parent, pred, flow; updated in place) to an
    optimum, LEMON's loop: price for an entering arc, pivot on it; when none is left,
    price again on potentials computed afresh (no drift) and, while an optimum still
    sends mass through the root, raise the big M ``art`` (up to LEMON's sure bound).
    Returns (``Status``; pivots; dual potentials with every component of real tree arcs
    kept near zero)."""
    n = len(tree.parent)
    root = n - 1
    n_arcs = len(arcs.src)
    sure = art * n
    n_core = _thread(tree, q)
    if n_core == 0:
        return Status.INFEASIBLE, 0, tree.pi
    _potentials(q, arcs, tree, art)
    base, pivots = tree.pi[root], 0
    for u in range(q):
        tree.rowc[u] = arcs.cost[tree.pred[u]]
    rebuild = max(CORE_REBUILD, n // 32)
    scale = BLOCK_COLD if cold and n >= LARGE_LP else 1.0
    block = max(int(np.ceil(scale * np.sqrt(n_arcs))), 10)
    next_arc, checked = np.int64(0), False  # (not a literal: one compiled signature)
    while n_arcs:
        e_in, reduced, next_arc = _find_entering(arcs, tree, tol, block, next_arc)
        if e_in < 0:
            if checked:
                if art >= sure or not _through_root(tree, n_arcs):
                    break
                art *= 16.0
                for j in range(q, root):
                    arcs.cost[n_arcs + j] = art + guide[j - q]
            _potentials(q, arcs, tree, art)  # no drift: price again
            base = tree.pi[root]
            checked = True
            continue
        checked = False
        if pivots >= max_iter:
            return Status.OUT_OF_PIVOTS, pivots, tree.pi
        n_core = _pivot(q, e_in, reduced, arcs, tree, n_core)
        if n_core == 0:
            return Status.INFEASIBLE, pivots, tree.pi
        pivots += 1
        if pivots % rebuild == 0:  # rows that became leaves leave the core
            n_core = _thread(tree, q)
        if abs(tree.pi[root] - base) > art:  # potentials drifted: their round-off would grow
            _potentials(q, arcs, tree, art)
            base = tree.pi[root]
    if _through_root(tree, n_arcs):
        return Status.INFEASIBLE, pivots, tree.pi
    _thread(tree, np.int64(0))  # (not a literal 0: one compiled signature)
    return Status.OPTIMAL, pivots, _duals(q, arcs, tree)


@helper
def _find_entering(arcs, tree, tol, block, start):
    """LEMON's block search: scan the arcs cyclically from ``start`` in blocks of
    ``block``, and take the arc of least reduced cost of the first block that holds one
    below ``-tol`` times its potentials' magnitude (at least 1; POT's test of LEMON's
    search): a reduced cost is a difference of potentials, and the round-off of large
    ones would otherwise make arcs of reduced cost zero enter, degenerate pivot after
    pivot, forever.  Returns (the arc, or -1 if none; its reduced cost; where the next
    search starts)."""
    src, tgt, cost = arcs.src, arcs.tgt, arcs.cost
    parent, pi, rowc = tree.parent, tree.pi, tree.rowc
    n_arcs = len(src)
    e_in, best, count, e = -1, -tol, block, start
    for _ in range(n_arcs):
        row = src[e]
        r = cost[e] + pi[parent[row]] - rowc[row] - pi[tgt[e]]
        if r < best and r < -tol * max(1.0, abs(pi[parent[row]]), abs(pi[tgt[e]])):
            best, e_in = r, e
        e += 1
        if e == n_arcs:
            e = 0
        count -= 1
        if count == 0:
            if e_in >= 0:
                break
            count = block
    return e_in, best, e


@helper
def _pivot(q, e_in, r_in, arcs, tree, n_core):
    """Enter arc ``e_in`` (reduced cost ``r_in``) in LEMON's steps: find the cycle's
    apex, the leaving arc, change the flow around the cycle, update the tree, shift the
    potentials of the moved subtree.  A leaf row outside the core whose own arc leaves
    just moves; one that the pivot makes internal enters the core first.  Returns the
    core's size, or 0 if the cycle is unbounded."""
    s, t = arcs.src[e_in], arcs.tgt[e_in]
    join = _find_join(s, t, tree)
    u_out, on_source_side, delta = _find_leaving(q, s, t, join, arcs, tree)
    if u_out < 0:
        return 0
    _change_flow(q, s, t, join, delta, arcs, tree)
    if tree.succ[s] == 0:  # a leaf row outside the core
        if u_out == s:  # moves to t: its potential follows t's, no thread to update
            tree.parent[s], tree.pred[s], tree.flow[s] = t, e_in, delta
            tree.rowc[s] = arcs.cost[e_in]
            return n_core
        _enter_core(s, tree)
        n_core += 1
    u_in, v_in = (s, t) if on_source_side else (t, s)
    _update_tree(q, u_in, v_in, u_out, join, arcs, tree)
    tree.pred[u_in], tree.flow[u_in] = e_in, delta
    if u_in < q:
        tree.rowc[u_in] = arcs.cost[e_in]
    # shift u_in's side so that e_in's reduced cost is zero
    _update_potentials(u_in, -r_in if u_in < q else r_in, tree, n_core)
    return n_core


@helper
def _points_up(u, q, pred, n_up):
    """Whether the tree arc above node ``u`` points to its parent (a row's, or a column's
    artificial arc to the root): flow around a cycle runs against it on the source side."""
    return u < q or pred[u] >= n_up


@helper
def _find_join(s, t, tree):
    """The apex of the cycle that arc ``s → t`` closes (a leaf row, succ 0, climbs first)."""
    parent, succ = tree.parent, tree.succ
    u, v = s, t
    while u != v:
        if succ[u] < succ[v]:
            u = parent[u]
        else:
            v = parent[v]
    return u


@helper
def _find_leaving(q, s, t, join, arcs, tree):
    """The leaving arc: the last blocking one along the cycle from the apex (strongly
    feasible), flows within ``ZERO`` of the least one blocking alike.  Returns (the node
    below it, or -1 if nothing blocks; whether it is on the source ``s``'s side; the flow
    the cycle carries, 0 if within ``ZERO``)."""
    parent, pred, flow = tree.parent, tree.pred, tree.flow
    n_up = len(arcs.src) + len(parent) - 1
    delta = np.inf
    u = s  # the flow runs down this side: arcs pointing up (above rows) decrease
    while u != join:
        if _points_up(u, q, pred, n_up) and flow[u] < delta:
            delta = flow[u]
        u = parent[u]
    u = t  # and up this side: arcs pointing down (above columns) decrease
    while u != join:
        if not _points_up(u, q, pred, n_up) and flow[u] < delta:
            delta = flow[u]
        u = parent[u]
    if delta == np.inf:
        return -1, False, delta
    blocking = delta + ZERO
    u_out = -1
    u = t
    while u != join:
        if not _points_up(u, q, pred, n_up) and flow[u] <= blocking:
            u_out = u
        u = parent[u]
    on_source_side = u_out < 0
    if on_source_side:
        u = s
        while not (_points_up(u, q, pred, n_up) and flow[u] <= blocking):
            u = parent[u]
        u_out = u
    return u_out, on_source_side, 0.0 if delta <= ZERO else delta


@helper
def _change_flow(q, s, t, join, delta, arcs, tree):
    """Augment ``delta`` around the cycle of arc ``s → t`` (nothing if 0)."""
    if delta == 0.0:
        return
    parent, pred, flow = tree.parent, tree.pred, tree.flow
    n_up = len(arcs.src) + len(parent) - 1
    u = s
    while u != join:
        flow[u] += -delta if _points_up(u, q, pred, n_up) else delta
        u = parent[u]
    u = t
    while u != join:
        flow[u] += delta if _points_up(u, q, pred, n_up) else -delta
        u = parent[u]


@helper
def _update_tree(q, u_in, v_in, u_out, join, arcs, tree):
    """Swap the leaving arc (above ``u_out``) for the entering one (``u_in`` under
    ``v_in``): re-hang the stem ``u_in … u_out`` under ``v_in``, reversing its parent
    links and arcs, and update the core's thread, reverse thread, subtree sizes and last
    successors (LEMON's ``updateTreeStructure``).  The entering arc's own pred and flow
    are the caller's to set."""
    parent, pred, flow, rowc = tree.parent, tree.pred, tree.flow, tree.rowc
    thread, rev, succ, last, dirty = tree.thread, tree.rev, tree.succ, tree.last, tree.dirty
    cost = arcs.cost
    old_rev, old_succ, old_last = rev[u_out], succ[u_out], last[u_out]
    v_out = parent[u_out]
    if u_in == u_out:
        parent[u_in] = v_in
        if thread[v_in] != u_out:  # move the subtree's thread segment after v_in
            after = thread[old_last]
            thread[old_rev] = after
            rev[after] = old_rev
            after = thread[v_in]
            thread[v_in] = u_out
            rev[u_out] = v_in
            thread[old_last] = after
            rev[after] = old_last
    else:
        # re-hang the stem u_in … u_out under v_in, reversing its parent links
        thread_continue = thread[old_last] if old_rev == v_in else thread[v_in]
        stem, par_stem = u_in, v_in
        lst = last[u_in]
        after = thread[lst]
        thread[v_in] = u_in
        dirty[0] = v_in
        n_dirty = 1
        while stem != u_out:
            next_stem = parent[stem]
            thread[lst] = next_stem
            dirty[n_dirty] = lst
            n_dirty += 1
            before = rev[stem]
            thread[before] = after
            rev[after] = before
            parent[stem] = par_stem
            par_stem, stem = stem, next_stem
            lst = rev[par_stem] if last[stem] == last[par_stem] else last[stem]
            after = thread[lst]
        parent[u_out] = par_stem
        thread[lst] = thread_continue
        rev[thread_continue] = lst
        last[u_out] = lst
        if old_rev != v_in:
            thread[old_rev] = after
            rev[after] = old_rev
        for i in range(n_dirty):
            rev[thread[dirty[i]]] = dirty[i]
        sizes, stem_last = 0, last[u_out]
        u = u_out
        while u != u_in:
            p = parent[u]
            pred[u], flow[u] = pred[p], flow[p]
            if u < q:
                rowc[u] = cost[pred[u]]
            sizes += succ[u] - succ[p]
            succ[u] = sizes
            last[p] = stem_last
            u = p
        succ[u_in] = old_succ

    up_limit_out = join if last[join] == v_in else -1
    last_out = last[u_out]
    u = v_in
    while u != -1 and last[u] == v_in:
        last[u] = last_out
        u = parent[u]
    if join != old_rev and v_in != old_rev:
        u = v_out
        while u != up_limit_out and u != -1 and last[u] == old_last:
            last[u] = old_rev
            u = parent[u]
    elif last_out != old_last:
        u = v_out
        while u != up_limit_out and u != -1 and last[u] == old_last:
            last[u] = last_out
            u = parent[u]
    u = v_in
    while u != join:
        succ[u] += old_succ
        u = parent[u]
    u = v_out
    while u != join:
        succ[u] -= old_succ
        u = parent[u]


@helper
def _update_potentials(u_in, sigma, tree, n_core):
    """Shift the potentials of ``u_in``'s subtree by ``sigma``, or, if it is the larger
    side of the core, those of the rest of the tree (root included) by ``−sigma``: the
    same reduced costs."""
    thread, pi = tree.thread, tree.pi
    end = thread[tree.last[u_in]]
    if 2 * tree.succ[u_in] <= n_core:
        u = u_in
        while u != end:
            pi[u] += sigma
            u = thread[u]
    else:
        u = end
        while u != u_in:
            pi[u] -= sigma
            u = thread[u]


@helper
def _enter_core(s, tree):
    """Put the leaf row ``s`` into the core, as its parent's first child."""
    parent, thread, rev, succ, last = tree.parent, tree.thread, tree.rev, tree.succ, tree.last
    c = parent[s]
    after = thread[c]
    thread[c], rev[s], thread[s], rev[after] = s, c, after, s
    succ[s], last[s] = 1, s
    if last[c] == c:
        u = c
        while u != -1 and last[u] == c:
            last[u] = s
            u = parent[u]
    u = c
    while u != -1:
        succ[u] += 1
        u = parent[u]


@helper
def _thread(tree, leaf_rows):
    """Thread (preorder, cyclic through the root), its reverse, subtree sizes and last
    successors of the tree ``parent`` (children in node order), of its core: the tree
    without the rows below ``leaf_rows`` that have no children (0: the whole tree), which
    get ``succ`` 0.  Returns the core's size (0: not a tree)."""
    parent, thread, rev, succ, last = tree.parent, tree.thread, tree.rev, tree.succ, tree.last
    n = len(parent)
    root = n - 1
    children = np.zeros(n, np.int32)
    for u in range(root):
        children[parent[u]] += 1
    first = np.zeros(n + 1, np.int32)
    for u in range(root):
        if u >= leaf_rows or children[u] > 0:
            first[parent[u] + 1] += 1
    for u in range(n):
        first[u + 1] += first[u]
    fill = np.empty(n, np.int32)
    for u in range(n):
        fill[u] = first[u]
    child = np.empty(max(n - 1, 1), np.int32)
    for u in range(root):
        if u >= leaf_rows or children[u] > 0:
            child[fill[parent[u]]] = u
            fill[parent[u]] += 1
    order = np.empty(n, np.int32)
    stack = np.empty(n, np.int32)
    stack[0] = root
    top, k = 1, 0
    while top > 0:
        top -= 1
        u = stack[top]
        order[k] = u
        k += 1
        for i in range(first[u + 1] - 1, first[u] - 1, -1):
            stack[top] = child[i]
            top += 1
    if k != first[n] + 1:
        return 0  # not a tree: a cycle misses the root
    for i in range(k):
        thread[order[i]] = order[(i + 1) % k]
        rev[order[(i + 1) % k]] = order[i]
    for u in range(n):
        succ[u] = 0
    for i in range(k):
        succ[order[i]] = 1
    for i in range(k - 1, 0, -1):
        succ[parent[order[i]]] += succ[order[i]]
    position = np.empty(n, np.int32)
    for i in range(k):
        position[order[i]] = i
    for i in range(k):
        u = order[i]
        last[u] = order[position[u] + succ[u] - 1]
    return k


@helper
def _potentials(q, arcs, tree, art):
    """Potentials from the tree (zero reduced cost on its arcs); the root sits at ``-art``
    when a column hangs from it, so that potentials of a tree of real arcs stay small."""
    parent, pred, thread, pi = tree.parent, tree.pred, tree.thread, tree.pi
    cost = arcs.cost
    root = len(parent) - 1
    n_up = len(arcs.src) + root
    pi[root] = 0.0
    for u in range(q, root):
        if parent[u] == root and pred[u] < n_up:
            pi[root] = -art
    u = thread[root]
    while u != root:
        pi[u] = (pi[parent[u]] - cost[pred[u]] if _points_up(u, q, pred, n_up)
                 else pi[parent[u]] + cost[pred[u]])
        u = thread[u]


@helper
def _through_root(tree, n_arcs):
    """Whether artificial arcs carry more than round-off."""
    pred, flow = tree.pred, tree.flow
    for u in range(len(flow) - 1):
        if pred[u] >= n_arcs and flow[u] > FLOW_TOL:
            return True
    return False


@helper
def _duals(q, arcs, tree):
    """Potentials of the optimal tree (``thread`` over the whole tree) without the
    artificial costs: zero at the top of each component of real arcs, then components
    shifted (shortest paths over the arcs between them) so that every reduced cost is
    non-negative."""
    parent, pred, thread = tree.parent, tree.pred, tree.thread
    src, tgt, cost = arcs.src, arcs.tgt, arcs.cost
    n_arcs = len(src)
    n = len(parent)
    root = n - 1
    comp = np.zeros(n, np.int32)
    pi = np.zeros(n)
    n_comp = 0
    u = thread[root]
    while u != root:
        p = parent[u]
        if p == root:
            comp[u] = n_comp
            n_comp += 1
        else:
            comp[u] = comp[p]
            pi[u] = pi[p] - cost[pred[u]] if u < q else pi[p] + cost[pred[u]]
        u = thread[u]
    if n_comp > 1:
        shift = np.zeros(n_comp)
        for _ in range(n_comp):
            changed = False
            for e in range(n_arcs):
                i, j = comp[src[e]], comp[tgt[e]]
                if i != j:
                    bound = shift[i] + cost[e] + pi[src[e]] - pi[tgt[e]]
                    if bound < shift[j]:
                        shift[j] = bound
                        changed = True
            if not changed:
                break
        for u in range(root):
            pi[u] += shift[comp[u]]
    return pi
