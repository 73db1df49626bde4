"""Certified W1 between the *whole* data set and a synthetic measure, to a relative gap.

The quantity the papers bound (He, Vershynin, Zhu, COLT 2023; Zare Moayedi et al.,
arXiv 2609.33363, §7; Y. He, *Intrinsic-Dimensional Wasserstein Guarantees*, §2) is the
ℓ∞ (or ℓ2) Wasserstein-1 distance between ``μ_X = (1/n) Σ_i δ_{x_i}`` and
``ν = Σ_j w_j δ_{y_j}``: a transport linear program with ``n × M`` arcs.  ``w1_exact``
returns a pair ``lower ≤ W1 ≤ upper`` with ``upper − lower ≤ rtol · upper``; both ends
are proofs:

* **lower**: for any atom potentials ``v``, ``f_i = min_j (c(x_i, y_j) − v_j)`` (the
  exact c-transform, over *all* atoms) makes ``(f, v)`` dual-feasible, so
  ``Σ_j w_j v_j + (1/n) Σ_i f_i ≤ W1`` (Kantorovich duality);
* **upper**: the cost of a coupling of ``μ_X`` and ``ν``.  A plan ``π ≥ 0`` whose
  marginals miss ``(μ_X, ν)`` by ``δ`` in ℓ1 (solver round-off) is first cut below both
  marginals and the missing mass coupled arbitrarily, which costs at most
  ``diam · δ`` more.

**Algorithm** (multiscale column generation on the transport LP; no ``n × M`` matrix is
stored).  The data, in Morton order (``partition.morton_words``), are cut into levels of
contiguous blocks: ``clusters`` blocks, ``REFINE`` times as many at each next level, and
at last the points themselves (``prepare_exact``, once per data set).  A level's
problem is the transport from its block centroids (block masses) to the atoms.

1. *each level* is a transport LP restricted to candidate arcs: every block gets the
   atoms that its parent blocks send mass to (far atoms included: transport to atoms in
   empty cells is not local), its ``CANDIDATES`` atoms of smallest reduced cost
   ``c(·, y_j) − v_j`` under the level above's atom duals (a jitted pass over all
   atoms; at the coarsest level, ``COARSE_CANDIDATES`` nearest atoms, or all atoms when
   it has at most ``DENSE_ARCS`` block-atom pairs: POT's dense solve), and the arcs of
   the north-west-corner coupling of blocks and atoms in Morton order, which make the
   restricted problem feasible whatever the other arcs.  POT's sparse network simplex
   solves it exactly (a ``scipy.sparse`` cost, from scratch: its sparse path takes no
   warm start); blocks whose dual constraint fails get their best arcs and it is solved
   again (column generation, which ends at the level's LP optimum; the coarsest level
   is taken to its optimum before it is certified).  A level above the points is left
   early once a round barely raises its dual value
   ``Σ_j w_j v_j + Σ_B m_B min_j (c(·, y_j) − v_j)`` (``STALL``): the upper end is then
   held up by the blocks' size, which only a finer level lowers.
2. *certificate, after every solve* (the coarsest level's at its optimum): every point
   of a block sends its mass as the block does, a coupling of ``μ_X`` and ``ν`` (upper
   end); the c-transform of the atom duals over all atoms at every point (lower end, a
   pass over all points: above the points it is taken as the last level above them is
   left, whose near-optimal duals usually beat those of the points' first restricted LP,
   or once a level's dual value, its estimate, meets ``rtol``).  One pass per round gives
   the blocks' c-transform and their best atoms together.  It stops as soon as the gap meets
   ``rtol``; at the last level (blocks are points) column generation ends at the full
   LP's optimum, where the two ends meet up to rounding.
3. *large data*: a level of more than ``MAX_LP_BLOCKS`` blocks is too large for one
   network simplex (its time grows faster than its size).  The levels stop at that many
   blocks, and the points' level is then solved by regions of ``REGION`` consecutive
   points: each region sends every atom exactly what the last plan sends it from there,
   so the regions' LPs (column generation to their optimum, from the best arcs under
   the last level's duals) are independent and their plans together are a coupling
   (upper end).  Up to ``REGION_SWEEPS`` sweeps, each shifted by half a region, lower
   it further across region boundaries while it falls by ``STALL · rtol · upper`` or
   more.  The regions' duals are not one dual solution, and the last level's blocks are
   too large for a lower end within ``rtol``, so (where the gap is still above ``rtol``)
   the lower end comes from one more LP, on the *plan-adapted level*: the last level's
   blocks split by the atom the regions' coupling sends each point to (blocks whose
   points are sent alike), with arc costs the mean cost of a block's points (its plans
   are couplings of the points: upper ends as well).  Its atom duals, nearly the points'
   own, give the lower end.

**The pass over all atoms** (c-transform, best atoms) is ``ctransform.reduced_pass``:
jitted, in chunks of points, pruned by boxes of points and groups of atoms when there
are many atoms.

**Rounding.**  The c-transform runs in float32 (data rounded to float32, atoms are
float32 already); its error per point is at most
``(d + 4) · 2^-24 · (diam + max|v|) + √d · 2^-24``, which is subtracted from the lower
end.  The upper end is summed in float64 from the float64 data, the float32 atoms and
the plan, and widened by ``2^-40`` relative.  Both are clipped into ``[0, diam]``.

**d = 1** needs no LP: the exact 1-D formula (``exact1d.w1_exact1d``) gives both ends,
widened by its float32 margin (``bounds.RELATIVE_MARGIN``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.core import partition
from jaxsynth.core.validate import check_positive_int
from jaxsynth.wasserstein.ctransform import atom_bucket, point_chunks, reduced_pass
from jaxsynth.wasserstein.exact import lp

__all__ = [
    "DEFAULT_CLUSTERS",
    "DEFAULT_RTOL",
    "ExactData",
    "canonical_atoms",
    "check_rtol",
    "pair_cost",
    "prepare_exact",
    "w1_exact",
    "w1_exact_replicate",
]

DEFAULT_RTOL = 0.01
"""Default relative gap ``(upper − lower) / upper`` of the certified pair."""
DEFAULT_CLUSTERS = 1024
"""Morton blocks of the coarsest level."""
CANDIDATES = 4
"""Arcs per point taken from the reduced costs (and added per violating point)."""
COARSE_CANDIDATES = 8
"""The same at the coarsest level, whose blocks are large and send mass to many atoms."""
DENSE_ARCS = 1 << 20
"""A coarsest level with at most this many block-atom pairs is solved densely at once
(cheaper than column generation on small problems)."""
MAX_ROUNDS = 64
"""Column-generation rounds before giving up on ``rtol`` (a warning, never a wrong pair)."""
MORTON_DEPTH = 64
"""Bits of the Morton code that order the data and the atoms."""
REFINE = 8
"""Blocks of a level per block of the level above."""
MAX_LP_BLOCKS = 1 << 17
"""The most blocks of a level solved as one LP: the last level above the points has at
most this many, and a points' level of more is solved by regions (``REGION``)."""
REGION = 1 << 14
"""Consecutive points per region of the points' level when it is solved by regions."""
REGION_SWEEPS = 3
"""Sweeps over the regions at most (each one shifted by half a region)."""
SETTLED = 0.1
"""The plan-adapted level (large data) stops once a round lowers its LP's value by less
than ``SETTLED · rtol · upper``."""
THREADS_PER_CORE = 2
"""Replicates evaluated at once per CPU core (``w1_exact``)."""
STALL = 1.0
"""A level above the points is left once a round raises its dual value by less than
``STALL · rtol · upper``: its blocks limit the upper end, and a finer level is cheaper
than more rounds."""


