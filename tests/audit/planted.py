"""Planted privacy bugs: test fixtures for the auditor, outside the public API.

Each is a subclass of a real mechanism config whose ``plan`` plants one bug through the
kernels' audit hooks (``DenseStatic.noise`` / ``rule``, ``TreeStatic.split``) or the plan's
parameters (the plan's options, e.g. the auditor's ``piece`` and ``transcript``, pass
through); ``jaxsynth.audit_mechanism`` must flag every one at the claimed ε.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from jaxsynth.core import noise
from jaxsynth.core.consistency import comparable_interval
from jaxsynth.mechanisms.adaptive import AdaptivePrunedPMM
from jaxsynth.mechanisms.pmm import PMM
from jaxsynth.mechanisms.privtree import PrivTree


def _with_static(plan, **changes):
    return dataclasses.replace(plan, static=dataclasses.replace(plan.static, **changes))


@dataclasses.dataclass(frozen=True)
class HalvedNoisePMM(PMM):
    """PMM whose discrete-Laplace scales are half the accounted ones (true loss 2ε)."""

    name = "pmm [planted: halved noise]"

    def plan(self, tree, eps, **options):
        plan = super().plan(tree, eps, **options)
        params = dict(plan.params, inv_sigma=plan.params["inv_sigma"] * 2,
                      inv_sigma0=plan.params["inv_sigma0"] * 2)
        return dataclasses.replace(plan, params=params)


def truncated_noisy_count(word, count, inv_sigma):
    """``(c + Z)_+`` with ``Z = trunc(Lap(σ))``: a continuous Laplace draw rounded toward 0.

    The sampler of ``noise.noisy_count`` without its offset ``h``: ``|Z| = ⌊σE⌋`` is
    geometric with ``P(|Z| ≥ k) = q^k``, so ``P(Z = 0) = 1 − q`` is twice the discrete
    Laplace mass and ``P(0)/P(±1) = 2e^{1/σ}``: an extra ``ln 2`` per node.
    """
    inv = jnp.asarray(inv_sigma, jnp.float32)
    t = noise.exponential(word, noise.COUNT_BITS)
    mag = jnp.minimum(jnp.floor(t / inv), jnp.float32(noise.SATURATION)).astype(jnp.int32)
    positive = noise.sign_bit(word) == 1
    count = jnp.asarray(count, jnp.int32)
    value = jnp.clip(count + jnp.where(positive, mag, -mag), 0, noise.SATURATION)
    scaled = jnp.maximum(count.astype(jnp.float32) * inv + jnp.where(positive, t, -t), 0.0)
    return value, scaled


@dataclasses.dataclass(frozen=True)
class TruncatedLaplacePMM(PMM):
    """PMM whose noise is a truncated continuous Laplace draw (``truncated_noisy_count``)."""

    name = "pmm [planted: truncated continuous Laplace]"

    def plan(self, tree, eps, **options):
        return _with_static(super().plan(tree, eps, **options), noise=truncated_noisy_count)


def true_count_split(m, a, b, a_scaled, b_scaled, coin, c0, c1):
    """The proportional rule with its ratio read from the TRUE child counts ``c0, c1``.

    Still clipped into the comparable interval of the noisy counts, so the output looks
    consistent; ``a = b = 0``-style ties split evenly with the coin.
    """
    total = c0 + c1
    ratio = c0.astype(jnp.float32) / jnp.maximum(total, 1).astype(jnp.float32)
    m0 = jnp.round(m.astype(jnp.float32) * ratio).astype(jnp.int32)
    lo, hi = comparable_interval(m, a, b)
    m0 = jnp.clip(m0, lo, hi)
    even = m // 2 + (m % 2) * (1 - coin)
    m0 = jnp.where(total == 0, jnp.clip(even, lo, hi), m0)
    return m0, m - m0


@dataclasses.dataclass(frozen=True)
class TrueCountRulePMM(PMM):
    """PMM whose consistency rule reads the true child counts (``true_count_split``)."""

    name = "pmm [planted: consistency reads true counts]"

    def plan(self, tree, eps, **options):
        return _with_static(super().plan(tree, eps, **options), rule=true_count_split)


def unclamped_split(counts, level, word, lam, delta):
    """PrivTree's split test without its clamp: ``c − kδ + Lap(λ) > 0``."""
    return counts - level * delta + noise.laplace(word, lam) > 0


@dataclasses.dataclass(frozen=True)
class NoClampPrivTree(PrivTree):
    """PrivTree without the clamp at ``θ − δ`` (``unclamped_split``)."""

    @property
    def name(self) -> str:
        return super().name + " [planted: no clamp]"

    def plan(self, tree, eps, **options):
        return _with_static(super().plan(tree, eps, **options), split=unclamped_split)


@dataclasses.dataclass(frozen=True)
class HalvedSensitivityAdaptive(AdaptivePrunedPMM):
    """Adaptive Pruned-PMM whose exponential mechanism uses ``Δ/2``."""

    name = "adaptive-pruned-pmm [planted: halved sensitivity]"

    def plan(self, tree, eps, **options):
        plan = super().plan(tree, eps, **options)
        params = dict(plan.params, sensitivity=plan.params["sensitivity"] * 0.5)
        return dataclasses.replace(plan, params=params)


PLANTED = {
    "halved-noise": HalvedNoisePMM(),
    "truncated-laplace": TruncatedLaplacePMM(),
    "true-count-rule": TrueCountRulePMM(),
    "no-clamp": NoClampPrivTree(),
    "halved-sensitivity": HalvedSensitivityAdaptive(),
}
"""One instance of every planted bug."""
