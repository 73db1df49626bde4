"""Top-down consistency of noisy sibling counts (PMM and Pruned-PMM).

PMM (He, Vershynin, Zhu, COLT 2023; §3 of Zare Moayedi, Asadi, Yassaee, Aminian,
"Geometry-Adaptive Mechanisms for Private Synthetic Data", arXiv 2609.33363) requires
only comparable child masses; the proportional rule here is jaxsynth's choice of one.
Pruned-PMM's zero-respecting rule is that paper's Algorithm 2.

Given a parent mass ``m`` and the noisy child counts ``(a, b)`` (non-negative integers),
each rule returns integers ``m0 + m1 = m``, ``m0, m1 ≥ 0``, *comparable* to ``(a, b)``:
both ``m_i ≤`` or both ``≥`` their noisy counts.  Counts arrive as
``jaxsynth.core.noise.noisy_count`` gives them: int32 values saturated at
``SATURATION > m`` (so every comparison with ``m`` is exact) and the same values in units
of their common scale ``σ`` (float32), which the ratio uses when a count saturates.
All rules are elementwise, so they apply to a whole level at once.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxsynth.core.noise import SATURATION


def comparable_interval(m, a, b):
    """Range ``[lo, hi]`` of ``m0`` making ``(m0, m − m0)`` comparable to ``(a, b)``."""
    enough = a + b >= m
    lo = jnp.where(enough, jnp.maximum(0, m - b), a)
    hi = jnp.where(enough, jnp.minimum(a, m), m - b)
    return lo, hi


def _ratio(a, b, a_scaled, b_scaled):
    """``a/(a + b)`` in float32; from the scaled values when a count saturates."""
    exact = a.astype(jnp.float32) / jnp.maximum(a + b, 1).astype(jnp.float32)
    wide = a_scaled / jnp.maximum(a_scaled + b_scaled, jnp.finfo(jnp.float32).tiny)
    return jnp.where((a >= SATURATION) | (b >= SATURATION), wide, exact)


def proportional_split(m, a, b, a_scaled, b_scaled, coin):
    """Proportional comparable rule: ``m0 = round(m·a/(a+b))`` clipped into the interval.

    The product is taken in float32 and the rounded value is clipped in int32 into the
    comparable interval, so the result is exactly comparable and sums to ``m`` whatever
    the rounding (round half to even), without integer overflow.  When ``a = b = 0`` the
    mass is split as evenly as possible and the odd unit goes to child ``coin`` (a fair
    bit independent of the data).

    Args:
      m: int32 parent masses (``0 ≤ m < 2^30``).
      a, b: int32 noisy child counts, saturated at ``SATURATION``.
      a_scaled, b_scaled: the same counts times ``1/σ`` (float32).
      coin: int32 fair bits.

    Returns:
      ``(m0, m1)``, int32.
    """
    m0 = jnp.round(m.astype(jnp.float32) * _ratio(a, b, a_scaled, b_scaled)).astype(jnp.int32)
    lo, hi = comparable_interval(m, a, b)
    m0 = jnp.clip(m0, lo, hi)
    even = m // 2 + (m % 2) * (1 - coin)
    m0 = jnp.where(a + b == 0, even, m0)
    return m0, m - m0


def zero_respecting_split(m, a, b, a_scaled, b_scaled, coin):
    """Zero-respecting rule of Pruned-PMM (Zare Moayedi et al. Algorithm 2).

    Exactly one noisy child is 0: it gets 0 and the other gets ``m``; both are 0: child
    ``coin`` gets ``m``; otherwise the proportional rule.
    """
    m0, _ = proportional_split(m, a, b, a_scaled, b_scaled, coin)
    m0 = jnp.where((a == 0) & (b > 0), 0, m0)
    m0 = jnp.where((b == 0) & (a > 0), m, m0)
    m0 = jnp.where((a == 0) & (b == 0), m * (1 - coin), m0)
    return m0, m - m0


RULES = {"proportional": proportional_split, "zero_respecting": zero_respecting_split}
