"""Certified Sinkhorn estimate of W1 with ott-jax.

W1 between the data ``μ_X = (1/n) Σ δ_{x_i}`` and a synthetic measure ``ν = Σ_j b_j δ_{y_j}``
for the ground metric ℓ∞ (default, as in Zare Moayedi et al., arXiv 2609.33363, §7) or ℓ2,
*not squared*.

Why a bracket.  No output of an entropic solver is W1: at practical ε the entropic costs
of ott-jax (``reg_ot_cost``, ``ent_reg_cost``, the Sinkhorn divergence) are biased by
tens of percent on close measures.  Two post-processings of the Sinkhorn potentials
``(f, g)`` give a certificate instead:

- lower bound: hard c-transforms.  ``f̃ = g^c``, ``g̃ = f̃^c`` (and symmetrically
  ``ĝ = f^c``, ``f̂ = ĝ^c``) satisfy ``f̃_i + g̃_j ≤ C_ij`` for all ``i, j``, so by weak
  duality ``⟨a, f̃⟩ + ⟨b, g̃⟩ ≤ W1``; the larger of the two dual values is reported;
- upper bound: the cost of the Altschuler–Weed–Rigollet rounding of the entropic plan
  (Altschuler, Weed, Rigollet 2017, Alg. 2): rows then columns are scaled down to fit
  the marginals and the missing mass is added as a rank-one product; the result is a
  feasible coupling, so its cost is ``≥ W1``.

Both are computed in row chunks of the cost matrix, so no ``n × m`` array is ever held
(ott's ``out.matrix``/``primal_cost`` would materialise one).  ``value`` is the midpoint,
within half the gap of W1, and ``converged`` says the relative half-width
``(upper − lower)/(upper + lower)`` is at most ``rtol``.

Schedule (tuned on two-moons data, n = 200 and 2000, ℓ∞ and ℓ2, close and far measures;
the measurements are summarised in the README, "Measuring W1").  The solve is a sequence
of *rounds* of at most 500 iterations: adaptive momentum
(``Momentum(start=100, error_threshold=inf)``, which cuts the iteration count several-fold),
stopping early once the column-marginal error ``‖Pᵀ1 − b‖₁`` is below the stage threshold,
then 10 plain iterations.  Momentum ends a round on an oscillation whose marginal error is
well above the round's best; the plain iterations damp it, which cuts the iterations
needed at n = 2000 substantially.  After every round the certificate is computed and the
solve stops as soon as the bracket is within ``rtol``.

ε starts at ``ε₀ = 0.01·diam`` (``diam`` = ground-metric diameter of the bounding box of
both supports) and decreases by stages, each warm-started from the previous potentials:
when a round meets its stage's threshold, ``ε ← max(ε/2, lower/30)`` — a 1 % bracket
needs ``ε ≈ W1/30`` with ott-jax's Sinkhorn (``W1/20`` is not enough) — and once ε has
reached ``lower/30`` further stages halve it.  Stages above ``lower/30`` only prepare
warm starts and use a loose threshold ``1e-3``; the target stage uses
``rtol·lower/(8·diam)`` (floored at ``1e-6``), below which rounding moves the cost by a
small fraction of the tolerance.  Halving from ``ε₀`` took fewer iterations than a direct
jump ``ε₀ → lower/30`` and than steps of 3, 4 or 8.

Every round's bounds are valid, so the bracket reported is the intersection over rounds.
A round whose potentials are not finite (ott still reports ``converged=True`` after a
blow-up) contributes nothing; the solve resumes from the last finite potentials without
momentum.  The rounds loop on the host; each round and each certificate is one jitted
call compiled once per shape (ε, thresholds and warm starts are traced arguments), so
replicates of equal shapes never retrace.

Accuracy against POT's exact ``emd2`` on the cases of ``tests/wasserstein/test_sinkhorn.py``
(n = m = 2000, far, sampled and close measures) is checked by those tests and summarised
in the README.

Online mode (``PointCloud(batch_size=...)``) evaluates the cost on the fly; it is chosen
automatically when ``n·m`` exceeds ``online_threshold``.  ott-jax 0.6.0 calls
``jax.interpreters.batching.is_vmappable``, which jax ≥ 0.9 moved to
``jax._src.interpreters.batching`` (ott-jax issue #700, fixed after 0.6.0): the alias is
installed by a context manager only around jaxsynth's own solves and removed afterwards.
Float32 throughout; matrix products run at "highest" precision inside the solve (TF32
on recent GPUs would spoil the marginals; ott-jax issue #496).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import batching as _public_batching
from ott.geometry import costs, geometry, pointcloud
from ott.problems.linear import linear_problem
from ott.solvers.linear import acceleration, sinkhorn

from jaxsynth.core.keys import as_typed_key
from jaxsynth.core.partition import GROUND_METRICS
from jaxsynth.core.validate import check_data, check_positive_int

__all__ = ["ChebyshevCost", "SinkhornW1", "w1_sinkhorn"]

_EPS0_FRACTION = 0.01
_EPS_PER_W1 = 1.0 / 30.0
_MOMENTUM_START = 100
_INNER_ITERATIONS = 10
_MIN_THRESHOLD = 1e-6
_CHUNK_ELEMENTS = 1 << 22
_ROUND_ITERATIONS = 500
_POLISH_ITERATIONS = 10
_LOOSE_THRESHOLD = 1e-3
_EPS_DECAY = 2.0


@jax.tree_util.register_pytree_node_class
class ChebyshevCost(costs.CostFn):
    """The ℓ∞ ground distance ``max_k |x_k − y_k|`` (a metric, not squared)."""

    def __call__(self, x, y):
        return jnp.max(jnp.abs(x - y), axis=-1)


def _cost_fn(metric: str) -> costs.CostFn:
    return ChebyshevCost() if metric == "linf" else costs.Euclidean()


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SinkhornW1:
    """A certified Sinkhorn estimate of W1.

    Attributes:
      value: midpoint ``(lower + upper)/2``, within ``(upper − lower)/2`` of W1.
      lower: certified lower bound (dual value after hard c-transforms), ``≤ W1``.
      upper: certified upper bound (cost of the rounded feasible plan), ``≥ W1``.
      converged: the bracket is finite and ``(upper − lower)/(upper + lower) ≤ rtol``.
      iterations: Sinkhorn iterations summed over all stages.
      epsilon: entropic regularisation of the last stage.
    """

    value: float
    lower: float
    upper: float
    converged: bool
    iterations: int
    epsilon: float


@contextlib.contextmanager
def _ott_batching_compat():
    """Expose ``is_vmappable`` where ott-jax 0.6.0 looks for it, for this block only."""
    if hasattr(_public_batching, "is_vmappable"):
        yield
        return
    from jax._src.interpreters import batching as private_batching

    _public_batching.is_vmappable = private_batching.is_vmappable
    try:
        yield
    finally:
        del _public_batching.is_vmappable


@functools.partial(jax.jit, static_argnames=("metric", "batch_size", "max_iterations", "momentum"))
def _sinkhorn_round(
    x, y, a, b, f, g, epsilon, threshold, *, metric, batch_size, max_iterations, momentum
):
    """One round of warm-started Sinkhorn at ``epsilon``.

    Accelerated iterations (stopping early once the marginal error is below
    ``threshold``), then ``_POLISH_ITERATIONS`` plain ones: momentum leaves the last
    iterate on an oscillation (its marginal error well above the round's best) and a
    few plain iterations damp it, which tightens the rounded upper bound.

    Returns:
      ``(f, g, iterations, marginal_error)``: potentials [n], [m], iterations run and
      the final column-marginal error ``‖Pᵀ1 − b‖₁``.
    """
    cost_fn = _cost_fn(metric)
    if batch_size is None:
        geom = geometry.Geometry(cost_matrix=cost_fn.all_pairs(x, y), epsilon=epsilon)
    else:
        geom = pointcloud.PointCloud(x, y, cost_fn=cost_fn, epsilon=epsilon, batch_size=batch_size)
    problem = linear_problem.LinearProblem(geom, a, b)
    accelerated = sinkhorn.Sinkhorn(
        threshold=threshold,
        inner_iterations=_INNER_ITERATIONS,
        max_iterations=max_iterations - _POLISH_ITERATIONS,
        momentum=(
            acceleration.Momentum(start=_MOMENTUM_START, error_threshold=jnp.inf)
            if momentum
            else None
        ),
    )
    out = accelerated(problem, init=(f, g))
    plain = sinkhorn.Sinkhorn(
        threshold=threshold,
        inner_iterations=_POLISH_ITERATIONS,
        max_iterations=_POLISH_ITERATIONS,
    )
    polished = plain(problem, init=(out.f, out.g))
    return polished.f, polished.g, out.n_iters + _POLISH_ITERATIONS, polished.errors[-1]


@functools.partial(jax.jit, static_argnames=("metric", "chunk"))
def _certificate(x, y, a, b, f, g, epsilon, *, metric, chunk):
    """Certified ``(lower, upper)`` bounds on W1 from the potentials ``(f, g)``.

    Rows are processed ``chunk`` at a time (two passes), so memory is ``O(chunk · m)``.
    Padding rows (added to reach a multiple of ``chunk``) carry ``a = 0``, ``f = −inf``.
    """
    cost_fn = _cost_fn(metric)
    n, m = x.shape[0], y.shape[0]
    pad = (-n) % chunk
    rows = (
        jnp.pad(x, ((0, pad), (0, 0))).reshape(-1, chunk, x.shape[1]),
        jnp.pad(a, (0, pad)).reshape(-1, chunk),
        jnp.pad(f, (0, pad), constant_values=-jnp.inf).reshape(-1, chunk),
    )
    live_b = b > 0
    g = jnp.where(live_b, g, -jnp.inf)

    def plan(c, f_rows):
        return jnp.exp((f_rows[:, None] + g[None, :] - c) / epsilon)

    # Pass 1: f̃ = g^c (rows), ĝ = f^c (column minima over chunks), and the first rounding
    # step: row scaling x_i = min(a_i / r_i, 1) and the scaled plan's column sums.
    def pass1(carry, row):
        g_hat, col_mass = carry
        xr, ar, fr = row
        c = cost_fn.all_pairs(xr, y)
        p = plan(c, fr)
        row_mass = jnp.sum(p, axis=1)
        scale = jnp.where(row_mass > ar, ar / row_mass, 1.0)
        f_tilde = jnp.where(ar > 0, jnp.min(c - g[None, :], axis=1), -jnp.inf)
        g_hat = jnp.minimum(g_hat, jnp.min(c - fr[:, None], axis=0))
        return (g_hat, col_mass + scale @ p), (f_tilde, scale)

    init1 = (jnp.full((m,), jnp.inf, x.dtype), jnp.zeros((m,), x.dtype))
    (g_hat, col_mass), (f_tilde, row_scale) = jax.lax.scan(pass1, init1, rows)
    col_scale = jnp.where(col_mass > b, b / jnp.where(col_mass > 0, col_mass, 1.0), 1.0)
    col_scale = jnp.where(live_b, col_scale, 0.0)
    err_b = jnp.maximum(b - col_scale * col_mass, 0.0)  # ≥ 0 up to float rounding
    g_hat = jnp.where(live_b, g_hat, -jnp.inf)

    # Pass 2: g̃ = f̃^c, f̂ = ĝ^c, and the rounded plan P'' = diag(x) P diag(y) + rank one.
    def pass2(carry, row):
        g_tilde, plan_cost = carry
        xr, ar, fr, ft, sr = row
        c = cost_fn.all_pairs(xr, y)
        p = sr[:, None] * plan(c, fr) * col_scale[None, :]
        f_hat = jnp.min(c - g_hat[None, :], axis=1)
        g_tilde = jnp.minimum(g_tilde, jnp.min(c - ft[:, None], axis=0))
        err_a = ar - jnp.sum(p, axis=1)
        return (g_tilde, plan_cost + jnp.sum(c * p)), (f_hat, err_a, c @ err_b)

    init2 = (jnp.full((m,), jnp.inf, x.dtype), jnp.zeros((), x.dtype))
    (g_tilde, plan_cost), (f_hat, err_a, c_err_b) = jax.lax.scan(
        pass2, init2, rows + (f_tilde, row_scale)
    )
    a_flat = rows[1].reshape(-1)
    err_a = jnp.maximum(err_a.reshape(-1), 0.0)
    missing = jnp.sum(err_a)
    rank_one_cost = jnp.vdot(err_a, c_err_b.reshape(-1)) / jnp.where(missing > 0, missing, 1.0)
    upper = plan_cost + jnp.where(missing > 0, rank_one_cost, 0.0)

    def dual(fv, gv):
        fa = jnp.where(a_flat > 0, a_flat * fv.reshape(-1), 0.0)
        gb = jnp.where(live_b, b * gv, 0.0)
        return jnp.sum(fa) + jnp.sum(gb)

    lower = jnp.maximum(dual(f_tilde, g_tilde), dual(f_hat, g_hat))
    return lower, upper


def _bucket(k: int) -> int:
    """Smallest size ``≥ k`` of the form ``q·2^e`` with ``q ∈ {4, 5, 6, 7}`` (or ``k ≤ 4``)."""
    if k <= 4:
        return k
    e = k.bit_length() - 3
    return -(-k // (1 << e)) << e


def _diameter(x: np.ndarray, y: np.ndarray, metric: str) -> float:
    """Ground-metric diameter of the bounding box of both supports (``≥`` their diameter)."""
    lo = np.minimum(x.min(axis=0), y.min(axis=0))
    hi = np.maximum(x.max(axis=0), y.max(axis=0))
    side = hi - lo
    return float(side.max() if metric == "linf" else np.sqrt(np.sum(side**2)))


def _subsample(key, x, y, b, size):
    """``size`` data points without replacement; ``size`` i.i.d. draws from ``ν`` as weights."""
    k_data, k_synth = jax.random.split(key)
    rows = jax.random.choice(k_data, x.shape[0], (size,), replace=False)
    draws = jax.random.choice(k_synth, b.shape[0], (size,), p=jnp.asarray(b))
    counts = np.bincount(np.asarray(draws), minlength=b.shape[0])
    return x[np.asarray(rows)], y, counts / size


def w1_sinkhorn(
    X,
    points,
    weights,
    *,
    metric: str = "linf",
    rtol: float = 0.01,
    subsample: int | None = None,
    key=None,
    online: bool | None = None,
    max_iterations: int = 20000,
    max_stages: int = 12,
    batch_size: int = 1024,
    online_threshold: int = 1 << 27,
) -> SinkhornW1:
    """Certified entropic estimate of W1 between data and a synthetic measure.

    Args:
      X: [n, d] data in [0,1]^d, each point with weight ``1/n``.
      points: [M, d] synthetic atoms.
      weights: [M] non-negative weights summing to 1; zero-weight atoms (padding) are
        dropped on the host before solving and the support is re-padded with zero
        weights to a size ``q·2^e`` (``q ∈ {4..7}``), so replicates of similar support
        size share one compilation.
      metric: ground metric, ``"linf"`` (default, as in Zare Moayedi et al. §7) or ``"l2"``
        (not squared).
      rtol: target relative half-width ``(upper − lower)/(upper + lower)`` of the bracket.
      subsample: if given, W1 is estimated between ``subsample`` data points drawn
        without replacement and the empirical measure of ``subsample`` i.i.d. draws from
        the synthetic measure (Zare Moayedi et al. §7 says only "estimate W1 on random
        subsamples"; drawing from ``ν`` treats the synthetic measure as the generator it
        is, and the draws are kept as counts on the original atoms).  Needs ``key``.
      key: a ``jax.random`` key or integer seed; used only with ``subsample``.
      online: force online (batched-cost) mode on or off; ``None`` chooses online when
        ``n·m > online_threshold``.
      max_iterations: cap on the total Sinkhorn iterations over all stages (runs are
        rounds of up to 500 iterations; no round starts that could pass the cap).
      max_stages: cap on the number of ε stages.
      batch_size: row batch of ott's online mode.
      online_threshold: ``n·m`` above which online mode is the default.

    Returns:
      A :class:`SinkhornW1` with ``value``, certified ``lower``/``upper``, ``converged``,
      total ``iterations`` and the final ``epsilon``.

    Raises:
      ValueError: naming the argument for bad data, shapes, metric, ``rtol``,
        ``subsample`` (not in ``1..n``, or without ``key``) or caps.

    The schedule is described in the module docstring.
    """
    x = check_data(X, "X")
    n, d = x.shape
    if metric not in GROUND_METRICS:
        raise ValueError(f"metric must be one of {GROUND_METRICS}; got {metric!r}")
    if isinstance(rtol, bool) or not isinstance(rtol, numbers.Real) or not 0 < rtol < 1:
        raise ValueError(f"rtol must be a number in (0, 1); got {rtol!r}")
    max_iterations = check_positive_int(max_iterations, "max_iterations", _MOMENTUM_START + 1)
    max_stages = check_positive_int(max_stages, "max_stages")
    batch_size = check_positive_int(batch_size, "batch_size")
    online_threshold = check_positive_int(online_threshold, "online_threshold")
    y = np.asarray(points, dtype=np.float64)
    b = np.asarray(weights, dtype=np.float64)
    if y.ndim != 2 or y.shape[1] != d:
        raise ValueError(f"points must have shape (M, {d}) to match X; got {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("points contains NaN or inf")
    if b.shape != y.shape[:1]:
        raise ValueError(f"weights must have shape ({y.shape[0]},) to match points; got {b.shape}")
    if not np.all(np.isfinite(b)) or np.any(b < 0) or not b.sum() > 0:
        raise ValueError("weights must be finite, non-negative and not all zero")
    b = b / b.sum()
    if subsample is not None:
        subsample = check_positive_int(subsample, "subsample")
        if subsample > n:
            raise ValueError(f"subsample must be at most n = {n}; got {subsample}")
        if key is None:
            raise ValueError("key is required with subsample")
        key = as_typed_key(key)  # an int seed, a typed or a raw key; else ValueError naming key
        x, y, b = _subsample(key, x, y, b, subsample)
        n = subsample

    live = np.flatnonzero(b > 0)
    m = _bucket(live.size)
    fill = m - live.size
    y = np.concatenate([y[live], np.repeat(y[live[:1]], fill, axis=0)])
    b = np.concatenate([b[live], np.zeros(fill)])
    if online is None:
        online = n * m > online_threshold
    diam = _diameter(x, y, metric)
    if diam == 0.0:  # both measures are one and the same point
        return SinkhornW1(0.0, 0.0, 0.0, True, 0, 0.0)

    x32, y32 = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)
    a32, b32 = jnp.full((n,), 1.0 / n, jnp.float32), jnp.asarray(b, jnp.float32)
    round_iterations = min(_ROUND_ITERATIONS, max_iterations)
    sinkhorn_round = functools.partial(
        _sinkhorn_round,
        metric=metric,
        batch_size=min(batch_size, n) if online else None,
        max_iterations=round_iterations,
    )
    certify = functools.partial(
        _certificate, metric=metric, chunk=max(1, min(n, _CHUNK_ELEMENTS // m))
    )

    f, g = jnp.zeros((n,), jnp.float32), jnp.zeros((m,), jnp.float32)
    lower, upper, stage_done = -math.inf, math.inf, False
    epsilon, stages, iterations, momentum = _EPS0_FRACTION * diam, 1, 0, True
    while iterations + round_iterations <= max_iterations and not _converged(lower, upper, rtol):
        if stage_done:
            if stages == max_stages:
                break
            stages += 1
            target = lower * _EPS_PER_W1
            above_target = epsilon > target * 1.001
            epsilon /= _EPS_DECAY
            if above_target:  # scale down towards the target, not past it
                epsilon = max(epsilon, target)
        if epsilon <= lower * _EPS_PER_W1 * 1.001:  # target stage: marginals must be tight
            threshold = max(rtol * lower / (8 * diam), _MIN_THRESHOLD)
        else:  # an intermediate stage only prepares a warm start
            threshold = _LOOSE_THRESHOLD
        with _ott_batching_compat(), jax.default_matmul_precision("highest"):
            f_new, g_new, n_iter, marginal_error = sinkhorn_round(
                x32, y32, a32, b32, f, g, epsilon, threshold, momentum=momentum
            )
            lo, up = certify(x32, y32, a32, b32, f_new, g_new, epsilon)
        iterations += int(n_iter)
        lo, up = float(lo), float(up)
        if not (math.isfinite(lo) and math.isfinite(up)):
            momentum = False  # blow-up: restart from the last finite potentials, plainly
            continue
        f, g = f_new, g_new
        lower, upper = max(lower, lo), min(upper, up)
        stage_done = float(marginal_error) <= threshold
    return SinkhornW1(
        value=0.5 * (lower + upper),
        lower=lower,
        upper=upper,
        converged=_converged(lower, upper, rtol),
        iterations=iterations,
        epsilon=epsilon,
    )


def _converged(lower: float, upper: float, rtol: float) -> bool:
    finite = math.isfinite(lower) and math.isfinite(upper)
    return finite and upper - lower <= rtol * (upper + lower)