def pair_cost(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """Row-wise ground cost ``c(a_k, b_k)`` in float64, [K]."""
    diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    return diff.max(axis=-1) if metric == "linf" else np.sqrt((diff * diff).sum(axis=-1))


def _morton_order(Z: np.ndarray) -> np.ndarray:
    """Indices sorting points of [0,1]^d along the cyclic partition's Morton order."""
    words = partition.morton_words(np.asarray(Z, np.float64), MORTON_DEPTH)
    return np.lexsort(tuple(words[:, k] for k in reversed(range(words.shape[1]))))


@dataclasses.dataclass(frozen=True, eq=False)
class Level:
    """One resolution of the data: ``Q`` blocks, contiguous in the order ``ranks``.

    Attributes:
      starts: [Q + 1] block boundaries, as positions in ``ranks``.
      centroids: [Q, d] float64 block centroids; masses: [Q] block masses (sizes / n).
      chunks: [C, CHUNK, d] float32 centroids padded to whole chunks (device;
        ``ctransform.point_chunks``).
      ranks: [n] the points' Morton ranks in block order; ``None`` (the levels of
        ``prepare_exact``): the Morton order itself.
    """

    starts: np.ndarray
    centroids: np.ndarray
    masses: np.ndarray
    chunks: jax.Array
    ranks: np.ndarray | None = None

    @property
    def size(self) -> int:
        return len(self.masses)


@dataclasses.dataclass(frozen=True, eq=False)
class ExactData:
    """A data set prepared once for ``w1_exact`` against many measures.

    Attributes:
      X: [n, d] float64 data.
      order: the Morton order of the data (rank ``r`` is the point ``order[r]``).
      levels: coarsest first; block counts ``clusters, 8·clusters, ...``, the last one
        the points themselves (one block per point, in Morton order).
    """

    X: np.ndarray
    order: np.ndarray
    levels: tuple

    @property
    def n(self) -> int:
        return self.X.shape[0]


def _level(X_sorted: np.ndarray, size: int) -> Level:
    n, d = X_sorted.shape
    starts = (np.arange(size + 1) * n) // size
    sizes = np.diff(starts)
    centroids = np.add.reduceat(X_sorted, starts[:-1], axis=0) / sizes[:, None]
    return Level(starts, centroids, sizes / n, jnp.asarray(point_chunks(centroids)))


def prepare_exact(X: np.ndarray, clusters: int = DEFAULT_CLUSTERS) -> ExactData:
    """Morton order and the levels of blocks of validated data ``X`` [n, d]."""
    X = np.asarray(X, np.float64)
    n = X.shape[0]
    clusters = check_positive_int(clusters, "clusters")
    order = _morton_order(X)
    sizes = [min(clusters, n)]
    while sizes[-1] < n:  # up to MAX_LP_BLOCKS blocks, then the points
        finer = REFINE * sizes[-1]
        sizes.append(n if finer >= n or sizes[-1] >= MAX_LP_BLOCKS else min(finer, MAX_LP_BLOCKS))
    return ExactData(X, order, tuple(_level(X[order], q) for q in sizes))


def _inherited_arcs(coarse: Level, fine: Level, rows, cols, m: int) -> np.ndarray:
    """Arcs (``block · m + atom``) of each fine block to the atoms that the coarse blocks
    holding its first and last point send mass to (``rows``, ``cols``: the coarse plan)."""
    order = np.argsort(rows, kind="stable")
    rows, cols = rows[order], cols[order]
    indptr = np.searchsorted(rows, np.arange(coarse.size + 1))
    arcs = []
    for rank in (fine.starts[:-1], fine.starts[1:] - 1):
        parent = np.searchsorted(coarse.starts, rank, side="right") - 1
        count = indptr[parent + 1] - indptr[parent]
        first = np.repeat(indptr[parent] - np.cumsum(count) + count, count)
        arcs.append(np.repeat(np.arange(fine.size), count) * m
                    + cols[first + np.arange(count.sum())])
    return np.concatenate(arcs)


def _unique_arcs(*parts) -> np.ndarray:
    """Sorted distinct arc indices of the concatenated ``parts`` (a sort: NumPy's hashing
    ``np.unique`` of integers is many times slower on arrays this large)."""
    arcs = np.sort(np.concatenate(parts))
    first = np.ones(len(arcs), bool)
    first[1:] = arcs[1:] != arcs[:-1]
    return arcs[first]


def _northwest_arcs(a, b):
    """Arcs (rows, cols) of the north-west-corner coupling of the weights ``a`` and ``b``
    in their orders: a coupling, so the arcs make any transport LP feasible."""
    ca, cb = np.cumsum(a), np.cumsum(b)
    ca[-1] = cb[-1] = 1.0
    starts = np.unique(np.concatenate([[0.0], ca, cb]))[:-1]
    i = np.minimum(np.searchsorted(ca, starts, side="right"), len(a) - 1)
    j = np.minimum(np.searchsorted(cb, starts, side="right"), len(b) - 1)
    return i, j


def _point_shares(level: Level, plan):
    """A block plan as the coupling of points it stands for (each point of a block sends
    its mass as the block does): (Morton ranks, atoms, masses), one entry per point-arc."""
    rows, cols, mass = plan
    sizes = np.diff(level.starts)[rows]
    ranks = np.repeat(level.starts[rows] - np.cumsum(sizes) + sizes, sizes) + np.arange(
        sizes.sum())
    if level.ranks is not None:
        ranks = level.ranks[ranks]
    return ranks, np.repeat(cols, sizes), np.repeat(mass / sizes, sizes)


def _adapted_level(data: ExactData, coarse: Level, plan, m: int):
    """The blocks of ``coarse`` split by the atom each of their points sends most mass to
    under the points' coupling ``plan`` (rows: Morton ranks): blocks whose points the
    plan sends alike.  Returns the level and the arcs (``block · m + atom``) that carry
    ``plan`` on it."""
    rows, cols, mass = plan
    order = np.lexsort((-mass, rows))
    first = order[np.r_[True, rows[order][1:] != rows[order][:-1]]]
    main = np.empty(data.n, np.int64)
    main[rows[first]] = cols[first]
    parent = np.searchsorted(coarse.starts, np.arange(data.n), side="right") - 1
    keys = parent * m + main
    ranks = np.argsort(keys, kind="stable")  # parents stay contiguous, Morton order inside
    keys = keys[ranks]
    starts = np.r_[np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]), data.n]
    sizes = np.diff(starts)
    centroids = np.add.reduceat(data.X[data.order[ranks]], starts[:-1], axis=0) / sizes[:, None]
    level = Level(starts, centroids, sizes / data.n,
                  jnp.asarray(point_chunks(centroids, bucket=True)), ranks)
    position = np.empty(data.n, np.int64)
    position[ranks] = np.arange(data.n)
    block = np.searchsorted(starts, position, side="right") - 1
    return level, _unique_arcs(block[rows] * m + cols)


