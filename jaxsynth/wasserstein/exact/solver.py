"""Certified W1 between the *whole* data set and a synthetic measure, to a relative gap.

``w1_exact`` returns, per replicate, ``lower ≤ W1(μ_X, ν) ≤ upper`` with
``upper − lower ≤ rtol · upper`` (the ℓ∞ or ℓ2 ground metric; the quantity bounded by
He, Vershynin, Zhu, COLT 2023, and Zare Moayedi et al., arXiv 2609.33363, §7).  The lower
end is a dual value certified by the c-transform over all atoms
(``ctransform.reduced_pass``); the upper end is the cost of a coupling
(``certificate.coupling_upper``).  Routes by size: d = 1, the exact formula
(``exact1d.line_w1``); otherwise multiscale column generation over the data's
levels of Morton blocks (``levels.prepare_exact``; a measure of fewer atoms than the
coarsest level has blocks starts at the probe level above it, ``ExactData.levels_for``; a
coarsest level of at most ``DENSE_ARCS`` block-atom pairs is solved densely, so small
data take the full LP at once; any level whose dual value meets rtol may end there),
each round's restricted LP restarted from the replicate's own previous basis and a
level's first LP from the level above's tree refined (``lp.solve_arcs``), the points
solved by regions on large data (the lower end then from the plan-adapted level's duals,
raised by Jacobi steps on the points); levels with too few blocks for the measure's
many atoms are solved against groups of atoms, as a guide only.  A pair wider than
``rtol`` warns and is still certified.

A replicate's pair depends only on the data and its own measure (canonical atom order,
no state shared between replicates), whatever the batch or the thread that runs it.

Derivations, the routes' rules and the rounding bounds: ``docs/theory/exact-w1.md``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import os
import threading
import time
import warnings
from typing import NamedTuple

import jax
import numpy as np

from jaxsynth.core import partition
from jaxsynth.core.measure import canonical_atoms
from jaxsynth.core.validate import check_positive_int
from jaxsynth.wasserstein.ctransform import atom_bucket, pass_array, pass_chunks, reduced_pass
from jaxsynth.wasserstein.exact import guide, levels, lp, simplex
from jaxsynth.wasserstein.exact.passes import BatchedPasses
from jaxsynth.wasserstein.exact.certificate import (
    cost_matrix,
    coupling_upper,
    pair_cost,
)
from jaxsynth.wasserstein.exact1d import line_w1
from jaxsynth.wasserstein.exact.levels import ExactData, Level

__all__ = ["DEFAULT_RTOL", "check_rtol", "check_stacked", "region_threads",
           "w1_exact", "w1_exact_replicate"]

DEFAULT_RTOL = 0.01
"""Default relative gap ``(upper − lower) / upper`` of the certified pair."""
CANDIDATES = 4
"""Arcs per point taken from the reduced costs (and added per violating point)."""
COARSE_CANDIDATES = 8
"""The same at the coarsest level, whose blocks are large and send mass to many atoms."""
ATOM_CANDIDATES = 2
"""Arcs from each atom to its nearest blocks in the coarsest level's first LP (column
generation): a block's nearest atoms leave atoms that no block has among its nearest
reached by north-west arcs alone, and the rounds that follow find them one by one.  Only
for fewer than ``ATOMS_PER_BLOCK`` atoms a block, where they were measured faster
(``docs/design/notes.md``); with many atoms a block (large data) they were not."""
GUIDE_STEPS = 2
"""Jacobi steps (``guide.balanced``) on the level above's duals, once scaled (as for every
cold start: ``guide.scaled``), before the points' first LP starts cold from them (no
refined tree: data in more than ``REFINED_MAX_D`` dimensions, or a dense level above):
on the 3-D blobs at n = 3·10^4 two steps took a fifth (PrivTree) and more than a quarter
(PMM) of its pivots off, more steps little more (``docs/theory/exact-w1.md``)."""
ASCENT_STEPS = 2
"""Jacobi steps of the atom duals on the points' LP (``_ascended``) after a plan-adapted
LP (large data) whose lower end misses rtol by less than ``ASCENT_FROM`` times it, before
another round: there its duals are its blocks', an atom holds tens of points, and a step
costs less than another LP (``docs/theory/exact-w1.md``).  Not after the points' LP of
smaller data, where the LP's duals are already the points' and steps lowered its end."""
ASCENT_FROM = 2.0
"""The largest gap, in units of rtol, from which ``_ascended`` steps: from further, steps
close too little of it and another LP is cheaper."""
DENSE_ARCS = 1 << 20
"""A coarsest level with at most this many block-atom pairs is solved densely at once
(cheaper than column generation on small problems)."""
MAX_ROUNDS = 64
"""Column-generation rounds before giving up on ``rtol`` (a warning, never a wrong pair)."""
REGION = 1 << 14
"""Consecutive points per region of the points' level when it is solved by regions."""
REGION_SNAP = 0.125
"""How far (a fraction of a region) a region's edge may move to where the data part
(``levels.region_edges``): less than a block's (``levels.SNAP``), as a region's LP costs
more than in proportion to its size and the regions share the threads."""
REGION_SWEEPS = 3
"""Sweeps over the regions at most (each one shifted by half a region)."""
SETTLED = 0.1
"""The plan-adapted level (large data) stops once a round lowers its LP's value by less
than ``SETTLED · rtol · upper``."""
THREADS_PER_CORE = 2
"""Replicates evaluated at once per CPU core (``w1_exact``)."""
REFINED_MAX_D = 2
"""A level's first LP starts from the level above's tree refined in dimensions up to this,
above it cold, guided by the level above's duals (which was the faster start on the
benchmarks' 3-D data: ``docs/theory/exact-w1.md``)."""
ATOMS_PER_BLOCK = 4
"""A level above the points with fewer blocks than ``m / ATOMS_PER_BLOCK`` (``m`` atoms) is
solved against groups of atoms, ``ATOMS_PER_BLOCK`` groups a block (``_grouped_level``):
on all ``m`` atoms each of its blocks sends mass to many atoms, and its column generation
takes many rounds of LPs on all the atoms.  Only for a measure of more than
``GROUPED_FROM`` atoms a block of the coarsest level."""
GROUPED_FROM = 64
"""Atoms per block of the coarsest level from which levels are solved against groups of
atoms (PMM's many atoms in d = 3 at n = 10^6: 75 on the 3-D blobs, 152 on uniform data).
Below it every level is solved on the atoms, as a guide is worse there: the 2-D spiral's
PrivTree release at 10^6 (30 atoms a block) ran for more than twelve minutes by groups,
against 23 s on the atoms (its first level on the atoms, stopped after two rounds with
the groups' trivial ends, left the next level restarts of millions of pivots)."""
GUIDED_CANDIDATES = 16
"""Arcs per block of the first LP of the first level solved against the atoms below
levels solved against groups of them (``_grouped_level``): no plan of the level above
gives its blocks' atoms, so more than ``CANDIDATES`` (with 4, its column generation took
three times the rounds); later rounds add ``CANDIDATES`` (with this many, each round
added more arcs than the level had, and its restarts took as long as its cold start)."""
GUIDED_ROUNDS = 1
"""Rounds of that level when it is the last above points solved by regions, which (with
the plan-adapted level) take it from its plan and duals: its later rounds each took as
long as its first and more (their restarts pivoted ever more, the dual value still
rising), where the regions met rtol from the first round's.  Above a level solved as one
LP it keeps its rounds (with one, that level's took twice the time)."""
UPPER_FALL = 0.3
"""The last level above points solved by regions takes one round when its first upper
end is more than ``UPPER_FALL`` below that of the levels above: an upper end that still
falls that fast with the blocks' size is held up by them, which the regions lower next,
and the level's later rounds would only refine the duals that guide the regions (where
such a level meets rtol by itself, its upper end has nearly settled)."""
STALL = 1.0
"""A level above the points is left once a round raises its dual value by less than
``STALL · rtol · upper``: its blocks limit the upper end, and a finer level is cheaper
than more rounds."""


