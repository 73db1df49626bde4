"""Consistency rules on exhaustive small cases and at the int32 edge (SPEC §2 step 4, §3)."""

import itertools

import jax.numpy as jnp
import numpy as np

from jaxsynth.consistency import proportional_split, zero_respecting_split

GRID = np.array(list(itertools.product(range(13), range(13), range(13), range(2))), np.int32)


def _apply(rule, m, a, b, coin):
    m0, m1 = rule(jnp.asarray(m), jnp.asarray(a), jnp.asarray(b), jnp.asarray(coin))
    return np.asarray(m0), np.asarray(m1)


def _check_comparable(m, a, b, m0, m1):
    assert np.all(m0 + m1 == m) and np.all(m0 >= 0) and np.all(m1 >= 0)
    both_le = (m0 <= a) & (m1 <= b)
    both_ge = (m0 >= a) & (m1 >= b)
    assert np.all(both_le | both_ge)


def test_proportional_exhaustive():
    m, a, b, coin = GRID.T
    m0, m1 = _apply(proportional_split, m, a, b, coin)
    _check_comparable(m, a, b, m0, m1)
    # the proportional target is attained whenever it lies in the comparable interval
    target = np.floor(m * a / np.maximum(a + b, 1) + 0.5)
    lo = np.where(a + b >= m, np.maximum(0, m - b), a)
    hi = np.where(a + b >= m, np.minimum(a, m), m - b)
    inside = (a + b > 0) & (target >= lo) & (target <= hi) & (np.abs(m * a / np.maximum(a + b, 1) % 1 - 0.5) > 1e-6)
    np.testing.assert_array_equal(m0[inside], target[inside])
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


def test_no_overflow_at_large_counts():
    rng = np.random.default_rng(0)
    m = rng.integers(0, 10**8 + 10**6, 100_000).astype(np.int32)
    a = rng.integers(0, 10**8 + 10**6, 100_000).astype(np.int32)
    b = rng.integers(0, 10**8 + 10**6, 100_000).astype(np.int32)
    coin = rng.integers(0, 2, 100_000).astype(np.int32)
    for rule in (proportional_split, zero_respecting_split):
        m0, m1 = _apply(rule, m, a, b, coin)
        _check_comparable(m.astype(np.int64), a, b, m0.astype(np.int64), m1.astype(np.int64))
