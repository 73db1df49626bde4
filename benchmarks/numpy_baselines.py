"""Vectorized NumPy baselines of the jaxsynth mechanisms (the speed baseline of the benchmarks).

What a competent researcher writes in an afternoon: pure NumPy, ``numpy.random.Generator``
for all randomness, one vectorized pass per tree *level* (never a Python loop over points,
replicates or nodes), one replicate per call.  Independent of ``jaxsynth``: the formulas
are taken from the papers and written in NumPy.  "Zare Moayedi et al." is R. Zare Moayedi,
A. R. Asadi, M. H. Yassaee, G. Aminian, "Geometry-Adaptive Mechanisms for Private
Synthetic Data" (arXiv 2609.33363: PMM of He, Vershynin, Zhu, COLT 2023, in its §3;
Pruned-PMM, Adaptive Pruned-PMM); "He" is Y. He, "Intrinsic-Dimensional Wasserstein
Guarantees for Private Synthetic Measures" (PrivTree of Zhang, Xiao, Xie, SIGMOD 2016,
with Laplace leaf masses; shifted partitions).

Work that is the same for every replicate is done once per data set by a ``prepare_*``
function (its cost is ``prep.seconds``); the per-replicate functions take that object:

* ``prepare_dense(X, r)``: per-level true counts of the complete depth-``r`` tree;
* ``prepare_sparse(X, r, occupancy=False)``: the level-major child-bit table
  ``bits[j, i]`` (uint8, ``r × n``) and optionally the occupancy profile ``O_0..O_r``;
* ``prepare_adaptive(X, eps, eps_sel=0.1)``: ``prepare_sparse`` to ``L = ⌊d log2(ε_main n)⌋``
  with the occupancy profile;
* ``prepare_privtree(X, depth_cap)``: the bit table to the depth cap.

Mechanisms (one replicate each; all return a dict, see ``_result``):

* ``pmm_dense(prep, sigmas, sigma0, rng, rule)``            — Zare Moayedi et al. §3 / §4.1 (dense);
* ``pruned_pmm_sparse(prep, sigmas, sigma0, rng)``         — Zare Moayedi et al. §4.1 (sparse);
* ``adaptive_pruned_pmm(prep, eps, rng, eps_sel=0.1)``     — Zare Moayedi et al. §4.2;
* ``privtree(prep, eps, depth_cap, rng)``                  — He §3, §5.2;
* ``privtree_shifted(X, eps, depth_cap, rng)``             — He §6 (random shift).

Common result keys: ``m`` (synthetic size), ``visited``, ``leaves``, ``depth``,
``variates`` (number of NumPy random variates drawn), ``w1_linf`` / ``w1_l2`` (exact
tree-metric W1, see ``edge_weights``), ``points`` [M, d] (cell centers of the
released leaves), ``weights`` [M] (summing to 1).

Modelling decisions (documented where they are made):

* ``LapZ`` uses ``G = ⌊σ·E⌋``, ``E ~ Exp(1)``, for each geometric (exact law:
  ``P(G ≥ k) = P(E ≥ k/σ) = e^{−k/σ}``), 2–5× faster than ``rng.geometric``; the
  ``method="geometric"`` path (``rng.geometric(p) − 1``) is kept and tested too.
* Coins of the consistency rules are drawn only where they decide something.
* Representatives are cell centers (float64: exact while a coordinate has at most 52
  bisections, i.e. ``r ≤ 52 d``; deeper centers are rounded, masses and W1 are not).
* ``eps_sel`` of Adaptive Pruned-PMM is the *fraction* of ε spent on selection, as in
  ``jaxsynth.AdaptivePrunedPMM`` (``ε_sel = eps_sel·ε``, ``ε_main = (1 − eps_sel)·ε``).
* PrivTree's ``m`` is the number of leaves with positive released mass (it releases a
  probability vector); ``visited`` counts every drawn split test, including the tests at
  the depth cap that only count ``cap_hits`` (as ``jaxsynth.mechanisms.privtree``).
* The shifted PrivTree draws ``U = rng.random(d)`` (continuous, float64) and assigns
  cells from the float64 values ``y = (x + U)/2``; see ``privtree_shifted``.

Run ``python benchmarks/numpy_baselines.py [--quick]`` to time the benchmark workloads.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

RULES = ("proportional", "zero_respecting")
MAX_DENSE_DEPTH = 26
"""Deepest complete tree ``pmm_dense`` accepts (``2^{r+1}`` int64 counts per replicate)."""


# --------------------------------------------------------------------------- validation


def check_data(X) -> np.ndarray:
    """``X`` as float64 ``(n, d)`` inside [0,1]^d, else ``ValueError`` naming ``X``."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X must have shape (n, d) with n, d >= 1; got {X.shape}")
    if not np.all(np.isfinite(X)) or X.min() < 0.0 or X.max() > 1.0:
        raise ValueError("X must be finite and inside [0,1]^d")
    return X


def _check_eps(eps, name="eps") -> float:
    eps = float(eps)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"{name} must be positive and finite; got {eps!r}")
    return eps


def _check_depth(r, name="r") -> int:
    if int(r) != r or r < 1:
        raise ValueError(f"{name} must be an integer >= 1; got {r!r}")
    return int(r)


def _check_sigmas(sigmas, depth_available: int) -> np.ndarray:
    sigmas = np.asarray(sigmas, dtype=np.float64).ravel()
    if sigmas.size < 1 or not np.all(np.isfinite(sigmas)) or np.any(sigmas <= 0):
        raise ValueError("sigmas must be a non-empty array of positive finite scales")
    if sigmas.size > depth_available:
        raise ValueError(
            f"sigmas has {sigmas.size} levels but the data were prepared to depth "
            f"{depth_available}"
        )
    return sigmas


