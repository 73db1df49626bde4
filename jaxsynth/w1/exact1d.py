"""Exact 1-D Wasserstein-1 distance by the CDF formula (SPEC §7, "Exact 1-D").

For two probability measures ``μ = Σ_i a_i δ_{u_i}`` and ``ν = Σ_j b_j δ_{v_j}`` on the
line, ``W1(μ, ν) = ∫ |F(t) − G(t)| dt`` with ``F``, ``G`` their CDFs.  Both CDFs are step
functions that only change at support points, so after one joint sort of the ``n + m``
support points ``z_(1) ≤ … ≤ z_(n+m)`` the integral is the finite sum

    W1 = Σ_k |D_k| (z_(k+1) − z_(k)),      D_k = Σ_{l ≤ k} s_(l),

where ``s`` carries the signed weights (``+a_i`` for atoms of ``μ``, ``−b_j`` for atoms of
``ν``).  Ties need no special care: tied points contribute intervals of length zero.
Cost ``O((n+m) log(n+m))`` (the sort), fully static shapes, jittable and vmappable.

Float32 accuracy.  The running sum ``D_k`` is the delicate part: a plain float32 cumsum
of ``n + m`` weights carries an absolute error growing like ``(n+m)·2^-24`` and ``D_k`` is
small exactly where the two CDFs are close.  It is accumulated instead as an unevaluated
pair of float32 numbers (error-free ``TwoSum`` inside an associative scan), which keeps
``D_k`` correct to float32 rounding of its exact value.  What remains is float32 rounding
of the inputs' differences, of the products and of the final positive sum.  Measured
against ``scipy.stats.wasserstein_distance`` evaluated in float64 on the same float32
inputs (1 to 2000 atoms per side, ties, zero weights): relative error below ``2e-6`` in
all cases tested (``tests/test_w1_exact1d.py``), typically a few ``1e-7``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth._validate import check_data

__all__ = ["wasserstein_1d", "w1_exact1d"]


def _two_sum_add(x, y):
    """Add two unevaluated float pairs ``(hi, lo)`` with error-free ``TwoSum`` (Knuth)."""
    x_hi, x_lo = x
    y_hi, y_lo = y
    s = x_hi + y_hi
    t = s - x_hi
    err = (x_hi - (s - t)) + (y_hi - t)
    err = err + (x_lo + y_lo)
    hi = s + err
    lo = err - (hi - s)
    return hi, lo


def _accurate_sum(w):
    """``Σ w`` as an unevaluated pair ``(hi, lo)`` with ``hi + lo`` exact to ~2^-48."""
    return jax.lax.reduce((w, jnp.zeros_like(w)), (jnp.zeros((), w.dtype),) * 2,
                          _two_sum_add, (0,))


def _normalized(w):
    """``w / Σ w`` without the systematic error of a rounded float32 total."""
    hi, lo = _accurate_sum(w)
    q = w / hi
    return q - q * (lo / hi)


def wasserstein_1d(u, u_weights, v, v_weights) -> jax.Array:
    """Exact W1 between two weighted measures on the real line, ``∫ |F − G|``.

    Pure JAX, static shapes: jit and vmap it freely.  Zero weights are allowed (padding).
    Weights are normalised by their sums, as ``scipy.stats.wasserstein_distance`` does;
    an all-zero weight vector gives NaN.

    Args:
      u: [n] support of the first measure.
      u_weights: [n] non-negative weights of ``u``.
      v: [m] support of the second measure.
      v_weights: [m] non-negative weights of ``v``.

    Returns:
      Scalar array, the W1 distance, in the floating dtype of the inputs.  Accurate to a
      few float32 ulps of relative error in float32 (see the module docstring).

    Implements SPEC §7 (exact 1-D W1).
    """
    dtype = jnp.result_type(u, u_weights, v, v_weights, jnp.float32)
    u, u_weights, v, v_weights = (jnp.asarray(a, dtype) for a in (u, u_weights, v, v_weights))
    z = jnp.concatenate([u, v])
    s = jnp.concatenate([_normalized(u_weights), -_normalized(v_weights)])
    order = jnp.argsort(z)
    z, s = z[order], s[order]
    cdf_diff, _ = jax.lax.associative_scan(_two_sum_add, (s, jnp.zeros_like(s)))
    return jnp.sum(jnp.abs(cdf_diff[:-1]) * jnp.diff(z))


@jax.jit
def _w1_batched(x, points, weights):
    """``wasserstein_1d`` of data ``x`` [n] against every measure of a flat batch [B, M]."""
    x_weights = jnp.full(x.shape, 1.0 / x.shape[0], x.dtype)
    return jax.vmap(wasserstein_1d, in_axes=(None, None, 0, 0))(x, x_weights, points, weights)


def w1_exact1d(x, points, weights) -> jax.Array:
    """Exact W1 between 1-D data (weights ``1/n``) and (a batch of) synthetic measures.

    Args:
      x: [n] or [n, 1] data inside [0, 1].
      points: [..., M, 1] synthetic atoms; leading axes are batch axes.
      weights: [..., M] non-negative weights summing to 1 (zero-weight padding allowed).

    Returns:
      [...] float32 W1 values, one per synthetic measure (a scalar array when unbatched).

    Raises:
      ValueError: naming the argument, if the data are not 1-D points in [0, 1], if
        ``points`` is not [..., M, 1], or if ``weights`` does not match ``points`` or has
        negative or non-finite entries.

    Implements SPEC §7 (exact 1-D W1).
    """
    x = np.asarray(x)
    if x.ndim == 1:
        x = x[:, None]
    x = check_data(x, "x")
    if x.shape[1] != 1:
        raise ValueError(f"x must be 1-D data of shape (n,) or (n, 1); got d = {x.shape[1]}")
    points = jnp.asarray(points, jnp.float32)
    weights = jnp.asarray(weights, jnp.float32)
    if points.ndim < 2 or points.shape[-1] != 1:
        raise ValueError(
            f"points must have shape (..., M, 1) for exact 1-D W1; got shape {points.shape}"
        )
    if weights.shape != points.shape[:-1]:
        raise ValueError(
            f"weights must have shape {points.shape[:-1]} to match points; got {weights.shape}"
        )
    if not isinstance(weights, jax.core.Tracer):
        w = np.asarray(weights)
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("weights must be finite and non-negative")
    batch_shape = weights.shape[:-1]
    flat = _w1_batched(
        jnp.asarray(x[:, 0], jnp.float32),
        points.reshape(-1, points.shape[-2]),
        weights.reshape(-1, weights.shape[-1]),
    )
    return flat.reshape(batch_shape)
