"""Exact noise laws used by the mechanisms (SPEC §1).

All samplers take an explicit ``jax.random`` key and a (possibly traced) scale, are pure,
and vmap over keys and scales.  Uniforms are built from 32 random bits as
``(bits + 1/2)·2^-32`` so that ``-log u`` has a fine tail (exponential variates up to
about 22.9, a truncation of probability 1e-10) in float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

MAX_DISCRETE_SCALE = 2.0**20
"""Largest discrete-Laplace scale: ``⌊σE⌋`` stays an exact float32 integer for E ≤ 16."""


def open_uniform(bits):
    """Uniforms in (0, 1] from uint32 ``bits``, resolution 2^-33 near zero, float32."""
    return (bits.astype(jnp.float32) + 0.5) * jnp.float32(2.0**-32)


def _exponential(key, shape):
    return -jnp.log(open_uniform(jax.random.bits(key, shape, jnp.uint32)))


def discrete_laplace_from_bits(bits, sigma):
    """``LapZ(σ)`` int32 from two uint32 words per draw, ``bits`` [..., 2] (see below)."""
    g = jnp.floor(-jnp.log(open_uniform(bits)) * jnp.asarray(sigma, jnp.float32))
    return (g[..., 0] - g[..., 1]).astype(jnp.int32)


def discrete_laplace(key, sigma, shape=()):
    """Discrete Laplace ``LapZ(σ)``: ``P(z) ∝ exp(-|z|/σ)`` on ℤ, int32 of ``shape``.

    Sampled as ``G1 - G2`` with ``G_i = ⌊σ E_i⌋``, ``E_i ~ Exp(1)``: then
    ``P(G ≥ k) = e^{-k/σ}``, i.e. ``G`` is geometric on {0,1,...} with success
    probability ``1 - e^{-1/σ}`` (SPEC §1; seed 001 §A.3).
    """
    bits = jax.random.bits(key, tuple(shape) + (2,), jnp.uint32)
    return discrete_laplace_from_bits(bits, sigma)


def laplace(key, scale, shape=()):
    """Laplace ``Lap(b)`` with density ``exp(-|z|/b)/(2b)``, float32 of ``shape``."""
    e = _exponential(key, (2,) + tuple(shape))
    return (e[0] - e[1]) * jnp.asarray(scale, jnp.float32)


def exponential_mechanism_probabilities(scores, epsilon, sensitivity):
    """Selection probabilities ``P(a) ∝ exp(-ε·B_a/(2Δ))`` (lower score is better).

    With ``Δ = 0`` adjacent data sets share the scores, so the choice costs no budget
    (seed 001 §B.4); the rule then puts all mass on the first minimiser.
    """
    scores = jnp.asarray(scores, jnp.float32)
    logits = exponential_mechanism_logits(scores, epsilon, sensitivity)
    return jax.nn.softmax(logits)


def exponential_mechanism_logits(scores, epsilon, sensitivity):
    """Logits ``-ε·B_a/(2Δ)``; a one-hot at the first minimiser when ``Δ = 0``."""
    scores = jnp.asarray(scores, jnp.float32)
    safe = jnp.where(sensitivity > 0, sensitivity, 1.0)
    logits = -epsilon * scores / (2.0 * safe)
    first_min = jnp.arange(scores.shape[-1]) == jnp.argmin(scores, axis=-1)[..., None]
    return jnp.where(sensitivity > 0, logits, jnp.where(first_min, 0.0, -jnp.inf))


def exponential_mechanism(key, scores, epsilon, sensitivity):
    """Index drawn by the exponential mechanism (Gumbel-max over the exact logits)."""
    return jax.random.categorical(key, exponential_mechanism_logits(scores, epsilon, sensitivity))