# -------------------------------------------------------------------------------- partition


def digit(x: np.ndarray, t: int) -> np.ndarray:
    """The ``t``-th dyadic digit (``t ≥ 1``) of ``x ∈ [0,1]``: ``⌊x 2^t⌋ mod 2``; ``x = 1`` → 1."""
    bits = np.fmod(np.floor(np.ldexp(x, t)), 2.0).astype(np.uint8)
    bits[x >= 1.0] = 1
    return bits


def bit_table(X: np.ndarray, depth: int) -> np.ndarray:
    """Child bits ``b_j`` of every point at levels ``j = 0..depth−1``, uint8 ``[depth, n]``.

    Level ``j`` bisects coordinate ``c = j mod d``; the bit is that coordinate's
    ``(⌊j/d⌋ + 1)``-th dyadic digit.  Level-major so a level is contiguous.
    """
    n, d = X.shape
    out = np.empty((depth, n), dtype=np.uint8)
    for j in range(depth):
        out[j] = digit(X[:, j % d], j // d + 1)
    return out


def diameters(depth: int, d: int, metric: str) -> np.ndarray:
    """Cell diameters of levels ``0..depth`` [depth+1].

    ℓ∞: ``2^{−⌊j/d⌋}``; ℓ2: ``sqrt(Σ_c 4^{−k_c(j)})`` with ``k_c(j) = ⌊j/d⌋ + [c < j mod d]``.
    """
    j = np.arange(depth + 1)
    q, rem = j // d, j % d
    if metric == "linf":
        return np.ldexp(1.0, -q)
    if metric == "l2":
        return np.sqrt(rem * 0.25 + (d - rem)) * np.ldexp(1.0, -q)
    raise ValueError(f"metric must be 'linf' or 'l2'; got {metric!r}")


def edge_weights(depth: int, d: int, metric: str) -> np.ndarray:
    """Tree-metric edge weights by level [depth+1]: ``w_0 = 0``, ``w_j = (diam(j−1) − diam(j))/2``.

    With these weights two leaves of a depth-``r`` tree are ``diam(LCA) − diam(r)``
    apart, and ``W_T(μ, ν) = Σ_{v ≠ root} w_v |μ(Ω_v) − ν(Ω_v)|`` is the exact W1 of the
    tree metric (Kantorovich on a tree).
    """
    diam = diameters(depth, d, metric)
    return np.concatenate([[0.0], (diam[:-1] - diam[1:]) / 2.0])


def _tree_w1(level_sums: np.ndarray, d: int, scale: float = 1.0) -> dict:
    """``Σ_j w_j S_j`` for ℓ∞ and ℓ2 from per-level sums ``S_j = Σ_{level j} |μ − ν|``."""
    depth = level_sums.size - 1
    return {
        f"w1_{metric}": scale * float(np.dot(edge_weights(depth, d, metric), level_sums))
        for metric in ("linf", "l2")
    }


def _centers(lower: np.ndarray, level: np.ndarray | int, d: int) -> np.ndarray:
    """Centers of cells with lower corners ``lower`` [K, d] at ``level`` (scalar or [K])."""
    level = np.asarray(level)
    k = level[..., None] // d + (np.arange(d) < level[..., None] % d)
    return lower + np.ldexp(0.5, -k)


def cell_side(level, d: int) -> np.ndarray:
    """Side lengths ``2^{−k_c(j)}`` of level-``j`` cells, [..., d]."""
    level = np.asarray(level)
    k = level[..., None] // d + (np.arange(d) < level[..., None] % d)
    return np.ldexp(1.0, -k)


# ----------------------------------------------------------------------------------- noise


def lapz(rng: np.random.Generator, sigma: float, size, method: str = "exponential"):
    """Discrete Laplace ``LapZ(σ)`` (Zare Moayedi et al. §2): ``G1 − G2``, ``G_i`` i.i.d.
    geometric on {0,1,…} with success probability ``1 − e^{−1/σ}``; int64 array of shape
    ``size``.

    ``method="exponential"`` (default): ``G = ⌊σ E⌋`` with ``E ~ Exp(1)`` (exact:
    ``P(G ≥ k) = e^{−k/σ}``).  ``method="geometric"``: ``rng.geometric(p) − 1``.
    Both draw 2 variates per value.
    """
    sigma = float(sigma)
    if method == "exponential":
        g1 = np.floor(sigma * rng.standard_exponential(size))
        return (g1 - np.floor(sigma * rng.standard_exponential(size))).astype(np.int64)
    if method == "geometric":
        p = -math.expm1(-1.0 / sigma)
        return rng.geometric(p, size) - rng.geometric(p, size)
    raise ValueError(f"method must be 'exponential' or 'geometric'; got {method!r}")


def lapz_pmf(z, sigma: float) -> np.ndarray:
    """Exact pmf ``(1−q)/(1+q)·q^{|z|}``, ``q = e^{−1/σ}``."""
    q = math.exp(-1.0 / sigma)
    return (1 - q) / (1 + q) * np.power(q, np.abs(np.asarray(z, np.float64)))


def lapz_cdf(z, sigma: float) -> np.ndarray:
    """Exact cdf ``P(LapZ(σ) ≤ z)`` for integer ``z``: ``q^{−z}/(1+q)`` for ``z < 0``,
    ``1 − q^{z+1}/(1+q)`` for ``z ≥ 0``."""
    z = np.asarray(z, np.float64)
    q = math.exp(-1.0 / sigma)
    neg = np.power(q, np.abs(z)) / (1 + q)
    pos = 1.0 - np.power(q, np.maximum(z, 0) + 1) / (1 + q)
    return np.where(z < 0, neg, pos)


# ---------------------------------------------------------------------------- consistency


def split_masses(m, a, b, coin, rule: str) -> np.ndarray:
    """Left-child masses ``m0`` (the right child gets ``m − m0``), elementwise, int64.

    ``"proportional"`` (jaxsynth's comparable split for PMM, Zare Moayedi et al. §3):
    ``m0 = round(m a/(a+b))`` clipped into the comparable interval
    (``[max(0, m−b), min(a, m)]`` if ``a+b ≥ m``, else ``[a, m−b]``); ``a = b = 0``:
    ``m//2`` plus the odd unit to child ``coin``.  ``"zero_respecting"`` (Zare Moayedi et
    al. Algorithm 2): exactly one of ``a, b`` zero → it gets 0; both zero → child ``coin``
    gets ``m``; otherwise proportional.
    """
    m, a, b, coin = (np.asarray(v, dtype=np.int64) for v in (m, a, b, coin))
    total = a + b
    m0 = np.rint(m * (a / np.maximum(total, 1))).astype(np.int64)
    enough = total >= m
    lo = np.where(enough, np.maximum(0, m - b), a)
    hi = np.where(enough, np.minimum(a, m), m - b)
    m0 = np.minimum(np.maximum(m0, lo), hi)
    zero = total == 0
    if rule == "proportional":
        return np.where(zero, m // 2 + (m % 2) * (1 - coin), m0)
    if rule == "zero_respecting":
        m0 = np.where((a == 0) & (b > 0), 0, m0)
        m0 = np.where((b == 0) & (a > 0), m, m0)
        return np.where(zero, m * (1 - coin), m0)
    raise ValueError(f"rule must be one of {RULES}; got {rule!r}")


def _split_level(rng, m, a, b, rule):
    """``split_masses`` with fair coins drawn only where they matter; (m0, coins drawn)."""
    need = (a + b == 0) & ((m % 2 == 1) if rule == "proportional" else (m > 0))
    count = int(np.count_nonzero(need))
    coin = np.zeros(m.shape, np.int64)
    if count:
        coin[need] = rng.integers(0, 2, count)
    return split_masses(m, a, b, coin, rule), count


def _interleave(x0, x1):
    out = np.empty(2 * x0.size, dtype=np.result_type(x0, x1))
    out[0::2], out[1::2] = x0, x1
    return out


def _result(**kw) -> dict:
    return kw


# --------------------------------------------------------------------------------- dense PMM


@dataclasses.dataclass(frozen=True)
class DensePrep:
    """True counts of every node of the complete tree: ``counts[j]`` int64 [2^j], ``j = 0..r``
    (heap order: the children of node ``i`` are ``2i, 2i+1``)."""

    n: int
    d: int
    r: int
    counts: tuple
    seconds: float


def prepare_dense(X, r: int) -> DensePrep:
    """Per-level true counts of the complete depth-``r`` tree (once per data set)."""
    t0 = time.perf_counter()
    X = check_data(X)
    r = _check_depth(r)
    if r > MAX_DENSE_DEPTH:
        raise ValueError(f"r={r} > {MAX_DENSE_DEPTH}: the complete tree is too large")
    n, d = X.shape
    code = np.zeros(n, dtype=np.int64)
    counts = [np.array([n], dtype=np.int64)]
    for j in range(r):
        code = 2 * code + digit(X[:, j % d], j // d + 1)
        counts.append(np.bincount(code, minlength=2 ** (j + 1)).astype(np.int64))
    return DensePrep(n, d, r, tuple(counts), time.perf_counter() - t0)


def _heap_centers(index: np.ndarray, r: int, d: int) -> np.ndarray:
    """Centers of level-``r`` cells from heap indices (bit ``t`` of the path is bit
    ``r−1−t`` of the index, a digit of coordinate ``t mod d``)."""
    lower = np.zeros((index.size, d))
    for t in range(r):
        lower[:, t % d] += ((index >> (r - 1 - t)) & 1) * math.ldexp(1.0, -(t // d + 1))
    return _centers(lower, r, d)


def pmm_dense(prep: DensePrep, sigmas, sigma0: float, rng: np.random.Generator,
              rule: str = "proportional", *, method: str = "exponential",
              trace: bool = False) -> dict:
    """One replicate of full-tree PMM (Zare Moayedi et al. §3) or dense Pruned-PMM (§4.1).

    Every node ``θ`` of the complete tree of depth ``r = len(sigmas)`` gets
    ``n'_θ = (n_θ + LapZ(σ_{|θ|}))_+``; root ``m = max(1, n + LapZ(σ0))``; top-down, level
    by level on arrays of size ``2^j``, each parent mass is split with ``rule``
    (``"proportional"``: PMM; ``"zero_respecting"``: Pruned-PMM, zero-mass subtrees stay
    zero).  Atoms: the leaves with positive mass at their cell centers.

    Returns (``_result``): ``m``, ``leaf_mass`` [2^r] int64 (heap order), ``points`` [M, d],
    ``weights`` [M], ``visited`` (PMM: ``2^{r+1}−1``; zero-respecting:
    ``N_vis = 1 + 2Σ_{j<r}|A_j|``), ``nodes_drawn`` (``2^{r+1}−1``), ``leaves`` (= ``atoms``,
    leaves with positive mass), ``depth``, ``variates``, ``w1_linf``, ``w1_l2`` (exact
    tree W1 on the complete depth-``r`` tree), and with ``trace`` the per-level
    ``(m, a, b, m0)`` of every split.
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}; got {rule!r}")
    sigmas = _check_sigmas(sigmas, prep.r)
    r, n, d = sigmas.size, prep.n, prep.d
    m = max(1, n + int(lapz(rng, sigma0, 1, method)[0]))
    variates = 2
    mass = np.array([m], dtype=np.int64)
    level_sums = np.zeros(r + 1)
    active = 1
    steps = []
    for j in range(r):
        c = prep.counts[j + 1]
        noisy = np.maximum(c + lapz(rng, sigmas[j], c.size, method), 0)
        variates += 2 * c.size
        a, b = noisy[0::2], noisy[1::2]
        if j and rule == "zero_respecting":
            active += int(np.count_nonzero(mass))
        m0, coins = _split_level(rng, mass, a, b, rule)
        variates += coins
        if trace:
            steps.append((mass, a, b, m0))
        mass = _interleave(m0, mass - m0)
        level_sums[j + 1] = np.abs(c / n - mass / m).sum()
    atoms = np.flatnonzero(mass)
    visited = 2 ** (r + 1) - 1 if rule == "proportional" else 1 + 2 * active
    out = _result(
        m=m, leaf_mass=mass, points=_heap_centers(atoms, r, d), weights=mass[atoms] / m,
        visited=visited, nodes_drawn=2 ** (r + 1) - 1, leaves=atoms.size, atoms=atoms.size,
        depth=r, variates=variates, **_tree_w1(level_sums, d),
    )
    if trace:
        out["trace"] = steps
    return out


# ------------------------------------------------------------------------- sparse Pruned-PMM


@dataclasses.dataclass(frozen=True)
class SparsePrep:
    """Child bits ``bits[j, i]`` (uint8 [r, n], level-major) and, optionally, the occupancy
    profile ``occupancy[j] = O_j`` (int64 [r+1], occupied level-``j`` cells)."""

    n: int
    d: int
    r: int
    bits: np.ndarray
    occupancy: np.ndarray | None
    seconds: float


def occupancy_profile(bits: np.ndarray) -> np.ndarray:
    """``O_j``, ``j = 0..r``, from a bit table [r, n]: level by level, points carry dense
    cell labels; ``2·label + bit`` is relabelled through a bincount (O(n) per level)."""
    r, n = bits.shape
    lab = np.zeros(n, dtype=np.intp)
    occ = [1]
    for j in range(r):
        child = 2 * lab + bits[j]
        seen = np.bincount(child, minlength=2 * occ[-1]) > 0
        lab = (np.cumsum(seen) - 1)[child]
        occ.append(int(np.count_nonzero(seen)))
    return np.array(occ, dtype=np.int64)


def prepare_sparse(X, r: int, occupancy: bool = False) -> SparsePrep:
    """Bit table to depth ``r`` (and the occupancy profile) once per data set."""
    t0 = time.perf_counter()
    X = check_data(X)
    r = _check_depth(r)
    bits = bit_table(X, r)
    occ = occupancy_profile(bits) if occupancy else None
    return SparsePrep(X.shape[0], X.shape[1], r, bits, occ, time.perf_counter() - t0)


def pruned_pmm_sparse(prep: SparsePrep, sigmas, sigma0: float, rng: np.random.Generator,
                      *, method: str = "exponential", trace: bool = False) -> dict:
    """One replicate of Pruned-PMM (Zare Moayedi et al. Alg. 1) following only the active nodes.

    Root ``m = max(1, n + LapZ(σ0))``.  For each level ``j < r = len(sigmas)``, with ``K``
    active nodes: every live point maps to child slot ``2·label + bit_j``; a bincount
    gives the ``2K`` true child counts; ``2K`` values ``LapZ(σ_{j+1})`` are drawn; the
    zero-respecting rule splits each parent's mass; children with positive mass are
    compacted by a cumulative sum and the points relabelled (points of pruned children
    are dropped).  Ghost nodes are ordinary slots without points.  Cost O(n + K) per
    level; nothing of size ``2^r`` is allocated.  Leaf centers are traced back through
    the per-level (parent, bit) records at the end.

    Tree W1 on the complete depth-``r`` tree: at level ``j`` the cells with ``ν > 0`` are
    the active ones, so ``S_j = Σ_active |μ − ν| + (1 − Σ_active μ)``.

    Returns: ``m``, ``leaf_mass`` [M] int64, ``points`` [M, d], ``weights`` [M],
    ``visited = 1 + 2Σ_{j<r}|A_j|``, ``leaves`` (= ``atoms`` = M), ``active`` (``|A_j|``,
    ``j = 0..r``), ``depth``, ``variates``, ``w1_linf``, ``w1_l2``; with ``trace`` the
    per-level ``(m, a, b, m0)``.
    """
    sigmas = _check_sigmas(sigmas, prep.r)
    r, n, d = sigmas.size, prep.n, prep.d
    m = max(1, n + int(lapz(rng, sigma0, 1, method)[0]))
    variates = 2
    mass = np.array([m], dtype=np.int64)
    lab = np.zeros(n, dtype=np.intp)
    idx = None  # live points: all (None) or these indices
    level_sums = np.zeros(r + 1)
    sizes = [1]
    parents, child_bits, steps = [], [], []
    for j in range(r):
        K = mass.size
        bj = prep.bits[j] if idx is None else prep.bits[j][idx]
        child = 2 * lab + bj
        cc = np.bincount(child, minlength=2 * K)
        noisy = np.maximum(cc + lapz(rng, sigmas[j], 2 * K, method), 0)
        variates += 4 * K
        a, b = noisy[0::2], noisy[1::2]
        m0, coins = _split_level(rng, mass, a, b, "zero_respecting")
        variates += coins
        if trace:
            steps.append((mass, a, b, m0))
        cm = _interleave(m0, mass - m0)
        keep = cm > 0
        kept = np.flatnonzero(keep)
        mass, counts = cm[kept], cc[kept]
        sizes.append(kept.size)
        level_sums[j + 1] = np.abs(counts / n - mass / m).sum() + (n - counts.sum()) / n
        parents.append(kept >> 1)
        child_bits.append(kept & 1)
        slot = np.cumsum(keep) - 1
        live = keep[child]
        if live.all():
            lab = slot[child]
        else:
            sel = np.flatnonzero(live)
            idx = sel if idx is None else idx[sel]
            lab = slot[child[sel]]
    lower = np.zeros((mass.size, d))
    node = np.arange(mass.size)
    for j in range(r - 1, -1, -1):
        lower[:, j % d] += child_bits[j][node] * math.ldexp(1.0, -(j // d + 1))
        node = parents[j][node]
    sizes = np.array(sizes)
    out = _result(
        m=m, leaf_mass=mass, points=_centers(lower, r, d), weights=mass / m,
        visited=int(1 + 2 * sizes[:-1].sum()), leaves=mass.size, atoms=mass.size,
        active=sizes, depth=r, variates=variates, **_tree_w1(level_sums, d),
    )
    if trace:
        out["trace"] = steps
    return out


# --------------------------------------------------------------------- Adaptive Pruned-PMM


def _floor(v: float) -> int:
    return int(math.floor(v + 1e-9))  # float rounding never drops an exact integer


def adaptive_max_depth(n: int, d: int, eps_main: float) -> int:
    """``L = ⌊d·log2(ε_main n)⌋`` (Zare Moayedi et al. §B.6); requires ``ε_main n ≥ 2``."""
    if not eps_main * n >= 2:
        raise ValueError(f"eps_main * n = {eps_main * n:g} must be >= 2")
    return max(1, _floor(d * math.log2(eps_main * n)))


def adaptive_candidates(n: int, d: int, eps_main: float, C: float = 1.0) -> dict:
    """Standard candidate set ``s = 1..d`` (Zare Moayedi et al. §B.1), float64.

    ``r_1 = L``, ``r_s = max{1, ⌊(d/s) log2(1 + ε_main n ((s−1)/d)^2)⌋}``;
    ``q_s = 2^{(s−1)/(2d)}``, ``A_{s,r} = 2Σ_{j<r} q_s^j``, ``σ_{j+1} = A/(ε_main q_s^j)``;
    sensitivity terms ``(4C/n) Σ_{j<r} σ_{j+1} 2^{−j/d}``.

    Returns dict: ``L``, ``s`` [d], ``depth`` [d], ``sigmas`` (list of [r_s]),
    ``sens_terms`` [d], ``sensitivity`` (their max), ``C``, ``n``, ``d``, ``eps_main``.
    """
    L = adaptive_max_depth(n, d, eps_main)
    s = np.arange(1, d + 1)
    depth = [L] + [
        max(1, _floor(d / k * math.log2(1.0 + eps_main * n * ((k - 1) / d) ** 2)))
        for k in s[1:]
    ]
    sigmas, terms = [], []
    for k, r in zip(s, depth):
        q_pow = np.exp2(np.arange(r) * (k - 1) / (2.0 * d))
        sig = 2.0 * q_pow.sum() / (eps_main * q_pow)
        sigmas.append(sig)
        terms.append(4.0 * C / n * np.sum(sig * np.exp2(-np.arange(r) / d)))
    terms = np.array(terms)
    return dict(L=L, s=s, depth=np.array(depth), sigmas=sigmas, sens_terms=terms,
                sensitivity=float(terms.max()), C=C, n=n, d=d, eps_main=eps_main)


def adaptive_scores(cands: dict, occupancy) -> np.ndarray:
    """``B_a = C/(ε_main n) + (4C/n) Σ_{j<r_a} σ_{j+1} O_j 2^{−j/d} + 2·2^{−r_a/d}`` [d]."""
    n, d, C, e = cands["n"], cands["d"], cands["C"], cands["eps_main"]
    occ = np.asarray(occupancy, np.float64)
    return np.array([
        C / (e * n) + 4.0 * C / n * np.sum(sig * occ[:r] * np.exp2(-np.arange(r) / d))
        + 2.0 * math.exp2(-r / d)
        for sig, r in zip(cands["sigmas"], cands["depth"])
    ])


def _split_budget(eps, eps_sel):
    eps = _check_eps(eps)
    if not 0.0 < eps_sel < 1.0:
        raise ValueError(f"eps_sel (a fraction of eps) must lie in (0, 1); got {eps_sel!r}")
    return eps_sel * eps, (1.0 - eps_sel) * eps


def prepare_adaptive(X, eps: float, eps_sel: float = 0.1) -> SparsePrep:
    """``prepare_sparse(X, L, occupancy=True)`` with ``L = ⌊d log2(ε_main n)⌋`` (once per
    data set; also serves every smaller ``ε``)."""
    X = check_data(X)
    _, eps_main = _split_budget(eps, eps_sel)
    return prepare_sparse(X, adaptive_max_depth(X.shape[0], X.shape[1], eps_main), True)


def adaptive_select(prep: SparsePrep, eps: float, eps_sel: float = 0.1) -> dict:
    """Candidates, scores, sensitivity and exponential-mechanism probabilities
    ``P(a) ∝ exp(−ε_sel (B_a − min B)/(2Δ))`` (Zare Moayedi et al. §B.2); no randomness."""
    eps_sel_abs, eps_main = _split_budget(eps, eps_sel)
    cands = adaptive_candidates(prep.n, prep.d, eps_main)
    if prep.occupancy is None or prep.r < cands["L"]:
        raise ValueError(f"prep must come from prepare_adaptive with depth >= {cands['L']}")
    scores = adaptive_scores(cands, prep.occupancy)
    logits = -eps_sel_abs * (scores - scores.min()) / (2.0 * cands["sensitivity"])
    prob = np.exp(logits)
    return dict(cands, scores=scores, probabilities=prob / prob.sum(), eps_sel=eps_sel_abs)


def adaptive_pruned_pmm(prep: SparsePrep, eps: float, rng: np.random.Generator,
                        eps_sel: float = 0.1, *, method: str = "exponential") -> dict:
    """One replicate of Adaptive Pruned-PMM (Zare Moayedi et al. §4.2; standard candidates).

    ``C = 1``; ``ε_sel = eps_sel·ε``, ``ε_main = (1 − eps_sel)·ε``.  Scores from the prepared
    occupancy profile; one categorical draw (inverse cdf, 1 variate) from the
    exponential-mechanism probabilities; then ``pruned_pmm_sparse`` with the selected
    depth and schedule and ``σ0 = 1/ε_main``.  Replacement adjacency, ``ε``-DP.

    Returns ``pruned_pmm_sparse``'s dict plus ``selected`` (index, ``s − 1``),
    ``selected_depth``, ``scores``, ``probabilities``, ``sensitivity``, ``candidate_depths``.
    """
    sel = adaptive_select(prep, eps, eps_sel)
    cdf = np.cumsum(sel["probabilities"])
    a = int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), cdf.size - 1))
    out = pruned_pmm_sparse(prep, sel["sigmas"][a], 1.0 / sel["eps_main"], rng, method=method)
    out["variates"] += 1
    out.update(selected=a, selected_depth=int(sel["depth"][a]), scores=sel["scores"],
               probabilities=sel["probabilities"], sensitivity=sel["sensitivity"],
               candidate_depths=sel["depth"])
    return out


# ------------------------------------------------------------------------------- PrivTree


@dataclasses.dataclass(frozen=True)
class PrivTreePrep:
    """Child bits to the depth cap, uint8 [cap, n] (see ``bit_table``)."""

    n: int
    d: int
    cap: int
    bits: np.ndarray
    seconds: float


def default_depth_cap(n: int, d: int, eps: float) -> int:
    """``d·(⌈log2(εn)⌉ + 1)`` (the default of ``jaxsynth.mechanisms.privtree``)."""
    return d * (max(0, math.ceil(math.log2(max(eps * n, 1.0)) - 1e-12)) + 1)


def prepare_privtree(X, depth_cap: int) -> PrivTreePrep:
    """Bit table to ``depth_cap`` (once per data set)."""
    t0 = time.perf_counter()
    X = check_data(X)
    cap = _check_depth(depth_cap, "depth_cap")
    return PrivTreePrep(X.shape[0], X.shape[1], cap, bit_table(X, cap), time.perf_counter() - t0)


def privtree_parameters(eps: float):
    """``(λ, δ, leaf scale)`` in count units: ``λ = 6/ε``, ``δ = λ ln 2``, ``2/ε`` (He §5.2)."""
    lam = 6.0 / eps
    return lam, lam * math.log(2.0), 2.0 / eps


def _privtree_core(n, d, cap, eps, rng, bit_fn, window=None, scale=1.0):
    """Grow PrivTree level by level, release leaf masses, reconstruct top-down, tree W1.

    Level ``j`` holds arrays over its nodes (true ``counts``, ``parent`` index into level
    ``j−1``, ``lower`` corners, ``split``).  Each reached node draws ``Lap(λ)`` and splits
    iff ``max(c − jδ, −δ) + Lap(λ) > 0``; at ``j = cap`` the test is drawn (``cap_hits``)
    but nothing splits.  Points of split nodes map to ``2·rank + bit`` (``bit_fn(j, idx)``
    gives the level-``j`` bits of points ``idx``).  ``window = (lo, hi)``: children whose
    cell meets the closed window in a null set are discarded (only the split coordinate
    can change that, so only it is tested); data points in a discarded child (possible
    only on a window face) are counted in ``dropped`` and removed.
    """
    lam, delta, leaf_scale = privtree_parameters(eps)
    counts = np.array([n], dtype=np.int64)
    parent = np.array([-1])
    lower = np.zeros((1, d))
    lab = np.zeros(n, dtype=np.intp)
    idx = np.arange(n)
    levels = []
    variates = visited = cap_hits = dropped = 0
    for j in range(cap + 1):
        K = counts.size
        split = np.maximum(counts - j * delta, -delta) + rng.laplace(0.0, lam, K) > 0
        variates += K
        visited += K
        if j == cap:
            cap_hits = int(np.count_nonzero(split))
            split[:] = False
        levels.append((counts, parent, lower, split))
        S = np.flatnonzero(split)
        if S.size == 0:
            break
        c, half = j % d, math.ldexp(1.0, -(j // d + 1))
        ch_parent = np.repeat(S, 2)
        ch_lower = lower[ch_parent]
        ch_lower[1::2, c] += half
        rank = np.full(K, -1)
        rank[S] = np.arange(S.size)
        pr = rank[lab]
        inside = pr >= 0
        if not inside.all():
            idx, pr = idx[inside], pr[inside]
        child = 2 * pr + bit_fn(j, idx)
        if window is not None:
            mid = lower[S, c] + half
            keep = _interleave(mid > window[0][c], mid < window[1][c])
            if not keep.all():
                slot = np.cumsum(keep) - 1
                live = keep[child]
                if not live.all():
                    dropped += int(np.count_nonzero(~live))
                    idx, child = idx[live], child[live]
                child = slot[child]
                kept = np.flatnonzero(keep)
                ch_parent, ch_lower = ch_parent[kept], ch_lower[kept]
        lab = child
        counts = np.bincount(child, minlength=ch_parent.size).astype(np.int64)
        parent, lower = ch_parent, ch_lower

    # leaf noise Lap(2/ε) on counts (ε/2, sensitivity 1 under add/remove)
    is_leaf = [~lv[3] for lv in levels]
    n_leaves = int(sum(np.count_nonzero(f) for f in is_leaf))
    noise = rng.laplace(0.0, leaf_scale, n_leaves)
    variates += n_leaves
    noisy, start = [], 0
    for (cnt, *_), leaf in zip(levels, is_leaf):
        v = np.zeros(cnt.size)
        k = int(np.count_nonzero(leaf))
        v[leaf] = cnt[leaf] + noise[start:start + k]
        start += k
        noisy.append(v)
    # noisy subtree sums, bottom-up
    sub = [None] * len(levels)
    for j in range(len(levels) - 1, -1, -1):
        s = noisy[j].copy()
        if j + 1 < len(levels):
            s += np.bincount(levels[j + 1][1], weights=sub[j + 1], minlength=s.size)
        sub[j] = s
    # top-down masses, and the tree-W1 level sums Σ |μ − ν|
    mass = [np.ones(1)]
    level_sums = np.zeros(cap + 1)
    for j in range(1, len(levels)):
        p = levels[j][1]
        pos = np.maximum(sub[j], 0.0)
        tot = np.bincount(p, weights=pos, minlength=mass[-1].size)[p]
        nch = np.bincount(p, minlength=mass[-1].size)[p]
        ratio = np.where(tot > 0, pos / np.where(tot > 0, tot, 1.0), 1.0 / nch)
        mass.append(mass[-1][p] * ratio)
        level_sums[j] = np.abs(levels[j][0] / n - mass[j]).sum()
    leaf_level = np.concatenate([np.full(np.count_nonzero(f), j) for j, f in enumerate(is_leaf)])
    leaf_lower = np.concatenate([lv[2][f] for lv, f in zip(levels, is_leaf)])
    weights = np.concatenate([ms[f] for ms, f in zip(mass, is_leaf)])
    weights = weights / weights.sum()
    noisy_mass = np.concatenate([v[f] for v, f in zip(noisy, is_leaf)]) / n
    return _result(
        m=int(np.count_nonzero(weights > 0)), weights=weights, leaf_level=leaf_level,
        leaf_lower=leaf_lower, noisy_mass=noisy_mass, visited=visited, leaves=n_leaves,
        depth=int(leaf_level.max()), cap_hits=cap_hits, dropped=dropped,
        variates=variates, **_tree_w1(level_sums, d, scale),
    )


def privtree(prep: PrivTreePrep, eps: float, depth_cap: int, rng: np.random.Generator) -> dict:
    """One replicate of PrivTree + Laplace leaf masses (He §3, §5.2).

    Add/remove adjacency, ``ε``-DP: tree ``ε/2`` (split iff
    ``max(c − kδ, −δ) + Lap(λ) > 0``, ``λ = 6/ε``, ``δ = λ ln 2``, counts), leaf counts
    ``+ Lap(2/ε)`` (``ε/2``); top-down reconstruction (mass split in proportion to the
    positive parts of the noisy subtree sums, evenly when all are ``≤ 0``); atoms at the
    leaf-cell centers.  Tree W1 on the grown tree (all data lie in its leaves).

    Returns: ``m`` (leaves with positive mass), ``weights`` [L], ``points`` [L, d],
    ``leaf_level`` [L], ``leaf_lower`` [L, d], ``noisy_mass`` [L] (``p̃ = noisy count/n``),
    ``visited`` (split tests drawn), ``leaves``, ``depth``, ``cap_hits``, ``variates``,
    ``w1_linf``, ``w1_l2``.
    """
    eps = _check_eps(eps)
    cap = _check_depth(depth_cap, "depth_cap")
    if cap > prep.cap:
        raise ValueError(f"depth_cap={cap} exceeds the prepared depth {prep.cap}")
    out = _privtree_core(prep.n, prep.d, cap, eps, rng, lambda j, idx: prep.bits[j][idx])
    out["points"] = _centers(out["leaf_lower"], out["leaf_level"], prep.d)
    del out["dropped"]
    return out


def privtree_shifted(X, eps: float, depth_cap: int, rng: np.random.Generator) -> dict:
    """One replicate of PrivTree on a randomly shifted partition (He §6).

    ``U = rng.random(d)`` (public, ``d`` variates); ``y = (x + U)/2`` lies in the window
    ``W = [U/2, (1+U)/2]``, partitioned by the standard cyclic partition of [0,1]^d (the
    partition of ``[0,2]^d`` halved).  A child cell meeting ``W`` in a null set is
    discarded (never split, no noise, not a leaf, not visited).  Otherwise as ``privtree``;
    no shared preparation: the level-``j`` bits are computed from the floats ``y`` of the
    live points at every level.  Atoms at the centers of ``Q ∩ W`` mapped back,
    ``[max(2a − U, 0), min(2b − U, 1)]``; tree W1 doubled (halving maps ``[0,2]^d`` to
    ``[0,1]^d``).

    *Choice, documented:* ``y`` is the float64 ``(x + U)/2``, so a point within one ulp of
    a cell boundary may be assigned across it, and a point on a face of ``W`` may fall in
    a discarded cell (reported as ``dropped``, removed; probability ~2^{-30} per
    coordinate for ``U`` drawn on the 2^{-53} grid).  ``jaxsynth`` instead draws ``U`` on
    a grid that makes both impossible.

    Returns ``privtree``'s keys (``leaf_lower`` in ``y`` coordinates) plus ``shift`` (U)
    and ``dropped``.
    """
    X = check_data(X)
    eps = _check_eps(eps)
    cap = _check_depth(depth_cap, "depth_cap")
    n, d = X.shape
    U = rng.random(d)
    Y = (X + U) / 2.0

    def bits(j, idx):
        return digit(Y[idx, j % d], j // d + 1)

    out = _privtree_core(n, d, cap, eps, rng, bits, window=(U / 2.0, (1.0 + U) / 2.0),
                         scale=2.0)
    a = np.maximum(2.0 * out["leaf_lower"] - U, 0.0)
    b = np.minimum(2.0 * (out["leaf_lower"] + cell_side(out["leaf_level"], d)) - U, 1.0)
    out.update(points=a + (b - a) / 2.0, shift=U, variates=out["variates"] + d)
    return out


# ------------------------------------------------------------------------------ timing


def spiral(n: int, rng: np.random.Generator, turns: float = 3.0, noise: float = 0.01):
    """Noisy Archimedean spiral arm in [0.05, 0.95]^2 (radius ``0.1 + 0.9t``, angle
    ``2π·turns·radius``, ``t ~ U[0,1]``, Gaussian noise ``noise``)."""
    rad = 0.1 + 0.9 * rng.random(n)
    phi = 2.0 * np.pi * turns * rad
    P = np.stack([rad * np.cos(phi), rad * np.sin(phi)], 1) + noise * rng.standard_normal((n, 2))
    return 0.5 + 0.45 * P / np.abs(P).max()


def embed(P: np.ndarray, d: int, fill: float = 0.5) -> np.ndarray:
    """Points ``P`` [n, k] in the first ``k`` coordinates of [0,1]^d, the rest ``fill``."""
    X = np.full((P.shape[0], d), fill)
    X[:, : P.shape[1]] = P
    return X


def _time(fn, reps):
    fn()  # warm
    t0 = time.perf_counter()
    outs = [fn() for _ in range(reps)]
    return (time.perf_counter() - t0) / reps, outs


def main(quick: bool = False):  # pragma: no cover - benchmark driver
    n, eps = (3000 if quick else 30000), 1.0
    reps = 2 if quick else 10
    rng = np.random.default_rng(0)
    X2 = spiral(n, np.random.default_rng(1))
    print(f"# NumPy baselines, numpy {np.__version__}, n = {n}, eps = {eps}; seconds per replicate")

    r = 15
    prep = prepare_dense(X2, r)
    q = np.exp2(np.arange(r) * (2 - 1) / 4.0)  # packing(k = d = 2)
    sig = 2.0 * q.sum() / (eps * q)
    print(f"dense prepare r={r}: {prep.seconds:.4f} s")
    for rule in RULES:
        sec, outs = _time(lambda: pmm_dense(prep, sig, 1 / eps, rng, rule), reps)
        print(f"pmm_dense {rule:16s} r={r}: {sec:.4f} s  "
              f"W1linf={np.mean([o['w1_linf'] for o in outs]):.5f} "
              f"atoms={np.mean([o['atoms'] for o in outs]):.0f} "
              f"variates={outs[0]['variates']}")

    X10 = embed(X2, 10)
    for r in (30, 60, 150):
        prep = prepare_sparse(X10, r)
        sig = np.full(r, 2.0 * r / eps)
        sec, outs = _time(lambda: pruned_pmm_sparse(prep, sig, 1 / eps, rng), max(2, reps // 2))
        print(f"pruned_pmm_sparse d=10 r={r}: prepare {prep.seconds:.3f} s, {sec:.4f} s/rep  "
              f"visited={np.mean([o['visited'] for o in outs]):.0f} "
              f"variates={np.mean([o['variates'] for o in outs]):.0f} "
              f"W1linf={np.mean([o['w1_linf'] for o in outs]):.4f}")

    for k in (1, 2):
        X8 = embed(np.random.default_rng(2 + k).random((n, k)), 8)
        prep = prepare_adaptive(X8, eps)
        sec, outs = _time(lambda: adaptive_pruned_pmm(prep, eps, rng), 2 * reps)
        print(f"adaptive d=8 k={k}: prepare {prep.seconds:.3f} s (L={prep.r}), {sec:.4f} s/rep  "
              f"depths={sorted(o['selected_depth'] for o in outs)}")

    cap = default_depth_cap(n, 2, eps)
    prep = prepare_privtree(X2, cap)
    sec, outs = _time(lambda: privtree(prep, eps, cap, rng), reps)
    print(f"privtree cap={cap}: prepare {prep.seconds:.4f} s, {sec:.4f} s/rep  "
          f"leaves={np.mean([o['leaves'] for o in outs]):.0f} "
          f"W1linf={np.mean([o['w1_linf'] for o in outs]):.5f}")
    sec, outs = _time(lambda: privtree_shifted(X2, eps, cap, rng), reps)
    print(f"privtree_shifted cap={cap}: {sec:.4f} s/rep  "
          f"leaves={np.mean([o['leaves'] for o in outs]):.0f} "
          f"W1linf={np.mean([o['w1_linf'] for o in outs]):.5f}")


if __name__ == "__main__":  # pragma: no cover
    import sys

    main("--quick" in sys.argv)