def _mean_costs(data: ExactData, level: Level, rows, cols, atoms, metric):
    """Arc costs of blocks ``rows`` to atoms ``cols``: the mean cost of the blocks' points
    (float64), so a block plan's cost is that of the coupling of points it stands for."""
    ranks, atom, _ = _point_shares(level, (rows, cols, np.ones(len(rows))))
    sizes = np.diff(level.starts)[rows]
    costs = pair_cost(data.X[data.order[ranks]], atoms[atom], metric)
    return np.add.reduceat(costs, np.cumsum(sizes) - sizes) / sizes


def _pushed(coarse: Level, level: Level, plan, m: int):
    """The coupling ``_upper`` certifies (``_point_shares`` of the coarse plan), summed
    over the blocks of a finer ``level``: its plan (rows, cols, mass)."""
    ranks, cols, share = _point_shares(coarse, plan)
    keys = (np.searchsorted(level.starts, ranks, side="right") - 1) * m + cols
    order = np.argsort(keys, kind="stable")
    keys, share = keys[order], share[order]
    first = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    fine_rows, fine_cols = np.divmod(keys[first], m)
    return fine_rows, fine_cols, np.add.reduceat(share, first)


def _upper(data: ExactData, level: Level, atoms, weights, plan, metric):
    """Certified upper end from a block plan: each point of a block sends its mass as the
    block does (a coupling of μ_X and ν); its float64 cost plus ``diam ·`` the marginal
    error left by the solver's round-off."""
    ranks, cols, share = _point_shares(level, plan)
    points = data.order[ranks]
    cost = float(np.dot(share, pair_cost(data.X[points], atoms[cols], metric)))
    miss = (np.abs(np.bincount(points, share, data.n) - 1.0 / data.n).sum()
            + np.abs(np.bincount(cols, share, len(weights)) - weights).sum())
    return cost * (1 + 2.0**-40) + float(partition.diameter(0, data.X.shape[1], metric)) * miss


