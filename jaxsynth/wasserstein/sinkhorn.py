"""Certified Sinkhorn estimate of W1 with ott-jax.

W1 between the data ``μ_X = (1/n) Σ δ_{x_i}`` and ``ν = Σ_j b_j δ_{y_j}`` for the ground
metric ℓ∞ (default, as in Zare Moayedi et al., arXiv 2609.33363, §7) or ℓ2, not squared.
No entropic cost is W1, so the Sinkhorn potentials are post-processed into a bracket:
a lower bound by hard c-transforms (weak duality) and an upper bound by the cost of the
Altschuler–Weed–Rigollet rounding of the entropic plan (Altschuler, Weed, Rigollet
2017, Alg. 2), both in row chunks of the cost matrix (no ``n × m`` array).  ``value`` is
the midpoint; ``converged`` says the relative half-width is at most ``rtol``.

The solve runs rounds of at most 500 momentum iterations on a decreasing ε schedule
(from ``0.01·diam`` towards ``lower/30``), certifying after every round and keeping the
intersection of the rounds' brackets; ``w1_sinkhorn_batch`` runs many replicates'
schedules side by side.  ott-jax 0.6.0 calls ``jax.interpreters.batching.is_vmappable``,
moved in jax ≥ 0.9: ``jaxsynth._compat.ott_batching`` installs the alias around
jaxsynth's own solves only.  Float32, matrix products at "highest" precision (ott-jax
issue #496).  The schedule and the proofs are in ``docs/theory/w1-methods.md``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from ott.geometry import costs, geometry, pointcloud
from ott.problems.linear import linear_problem
from ott.solvers.linear import acceleration, sinkhorn

from jaxsynth._compat import ott_batching
from jaxsynth.core.keys import as_typed_key
from jaxsynth.core.validate import check_data, check_positive_int
from jaxsynth.wasserstein.ctransform import atom_bucket
from jaxsynth.wasserstein.sinkhorn_limits import CHUNK_ELEMENTS, MOMENTUM_START

__all__ = ["ChebyshevCost", "SinkhornW1", "w1_sinkhorn", "w1_sinkhorn_batch"]

_EPS0_FRACTION = 0.01
_EPS_PER_W1 = 1.0 / 30.0
_MOMENTUM_START = MOMENTUM_START
_INNER_ITERATIONS = 10
_MIN_THRESHOLD = 1e-6
_CHUNK_ELEMENTS = CHUNK_ELEMENTS
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


def _sinkhorn_round_impl(
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


def _certificate_impl(x, y, a, b, f, g, epsilon, *, metric, chunk):
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


_STATIC_ROUND = ("metric", "batch_size", "max_iterations", "momentum")
_sinkhorn_round = jax.jit(_sinkhorn_round_impl, static_argnames=_STATIC_ROUND)
_certificate = jax.jit(_certificate_impl, static_argnames=("metric", "chunk"))


@functools.lru_cache(maxsize=None)
def _vmapped(shared_x: bool, metric: str, batch_size, max_iterations: int, momentum: bool,
             chunk: int):
    """The round and the certificate vmapped over replicates (``x`` shared or per slot)."""
    axis = None if shared_x else 0
    solve = functools.partial(_sinkhorn_round_impl, metric=metric, batch_size=batch_size,
                              max_iterations=max_iterations, momentum=momentum)
    certify = functools.partial(_certificate_impl, metric=metric, chunk=chunk)
    return (jax.jit(jax.vmap(solve, in_axes=(axis, 0, None, 0, 0, 0, 0, 0))),
            jax.jit(jax.vmap(certify, in_axes=(axis, 0, None, 0, 0, 0, 0))))


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
      ValueError: naming the argument for bad data or shapes, or a ``subsample`` above
        ``n`` or without ``key``.  The metric and the options are checked by the router
        and the ``Sinkhorn`` method (``methods.sinkhorn``) before they reach the solve.

    The schedule is described in the module docstring.
    """
    x, options = _checked(X, metric, rtol, subsample, max_iterations, max_stages, batch_size,
                          online_threshold)
    run = _Run.of(x, points, weights, key, online, **options)
    _solve([run], 1)
    return run.result()


