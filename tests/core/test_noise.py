"""Word-based samplers against their exact laws, and the counter hash against jax.

Every sampler of ``jaxsynth.core.noise`` maps uint32 words to variates; the tests draw the
words with ``jax.random.bits`` (fixed keys, so every test is deterministic) and compare the
variates with the exact laws: chi-square against the exact pmf for the discrete laws
(tails pooled), Kolmogorov-Smirnov against the exact cdf for the continuous ones.
``ALPHA = 1e-4`` per goodness-of-fit test, so with ~20 of them a correct sampler fails
none with probability above 0.998 on fresh keys; the keys here are fixed, so the outcome
is reproducible.  ``keys.threefry2x32`` is checked bit for bit against
``jax.extend.random.threefry_2x32`` and ``jax.random.fold_in``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry_2x32
from scipy import stats

from jaxsynth.core import keys, noise
from jaxsynth.core.partition import planar_to_morton

N_DRAWS = 200_000
ALPHA = 1e-4
SAT = noise.SATURATION


def _words(seed, shape):
    return jax.random.bits(jax.random.key(seed), shape, jnp.uint32)


def _lapz_pmf(z, sigma):
    """Exact pmf of LapZ(σ), ``P(z) = (1−q)/(1+q)·q^{|z|}``, ``q = e^{−1/σ}`` (float64)."""
    q = np.exp(-1.0 / sigma)
    return (1 - q) / (1 + q) * q ** np.abs(np.asarray(z, np.float64))


def _lapz_cdf(v, sigma):
    """``P(Z ≤ v)`` of LapZ(σ) at integers ``v`` (float64)."""
    q = np.exp(-1.0 / sigma)
    v = np.asarray(v, np.float64)
    return np.where(v < 0, q ** (-v) / (1 + q), 1 - q ** (v + 1) / (1 + q))


def _chi_square_pvalue(samples, pmf, support):
    """Chi-square p-value; values outside ``support`` and bins expecting ≤ 5 are pooled."""
    lo, hi = support[0], support[-1]
    observed = np.array(
        [np.sum(samples < lo)] + [np.sum(samples == z) for z in support] + [np.sum(samples > hi)]
    )
    p_in = pmf(support)
    p_tail = (1.0 - p_in.sum()) / 2.0  # the laws tested here are symmetric
    expected = len(samples) * np.concatenate([[p_tail], p_in, [p_tail]])
    keep = expected > 5
    observed = np.concatenate([observed[keep], [observed[~keep].sum()]])
    expected = np.concatenate([expected[keep], [expected[~keep].sum()]])
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    return stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue


# ------------------------------------------------------------------- discrete Laplace


@pytest.mark.parametrize("sigma", [0.1, 1.0, 10.0, 1e4])
def test_discrete_laplace_pmf(sigma):
    z = np.asarray(noise.discrete_laplace(_words(7, (N_DRAWS,)), 1.0 / sigma))
    assert z.dtype == np.int32
    np.testing.assert_allclose(  # the package's host pmf is the law tested against
        noise.discrete_laplace_pmf(np.arange(-5, 6), sigma), _lapz_pmf(np.arange(-5, 6), sigma)
    )
    if sigma >= 100:  # group the integers into ~60 bins through the exact cdf
        edges = np.unique(np.round(np.linspace(-6 * sigma, 6 * sigma, 60)).astype(int))
        probs = np.diff(np.concatenate([[0.0], _lapz_cdf(edges[:-1], sigma), [1.0]]))
        counts = np.bincount(np.searchsorted(edges[:-1], z, side="left"), minlength=len(probs))
        p = stats.chisquare(counts, probs * len(z)).pvalue
    else:
        support = np.arange(-int(12 * sigma) - 2, int(12 * sigma) + 3)
        p = _chi_square_pvalue(z, lambda v: _lapz_pmf(v, sigma), support)
    assert p > ALPHA
    # E|LapZ(σ)| = 1/sinh(1/σ), within 5 standard errors
    sd = np.abs(z).std() / np.sqrt(len(z))
    assert abs(np.abs(z).mean() - 1 / np.sinh(1 / sigma)) < 5 * sd + 1e-12


def test_discrete_laplace_sign_is_bit_31_and_leaves_bit_30_free():
    """The sign is bit 31 and the magnitude depends on bits 0..29 only: flipping bit 30
    (the PMM coin) changes nothing, so the coin is independent of the noise."""
    w = _words(8, (20_000,))
    z = np.asarray(noise.discrete_laplace(w, 0.3))
    flipped = np.asarray(noise.discrete_laplace(w ^ jnp.uint32(1 << 30), 0.3))
    np.testing.assert_array_equal(z, flipped)
    positive = (np.asarray(w) >> 31) == 1
    assert np.all(z[positive] >= 0) and np.all(z[~positive] <= 0)


# --------------------------------------------------------------------------- noisy counts


@pytest.mark.parametrize("inv_sigma", [1.0, 0.1, 1e-3])
def test_noisy_count_moderate_scales(inv_sigma):
    """value = clip(c + Z, 0, 2^30 − 1) with Z the discrete-Laplace draw of the same word,
    and scaled = ν·(c ± T)_+ with T the unfloored magnitude ``|Z| = ⌊T/ν⌋``: it lies
    within ν of ν·max(c + Z, 0) (above it for positive noise, below for negative)."""
    rng = np.random.default_rng(1)
    c = rng.integers(0, 60, N_DRAWS)
    c[:1000] = 2**27 - 1  # the largest count supported
    w = _words(9, (N_DRAWS,))
    value, scaled = noise.noisy_count(w, jnp.asarray(c, jnp.int32), inv_sigma)
    assert value.dtype == jnp.int32 and scaled.dtype == jnp.float32
    z = np.asarray(noise.discrete_laplace(w, inv_sigma)).astype(np.int64)
    value, scaled = np.asarray(value), np.asarray(scaled, np.float64)
    np.testing.assert_array_equal(value, np.clip(c + z, 0, SAT))
    target = inv_sigma * np.maximum(c + z, 0)
    rounding = 2.0**-22 * (inv_sigma * c + 25.0)  # float32 rounding of ν·c ± T
    positive = (np.asarray(w) >> 31) == 1
    diff = scaled - target
    assert np.all(diff[positive] >= -rounding[positive])
    assert np.all(diff[positive] <= inv_sigma + rounding[positive])
    assert np.all(diff[~positive] >= -inv_sigma - rounding[~positive])
    assert np.all(diff[~positive] <= rounding[~positive])
    assert np.all(scaled[value == 0] <= inv_sigma + rounding[value == 0])


def test_noisy_count_law_of_clipped_value():
    """``(c + Z)_+`` for c = 3, σ = 2 against its exact pmf (mass of ``Z ≤ −c`` at 0)."""
    sigma, c = 2.0, 3
    value, _ = noise.noisy_count(_words(10, (N_DRAWS,)), jnp.full(N_DRAWS, c, jnp.int32), 1 / sigma)
    value = np.asarray(value)
    support = np.arange(0, 40)
    probs = _lapz_pmf(support - c, sigma)
    probs[0] = _lapz_cdf(-c, sigma)
    probs = np.append(probs, 1 - probs.sum())  # values ≥ 40
    observed = np.bincount(np.minimum(value, 40), minlength=41)
    keep = probs * N_DRAWS > 5
    observed = np.append(observed[keep], observed[~keep].sum())
    expected = np.append(probs[keep], probs[~keep].sum()) * N_DRAWS
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > ALPHA


def test_noisy_count_saturates_at_intermediate_scale():
    """σ = 10^9: the value is clip(c + Z, 0, 2^30 − 1) with |Z| saturated, exactly."""
    w = _words(11, (50_000,))
    c = jnp.asarray(np.random.default_rng(2).integers(0, 2**27, 50_000), jnp.int32)
    value, scaled = noise.noisy_count(w, c, 1e-9)
    z = np.asarray(noise.discrete_laplace(w, 1e-9)).astype(np.int64)
    value = np.asarray(value)
    np.testing.assert_array_equal(value, np.clip(np.asarray(c) + z, 0, SAT))
    # P(value = 2^30 − 1) = P(Z ≥ 2^30 − 1 − c) = q^{2^30−1−c}/(1+q) and
    # P(value = 0) = P(Z ≤ −c) = q^c/(1+q): observed counts within 5 sd (sums of Bernoullis)
    c = np.asarray(c, np.float64)
    p_top, p_zero = 1 - _lapz_cdf(SAT - c - 1, 1e9), _lapz_cdf(-c, 1e9)
    for observed, p in ((value == SAT, p_top), (value == 0, p_zero)):
        assert abs(observed.sum() - p.sum()) < 5 * np.sqrt(np.sum(p * (1 - p)))
    assert np.all(np.isfinite(np.asarray(scaled)))


@pytest.mark.parametrize("inv_sigma", [1e-25, 0.0])
def test_noisy_count_huge_scales(inv_sigma):
    """σ = 10^25 and σ = ∞: the value is 2^30 − 1 (positive noise) or 0 (negative), each
    with probability 1/2, and the scaled value carries the exponential magnitude."""
    n = 100_000
    w = _words(12, (n,))
    c = jnp.asarray(np.random.default_rng(3).integers(0, 2**27, n), jnp.int32)
    value, scaled = noise.noisy_count(w, c, inv_sigma)
    value, scaled = np.asarray(value), np.asarray(scaled)
    positive = (np.asarray(w) >> 31) == 1
    np.testing.assert_array_equal(value, np.where(positive, SAT, 0))
    heads = positive.sum()
    assert abs(heads - n / 2) < 5 * np.sqrt(n / 4)  # binomial(n, 1/2), 5 sd
    assert np.all(scaled[~positive] == 0.0)
    e = np.asarray(noise.exponential(w, noise.COUNT_BITS))
    assert np.all(scaled[positive] > 0)
    np.testing.assert_allclose(scaled[positive], e[positive], rtol=1e-6)  # ν·c + h ≈ 0


# ----------------------------------------------------------------- continuous samplers


@pytest.mark.parametrize("bits", [30, 31])
def test_exponential_ks(bits):
    e = np.asarray(noise.exponential(_words(13, (N_DRAWS,)), bits))
    assert e.dtype == np.float32 and np.all(e > 0)
    assert e.max() <= (bits + 1) * np.log(2) * (1 + 1e-6)
    assert stats.kstest(e, stats.expon.cdf).pvalue > ALPHA


def _exponential_reference(words, bits):
    """``−ln((k + 1/2)·2^{−b})`` in float64, accurate also for ``u`` next to 1."""
    k = (np.asarray(words, np.uint64) & np.uint64(2**bits - 1)).astype(np.float64)
    return -np.log1p(-(2.0**bits - k - 0.5) * 2.0**-bits)


def test_exponential_tiny_values_near_one():
    """Words whose 30 low bits are all ones (u = 1 − 2^{-31}): E = −log1p(−0.5·2^{-30})
    to float32 precision, whatever the high bits; the 4096 largest k as well."""
    top = np.uint32(2**30 - 1) | np.array([0, 1 << 30, 1 << 31, 3 << 30], np.uint32)
    e = np.asarray(noise.exponential(jnp.asarray(top), 30)).astype(np.float64)
    np.testing.assert_allclose(e, -np.log1p(-0.5 * 2.0**-30), rtol=2.0**-23)
    near = np.uint32(2**30) - np.arange(1, 4097, dtype=np.uint32)
    e = np.asarray(noise.exponential(jnp.asarray(near), 30)).astype(np.float64)
    np.testing.assert_allclose(e, _exponential_reference(near, 30), rtol=2.0**-22)
    words = np.asarray(_words(14, (N_DRAWS,)))
    e = np.asarray(noise.exponential(jnp.asarray(words), 30)).astype(np.float64)
    np.testing.assert_allclose(e, _exponential_reference(words, 30), rtol=2.0**-22)


def test_exponential_tiny_values_near_one_31_bits():
    """The same accuracy claim for the 31-bit draws of ``laplace`` and ``gumbel_argmax``."""
    near = np.uint32(2**31) - np.arange(1, 4097, dtype=np.uint32)
    e = np.asarray(noise.exponential(jnp.asarray(near), 31)).astype(np.float64)
    np.testing.assert_allclose(e, _exponential_reference(near, 31), rtol=2.0**-22)


@pytest.mark.parametrize("scale", [0.01, 1.0, 300.0])
def test_laplace_cdf(scale):
    z = np.asarray(noise.laplace(_words(15, (N_DRAWS,)), scale))
    assert stats.kstest(z, stats.laplace(scale=scale).cdf).pvalue > ALPHA


def test_uniform_is_exact_24_bit_grid():
    w = _words(16, (N_DRAWS,))
    u = np.asarray(noise.uniform(w)).astype(np.float64)
    np.testing.assert_array_equal(u * 2.0**24, np.asarray(w) >> 8)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert stats.kstest(u, stats.uniform.cdf).pvalue > ALPHA


# ------------------------------------------------------------- coins and selection


def test_coin_is_fair_and_independent_of_the_sign():
    """Coin = bit 30; (coin, sign) uniform on its four values (chi-square)."""
    w = _words(17, (N_DRAWS,))
    coin = np.asarray(noise.coin(w))
    np.testing.assert_array_equal(coin, (np.asarray(w) >> 30) & 1)
    assert abs(coin.sum() - N_DRAWS / 2) < 5 * np.sqrt(N_DRAWS / 4)
    joint = np.bincount(2 * coin + np.asarray(noise.sign_bit(w)), minlength=4)
    assert stats.chisquare(joint).pvalue > ALPHA


def test_exponential_mechanism_probabilities():
    gaps = jnp.array([0.3, 0.5, 0.1, 0.9])
    eps, delta = 2.0, 0.2
    probs = np.asarray(noise.exponential_mechanism_probabilities(gaps, eps, delta))
    exact = np.exp(-eps * np.asarray(gaps, np.float64) / (2 * delta))
    np.testing.assert_allclose(probs, exact / exact.sum(), rtol=1e-5)


def test_gumbel_argmax_frequencies_match_softmax():
    """Selections from ``gumbel_argmax`` against softmax(logits), chi-square; an excluded
    candidate (gap +inf, logit −inf) is never selected."""
    gaps = jnp.array([0.3, 0.5, 0.1, 0.9, jnp.inf])
    eps, delta = 2.0, 0.2
    logits = noise.exponential_mechanism_logits(gaps, eps, delta)
    probs = np.asarray(noise.exponential_mechanism_probabilities(gaps, eps, delta), np.float64)
    assert probs[-1] == 0.0
    n = 100_000
    draws = np.asarray(noise.gumbel_argmax(_words(18, (n, 5)), logits))
    assert draws.dtype == np.int32
    counts = np.bincount(draws, minlength=5)
    assert counts[-1] == 0
    expected = probs[:4] / probs[:4].sum() * n
    assert stats.chisquare(counts[:4], expected).pvalue > ALPHA


def test_zero_sensitivity_selects_the_first_minimiser():
    gaps = jnp.array([0.3, 0.1, 0.1])
    probs = noise.exponential_mechanism_probabilities(gaps, 1.0, 0.0)
    np.testing.assert_array_equal(np.asarray(probs), [0.0, 1.0, 0.0])
    logits = noise.exponential_mechanism_logits(gaps, 1.0, 0.0)
    draws = np.asarray(noise.gumbel_argmax(_words(19, (5000, 3)), logits))
    assert np.all(draws == 1)


# ------------------------------------------------------------------------------- keys


def test_threefry_matches_jax():
    """``threefry2x32`` equals ``jax.extend.random.threefry_2x32``: counts ``[c0, c1]``
    (concatenated halves) hash to ``[x0, x1]``."""
    rng = np.random.default_rng(20)
    n = 4096
    for _ in range(4):
        k = rng.integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32)
        c0, c1 = rng.integers(0, 2**32, (2, n), dtype=np.uint64).astype(np.uint32)
        c0[:4], c1[:4] = [0, 0, 2**32 - 1, 5], [0, 2**32 - 1, 2**32 - 1, 0]
        x0, x1 = keys.threefry2x32(k[0], k[1], c0, c1)
        keypair = (jnp.uint32(k[0]), jnp.uint32(k[1]))
        ref = np.asarray(threefry_2x32(keypair, jnp.asarray(np.r_[c0, c1])))
        np.testing.assert_array_equal(np.asarray(x0), ref[:n])
        np.testing.assert_array_equal(np.asarray(x1), ref[n:])


def test_draw_with_tag_zero_is_fold_in():
    """``draw(k, 0, 0, t) = H(k, (0, t)) = fold_in(k, t)``; ``replicate_keys`` is fold_in."""
    t = np.r_[np.arange(64), [2**31 - 1, 2**31, 2**32 - 1]].astype(np.uint32)
    for seed in (0, 11, 2**40 + 3):
        with jax.enable_x64():  # int seeds are 64-bit (keys.as_raw_key)
            key = jax.random.wrap_key_data(jax.random.key_data(jax.random.key(seed)))
        raw = jax.random.key_data(key)
        ref = np.asarray(jax.random.key_data(jax.vmap(lambda s: jax.random.fold_in(key, s))(t)))
        x0, x1 = keys.draw(raw, 0, 0, jnp.asarray(t))
        np.testing.assert_array_equal(np.stack([x0, x1], -1), ref)
        np.testing.assert_array_equal(np.asarray(keys.replicate_keys(seed, t)), ref)
        np.testing.assert_array_equal(np.asarray(keys.replicate_keys(key, t)), ref)


def test_draw_counter_layout():
    """``draw(k, tag, level, word) = H(k, (tag·32 + level mod 32, word))`` (jax's hash)."""
    raw = jax.random.key_data(jax.random.key(5))
    levels = np.arange(0, 70)
    words = np.random.default_rng(21).integers(0, 2**32, 70, dtype=np.uint64).astype(np.uint32)
    for tag in (keys.EXPAND, keys.ROOT, keys.CHUNK, keys.PLACE + 3, keys.POINT + 31):
        x0, x1 = keys.draw(raw, tag, jnp.asarray(levels), jnp.asarray(words))
        c0 = (tag * 32 + levels % 32).astype(np.uint32)
        ref = np.asarray(threefry_2x32((raw[0], raw[1]), jnp.asarray(np.r_[c0, words])))
        np.testing.assert_array_equal(np.r_[x0, x1], ref)
    np.testing.assert_array_equal(
        np.stack(keys.next_chunk_key(raw, jnp.asarray(words))),
        np.stack(keys.draw(raw, keys.CHUNK, 0, jnp.asarray(words))),
    )


def test_bit_reverse():
    rng = np.random.default_rng(22)
    x = np.r_[[0, 1, 2, 2**31, 2**32 - 1, 0x12345678],
              rng.integers(0, 2**32, 2000, dtype=np.uint64)].astype(np.uint32)  # fmt: skip
    ref = np.array([int(f"{int(v):032b}"[::-1], 2) for v in x], np.uint32)
    np.testing.assert_array_equal(np.asarray(keys.bit_reverse(jnp.asarray(x))), ref)
    for level in (1, 5, 12):  # planar index → path word, as partition.planar_to_morton
        index = jnp.arange(2**level, dtype=jnp.uint32)
        np.testing.assert_array_equal(
            np.asarray(keys.bit_reverse(index) >> (32 - level)), planar_to_morton(level)
        )


def test_child_word_sets_bit_31_minus_level():
    rng = np.random.default_rng(23)
    levels = np.arange(0, 100)
    words = rng.integers(0, 2**32, 100, dtype=np.uint64).astype(np.uint32)
    position = 31 - levels % 32
    words = words & ~(np.uint32(1) << position.astype(np.uint32))  # bit cleared first
    np.testing.assert_array_equal(np.asarray(keys.child_word(words, levels, 0)), words)
    expect = np.array([int(w) | (1 << int(p)) for w, p in zip(words, position)], np.uint32)
    np.testing.assert_array_equal(np.asarray(keys.child_word(words, levels, 1)), expect)
    # a path built bit by bit is the path bits left-aligned (b_0 at position 31)
    bits = rng.integers(0, 2, 32)
    word = jnp.uint32(0)
    for level, bit in enumerate(bits):
        word = keys.child_word(word, level, int(bit))
    assert int(word) == int("".join(map(str, bits)), 2)


@pytest.mark.parametrize(
    "key", [True, 1.5, -1, 2**63, "seed", np.zeros(3, np.uint32), np.zeros(2, np.int32)]
)
def test_as_raw_key_rejects_bad_keys(key):
    with pytest.raises(ValueError, match="key"):
        keys.as_raw_key(key)


def test_as_raw_key_accepts_seeds_typed_and_raw_keys():
    raw = jax.random.key_data(jax.random.key(42))
    for key in (42, np.int64(42), jax.random.key(42), raw, np.asarray(raw)):
        np.testing.assert_array_equal(np.asarray(keys.as_raw_key(key)), np.asarray(raw))


def test_int_seeds_are_the_whole_64_bit_integer():
    # truth: jax.random.key's 64-bit seeding (under jax_enable_x64), which keeps seeds
    # below 2^32 as they were and never aliases two seeds modulo 2^32
    rng = np.random.default_rng(7)
    seeds = [0, 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2147483648000, 2**63 - 1,
             *rng.integers(0, 2**63, 20, dtype=np.int64).tolist()]
    with jax.enable_x64():
        expect = [np.asarray(jax.random.key_data(jax.random.key(s))) for s in seeds]
    for s, e in zip(seeds, expect):
        np.testing.assert_array_equal(np.asarray(keys.as_raw_key(s)), e, err_msg=str(s))
    for s in seeds[:4]:  # unchanged below 2^32: existing results stay reproducible
        np.testing.assert_array_equal(np.asarray(keys.as_raw_key(s)),
                                      np.asarray(jax.random.key_data(jax.random.key(s))))


def test_releases_of_keys_beyond_2_32_differ_from_their_low_bits():
    import jaxsynth as js

    X = js.datasets.load("spiral", n=300, key=0)
    mech = js.PMM(depth=6)
    rng = np.random.default_rng(11)
    for low in rng.integers(0, 2**32, 4).tolist():
        base = js.release(low, mech, X, 1.0).weights
        for high in (1, 500, int(rng.integers(2, 2**31))):
            other = js.release(low + (high << 32), mech, X, 1.0).weights
            assert not np.array_equal(np.asarray(base), np.asarray(other)), (low, high)
