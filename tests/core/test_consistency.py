"""Consistency rules on exhaustive small cases, at large counts and at saturation (PMM's
proportional rule, Pruned-PMM's zero-respecting rule).

Rules take ``(m, a, b, a_scaled, b_scaled, coin)``: int32 noisy counts saturated at
``noise.SATURATION = 2^30 − 1`` and the same counts in units of σ (float32, here the counts
times ``NU``).  Truth is computed independently in float64/int64 with NumPy.
"""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from jaxsynth.core.consistency import (
    RULES,
    comparable_interval,
    proportional_split,
    zero_respecting_split,
)
from jaxsynth.core.noise import SATURATION

GRID = np.array(list(itertools.product(range(13), range(13), range(13), range(2))), np.int32)
NU = 0.37
"""The common ``1/σ`` of the scaled counts (any positive value; the ratio is scale-free)."""


def _apply(rule, m, a, b, coin, a_scaled=None, b_scaled=None):
    """Apply ``rule``; the scaled counts default to the float32 counts times ``NU``."""
    if a_scaled is None:
        a_scaled = np.asarray(a, np.float32) * np.float32(NU)
    if b_scaled is None:
        b_scaled = np.asarray(b, np.float32) * np.float32(NU)
    args = (m, a, b, np.asarray(a_scaled, np.float32), np.asarray(b_scaled, np.float32), coin)
    m0, m1 = rule(*(jnp.asarray(x) for x in args))
    assert m0.dtype == m1.dtype == jnp.int32
    return np.asarray(m0), np.asarray(m1)


def _check_comparable(m, a, b, m0, m1):
    m, a, b, m0, m1 = (np.asarray(x, np.int64) for x in (m, a, b, m0, m1))
    assert np.all(m0 + m1 == m) and np.all(m0 >= 0) and np.all(m1 >= 0)
    both_le = (m0 <= a) & (m1 <= b)
    both_ge = (m0 >= a) & (m1 >= b)
    assert np.all(both_le | both_ge)


def _interval(m, a, b):
    m, a, b = (np.asarray(x, np.int64) for x in (m, a, b))
    lo = np.where(a + b >= m, np.maximum(0, m - b), a)
    hi = np.where(a + b >= m, np.minimum(a, m), m - b)
    return lo, hi


def test_rules_registry():
    assert RULES == {"proportional": proportional_split, "zero_respecting": zero_respecting_split}


def test_comparable_interval_exhaustive():
    """``[lo, hi]`` is exactly the set of comparable ``m0`` (brute force over ``0..m``)."""
    m, a, b, _ = GRID[GRID[:, 3] == 0].T
    lo, hi = (np.asarray(x) for x in comparable_interval(*(jnp.asarray(x) for x in (m, a, b))))
    for mi, ai, bi, l, h in zip(m, a, b, lo, hi):
        ok = [x for x in range(mi + 1) if (x <= ai and mi - x <= bi) or (x >= ai and mi - x >= bi)]
        assert (l, h) == (min(ok), max(ok))