def w1_sinkhorn_batch(X, points, weights, *, keys=None, group: int | None = None,
                      metric: str = "linf", rtol: float = 0.01, subsample: int | None = None,
                      online: bool | None = None, max_iterations: int = 20000,
                      max_stages: int = 12, batch_size: int = 1024,
                      online_threshold: int = 1 << 27) -> list[SinkhornW1]:
    """``w1_sinkhorn`` of many measures ``points`` [B, M, d], ``weights`` [B, M] at once.

    Every replicate follows its own ε schedule; the rounds of the replicates still
    running are solved together, ``group`` replicates (of one padded support size) per
    vmapped call, empty slots filled by copies whose results are dropped.  A slot's
    result does not depend on what the other slots hold, so a replicate gets the same
    numbers whatever batch it is in, for a given ``group``.  ``group = 1`` solves one
    replicate per call, exactly as ``w1_sinkhorn`` does.  Default: 1 on CPU, where a
    vmapped round does the same arithmetic, runs until its slowest slot has converged and
    is slower (BENCHMARKS.md), 16 on an accelerator, which a single small solve leaves
    mostly idle.  Dense cost matrices are held for all slots at once, so online mode is
    chosen when ``group · n · m > online_threshold``.

    Args:
      keys: one key (or integer seed) per replicate, for ``subsample``; else None.
      group: replicates per vmapped call (a positive integer), or None for the default.
      the rest: as ``w1_sinkhorn``.

    Returns:
      One :class:`SinkhornW1` per replicate.
    """
    x, options = _checked(X, metric, rtol, subsample, max_iterations, max_stages, batch_size,
                          online_threshold)
    points, weights = np.asarray(points), np.asarray(weights)
    if points.ndim != 3 or weights.shape != points.shape[:2]:
        raise ValueError(f"points [B, M, d] and weights [B, M] must match; got {points.shape} "
                         f"and {weights.shape}")
    if keys is not None and len(keys) != len(weights):
        raise ValueError(f"keys must hold one key per replicate ({len(weights)}); "
                         f"got {len(keys)}")
    if group is None:
        group = 1 if jax.default_backend() == "cpu" else 16
    group = check_positive_int(group, "group")
    if group > 1:
        options["online_threshold"] = max(1, options["online_threshold"] // group)
    runs = [_Run.of(x, points[i], weights[i], None if keys is None else keys[i], online,
                    **options) for i in range(len(weights))]
    _solve(runs, group)
    return [run.result() for run in runs]


def _checked(X, metric, rtol, subsample, max_iterations, max_stages, batch_size,
             online_threshold):
    """Validated data and the options shared by every replicate (checked by the
    ``Sinkhorn`` method that calls the solve: ``methods.sinkhorn``), or ``ValueError``
    naming ``X`` or a ``subsample`` larger than the data."""
    x = check_data(X, "X")
    if subsample is not None and subsample > x.shape[0]:
        raise ValueError(f"subsample must be at most n = {x.shape[0]}; got {subsample}")
    return x, dict(metric=metric, rtol=float(rtol), subsample=subsample,
                   max_iterations=max_iterations, max_stages=max_stages,
                   batch_size=batch_size, online_threshold=online_threshold)


@dataclasses.dataclass(eq=False)
class _Run:
    """One replicate's solve: its padded problem and its ε schedule (module docstring),
    advanced one round at a time by ``_solve``."""

    x: jax.Array
    y: jax.Array
    a: jax.Array
    b: jax.Array
    diam: float
    rtol: float
    max_iterations: int
    max_stages: int
    round_iterations: int
    solve_options: dict
    chunk: int
    subsampled: bool
    f: jax.Array
    g: jax.Array
    lower: float = -math.inf
    upper: float = math.inf
    stage_done: bool = False
    epsilon: float = 0.0
    stages: int = 1
    iterations: int = 0
    momentum: bool = True
    threshold: float = 0.0
    over: bool = False

    @classmethod
    def of(cls, x, points, weights, key, online, *, metric, rtol, subsample, max_iterations,
           max_stages, batch_size, online_threshold):
        """Checked, subsampled and padded problem of one measure (host work, no solve)."""
        n, d = x.shape
        y = np.asarray(points, dtype=np.float64)
        b = np.asarray(weights, dtype=np.float64)
        if y.ndim != 2 or y.shape[1] != d:
            raise ValueError(f"points must have shape (M, {d}) to match X; got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("points contains NaN or inf")
        if b.shape != y.shape[:1]:
            raise ValueError(
                f"weights must have shape ({y.shape[0]},) to match points; got {b.shape}")
        if not np.all(np.isfinite(b)) or np.any(b < 0) or not b.sum() > 0:
            raise ValueError("weights must be finite, non-negative and not all zero")
        b = b / b.sum()
        if subsample is not None:
            if key is None:
                raise ValueError("key is required with subsample")
            key = as_typed_key(key)  # an int seed, a typed or a raw key; else ValueError
            x, y, b = _subsample(key, x, y, b, subsample)
            n = subsample
        live = np.flatnonzero(b > 0)
        m = atom_bucket(live.size, minimum=1)  # few shapes; 10 atoms stay 10
        fill = m - live.size
        y = np.concatenate([y[live], np.repeat(y[live[:1]], fill, axis=0)])
        b = np.concatenate([b[live], np.zeros(fill)])
        if online is None:
            online = n * m > online_threshold
        diam = _diameter(x, y, metric)
        round_iterations = min(_ROUND_ITERATIONS, max_iterations)
        return cls(
            x=jnp.asarray(x, jnp.float32), y=jnp.asarray(y, jnp.float32),
            a=jnp.full((n,), 1.0 / n, jnp.float32), b=jnp.asarray(b, jnp.float32),
            diam=diam, rtol=rtol, max_iterations=max_iterations, max_stages=max_stages,
            round_iterations=round_iterations,
            solve_options=dict(metric=metric, batch_size=min(batch_size, n) if online else None,
                               max_iterations=round_iterations),
            chunk=max(1, min(n, _CHUNK_ELEMENTS // m)), subsampled=subsample is not None,
            f=jnp.zeros((n,), jnp.float32), g=jnp.zeros((m,), jnp.float32),
            epsilon=_EPS0_FRACTION * diam, over=diam == 0.0)  # one and the same point

    def advance(self) -> bool:
        """Set the next round's ``epsilon`` and ``threshold``; False once the solve is over."""
        if self.over or self.iterations + self.round_iterations > self.max_iterations or (
                _converged(self.lower, self.upper, self.rtol)):
            self.over = True
            return False
        if self.stage_done:
            if self.stages == self.max_stages:
                self.over = True
                return False
            self.stages += 1
            target = self.lower * _EPS_PER_W1
            above_target = self.epsilon > target * 1.001
            self.epsilon /= _EPS_DECAY
            if above_target:  # scale down towards the target, not past it
                self.epsilon = max(self.epsilon, target)
        if self.epsilon <= self.lower * _EPS_PER_W1 * 1.001:  # target stage: tight marginals
            self.threshold = max(self.rtol * self.lower / (8 * self.diam), _MIN_THRESHOLD)
        else:  # an intermediate stage only prepares a warm start
            self.threshold = _LOOSE_THRESHOLD
        return True

    def record(self, f, g, n_iter, marginal_error, lo, up):
        """Take a round's potentials and certificate (a blow-up keeps the last finite ones
        and drops momentum)."""
        self.iterations += int(n_iter)
        lo, up = float(lo), float(up)
        if not (math.isfinite(lo) and math.isfinite(up)):
            self.momentum = False
            return
        self.f, self.g = f, g
        self.lower, self.upper = max(self.lower, lo), min(self.upper, up)
        self.stage_done = float(marginal_error) <= self.threshold

    def result(self) -> SinkhornW1:
        if self.diam == 0.0:
            return SinkhornW1(0.0, 0.0, 0.0, True, 0, 0.0)
        return SinkhornW1(value=0.5 * (self.lower + self.upper), lower=self.lower,
                          upper=self.upper,
                          converged=_converged(self.lower, self.upper, self.rtol),
                          iterations=self.iterations, epsilon=self.epsilon)


def _solve(runs: list, group: int) -> None:
    """Advance every run round by round until each is over.

    ``group = 1``: one jitted round and certificate per replicate.  Else the replicates of
    a round that share a compiled shape (support size, momentum) are solved ``group`` per
    vmapped call, empty slots filled with copies of the first.
    """
    while True:
        live = [run for run in runs if run.advance()]
        if not live:
            return
        with ott_batching(), jax.default_matmul_precision("highest"):
            if group == 1:
                for run in live:
                    f, g, n_iter, error = _sinkhorn_round(
                        run.x, run.y, run.a, run.b, run.f, run.g, run.epsilon, run.threshold,
                        momentum=run.momentum, **run.solve_options)
                    lo, up = _certificate(run.x, run.y, run.a, run.b, f, g, run.epsilon,
                                          metric=run.solve_options["metric"], chunk=run.chunk)
                    run.record(f, g, n_iter, error, lo, up)
                continue
            shapes: dict = {}
            for run in live:
                shapes.setdefault((run.y.shape[0], run.momentum), []).append(run)
            for (_, momentum), members in shapes.items():
                for start in range(0, len(members), group):
                    _solve_slots(members[start:start + group], group, momentum)


def _solve_slots(members: list, group: int, momentum: bool) -> None:
    """One vmapped round and certificate for ``members`` (at most ``group``) of one shape."""
    first = members[0]
    slots = members + [first] * (group - len(members))
    solve, certify = _vmapped(not first.subsampled, momentum=momentum, chunk=first.chunk,
                              **first.solve_options)

    def stack(name, dtype=None):
        return jnp.stack([jnp.asarray(getattr(run, name), dtype) for run in slots])

    x = first.x if not first.subsampled else stack("x")
    y, b, f, g = stack("y"), stack("b"), stack("f"), stack("g")
    epsilon, threshold = stack("epsilon", jnp.float32), stack("threshold", jnp.float32)
    f, g, n_iter, error = solve(x, y, first.a, b, f, g, epsilon, threshold)
    lo, up = certify(x, y, first.a, b, f, g, epsilon)
    n_iter, error, lo, up = jax.device_get((n_iter, error, lo, up))
    for i, run in enumerate(members):
        run.record(f[i], g[i], n_iter[i], error[i], lo[i], up[i])


def _converged(lower: float, upper: float, rtol: float) -> bool:
    finite = math.isfinite(lower) and math.isfinite(upper)
    return finite and upper - lower <= rtol * (upper + lower)
