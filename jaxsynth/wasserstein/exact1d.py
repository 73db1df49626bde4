"""Exact 1-D Wasserstein-1 distance by the CDF formula ``W1 = ∫|F − G|``: the one 1-D code.

Data ``x`` (weights ``1/n``) sorted once and atoms ``v`` (weights ``b``) are merged into
one sorted support ``z_(1) ≤ … ≤ z_(n+m)`` by binary searches, and

    W1 = Σ_k |D_k| (z_(k+1) − z_(k)),      D_k = Σ_{l ≤ k} s_(l),

with ``s`` the signed weights (``+1/n`` for the data, ``−b_j`` for the atoms); ties
contribute intervals of length zero.  ``O(n + m log m)`` per measure.  One code, two
array libraries (``xp``): JAX in float32 (jitted and vmapped on the device: the ``exact1d``
method and the bracket's projections) and NumPy in float64 (``line_w1``: the exact
method's ``d = 1`` route, whose certificate needs float64).

Float32 accuracy without 64-bit mode: each signed weight is split exactly as
``hi + lo`` with ``hi`` on the grid ``2^-21`` (partial sums of the ``hi`` parts are
exact), and the normalisation drift ``Σ q = 1 + δ`` is computed exactly and removed to
first order.  The derivation is in ``docs/theory/w1-methods.md``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["line_w1", "w1_against_sorted"]


_GRID_BITS = 21
"""Weights are split as ``hi + lo`` with ``hi`` on the grid ``2^-21``: every partial sum of
``hi`` parts (magnitude ≤ Σ|s| ≤ 2 plus rounding) is a multiple of ``2^-21`` below ``2^3``,
hence exact in float32 (24-bit significand) in any summation order."""


def _exact_split(xp, s):
    """Split ``s = hi + lo`` exactly, ``hi`` on the ``2^-21`` grid and ``|lo| ≤ 2^-22``."""
    hi = xp.round(s * 2.0**_GRID_BITS) * 2.0**-_GRID_BITS
    return hi, s - hi


def _integral(xp, z, is_u, hi, lo):
    """``∫|F − G|`` from the merged sorted support ``z`` and signed weights ``hi + lo``.

    ``hi`` on the ``2^-21`` grid and ``|lo| ≤ 2^-22`` (``_exact_split``; ``+`` for u).
    """
    s = hi + lo
    # cumsum(hi) is exact; the small lo parts are summed with rounding, so the CDF
    # difference is accurate to about one rounding of its value.
    hi_u, lo_u = xp.where(is_u, hi, 0.0), xp.where(is_u, lo, 0.0)
    # The rounded totals leave Σ q_u = 1 + δ_u; rescaling each CDF by 1/(1 + δ) to first
    # order removes this systematic drift (|δ| ~ 1e-7 in float32: the δ² remainder is
    # negligible).
    excess_u = (xp.sum(hi_u) - 1.0) + xp.sum(lo_u)
    excess_v = (-xp.sum(hi - hi_u) - 1.0) - xp.sum(lo - lo_u)
    mass_u = xp.cumsum(xp.where(is_u, s, 0.0))
    mass_v = xp.cumsum(xp.where(is_u, 0.0, -s))
    cdf_diff = xp.cumsum(hi) + (xp.cumsum(lo) - excess_u * mass_u + excess_v * mass_v)
    return xp.sum(xp.abs(cdf_diff[:-1]) * xp.diff(z))


def _scatter(xp, size, index, values, dtype, add=False):
    """``values`` written (or, ``add``, summed) at ``index`` of ``size`` zeros."""
    if xp is np:
        if add:
            return np.bincount(index, values, size).astype(dtype)
        out = np.zeros(size, dtype)
        out[index] = values
        return out
    out = jnp.zeros(size, dtype).at[index]
    return out.add(values) if add else out.set(values)


def _merged(xp, size, first, first_values, second, second_values, dtype):
    """Two sets of values written at the disjoint positions ``first`` and ``second``."""
    if xp is jnp:
        return jnp.zeros(size, dtype).at[first].set(first_values).at[second].set(second_values)
    out = np.zeros(size, dtype)
    out[first], out[second] = first_values, second_values
    return out


def w1_against_sorted(x_sorted, v, v_weights, xp=jnp):
    """Exact W1 between equal-weight data ``x_sorted`` [n] (sorted once) and atoms [m].

    The atoms are sorted (on the device as their IEEE bit patterns: a single-key integer
    sort, which orders non-negative floats), then merged with the data by binary searches
    (ties put atoms first; tied points bound intervals of length zero).  Weights are
    normalised by their sum, as ``scipy.stats.wasserstein_distance`` does.

    Args:
      x_sorted: [n] data in increasing order.
      v: [m] non-negative atoms; v_weights: [m] non-negative weights (zeros: padding).
      xp: ``jax.numpy`` (float32; jit and vmap it freely) or ``numpy`` (float64, host).

    Returns:
      the W1 distance, a scalar of that precision.
    """
    dtype = jnp.float32 if xp is jnp else np.float64
    n, m = x_sorted.shape[0], v.shape[0]
    x_sorted = xp.asarray(x_sorted, dtype)
    v = xp.maximum(xp.asarray(v, dtype), 0.0)  # −0.0 has the sign bit: make it +0.0
    if xp is jnp:
        keys = jax.lax.bitcast_convert_type(v, jnp.uint32)
        sorted_keys = jnp.sort(keys)
        rank = jnp.searchsorted(sorted_keys, keys, side="left")
        v_sorted = jax.lax.bitcast_convert_type(sorted_keys, jnp.float32)
    else:
        v_sorted = np.sort(v)
        rank = np.searchsorted(v_sorted, v, side="left")
    # tied atoms share a slot: their weights are merged exactly (hi parts on the 2^-21
    # grid add without rounding; the small lo parts are what the arithmetic rounds)
    w_hi, w_lo = _exact_split(xp, xp.asarray(v_weights, dtype) / xp.sum(v_weights))
    hi_sorted = _scatter(xp, m, rank, w_hi, dtype, add=True)
    lo_sorted = _scatter(xp, m, rank, w_lo, dtype, add=True)
    data_at = xp.arange(n) + xp.searchsorted(v_sorted, x_sorted, side="right")
    atom_at = xp.arange(m) + xp.searchsorted(x_sorted, v_sorted, side="left")
    d_hi, d_lo = _exact_split(xp, xp.full(n, 1.0 / n, dtype))
    z = _merged(xp, n + m, data_at, x_sorted, atom_at, v_sorted, dtype)
    hi = _merged(xp, n + m, data_at, d_hi, atom_at, -hi_sorted, dtype)
    lo = _merged(xp, n + m, data_at, d_lo, atom_at, -lo_sorted, dtype)
    is_u = _scatter(xp, n + m, data_at, True, bool)
    return _integral(xp, z, is_u, hi, lo)


def line_w1(x, atoms, w) -> float:
    """W1 on the line between the points ``x`` [n] (mass ``1/n`` each) and ``atoms`` [M] of
    weights ``w``, in float64 on the host (``w1_against_sorted`` with NumPy); its rounding
    is below ``(n + M + 1)·2^-50``."""
    return float(w1_against_sorted(np.sort(np.asarray(x, np.float64)), np.asarray(atoms),
                                   np.asarray(w), xp=np))