def test_proportional_exhaustive():
    m, a, b, coin = GRID.T
    m0, m1 = _apply(proportional_split, m, a, b, coin)
    _check_comparable(m, a, b, m0, m1)
    # the proportional target is attained whenever it lies in the comparable interval
    target = np.floor(m * a / np.maximum(a + b, 1) + 0.5)
    lo, hi = _interval(m, a, b)
    inside = (a + b > 0) & (target >= lo) & (target <= hi) & (np.abs(m * a / np.maximum(a + b, 1) % 1 - 0.5) > 1e-6)
    np.testing.assert_array_equal(m0[inside], target[inside])
    # outside it, the clipped value is the interval end nearest the target
    outside = (a + b > 0) & ((target < lo) | (target > hi))
    np.testing.assert_array_equal(m0[outside], np.clip(target, lo, hi)[outside])
    # a = b = 0: even split, odd unit to child `coin`
    zero = (a == 0) & (b == 0)
    np.testing.assert_array_equal(m0[zero], m[zero] // 2 + (m[zero] % 2) * (1 - coin[zero]))


def test_zero_respecting_exhaustive():
    m, a, b, coin = GRID.T
    m0, m1 = _apply(zero_respecting_split, m, a, b, coin)
    _check_comparable(m, a, b, m0, m1)
    one_zero_a = (a == 0) & (b > 0)
    assert np.all(m0[one_zero_a] == 0)
    one_zero_b = (b == 0) & (a > 0)
    assert np.all(m1[one_zero_b] == 0)
    both = (a == 0) & (b == 0)
    np.testing.assert_array_equal(m0[both], np.where(coin[both] == 0, m[both], 0))
    rest = (a > 0) & (b > 0)
    p0, _ = _apply(proportional_split, m, a, b, coin)
    np.testing.assert_array_equal(m0[rest], p0[rest])


def test_scaled_values_are_ignored_below_saturation():
    """Unsaturated counts: the ratio is the exact integer one, whatever the scaled values."""
    m, a, b, coin = GRID.T
    rng = np.random.default_rng(4)
    junk_a, junk_b = rng.random((2, len(m))) * 100
    for rule in RULES.values():
        np.testing.assert_array_equal(
            _apply(rule, m, a, b, coin, junk_a, junk_b)[0], _apply(rule, m, a, b, coin)[0]
        )


def test_no_overflow_at_large_counts():
    rng = np.random.default_rng(0)
    m = rng.integers(0, 10**8 + 10**6, 100_000).astype(np.int32)
    a = rng.integers(0, 10**8 + 10**6, 100_000).astype(np.int32)
    b = rng.integers(0, 10**8 + 10**6, 100_000).astype(np.int32)
    coin = rng.integers(0, 2, 100_000).astype(np.int32)
    for rule in (proportional_split, zero_respecting_split):
        m0, m1 = _apply(rule, m, a, b, coin)
        _check_comparable(m, a, b, m0, m1)


def _check_ratio(m, a, b, a_s, b_s, m0):
    """``m0`` is ``m·a_s/(a_s + b_s)`` clipped into the comparable interval: exactly
    (rounded half away from ±0.5 by 1e-3) for ``m < 2^16``, within float32 rounding
    (``0.5 + 2^-21·m``: the rule multiplies in float32) for larger ``m``."""
    ratio = a_s.astype(np.float64) / (a_s.astype(np.float64) + b_s.astype(np.float64))
    lo, hi = _interval(m, a, b)
    real = np.clip(m * ratio, lo, hi)
    assert np.all(np.abs(m0 - real) <= 0.5 + 2.0**-21 * m)
    small = (m < 2**16) & (np.abs(real % 1 - 0.5) > 1e-3)
    np.testing.assert_array_equal(m0[small], np.round(real[small]))


def test_saturated_counts_take_the_ratio_from_the_scaled_values():
    """Both counts saturated (the interval is ``[0, m]``): the ratio of the scaled values,
    which may be tiny, huge or zero."""
    m = np.array([1000, 999, 7, 2**30 - 3, 123456, 10, 1, 3, 2**29 + 1], np.int32)
    a_s = np.array([3.0, 1e20, 1.0, 2.5, 7e-30, 0.0, 5.0, 1.0, 1.0], np.float32)
    b_s = np.array([1.0, 3e20, 2.0, 7.5, 1e-30, 4.0, 0.0, 2.0, 3.0], np.float32)
    sat = np.full(len(m), SATURATION, np.int32)
    coin = np.zeros(len(m), np.int32)
    for rule in RULES.values():  # no zero counts here: both rules are proportional
        m0, m1 = _apply(rule, m, sat, sat, coin, a_s, b_s)
        _check_ratio(m, sat, sat, a_s, b_s, m0)
        _check_comparable(m, sat, sat, m0, m1)
        np.testing.assert_array_equal(m0[:3], [750, 250, 2])  # spot values


def test_one_saturated_count():
    """``a`` saturated, ``b`` not: the scaled ratio, clipped into ``[max(0, m − b), m]``."""
    m = np.array([1000, 1000, 500, 2**30 - 2, 1000], np.int32)
    a = np.full(5, SATURATION, np.int32)
    b = np.array([900, 100, 0, 2**29, 400], np.int32)
    nu = np.float32(1e-9)
    a_s = np.array([2.0, 0.5, 3.0, 1.0, 4e-7], np.float32)  # a in units of σ: a ≈ 2e9, ...
    b_s = b.astype(np.float32) * nu
    coin = np.ones(5, np.int32)
    m0, m1 = _apply(proportional_split, m, a, b, coin, a_s, b_s)
    _check_ratio(m, a, b, a_s, b_s, m0)
    _check_comparable(m, a, b, m0, m1)
    assert m0[4] == 600  # ratio 0.5 → 500, clipped up to m − b = 600
    z0, z1 = _apply(zero_respecting_split, m, a, b, coin, a_s, b_s)
    np.testing.assert_array_equal(z0, np.where(b == 0, m, m0))  # b = 0: all to child 0
    _check_comparable(m, a, b, z0, z1)


@pytest.mark.parametrize("rule", list(RULES.values()), ids=list(RULES))
def test_comparable_and_sum_to_m_with_saturation(rule):
    """Random mixes of saturated, zero and moderate counts, with arbitrary (also zero,
    tiny and huge) scaled values: sums to ``m`` and comparable, exactly."""
    rng = np.random.default_rng(1)
    n = 200_000
    m = rng.integers(0, SATURATION, n).astype(np.int32)
    m[: n // 4] = rng.integers(0, 20, n // 4)

    def counts():
        c = rng.integers(0, SATURATION + 1, n)
        kind = rng.integers(0, 4, n)
        c = np.where(kind == 0, SATURATION, np.where(kind == 1, 0, c))
        return np.where(kind == 2, rng.integers(0, 30, n), c).astype(np.int32)

    def scaled(c):
        s = c.astype(np.float32) * np.float32(10.0 ** rng.uniform(-30, 10, n))
        return np.where(rng.random(n) < 0.1, np.float32(0), s).astype(np.float32)

    a, b = counts(), counts()
    coin = rng.integers(0, 2, n).astype(np.int32)
    m0, m1 = _apply(rule, m, a, b, coin, scaled(a), scaled(b))
    _check_comparable(m, a, b, m0, m1)