def w1_exact_replicate(data: ExactData, points, weights, metric: str = "linf",
                       rtol: float = DEFAULT_RTOL) -> tuple[float, float]:
    """Certified ``(lower, upper)`` for one measure (positive atoms ``points``, ``weights``).

    Weights are normalised by their sum.  Levels and column generation as in the module
    docstring.
    """
    n, d = data.n, data.X.shape[1]
    atoms = np.asarray(points, np.float32).astype(np.float64)
    w = np.asarray(weights, np.float64)
    w = w / w.sum()
    m = len(w)
    diam = float(partition.diameter(0, d, metric))
    if d == 1:
        from jaxsynth.wasserstein.bounds import RELATIVE_MARGIN
        from jaxsynth.wasserstein.exact1d import w1_exact1d

        value = float(w1_exact1d(data.X, atoms, w))
        return max(0.0, value * (1 - RELATIVE_MARGIN)), min(diam, value * (1 + RELATIVE_MARGIN))

    order = _morton_order(atoms)          # groups of consecutive atoms are compact
    atoms, w = atoms[order], w[order]
    size = atom_bucket(m)
    y = jnp.asarray(np.concatenate([atoms, np.repeat(atoms[:1], size - m, 0)]), jnp.float32)

    def centred(v):
        """``v − max v`` (potentials are defined up to a constant), float32, padded."""
        return np.concatenate([v - v.max(), np.full(size - m, -4.0 * diam - 1)]).astype(
            np.float32)

    def scan(chunks, count, v, k=0):
        """c-transform ``min_j c(·, y_j) − v_j`` of ``count`` points in ``chunks`` (float64)
        and, with ``k > 0``, their ``k`` atoms of least reduced cost ([count, k])."""
        fmin, best = reduced_pass(chunks, y, jnp.asarray(centred(v)), metric, k)
        return fmin[:count].astype(np.float64) - v.max(), best[:count]

    def transform(chunks, count, v):
        """The c-transform alone."""
        return scan(chunks, count, v)[0]

    def lower_end(v):
        """Certified dual value of ``v`` (float32 rounding subtracted), and the transform.

        The pass sees the centred float32 potentials ``vv``; ``(min_j c − vv_j, vv)`` is
        the dual-feasible pair whose value is certified."""
        vv = centred(v)[:m].astype(np.float64)
        fmin = transform(data.levels[-1].chunks, n, v)
        err = (d + 4) * 2.0**-24 * (diam + np.abs(vv).max()) + np.sqrt(d) * 2.0**-24
        return float(np.dot(w, vv) + (fmin + v.max()).mean() - err), fmin

    def best_atoms(centroids, v, count):
        """The ``count`` atoms of least reduced cost of each of the points ``centroids``."""
        return scan(jnp.asarray(point_chunks(centroids, bucket=True)), len(centroids), v, count)[1]

    def arcs_of(rows, best):
        """Arcs of blocks ``rows`` to their atoms ``best[rows]``."""
        return np.repeat(rows, best.shape[1]) * m + best[rows].ravel()

    def regional(level, plan, v, shift):
        """The points' LP by regions of ``REGION`` consecutive points (shifted by
        ``shift``), each sending to every atom what ``plan`` sends from it: exact
        subproblems (column generation from the best arcs under ``v``, to their optimum)
        whose plans together are a coupling, returned."""
        rows, cols, mass = plan
        region = (rows + shift) // REGION
        order = np.argsort(region, kind="stable")
        rows, cols, mass, region = rows[order], cols[order], mass[order], region[order]
        bounds = np.searchsorted(region, np.arange(region[-1] + 2))
        parts = []
        for r in range(len(bounds) - 1):
            lo, hi = max(0, r * REGION - shift), min(level.size, (r + 1) * REGION - shift)
            part = slice(bounds[r], bounds[r + 1])
            used, local = np.unique(cols[part], return_inverse=True)
            k = len(used)
            inside = np.full(m, -1)
            inside[used] = np.arange(k)
            masses = level.masses[lo:hi]
            sends = np.bincount(local, mass[part], k)
            sends *= masses.sum() / sends.sum()
            sub = Level(level.starts[lo:hi + 1], level.centroids[lo:hi], masses, None)

            def region_arcs(blocks, potentials):
                """Arcs of ``blocks`` to their best atoms that the region sends mass to."""
                best = best_atoms(sub.centroids[blocks], potentials, min(CANDIDATES, m))
                keep = inside[best] >= 0
                return np.repeat(blocks, best.shape[1])[keep.ravel()] * k + inside[best][keep]

            nw_rows, nw_cols = _northwest_arcs(masses, sends)
            arcs = _unique_arcs((rows[part] - lo) * k + local, nw_rows * k + nw_cols,
                                region_arcs(np.arange(sub.size), v))
            chunks = jnp.asarray(point_chunks(sub.centroids, bucket=True))
            solution = None
            for _ in range(MAX_ROUNDS):
                r_, c_ = np.divmod(arcs, k)
                solution = lp.solve_arcs(
                    masses, sends, r_, c_,
                    pair_cost(sub.centroids[r_], atoms[used[c_]], metric), solution)
                sub_plan, u, duals = solution[:3], solution.u, solution.v
                # the region's duals as potentials of all atoms (the others never best)
                own = np.full(m, duals.min() - 4.0 * diam - 1)
                own[used] = duals
                violating = np.flatnonzero(transform(chunks, sub.size, own) < u - 1e-12)
                if violating.size == 0:
                    break
                grown = _unique_arcs(arcs, region_arcs(violating, own))
                if len(grown) == len(arcs):
                    break
                arcs = grown
            parts.append((sub_plan[0] + lo, used[sub_plan[1]], sub_plan[2]))
        return tuple(np.concatenate(part) for part in zip(*parts))

    lower, upper, plan, v = 0.0, diam, None, np.zeros(m)

    def adapted(coarse, plan, v):
        """Both ends from the LP of the plan-adapted level (``_adapted_level``: the blocks
        of ``coarse`` split by the atom the regions' coupling ``plan`` sends their points
        to; arc costs the mean over a block's points, ``_mean_costs``).  Its duals, unlike
        the regions', are one dual solution; and near-homogeneous blocks make them nearly
        the points' own.  Column generation from the arcs that carry ``plan``, each block's
        best atoms under ``v`` and north-west arcs, while a round lowers the LP's value by
        ``SETTLED · rtol · upper`` or more (the first rounds' duals can overrate atoms
        that few arcs reach, so the lower end is taken after each round)."""
        nonlocal lower, upper
        level, carried = _adapted_level(data, coarse, plan, m)
        k = min(CANDIDATES, m)
        nw_rows, nw_cols = _northwest_arcs(level.masses, w)
        _, best = scan(level.chunks, level.size, v, k)
        arcs = _unique_arcs(carried, arcs_of(np.arange(level.size), best), nw_rows * m + nw_cols)
        previous, solution = np.inf, None
        for _ in range(MAX_ROUNDS):
            r, c = np.divmod(arcs, m)
            solution = lp.solve_arcs(level.masses, w, r, c,
                                     _mean_costs(data, level, r, c, atoms, metric), solution)
            block_plan, u, v = solution[:3], solution.u, solution.v
            upper = min(upper, _upper(data, level, atoms, w, block_plan, metric))
            lower = max(lower, lower_end(v)[0])
            value = float(np.dot(level.masses, u) + np.dot(w, v))
            if upper - lower <= rtol * upper or previous - value < SETTLED * rtol * upper:
                break
            previous = value
            # candidates from the centroids' reduced costs (a norm is convex: mean costs are
            # never below the centroid's)
            fmin, best = scan(level.chunks, level.size, v, k)
            grown = _unique_arcs(arcs, arcs_of(np.flatnonzero(fmin < u - 1e-12), best))
            if len(grown) == len(arcs):
                break
            arcs = grown

    def certify(level, plan, v, fmin):
        """Tighten the pair with the plan and atom duals of a level above the points
        (``fmin``: the c-transform of its blocks); return the level's dual value.  The
        lower end is a pass over all points, taken here only once the level's dual value
        (its estimate) meets rtol (and as the last level above the points is left)."""
        nonlocal lower, upper
        upper = min(upper, _upper(data, level, atoms, w, plan, metric))
        value = float(np.dot(w, v) + np.dot(level.masses, fmin))
        if upper - value <= rtol * upper:
            lower = max(lower, lower_end(v)[0])
        return value

    def leave(index, v):
        """As level ``index`` is left: its duals give the lower end if it is the points'
        level or the last one above it (near-optimal for the blocks, those usually beat
        the duals of the points' first restricted LP; and the regions' duals are not one
        dual solution)."""
        nonlocal lower
        if index + 2 >= len(data.levels) and upper - lower > rtol * upper:
            lower = max(lower, lower_end(v)[0])

    coarse = None  # the last level solved
    for index, level in enumerate(data.levels):
        if upper - lower <= rtol * upper:
            break
        coarsest, finest = coarse is None, level is data.levels[-1]
        if finest and not coarsest and level.size > MAX_LP_BLOCKS:  # by regions
            plan = _pushed(coarse, level, plan, m)
            for sweep in range(REGION_SWEEPS):
                plan = regional(level, plan, v, sweep * REGION // 2 % REGION)
                previous, upper = upper, min(upper, _upper(data, level, atoms, w, plan, metric))
                if upper - lower <= rtol * upper or previous - upper < STALL * rtol * upper:
                    break
            if upper - lower > rtol * upper:
                adapted(coarse, plan, v)
            break
        if coarsest and level.size * m <= DENSE_ARCS:
            solution = lp.solve_dense(level.masses, w, pair_cost(
                level.centroids[:, None, :], atoms[None, :, :], metric))
            plan, v = solution[:3], solution.v
            upper = min(upper, _upper(data, level, atoms, w, plan, metric))
            leave(index, v)
            coarse = level
            continue
        k = min(COARSE_CANDIDATES if coarsest else CANDIDATES, m)
        nw_rows, nw_cols = _northwest_arcs(level.masses, w)
        inherited = [] if coarsest else [_inherited_arcs(coarse, level, plan[0], plan[1], m)]
        _, best = scan(level.chunks, level.size, v, k)
        arcs = _unique_arcs(*inherited, arcs_of(np.arange(level.size), best),
                            nw_rows * m + nw_cols)
        previous, solution = -np.inf, None
        for _ in range(MAX_ROUNDS):
            r, c = np.divmod(arcs, m)
            solution = lp.solve_arcs(level.masses, w, r, c,
                                     pair_cost(level.centroids[r], atoms[c], metric), solution)
            plan, u, v = solution[:3], solution.u, solution.v
            # the blocks' c-transform, and their best atoms (one pass over all atoms)
            if finest and not coarsest:  # the pair first: one round usually meets rtol
                upper = min(upper, _upper(data, level, atoms, w, plan, metric))
                value, fmin = lower_end(v)
                lower = max(lower, value)
                if upper - lower <= rtol * upper:
                    break
                _, best = scan(level.chunks, level.size, v, k)
            else:
                fmin, best = scan(level.chunks, level.size, v, k)
            if not coarsest and not finest:
                value = certify(level, plan, v, fmin)
                if upper - lower <= rtol * upper:
                    break
                if value - previous < STALL * rtol * upper:
                    break  # stalled: refine
                previous = value
            # column generation: the best arcs of every block whose dual constraint fails
            violating = np.flatnonzero(fmin < u - 1e-12)
            if violating.size == 0:  # the level's LP is solved
                break
            grown = _unique_arcs(arcs, arcs_of(violating, best))
            if len(grown) == len(arcs):  # the level's LP is solved
                break
            arcs = grown
        if coarsest:  # certified at its optimum
            upper = min(upper, _upper(data, level, atoms, w, plan, metric))
        if coarsest or not finest:  # (the points' own rounds took their lower end)
            leave(index, v)
        coarse = level
    if upper - lower > rtol * upper:
        warnings.warn(f"exact W1: relative gap {(upper - lower) / upper:.3g} > rtol = {rtol}; "
                      "the pair is still certified", stacklevel=2)
    return max(0.0, min(lower, upper)), min(diam, upper)


def check_rtol(rtol) -> float:
    """``rtol`` as a float in (0, 1), or ``ValueError`` naming it."""
    if isinstance(rtol, (bool, np.bool_)) or not isinstance(rtol, (int, float, np.number)):
        raise ValueError(f"rtol must be a number in (0, 1); got {rtol!r}")
    if not 0 < float(rtol) < 1:
        raise ValueError(f"rtol must be in (0, 1); got {rtol!r}")
    return float(rtol)


def w1_exact(data: ExactData, points, weights, metric: str = "linf",
             rtol: float = DEFAULT_RTOL) -> tuple[np.ndarray, np.ndarray]:
    """Certified pairs for a batch of measures ``points`` [B, M, d], ``weights`` [B, M].

    One ``w1_exact_replicate`` per replicate on its positive atoms in canonical order
    (coordinates, then weight), so a replicate's pair depends only on its own atoms.
    Replicates run on a pool of ``THREADS_PER_CORE`` threads per CPU core (one per core
    for data of more than ``MAX_LP_BLOCKS`` points, whose replicates hold gigabytes): the
    network simplex and JAX's computations release the GIL, so they run in parallel, and
    a second thread per core runs while another holds the GIL for NumPy glue; each
    replicate's computation is the same whatever thread runs it.

    Returns:
      (lower [B], upper [B]) float64.
    """
    rtol = check_rtol(rtol)
    per_core = THREADS_PER_CORE if data.n <= MAX_LP_BLOCKS else 1
    workers = max(1, min(len(weights), per_core * (os.cpu_count() or 1)))

    def one(b):
        p, w = canonical_atoms(np.asarray(points[b]), np.asarray(weights[b]))
        return w1_exact_replicate(data, p, w, metric, rtol)

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        pairs = list(pool.map(one, range(len(weights))))
    lower, upper = np.array(pairs, np.float64).reshape(-1, 2).T
    return lower.copy(), upper.copy()


def canonical_atoms(points: np.ndarray, weights: np.ndarray):
    """A replicate's positive atoms in a canonical order (coordinates, then weight), host."""
    live = weights > 0
    p, w = points[live], weights[live]
    order = np.lexsort((w,) + tuple(p[:, k] for k in reversed(range(p.shape[1]))))
    return p[order], w[order]