def w1_exact_replicate(data: ExactData, points, weights, metric: str = "linf",
                       rtol: float = DEFAULT_RTOL, times: dict | None = None,
                       passes=reduced_pass, threads: int = 1) -> tuple[float, float]:
    """Certified ``(lower, upper)`` for one measure (positive atoms ``points``, ``weights``).

    Weights are normalised by their sum.  A pair wider than ``rtol`` (the round limit, or
    ``rtol`` below the float32 rounding of the c-transform) warns; it is still certified.

    Args:
      times: if given, seconds per phase are added to it: ``"lp"`` (transport LPs),
        ``"pass"`` (the blocks' passes over all atoms), ``"lower"`` (the points'
        c-transform), ``"upper"`` (the couplings' costs), ``"total"``.
      passes: runs the passes over all atoms (``reduced_pass``'s signature and result;
        ``w1_exact`` gives a ``passes.BatchedPasses``).
      threads: threads that solve the regions of large data's points at once (each
        region's work is the same whatever thread runs it); a phase's seconds are then
        summed over them.
    """
    lower, upper = _timed_pair(data, points, weights, metric, rtol, times, passes,
                               check_positive_int(threads, "threads"))
    _warn_wide(np.array([lower]), np.array([upper]), rtol, ["the replicate"])
    return lower, upper


def _timed_pair(data, points, weights, metric, rtol, times, passes, threads):
    """``w1_exact_replicate``'s pair, its seconds added to ``times["total"]``; no warning."""
    start = time.perf_counter()
    pair = _replicate(data, points, weights, metric, rtol, {} if times is None else times,
                      passes, threads)
    if times is not None:
        _add_seconds(times, "total", time.perf_counter() - start)
    return pair


def _warn_wide(lower, upper, rtol: float, names) -> None:
    """One warning naming every replicate whose pair is wider than ``rtol``, with its
    relative gap."""
    wide = np.flatnonzero(upper - lower > rtol * upper)
    if wide.size:
        gaps = "; ".join(f"{names[b]}: {(upper[b] - lower[b]) / upper[b]:.3g}" for b in wide)
        warnings.warn(f"exact W1: relative gap > rtol = {rtol} for {wide.size} of "
                      f"{len(upper)} replicates ({gaps}); the pairs are still certified",
                      stacklevel=3)


