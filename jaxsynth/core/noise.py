"""Exact noise laws from 32-bit random words.

Every variate is a function of one word of ``jaxsynth.core.keys``, so an independent
reimplementation (the tests' per-node oracle) that draws the same words gets the same
noise: the exponential ``−ln u`` with ``u`` on the midpoints of a ``2^-b`` grid, carried
as an exact float32 pair; the discrete Laplace ``LapZ(σ)`` from one word and one
logarithm (sign from bit 31, bit 30 left free for the PMM family's coin, ``|Z|``
truncated at ``21.5σ + 1``, every cdf value within ``2^-30``); the Laplace ``±b·E``; the
uniform on ``[0, 1)`` from the top 24 bits.

``noisy_count`` returns ``(c + Z)_+`` as an int32 saturated at ``SATURATION = 2^30 − 1``
(exact below it, so every comparison of a consistency rule is exact) together with the
value in units of ``σ`` for the proportional rule's ratio.  Scales are passed as
``ν = 1/σ``; ``ν = 0`` is the limit ``σ = ∞``.  The derivations: the documentation's
theory page "Noise and random words".
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

SATURATION = 2**30 - 1
"""Noisy counts are carried as int32 saturated here (sums of two stay below 2^31)."""
COUNT_BITS = 30
"""Uniform bits of a discrete-Laplace draw (bits 0..29 of its word)."""


def _exact_uniform(word, bits: int):
    """``u = (k + 1/2)·2^{-bits}`` as an exact pair ``(s, e)``, ``u = s + e``, ``s = fl(u)``.

    ``k`` (the low ``bits`` bits) is split into its top 24 bits and the rest, both exact
    in float32; TwoSum then gives the rounded sum and its exact error.
    """
    k = word & jnp.uint32(2**bits - 1)
    low_mask = jnp.uint32(2 ** max(0, bits - 24) - 1)
    hi = (k & ~low_mask).astype(jnp.float32) * jnp.float32(2.0**-bits)
    lo = ((k & low_mask).astype(jnp.float32) + 0.5) * jnp.float32(2.0**-bits)
    s = hi + lo  # TwoSum: s + e = hi + lo exactly
    bb = s - hi
    e = (hi - (s - bb)) + (lo - bb)
    return s, e


def exponential(word, bits: int = 31):
    """``Exp(1)`` variate ``−ln u`` from the low ``bits`` bits of ``uint32`` words, float32."""
    s, e = _exact_uniform(jnp.asarray(word, jnp.uint32), bits)
    return -jnp.log(s) - e / s


def sign_bit(word):
    """Bit 31 of the word (1: positive)."""
    return (jnp.asarray(word, jnp.uint32) >> 31).astype(jnp.int32)


def coin(word):
    """Bit 30 of the word: the fair coin of an expansion block."""
    return ((jnp.asarray(word, jnp.uint32) >> 30) & 1).astype(jnp.int32)


def _magnitude(word, inv_sigma):
    """``(T, M)``: ``T = E + h`` and ``M = min(⌊T/ν⌋, SATURATION)`` (int32) of a LapZ draw."""
    inv = jnp.asarray(inv_sigma, jnp.float32)
    h = -jnp.log1p(0.5 * jnp.expm1(-inv))  # ln(2 / (1 + e^{-ν}))
    t = exponential(word, COUNT_BITS) + h
    mag = jnp.minimum(jnp.floor(t / inv), jnp.float32(SATURATION)).astype(jnp.int32)
    return t, mag


def discrete_laplace(word, inv_sigma):
    """``LapZ(σ)`` int32 from words, ``ν = 1/σ`` (saturated at ``±SATURATION``)."""
    _, mag = _magnitude(word, inv_sigma)
    return jnp.where(sign_bit(word) == 1, mag, -mag)


def noisy_count(word, count, inv_sigma):
    """``(c + Z)_+`` for ``Z ~ LapZ(σ)``: (int32 saturated value, float32 scaled value).

    The scaled value is ``ν·(c ± T)_+`` with ``T = E + h`` the magnitude before its floor
    (``|Z| = ⌊T/ν⌋``), within ``ν`` of ``ν·(c + Z)_+``: the ratio of two saturated counts
    needs nothing finer.

    Args:
      word: uint32 words, one per count.
      count: int32 true counts ``c`` (``0 ≤ c < 2^27``).
      inv_sigma: ``ν = 1/σ`` (scalar or broadcastable; 0 means ``σ = ∞``).
    """
    t, mag = _magnitude(word, inv_sigma)
    positive = sign_bit(word) == 1
    count = jnp.asarray(count, jnp.int32)
    value = jnp.clip(count + jnp.where(positive, mag, -mag), 0, SATURATION)
    scaled = count.astype(jnp.float32) * jnp.asarray(inv_sigma, jnp.float32)
    scaled = jnp.maximum(scaled + jnp.where(positive, t, -t), 0.0)
    return value, scaled


def laplace(word, scale):
    """``Lap(b)``, density ``e^{−|z|/b}/(2b)``: ``±b·E`` from words, float32."""
    e = exponential(word, 31) * jnp.asarray(scale, jnp.float32)
    return jnp.where(sign_bit(word) == 1, e, -e)


def uniform(word):
    """Uniform on ``[0, 1)`` from the top 24 bits of each word, float32 (exact)."""
    return (jnp.asarray(word, jnp.uint32) >> 8).astype(jnp.float32) * jnp.float32(2.0**-24)


def exponential_mechanism_logits(gaps, epsilon, sensitivity):
    """Logits ``−ε·B_a/(2Δ)`` from score gaps (lower is better; ``+inf`` excluded).

    With ``Δ = 0`` adjacent data sets share the scores, so the choice costs no budget
    (Zare Moayedi et al., arXiv 2609.33363, §B.4) and all mass goes to the first minimiser.
    """
    gaps = jnp.asarray(gaps, jnp.float32)
    safe = jnp.where(sensitivity > 0, sensitivity, 1.0)
    logits = -epsilon * gaps / (2.0 * safe)
    first_min = jnp.arange(gaps.shape[-1]) == jnp.argmin(gaps, axis=-1)[..., None]
    return jnp.where(sensitivity > 0, logits, jnp.where(first_min, 0.0, -jnp.inf))


def exponential_mechanism_probabilities(gaps, epsilon, sensitivity):
    """Selection probabilities ``P(a) ∝ exp(−ε·B_a/(2Δ))``."""
    return jax.nn.softmax(exponential_mechanism_logits(gaps, epsilon, sensitivity), axis=-1)


def gumbel_argmax(words, logits):
    """Index drawn with probabilities ``softmax(logits)`` by the exponential race.

    ``argmin_a E_a·e^{−logit_a}`` with ``E_a = Exp(1)`` from ``words[a]`` equals the
    Gumbel-max draw ``argmax_a logit_a − ln E_a``.
    """
    keyed = jnp.log(exponential(words, 31)) - jnp.asarray(logits, jnp.float32)
    return jnp.argmin(keyed, axis=-1).astype(jnp.int32)


def discrete_laplace_pmf(z, sigma) -> np.ndarray:
    """Exact pmf ``(1−q)/(1+q)·q^{|z|}``, ``q = e^{−1/σ}`` (host float64, for checks)."""
    q = np.exp(-1.0 / np.asarray(sigma, np.float64))
    return (1.0 - q) / (1.0 + q) * q ** np.abs(np.asarray(z, np.float64))
