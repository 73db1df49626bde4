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

**Algorithm** (column generation on the transport LP; no ``n × M`` matrix is stored):

1. *coarse duals*: the data, in Morton order (``partition.morton_words``), are cut into
   ``clusters`` contiguous blocks; the exact transport between the block centroids (block
   masses) and the atoms is solved densely (POT's network simplex, ``ot.emd``).  Its plan
   says where each block's mass goes, far atoms included; its atom duals ``v`` are close
   to the fine ones.
2. *candidate arcs*: every point gets the atoms its block sends mass to, its
   ``CANDIDATES`` atoms of smallest reduced cost ``c(x_i, y_j) − v_j`` (one jitted pass
   over all atoms), and the arcs of the north-west-corner coupling of points and atoms in
   Morton order, which make the restricted problem feasible whatever the other arcs.
3. *restricted LP*: the transport on the candidate arcs, solved exactly by POT's sparse
   network simplex (a ``scipy.sparse`` cost), warm-started from the previous duals; its
   plan is a coupling of ``μ_X`` and ``ν`` (upper end).
4. *certificate*: the c-transform of its atom duals over all atoms (lower end).  Points
   with a violated dual constraint (``f_i < u_i``) get their best arcs added, and 3–4
   repeat until the gap meets ``rtol``.  Column generation ends at the LP optimum, where
   the two ends meet up to rounding.

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
import functools
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.core import partition
from jaxsynth.core.validate import check_positive_int

__all__ = ["DEFAULT_RTOL", "ExactData", "prepare_exact", "w1_exact", "w1_exact_replicate"]

DEFAULT_RTOL = 0.01
"""Default relative gap ``(upper − lower) / upper`` of the certified pair."""
DEFAULT_CLUSTERS = 1024
"""Morton blocks of the coarse problem (its dense LP has ``clusters × M`` arcs)."""
CANDIDATES = 4
"""Arcs per point taken from the reduced costs (and added per violating point)."""
MAX_ROUNDS = 64
"""Column-generation rounds before giving up on ``rtol`` (a warning, never a wrong pair)."""
CHUNK = 1024
"""Points per step of the jitted pass over all atoms (memory ``CHUNK × M`` floats)."""
MORTON_DEPTH = 64
"""Bits of the Morton code that order the data and the atoms."""


def diameter(d: int, metric: str) -> float:
    """Diameter of [0,1]^d: 1 for ℓ∞, ``√d`` for ℓ2."""
    return 1.0 if metric == "linf" else float(np.sqrt(d))


def pair_cost(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """Row-wise ground cost ``c(a_k, b_k)`` in float64, [K]."""
    diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    return diff.max(axis=-1) if metric == "linf" else np.sqrt((diff * diff).sum(axis=-1))


def _cost_block(x, y, metric: str):
    """Cost matrix [P, M] between points [P, d] and atoms [M, d] (float32, on device).

    One coordinate at a time: XLA fuses it into a single [P, M] loop, where a reduction
    over a trailing size-``d`` axis of a [P, M, d] difference is several times slower.
    """
    total = None
    for k in range(x.shape[1]):
        diff = jnp.abs(x[:, k, None] - y[None, :, k])
        if metric == "linf":
            total = diff if total is None else jnp.maximum(total, diff)
        else:
            total = diff * diff if total is None else total + diff * diff
    return total if metric == "linf" else jnp.sqrt(total)


def _morton_order(Z: np.ndarray) -> np.ndarray:
    """Indices sorting points of [0,1]^d along the cyclic partition's Morton order."""
    words = partition.morton_words(np.asarray(Z, np.float64), MORTON_DEPTH)
    return np.lexsort(tuple(words[:, k] for k in reversed(range(words.shape[1]))))


@dataclasses.dataclass(frozen=True, eq=False)
class ExactData:
    """A data set prepared once for ``w1_exact`` against many measures.

    Attributes:
      X: [n, d] float64 data.
      order: Morton order of the data (north-west-corner arcs); block ``q`` is
        ``order[starts[q]:starts[q + 1]]``.
      starts: [Q + 1] block boundaries in ``order``.
      centroids, masses: [Q, d] centroids and [Q] masses of the coarse Morton blocks.
      chunks: [C, CHUNK, d] float32 data padded to whole chunks (device).
    """

    X: np.ndarray
    order: np.ndarray
    starts: np.ndarray
    centroids: np.ndarray
    masses: np.ndarray
    chunks: jax.Array

    @property
    def n(self) -> int:
        return self.X.shape[0]


def prepare_exact(X: np.ndarray, clusters: int = DEFAULT_CLUSTERS) -> ExactData:
    """Morton order, coarse blocks and device chunks of validated data ``X`` [n, d]."""
    X = np.asarray(X, np.float64)
    n, d = X.shape
    clusters = check_positive_int(clusters, "clusters")
    order = _morton_order(X)
    q = min(clusters, n)
    starts = (np.arange(q + 1) * n) // q
    sizes = np.diff(starts)
    centroids = np.add.reduceat(X[order], starts[:-1], axis=0) / sizes[:, None]
    padded = np.concatenate([X, np.repeat(X[:1], -n % CHUNK, axis=0)]).astype(np.float32)
    return ExactData(X, order, starts, centroids, sizes / n,
                     jnp.asarray(padded.reshape(-1, CHUNK, d)))


def _block_arcs(data: ExactData, blocks: np.ndarray, cols: np.ndarray, m: int) -> np.ndarray:
    """Arcs (as ``row · m + col``) from every point of block ``blocks[k]`` to ``cols[k]``."""
    sizes = np.diff(data.starts)[blocks]
    first = np.repeat(data.starts[blocks] - np.cumsum(sizes) + sizes, sizes)
    points = data.order[first + np.arange(sizes.sum())]
    return points * m + np.repeat(cols, sizes)


@functools.lru_cache(maxsize=None)
def _pass(metric: str, k: int):
    """Jitted pass over all atoms: c-transform ``min_j (c_ij − v_j)`` and best ``k`` atoms.

    Padding atoms carry ``v = -inf``-like potentials and are never chosen.
    """

    def chunk(x, y, v):
        reduced = _cost_block(x, y, metric) - v[None, :]
        fmin = reduced.min(axis=1)
        cols = jnp.arange(reduced.shape[1])[None, :]
        best = []
        for _ in range(k):
            j = jnp.argmin(reduced, axis=1)
            best.append(j)
            reduced = jnp.where(cols == j[:, None], jnp.inf, reduced)
        return fmin, jnp.stack(best, axis=1)

    @jax.jit
    def run(chunks, y, v):
        fmin, best = jax.lax.map(lambda x: chunk(x, y, v), chunks)
        return fmin.reshape(-1), best.reshape(-1, k)

    return run


def _bucket(m: int) -> int:
    """Padded atom count (a multiple of 256) so that few shapes compile."""
    return max(256, -(-m // 256) * 256)


def _northwest_arcs(a_order, a, b_order, b):
    """Arcs (rows, cols) of the north-west-corner coupling of ``a`` and ``b`` in the given orders."""
    ca, cb = np.cumsum(a[a_order]), np.cumsum(b[b_order])
    ca[-1] = cb[-1] = 1.0
    starts = np.unique(np.concatenate([[0.0], ca, cb]))[:-1]
    i = np.minimum(np.searchsorted(ca, starts, side="right"), len(a) - 1)
    j = np.minimum(np.searchsorted(cb, starts, side="right"), len(b) - 1)
    return a_order[i], b_order[j]


def _coarse(centroids, masses, atoms, weights, metric):
    """Exact coarse transport (block centroids → atoms): atom duals and the plan's arcs."""
    import ot

    cost = pair_cost(centroids[:, None, :], atoms[None, :, :], metric)
    plan, log = ot.emd(masses, weights, cost, log=True, numItermax=10**8,
                       check_marginals=False)
    blocks, cols = np.nonzero(plan > 0)
    return np.asarray(log["v"], np.float64), blocks, cols


def _sparse_lp(n, atoms_w, arcs, costs, potentials):
    """Exact transport on the candidate arcs (POT sparse network simplex): plan, duals."""
    import ot
    import scipy.sparse as sp

    rows, cols = np.divmod(arcs, len(atoms_w))
    # every arc cost + 1: explicit zeros would drop arcs; the plan is unchanged
    matrix = sp.coo_matrix((costs + 1.0, (rows, cols)), shape=(n, len(atoms_w)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan, log = ot.emd(np.full(n, 1.0 / n), atoms_w, matrix, log=True, numItermax=10**9,
                           check_marginals=False, potentials_init=potentials)
    if log.get("warning") is not None:
        raise RuntimeError(f"exact W1: the restricted transport LP failed ({log['warning']})")
    return plan.tocoo(), np.asarray(log["u"]), np.asarray(log["v"])


def _upper(X, atoms, weights, plan, metric):
    """Certified upper end: the plan's float64 cost plus ``diam ·`` its marginal error."""
    n = X.shape[0]
    keep = plan.data > 0
    rows, cols, mass = plan.row[keep], plan.col[keep], plan.data[keep]
    cost = float(np.dot(mass, pair_cost(X[rows], atoms[cols], metric)))
    miss = (np.abs(np.bincount(rows, mass, n) - 1.0 / n).sum()
            + np.abs(np.bincount(cols, mass, len(weights)) - weights).sum())
    return cost * (1 + 2.0**-40) + diameter(X.shape[1], metric) * miss


def w1_exact_replicate(data: ExactData, points, weights, metric: str = "linf",
                       rtol: float = DEFAULT_RTOL) -> tuple[float, float]:
    """Certified ``(lower, upper)`` for one measure (positive atoms ``points``, ``weights``).

    Weights are normalised by their sum.  Column generation as in the module docstring.
    """
    X, n, d = data.X, data.n, data.X.shape[1]
    atoms = np.asarray(points, np.float32).astype(np.float64)
    w = np.asarray(weights, np.float64)
    w = w / w.sum()
    m = len(w)
    diam = diameter(d, metric)
    if d == 1:
        from jaxsynth.wasserstein.bounds import RELATIVE_MARGIN
        from jaxsynth.wasserstein.exact1d import w1_exact1d

        value = float(w1_exact1d(X, atoms, w))
        return max(0.0, value * (1 - RELATIVE_MARGIN)), min(diam, value * (1 + RELATIVE_MARGIN))

    size = _bucket(m)
    y = np.concatenate([atoms, np.repeat(atoms[:1], size - m, 0)]).astype(np.float32)
    run = _pass(metric, min(CANDIDATES, m))

    def certify(v):
        v32 = np.concatenate([v, np.full(size - m, -4.0 * diam - 1)]).astype(np.float32)
        v32 = v32 - np.float32(v32[:m].max())   # potentials are defined up to a constant
        fmin, best = jax.device_get(run(data.chunks, jnp.asarray(y), jnp.asarray(v32)))
        vv = v32[:m].astype(np.float64)
        err = (d + 4) * 2.0**-24 * (diam + np.abs(vv).max()) + np.sqrt(d) * 2.0**-24
        lower = float(np.dot(w, vv) + fmin[:n].astype(np.float64).mean() - err)
        return lower, fmin[:n].astype(np.float64), best[:n], vv

    def arcs_of(rows, best):
        cols = best[rows].ravel()
        return np.repeat(rows, best.shape[1]) * m + cols

    v, blocks, cols = _coarse(data.centroids, data.masses, atoms, w, metric)
    lower, fmin, best, v = certify(v)
    nw_rows, nw_cols = _northwest_arcs(data.order, np.full(n, 1.0 / n), _morton_order(atoms), w)
    arcs = np.unique(np.concatenate([arcs_of(np.arange(n), best), nw_rows * m + nw_cols,
                                     _block_arcs(data, blocks, cols, m)]))
    potentials, upper = None, diam
    for _ in range(MAX_ROUNDS):
        r, c = np.divmod(arcs, m)
        plan, u, v_lp = _sparse_lp(n, w, arcs, pair_cost(X[r], atoms[c], metric), potentials)
        potentials = (u, v_lp)
        upper = min(upper, _upper(X, atoms, w, plan, metric))
        low, fmin, best, v = certify(v_lp)
        lower = max(lower, low)
        if upper - lower <= rtol * upper:
            break
        shift = np.float64(v_lp.max())          # certify() centred v at max 0
        violating = np.flatnonzero(fmin < (u - 1.0 + shift) - 1e-12)
        new = np.setdiff1d(arcs_of(violating, best), arcs, assume_unique=False)
        if new.size == 0:
            break
        arcs = np.union1d(arcs, new)
    else:
        warnings.warn(f"exact W1: relative gap {(upper - lower) / upper:.3g} > rtol = {rtol} "
                      f"after {MAX_ROUNDS} rounds; the pair is still certified", stacklevel=2)
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
    Replicates run on a pool of one thread per CPU core: the network simplex releases the
    GIL, and each replicate's computation is the same whatever thread runs it.

    Returns:
      (lower [B], upper [B]) float64.
    """
    rtol = check_rtol(rtol)

    def one(b):
        p, w = canonical_atoms(np.asarray(points[b]), np.asarray(weights[b]))
        return w1_exact_replicate(data, p, w, metric, rtol)

    workers = max(1, min(len(weights), os.cpu_count() or 1))
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