_TIMES = threading.Lock()


def _add_seconds(times: dict, phase: str, seconds: float):
    """``times[phase] += seconds`` (threads of a replicate share ``times``)."""
    with _TIMES:
        times[phase] = times.get(phase, 0.0) + seconds


def _timed(times: dict, phase: str, fn):
    """``fn`` adding its seconds to ``times[phase]``."""

    def run(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _add_seconds(times, phase, time.perf_counter() - start)

    return run


class Replicate(NamedTuple):
    """One measure's fixed inputs: the data, its atoms in Morton order and their weights,
    the atoms padded where the passes run (``y``, ``size`` rows), the options, ``times``, the
    ``passes`` that run its passes over all atoms and the ``threads`` of its regions;
    ``grouped``: its atoms stand for groups of the measure's (``_grouped``), whose
    bounds are not the measure's: its ends are then the trivial ``0`` and ``diam``."""

    data: ExactData
    atoms: np.ndarray
    w: np.ndarray
    y: np.ndarray | jax.Array
    size: int
    diam: float
    metric: str
    rtol: float
    times: dict
    passes: object
    threads: int
    grouped: bool = False

    @property
    def m(self) -> int:
        return len(self.w)


class Pair(NamedTuple):
    """The certified pair so far."""

    lower: float
    upper: float

    def met(self, rtol: float) -> bool:
        return self.upper - self.lower <= rtol * self.upper

    def tightened(self, lower: float = 0.0, upper: float = np.inf) -> Pair:
        return Pair(max(self.lower, lower), min(self.upper, upper))


class Solved(NamedTuple):
    """The last level solved: its plan (rows, cols, mass), duals and optimal tree
    (``simplex.Basis``; ``None`` from a dense solve)."""

    level: Level
    plan: tuple
    u: np.ndarray
    v: np.ndarray
    basis: simplex.Basis | None = None


def _replicate_inputs(data: ExactData, points, weights, metric, rtol, times, passes, threads
                      ) -> Replicate:
    atoms = np.asarray(points, np.float32).astype(np.float64)
    w = np.asarray(weights, np.float64)
    order = levels.morton_order(atoms)          # groups of consecutive atoms are compact
    atoms, w = atoms[order], w[order] / w.sum()
    y, size = _padded_atoms(atoms)
    diam = float(partition.diameter(0, data.X.shape[1], metric))
    return Replicate(data, atoms, w, y, size, diam, metric, rtol, times, passes, threads)


def _restricted(rep: Replicate, atoms: np.ndarray) -> Replicate:
    """``rep`` with only the atoms ``atoms`` (its passes run over those alone)."""
    y, size = _padded_atoms(rep.atoms[atoms])
    return rep._replace(atoms=rep.atoms[atoms], w=rep.w[atoms], y=y, size=size)


def _padded_atoms(atoms: np.ndarray):
    """Atoms float32 where the passes run (``pass_array``), padded to ``atom_bucket``
    rows by repeating the first: (y, size)."""
    size = atom_bucket(len(atoms))
    return pass_array(np.concatenate([atoms, np.repeat(atoms[:1], size - len(atoms), 0)])
                      .astype(np.float32)), size


def _lp(rep: Replicate, solve, *args):
    """An LP solve, its seconds added to ``rep.times["lp"]``."""
    return _timed(rep.times, "lp", solve)(*args)


def _upper(rep: Replicate, level: Level, plan) -> float:
    """Certified upper end of a level's plan, its seconds added to ``times["upper"]``
    (``diam`` on groups of atoms)."""
    if rep.grouped:
        return rep.diam
    return _timed(rep.times, "upper", coupling_upper)(rep.data, level, rep.atoms, rep.w, plan,
                                                      rep.metric)


def _centred(rep: Replicate, v):
    """``v − max v`` (potentials are defined up to a constant), float32, padded."""
    return np.concatenate([v - v.max(), np.full(rep.size - rep.m, -4.0 * rep.diam - 1)]).astype(
        np.float32)


def _scan(rep: Replicate, chunks, count, v, k=0, phase="pass"):
    """c-transform ``min_j c(·, y_j) − v_j`` of ``count`` points in ``chunks`` (float64)
    and, with ``k > 0``, their ``k`` atoms of least reduced cost ([count, k])."""
    start = time.perf_counter()
    fmin, best = rep.passes(chunks, rep.y, pass_array(_centred(rep, v)), rep.metric, k)
    _add_seconds(rep.times, phase, time.perf_counter() - start)
    return fmin[:count].astype(np.float64) - v.max(), best[:count]


def _lower_end(rep: Replicate, v, fmin=None):
    """Certified dual value of ``v`` (float32 rounding subtracted), and the c-transform.

    The pass sees the centred float32 potentials ``vv``; ``(min_j c − vv_j, vv)`` is the
    dual-feasible pair whose value is certified.  ``fmin``: the points' c-transform, if
    a pass (``_scan`` of the points under ``v``) has it already.  On groups of atoms: 0."""
    if rep.grouped:
        return 0.0, fmin
    d = rep.data.X.shape[1]
    vv = _centred(rep, v)[:rep.m].astype(np.float64)
    if fmin is None:
        fmin = _scan(rep, rep.data.levels[-1].chunks, rep.data.n, v, phase="lower")[0]
    err = (d + 4) * 2.0**-24 * (rep.diam + np.abs(vv).max()) + np.sqrt(d) * 2.0**-24
    return float(np.dot(rep.w, vv) + (fmin + v.max()).mean() - err), fmin


def _ascended(rep: Replicate, pair: Pair, v) -> Pair:
    """The pair with the lower ends of up to ``ASCENT_STEPS`` Jacobi steps from the atom
    duals ``v`` (``guide.balanced``) on the points' LP restricted to each point's
    ``CANDIDATES`` best arcs under them: an atom that is the cheapest of more points'
    mass than its weight lowers its dual, one that is the cheapest of less raises it,
    which raises the c-transform's dual value (its supergradient in ``v_j`` is ``w_j``
    less that mass).  Every step's lower end is certified, whatever the step did; the best is
    kept.  A step is a pass over all points that picks their best atoms, the kernel and
    a pass for the lower end (all timed as ``"lower"``)."""
    level, k = rep.data.levels[-1], min(CANDIDATES, rep.m)
    for _ in range(ASCENT_STEPS):
        gap = pair.upper - pair.lower
        if gap <= rep.rtol * pair.upper or gap > ASCENT_FROM * rep.rtol * pair.upper:
            break
        best = _scan(rep, level.chunks, level.size, v, k, phase="lower")[1]
        costs = pair_cost(level.centroids[:, None], rep.atoms[best], rep.metric)
        v = _timed(rep.times, "lower", guide.balanced)(
            level.masses, rep.w, np.repeat(np.arange(level.size), k), best.ravel(),
            costs.ravel(), v, 1)
        pair = pair.tightened(lower=_lower_end(rep, v)[0])
    return pair


def _best_atoms(rep: Replicate, centroids, v, count):
    """The ``count`` atoms of least reduced cost of each of the points ``centroids``."""
    chunks = pass_chunks(centroids)
    return _scan(rep, chunks, len(centroids), v, count)[1]


def _arcs_of(rows, best, m: int):
    """Arcs of blocks ``rows`` to their atoms ``best[rows]``."""
    return np.repeat(rows, best.shape[1]) * m + best[rows].ravel()


def _solve_level(rep: Replicate, index: int, pair: Pair, last: Solved | None):
    """Level ``index`` by column generation (or densely, a small coarsest level), the
    pair tightened after every round; returns ``(pair, Solved)``."""
    data, m = rep.data, rep.m
    level = data.levels[index]
    coarsest, finest = last is None, index == len(data.levels) - 1
    if coarsest and level.size * m <= DENSE_ARCS:
        solution = _lp(rep, lp.solve_dense, level.masses, rep.w,
                       cost_matrix(level.centroids, rep.atoms, rep.metric))
        pair = _leave_optimum(rep, index, pair, level, solution[:3], solution.u, solution.v)
        return pair, Solved(level, solution[:3], solution.u, solution.v)
    k = min(COARSE_CANDIDATES if coarsest else CANDIDATES, m)
    guided = not coarsest and last.plan is None  # below levels of groups of atoms
    tree = None if coarsest else _refined_tree(rep, last, level)
    arcs = _first_arcs(rep, level, last, tree, min(GUIDED_CANDIDATES, m) if guided else k)
    # the first LP starts from the level above's tree refined, or its column duals
    solution = None if coarsest else lp.guided(last.v, tree)
    by_regions = index + 2 == len(data.levels) and data.levels[-1].size > levels.MAX_LP_BLOCKS
    rounds = GUIDED_ROUNDS if guided and by_regions and not rep.grouped else MAX_ROUNDS
    # above points that go by regions, an upper end that falls below this is held up by
    # the blocks, which the regions lower next
    floor = (1 - UPPER_FALL) * pair.upper if by_regions else 0.0
    previous = -np.inf
    for _ in range(rounds):
        r, c = np.divmod(arcs, m)
        costs = pair_cost(level.centroids[r], rep.atoms[c], rep.metric)
        solution = _lp(rep, lp.solve_arcs, level.masses, rep.w, r, c, costs, solution,
                       GUIDE_STEPS if finest else 0)
        plan, u, v = solution[:3], solution.u, solution.v
        if finest and not coarsest:  # the upper end first: with the level above's lower
            pair = pair.tightened(upper=_upper(rep, level, plan))  # end, one round
            if pair.met(rep.rtol):                                 # usually meets rtol
                break
        if finest and not coarsest:  # the points' c-transform alone (a cheaper pass, the
            pair = pair.tightened(lower=_lower_end(rep, v)[0])  # same minima): a lower end
            if pair.met(rep.rtol):
                break
        # the blocks' c-transform, and their best atoms (one pass over all atoms)
        fmin, best = _scan(rep, level.chunks, level.size, v, k)
        if not (finest or coarsest):
            pair, value, leave = _round_above_points(rep, level, pair, plan, v, fmin,
                                                     previous, floor)
            if leave:
                break
            previous = value
        # column generation: the best arcs of every block whose dual constraint fails
        violating = np.flatnonzero(fmin < u - 1e-12)
        if violating.size == 0:  # the level's LP is solved
            break
        grown = levels.unique_arcs(arcs, _arcs_of(violating, best, m))
        if len(grown) == len(arcs):  # the level's LP is solved
            break
        arcs = grown
    if coarsest:
        pair = _leave_optimum(rep, index, pair, level, plan, u, v)
    elif not finest:  # (the points' own rounds took their lower end)
        pair = _leave(rep, index, pair, v)
    return pair, Solved(level, plan, u, v, solution.basis)


def _first_arcs(rep: Replicate, level: Level, last: Solved | None, tree, count: int):
    """A level's first arcs: those its blocks inherit from the level above's plan and
    refined tree, at the coarsest level each atom's nearest blocks (fewer atoms than
    ``ATOMS_PER_BLOCK`` a block), every block's ``count`` best atoms under the level
    above's atom duals (nearest atoms at the coarsest level), and the north-west-corner
    coupling's arcs, which make the restricted problem feasible."""
    m = rep.m
    inherited = [] if last is None or last.plan is None else [
        levels.inherited_arcs(last.level, level, last.plan[0], last.plan[1], m)]
    if tree is not None:
        inherited.append(tree.keys[tree.keys >= 0])
    if last is None and m < ATOMS_PER_BLOCK * level.size:
        # each atom's nearest blocks: a pass with the roles swapped
        near = _atoms_over_blocks(rep, level, np.zeros(level.size),
                                  min(ATOM_CANDIDATES, level.size))[1]
        inherited.append(near.ravel() * m + np.repeat(np.arange(m), near.shape[1]))
    nw_rows, nw_cols = levels.northwest_arcs(level.masses, rep.w)
    _, best = _scan(rep, level.chunks, level.size, np.zeros(m) if last is None else last.v,
                    count)
    return levels.unique_arcs(*inherited, _arcs_of(np.arange(level.size), best, m),
                              nw_rows * m + nw_cols)


def _round_above_points(rep: Replicate, level: Level, pair: Pair, plan, v, fmin,
                        previous: float, floor: float):
    """A round's end on a level between the coarsest and the points: the pair certified
    with its plan and duals (``fmin``: its blocks' c-transform), their dual value, and
    whether to leave the level: at rtol; stalled (the value rose by less than ``STALL``
    from ``previous``: the blocks' size holds the upper end, which only a finer level
    lowers); or with the upper end below ``floor`` (still falling fast above points that
    go by regions, ``UPPER_FALL``: the regions lower it next)."""
    value = _value(rep, level, fmin, v)
    pair = _certify(rep, pair, level, plan, v, value)
    leave = (pair.met(rep.rtol) or value - previous < STALL * rep.rtol * pair.upper
             or pair.upper < floor)
    return pair, value, leave


def _refined_tree(rep: Replicate, last: Solved, level: Level) -> simplex.Basis | None:
    """The optimal tree of the level above's last LP as a tree of ``level``'s LP
    (``simplex.refine``; the levels nest), or ``None``: data of more than
    ``REFINED_MAX_D`` dimensions, or no tree kept (a dense solve, POT's fallback, groups
    of atoms)."""
    if last.basis is None or rep.data.X.shape[1] > REFINED_MAX_D:
        return None
    groups = np.searchsorted(level.starts, last.level.starts)
    return simplex.refine(last.basis, groups, level.masses, level.centroids, rep.atoms, last.v,
                          rep.metric)


def _grouped(rep: Replicate, count: int):
    """``rep``'s measure merged into ``count`` groups of consecutive atoms (Morton order:
    compact groups), each at its atoms' weighted mean with their total weight; and the
    group of each atom."""
    starts = np.arange(count + 1) * rep.m // count
    group = np.repeat(np.arange(count), np.diff(starts))
    w = np.bincount(group, rep.w, count)
    atoms = np.stack([np.bincount(group, rep.w * rep.atoms[:, k], count)
                      for k in range(rep.atoms.shape[1])], 1) / w[:, None]
    y, size = _padded_atoms(atoms)
    return rep._replace(atoms=atoms, w=w, y=y, size=size, grouped=True), group


def _grouped_level(rep: Replicate, index: int, last: Solved | None) -> Solved:
    """Level ``index`` (too few blocks for ``rep``'s atoms, ``_first_level``) solved against
    ``ATOMS_PER_BLOCK`` groups of atoms a block (``_grouped``), column generation as on
    atoms, guided by ``last``'s atom duals: a guide for the next level only, with no plan
    or tree, and the atoms' duals priced from its blocks' (``_atom_duals``).  Its pair
    would bound W1 to the groups, not to the measure: none is taken."""
    grouped, group = _grouped(rep, min(rep.m, ATOMS_PER_BLOCK * rep.data.levels[index].size))
    if last is not None:  # each group guided by its first atom's dual
        last = last._replace(v=last.v[np.searchsorted(group, np.arange(grouped.m))])
    solved = _solve_level(grouped, index, Pair(0.0, rep.diam), last)[1]
    return solved._replace(plan=None, v=_atom_duals(rep, solved.level, solved.u), basis=None)


def _atom_duals(rep: Replicate, level: Level, u) -> np.ndarray:
    """Each atom's dual from block duals ``u`` of ``level``: its c-transform
    ``min_i c(x_i, y_j) − u_i`` over the blocks (a pass with the roles swapped), the
    duals that price every arc to the atom at ``≥ 0``, one at 0."""
    return _atoms_over_blocks(rep, level, u)[0]


def _atoms_over_blocks(rep: Replicate, level: Level, u, k=0):
    """``_scan`` with the roles swapped: each atom's c-transform over ``level``'s blocks
    under block duals ``u`` and, with ``k > 0``, its ``k`` blocks of least reduced cost."""
    y, size = _padded_atoms(level.centroids)
    blocks = rep._replace(w=level.masses, y=y, size=size)
    return _scan(blocks, pass_chunks(rep.atoms), rep.m, u, k)


def _value(rep: Replicate, level: Level, u, v) -> float:
    """The dual value ``Σ a_i u_i + Σ w_j v_j`` of ``level``'s blocks under ``(u, v)``: the
    LP's value at its optimum, a lower bound on it with ``u`` the blocks' c-transform."""
    return float(np.dot(level.masses, u) + np.dot(rep.w, v))


def _certify(rep: Replicate, pair: Pair, level: Level, plan, v, value: float) -> Pair:
    """The pair tightened with the plan and atom duals of a level above the points
    (``value``: its dual value, ``_value``).  The lower end is a pass over all points,
    taken here only once ``value`` (its estimate) meets rtol (and as the last level
    above the points is left)."""
    pair = pair.tightened(upper=_upper(rep, level, plan))
    return _lower_if_near(rep, pair, v, value)


def _lower_if_near(rep: Replicate, pair: Pair, v, value: float) -> Pair:
    """The pair with the lower end of ``v`` if the dual value ``value``, the lower end's
    estimate, meets rtol against the upper end (a pass over all points saved otherwise)."""
    if pair.upper - value <= rep.rtol * pair.upper:
        pair = pair.tightened(lower=_lower_end(rep, v)[0])
    return pair


def _leave(rep: Replicate, index: int, pair: Pair, v, value: float = -np.inf) -> Pair:
    """As level ``index`` is left: its duals give the lower end if it is the points' level
    or the last one above it (near-optimal for the blocks, those usually beat the duals of
    the points' first restricted LP; and the regions' duals are not one dual solution),
    or if their dual value ``value`` meets rtol (``_lower_if_near``: the coarsest level,
    solved to its optimum, may meet rtol on data of low intrinsic dimension)."""
    if pair.met(rep.rtol):
        return pair
    if index + 2 >= len(rep.data.levels):
        return pair.tightened(lower=_lower_end(rep, v)[0])
    return _lower_if_near(rep, pair, v, value)


def _leave_optimum(rep: Replicate, index: int, pair: Pair, level: Level, plan, u, v) -> Pair:
    """``_leave`` for a level solved to its optimum (the coarsest): the pair tightened with
    its plan's upper end, and the lower end of its duals if they are the last above the
    points or their dual value, the LP's, meets rtol."""
    pair = pair.tightened(upper=_upper(rep, level, plan))
    return _leave(rep, index, pair, v, _value(rep, level, u, v))


def _solve_regions(rep: Replicate, pair: Pair, last: Solved) -> Pair:
    """The points' level of large data: by regions (shifted sweeps), then, if the gap is
    still above rtol, the plan-adapted level's LP for the lower end."""
    level = rep.data.levels[-1]
    plan = levels.pushed(last.level, level, last.plan, rep.m)
    for sweep in range(REGION_SWEEPS):
        plan = _regional(rep, level, plan, last.v, sweep * REGION // 2 % REGION)
        previous, pair = pair.upper, pair.tightened(upper=_upper(rep, level, plan))
        if pair.met(rep.rtol) or previous - pair.upper < STALL * rep.rtol * pair.upper:
            break
    if not pair.met(rep.rtol):
        pair = _adapted(rep, pair, last.level, plan, last.v)
    return pair


def _regional(rep: Replicate, level: Level, plan, v, shift: int):
    """The points' LP by regions of about ``REGION`` consecutive points (shifted by
    ``shift``; ``levels.region_edges``), each sending to every atom what ``plan`` sends
    from it: exact subproblems (column generation from the best arcs under ``v`` among
    the atoms it sends to, to their optimum, the first LP guided by ``v``) whose plans
    together are a coupling, returned."""
    rows, cols, mass = plan
    edges = levels.region_edges(rep.data, REGION, shift, REGION_SNAP)
    region = np.searchsorted(edges, rows, side="right") - 1
    order = np.argsort(region, kind="stable")
    rows, cols, mass, region = rows[order], cols[order], mass[order], region[order]
    bounds = np.searchsorted(region, np.arange(len(edges)))

    def solve(r):
        """Region ``r``'s optimal plan (rows of ``level``, atoms, masses)."""
        lo, hi = edges[r], edges[r + 1]
        part = slice(bounds[r], bounds[r + 1])
        used, local = np.unique(cols[part], return_inverse=True)
        k = len(used)
        own = _restricted(rep, used)  # the region's problem: its points and these atoms
        masses = level.masses[lo:hi]
        sends = np.bincount(local, mass[part], k)
        sends *= masses.sum() / sends.sum()
        centroids = level.centroids[lo:hi]

        def region_arcs(blocks, potentials):
            """Arcs of ``blocks`` to their best atoms among the region's."""
            best = _best_atoms(own, centroids[blocks], potentials, min(CANDIDATES, k))
            return np.repeat(blocks, best.shape[1]) * k + best.ravel()

        nw_rows, nw_cols = levels.northwest_arcs(masses, sends)
        arcs = levels.unique_arcs((rows[part] - lo) * k + local, nw_rows * k + nw_cols,
                            region_arcs(np.arange(hi - lo), v[used]))
        chunks = pass_chunks(centroids)
        solution = lp.guided(v[used])  # a cold start, guided by the level above's duals
        for _ in range(MAX_ROUNDS):
            arc_rows, arc_cols = np.divmod(arcs, k)
            costs = pair_cost(centroids[arc_rows], own.atoms[arc_cols], rep.metric)
            solution = _lp(rep, lp.solve_arcs, masses, sends, arc_rows, arc_cols, costs,
                           solution)
            fmin = _scan(own, chunks, hi - lo, solution.v)[0]
            violating = np.flatnonzero(fmin < solution.u - 1e-12)
            if violating.size == 0:
                break
            grown = levels.unique_arcs(arcs, region_arcs(violating, solution.v))
            if len(grown) == len(arcs):
                break
            arcs = grown
        return solution.rows + lo, used[solution.cols], solution.mass

    with concurrent.futures.ThreadPoolExecutor(rep.threads) as pool:
        parts = list(pool.map(solve, range(len(bounds) - 1)))
    return tuple(np.concatenate(part) for part in zip(*parts))


def _adapted(rep: Replicate, pair: Pair, coarse: Level, plan, v) -> Pair:
    """Both ends from the LP of the plan-adapted level (``levels.adapted_level``: the
    blocks of ``coarse`` split by the atom the regions' coupling ``plan`` sends their
    points to; arc costs the mean over a block's points, ``levels.mean_costs``).  Its
    duals, unlike the regions', are one dual solution; and near-homogeneous blocks make
    them nearly the points' own.  Column generation from the arcs that carry ``plan``,
    each block's best atoms under ``v`` and north-west arcs (the first LP guided by
    ``v``), while a round lowers the LP's value by ``SETTLED · rtol · upper`` or more
    (the first rounds' duals can overrate atoms that few arcs reach, so the lower end is
    taken after each round, and raised by steps on the points near rtol: ``_ascended``)."""
    data, w, m, rtol = rep.data, rep.w, rep.m, rep.rtol
    level, carried = levels.adapted_level(data, coarse, plan, m)
    k = min(CANDIDATES, m)
    nw_rows, nw_cols = levels.northwest_arcs(level.masses, w)
    _, best = _scan(rep, level.chunks, level.size, v, k)
    arcs = levels.unique_arcs(carried, _arcs_of(np.arange(level.size), best, m),
                              nw_rows * m + nw_cols)
    # a cold start, guided by the level above's duals
    previous, solution = np.inf, lp.guided(v)
    for _ in range(MAX_ROUNDS):
        r, c = np.divmod(arcs, m)
        costs = levels.mean_costs(data, level, r, c, rep.atoms, rep.metric)
        solution = _lp(rep, lp.solve_arcs, level.masses, w, r, c, costs, solution)
        u, v = solution.u, solution.v
        pair = pair.tightened(_lower_end(rep, v)[0], _upper(rep, level, solution[:3]))
        pair = _ascended(rep, pair, v)
        value = float(np.dot(level.masses, u) + np.dot(w, v))
        if pair.met(rtol) or previous - value < SETTLED * rtol * pair.upper:
            break
        previous = value
        # candidates from the centroids' reduced costs (a norm is convex: mean costs are
        # never below the centroid's)
        fmin, best = _scan(rep, level.chunks, level.size, v, k)
        grown = levels.unique_arcs(arcs, _arcs_of(np.flatnonzero(fmin < u - 1e-12), best, m))
        if len(grown) == len(arcs):
            break
        arcs = grown
    return pair


def _replicate(data: ExactData, points, weights, metric, rtol, times, passes, threads):
    """``w1_exact_replicate``'s pair, unchecked: the route by size, then the phases."""
    n, d, m = data.n, data.X.shape[1], len(weights)
    diam = float(partition.diameter(0, d, metric))
    if d == 1:  # the exact formula in float64; its rounding is below (n + M + 1) · 2^-50
        w = np.asarray(weights, np.float64)
        value = line_w1(data.X[:, 0], np.asarray(points, np.float32)[:, 0].astype(np.float64),
                        w / w.sum())
        err = (n + m + 1) * 2.0**-50
        return max(0.0, value - err), min(diam, value + err)
    solved = data.levels_for(m)  # few atoms: the probe level first
    if solved is not data.levels:
        data = dataclasses.replace(data, levels=solved)
    rep = _replicate_inputs(data, points, weights, metric, rtol, times, passes, threads)
    pair, last = Pair(0.0, diam), None
    first = _first_level(data, m)
    for index, level in enumerate(data.levels):
        if index < first:  # too few blocks for the atoms
            last = _grouped_level(rep, index, last)
            continue
        if pair.met(rtol):
            break
        if last is not None and index == len(data.levels) - 1 \
                and level.size > levels.MAX_LP_BLOCKS:
            pair = _solve_regions(rep, pair, last)
            break
        pair, last = _solve_level(rep, index, pair, last)
    return max(0.0, min(pair.lower, pair.upper)), min(diam, pair.upper)


def _first_level(data: ExactData, m: int) -> int:
    """Index of the first level solved against ``m`` atoms (the levels above it against
    groups of atoms, ``_grouped_level``): the coarsest for at most ``GROUPED_FROM`` atoms
    a coarsest block, else the first with at least ``m / ATOMS_PER_BLOCK`` blocks, at the
    latest the last level above a points' level solved by regions (which starts from that
    level's plan), else the points'."""
    if m <= GROUPED_FROM * data.levels[0].size:
        return 0
    last = len(data.levels) - 1
    if last > 0 and data.levels[last].size > levels.MAX_LP_BLOCKS:
        last -= 1
    return next(index for index, level in enumerate(data.levels)
                if level.size * ATOMS_PER_BLOCK >= m or index == last)


def check_rtol(rtol) -> float:
    """``rtol`` as a float in (0, 1), or ``ValueError`` naming it."""
    if isinstance(rtol, (bool, np.bool_)) or not isinstance(rtol, (int, float, np.number)):
        raise ValueError(f"rtol must be a number in (0, 1); got {rtol!r}")
    if not 0 < float(rtol) < 1:
        raise ValueError(f"rtol must be in (0, 1); got {rtol!r}")
    return float(rtol)


def w1_exact(data: ExactData, points, weights, metric: str = "linf",
             rtol: float = DEFAULT_RTOL, workers: int | None = None,
             stacked: bool | None = None, names=None) -> tuple[np.ndarray, np.ndarray]:
    """Certified pairs for a batch of measures ``points`` [B, M, d], ``weights`` [B, M].

    One ``w1_exact_replicate`` per replicate on its positive atoms in canonical order
    (coordinates, then weight), so a replicate's pair depends only on its own atoms.
    Replicates run on a pool of ``THREADS_PER_CORE`` threads per CPU core (one per core
    for data of more than ``levels.MAX_LP_BLOCKS`` points, whose replicates hold
    gigabytes): the network simplex and JAX's computations release the GIL, so they run
    in parallel, and a second thread per core runs while another holds the GIL for
    NumPy glue; each replicate's computation is the same whatever thread runs it.  Cores
    left over (fewer replicates than cores) solve a replicate's regions in parallel
    (``threads``).

    With ``stacked``, the threads' passes over all atoms on an accelerator go to one
    device thread that runs those queued together as one call (``passes.BatchedPasses``)
    while the other threads solve their LPs; passes of CPU arrays run on the host kernel
    (``hostpass``) of their own thread either way.

    Args:
      workers: threads of the pool (default: as above); the pairs do not depend on it.
      stacked: stack the passes (default: where JAX's backend is not the CPU); the
        pairs do not depend on it.
      names: per replicate, how the warning about pairs wider than ``rtol`` names it
        (default ``"replicate b"``); one warning names them all, with their gaps.

    Returns:
      (lower [B], upper [B]) float64.
    """
    rtol = check_rtol(rtol)
    if workers is None:
        per_core = THREADS_PER_CORE if data.n <= levels.MAX_LP_BLOCKS else 1
        workers = per_core * (os.cpu_count() or 1)
    workers = max(1, min(len(weights), check_positive_int(workers, "workers")))
    threads = region_threads(workers)
    stacked = check_stacked(stacked)

    with contextlib.ExitStack() as context:
        passes = context.enter_context(BatchedPasses()) if stacked else reduced_pass

        def one(b):
            p, w = canonical_atoms(np.asarray(points[b]), np.asarray(weights[b]))
            return _timed_pair(data, p, w, metric, rtol, None, passes, threads)

        pool = context.enter_context(concurrent.futures.ThreadPoolExecutor(workers))
        pairs = list(pool.map(one, range(len(weights))))
    lower, upper = np.array(pairs, np.float64).reshape(-1, 2).T
    _warn_wide(lower, upper, rtol, names or [f"replicate {b}" for b in range(len(upper))])
    return lower.copy(), upper.copy()


def region_threads(workers: int) -> int:
    """Threads that solve a replicate's regions (``w1_exact_replicate``'s ``threads``)
    when ``workers`` replicates run at once: the cores the pool leaves, at least one."""
    return max(1, (os.cpu_count() or 1) // workers)


def check_stacked(stacked) -> bool:
    """``w1_exact``'s ``stacked`` (``None``: where JAX's backend is not the CPU) as a bool,
    or ``ValueError`` naming it."""
    if stacked is None:
        return jax.default_backend() != "cpu"
    if not isinstance(stacked, (bool, np.bool_)):
        raise ValueError(f"stacked must be True, False or None; got {stacked!r}")
    return bool(stacked)

