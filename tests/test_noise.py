"""Samplers against their exact laws (SPEC §1), and the node-key hash against jax.random."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxsynth import keys, noise

N_DRAWS = 200_000
ALPHA = 1e-4  # per test; with ~15 goodness-of-fit tests the family error stays below 1e-3


def _chi_square_pvalue(samples, pmf, support):
    """Chi-square p-value with two tail bins collecting everything outside ``support``."""
    lo, hi = support[0], support[-1]
    observed = np.array(
        [np.sum(samples < lo)] + [np.sum(samples == z) for z in support] + [np.sum(samples > hi)]
    )
    p_in = pmf(support)
    p_tail = (1.0 - p_in.sum()) / 2.0  # the law is symmetric
    expected = len(samples) * np.concatenate([[p_tail], p_in, [p_tail]])
    keep = expected > 5
    observed = np.concatenate([observed[keep], [observed[~keep].sum()]])
    expected = np.concatenate([expected[keep], [expected[~keep].sum()]])
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    return stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue


@pytest.mark.parametrize("sigma", [0.1, 0.7, 3.0, 25.0, 1e3, 1e4])
def test_discrete_laplace_pmf(sigma):
    z = np.asarray(noise.discrete_laplace(jax.random.PRNGKey(7), sigma, (N_DRAWS,)))
    a = np.exp(-1.0 / sigma)

    def pmf(v):
        return (1 - a) / (1 + a) * a ** np.abs(v)

    if sigma >= 100:  # bin the integers in equal-probability-ish groups via the cdf
        edges = np.unique(np.round(np.linspace(-6 * sigma, 6 * sigma, 60)).astype(int))

        def cdf(v):  # P(Z <= v)
            v = np.asarray(v, dtype=float)
            return np.where(v < 0, a ** (-v) / (1 + a), 1 - a ** (v + 1) / (1 + a))

        probs = np.diff(np.concatenate([[0.0], cdf(edges[:-1]), [1.0]]))
        counts = np.bincount(np.searchsorted(edges[:-1], z, side="left"), minlength=len(probs))
        p = stats.chisquare(counts, probs * len(z)).pvalue
    else:
        support = np.arange(-int(12 * sigma) - 2, int(12 * sigma) + 3)
        p = _chi_square_pvalue(z, pmf, support)
    assert p > ALPHA
    # E|LapZ| = 1/sinh(1/σ): 5 standard errors
    sd = np.abs(z).std() / np.sqrt(len(z))
    assert abs(np.abs(z).mean() - 1 / np.sinh(1 / sigma)) < 5 * sd + 1e-12


@pytest.mark.parametrize("scale", [0.01, 1.0, 300.0])
def test_laplace_cdf(scale):
    z = np.asarray(noise.laplace(jax.random.PRNGKey(3), scale, (N_DRAWS,)))
    assert stats.kstest(z, stats.laplace(scale=scale).cdf).pvalue > ALPHA


def test_exponential_mechanism_frequencies():
    scores = jnp.array([0.3, 0.5, 0.1, 0.9])
    eps, delta = 2.0, 0.2
    probs = np.asarray(noise.exponential_mechanism_probabilities(scores, eps, delta))
    exact = np.exp(-eps * np.asarray(scores) / (2 * delta))
    np.testing.assert_allclose(probs, exact / exact.sum(), rtol=1e-5)
    draws = jax.vmap(lambda k: noise.exponential_mechanism(k, scores, eps, delta))(
        jax.random.split(jax.random.PRNGKey(0), 40_000)
    )
    counts = np.bincount(np.asarray(draws), minlength=4)
    p64 = probs.astype(np.float64)
    expected = p64 / p64.sum() * counts.sum()
    assert stats.chisquare(counts, expected).pvalue > ALPHA


def test_exponential_mechanism_zero_sensitivity_is_argmin():
    probs = noise.exponential_mechanism_probabilities(jnp.array([0.3, 0.1, 0.1]), 1.0, 0.0)
    np.testing.assert_array_equal(np.asarray(probs), [0.0, 1.0, 0.0])


def test_threefry_matches_jax_fold_in():
    base = jax.random.split(jax.random.PRNGKey(11), 64)
    for tag in (0, 1, 2, 3, keys.PLACEMENT_TAG):
        ours = keys.fold_in(base, tag)
        ref = jax.vmap(lambda k: jax.random.fold_in(k, tag))(base)
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))
    children, _ = keys.split_node(base)
    np.testing.assert_array_equal(np.asarray(children[:, 1]), np.asarray(keys.fold_in(base, 1)))


def test_coin_is_fair():
    node_keys = jax.random.split(jax.random.PRNGKey(5), 100_000)
    heads = int(np.asarray(keys.split_node(node_keys)[1]).sum())
    assert abs(heads - 50_000) < 5 * np.sqrt(100_000 * 0.25)
