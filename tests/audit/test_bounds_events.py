"""Clopper–Pearson bounds and the two-half event search (``jaxsynth.audit.bounds/events``).

Checked against SciPy's exact binomial intervals and by coverage on simulated binomials
with known proportions (fixed seeds, so nothing here is random from run to run).
"""

import numpy as np
import pytest
from scipy import stats

from jaxsynth.audit import bounds, events


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (0, 1), (57, 1000), (999, 1000)])
def test_clopper_pearson_matches_scipy_exact_interval(k, n):
    # SciPy's two-sided exact interval at level 0.9 is the pair of one-sided 0.95 bounds
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.9, method="exact")
    assert bounds.cp_lower(k, n, 0.05) == pytest.approx(ci.low, abs=1e-12)
    assert bounds.cp_upper(k, n, 0.05) == pytest.approx(ci.high, abs=1e-12)


def test_log_ratio_bound_edge_cases_and_monotonicity():
    assert bounds.log_ratio_lower(0, 100, 5, 100, 0.05) == -np.inf
    assert np.isfinite(bounds.log_ratio_lower(5, 100, 0, 100, 0.05))
    # more data, tighter: the bound approaches the true log ratio ln 2 from below
    values = [float(bounds.log_ratio_lower(0.2 * n, n, 0.1 * n, n, 0.05)) for n in (10**3, 10**5)]
    assert values[0] < values[1] < np.log(2.0)
    assert values[1] > np.log(2.0) - 0.05


def test_log_ratio_bound_covers_the_true_ratio():
    # 20000 simulated experiments with known proportions: the bound exceeds the true log
    # ratio in at most alpha of them (the Clopper–Pearson bound is conservative; 3 standard
    # errors of slack on the frequency keep the check exact-seed safe)
    rng = np.random.default_rng(0)
    alpha, trials = 0.05, 20000
    for p, q, n in [(0.2, 0.1, 500), (0.02, 0.01, 2000), (0.5, 0.5, 100)]:
        k1, k2 = rng.binomial(n, p, trials), rng.binomial(n, q, trials)
        miss = np.mean(bounds.log_ratio_lower(k1, n, k2, n, alpha) > np.log(p / q))
        assert miss <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / trials)


def _dlap(rng, sigma, size):
    q = np.exp(-1.0 / sigma)
    return rng.geometric(1 - q, size) - rng.geometric(1 - q, size)


def test_event_search_finds_the_privacy_loss_of_a_shifted_discrete_laplace():
    # two noisy counts, each shifted by one between X and X' (in opposite directions): the
    # true privacy loss is exactly 2/sigma = 1; the bound must be below it and close to it
    rng = np.random.default_rng(1)
    sigma, n = 2.0, 200_000
    fx = np.stack([10 + _dlap(rng, sigma, n), 5 + _dlap(rng, sigma, n)], 1)
    fy = np.stack([9 + _dlap(rng, sigma, n), 6 + _dlap(rng, sigma, n)], 1)
    out = events.audit_features(fx, fy, 0.05, names=("a", "b"))
    assert 0.9 < out.evaluation.lower_bound <= 1.0
    assert out.evaluation.n == n // 2 and out.evaluation.n_den == n // 2


def test_event_search_on_identical_laws_stays_below_zero():
    rng = np.random.default_rng(2)
    f = rng.integers(0, 5, size=(40_000, 3)).astype(float)
    g = rng.integers(0, 5, size=(40_000, 3)).astype(float)
    out = events.audit_features(f, g, 0.05)
    assert out.evaluation.lower_bound <= 0.0


def test_events_use_both_orientations():
    # a binary feature that is rarer under X: only the orientation P[X']/P[X] is informative
    rng = np.random.default_rng(3)
    fx = (rng.random((50_000, 1)) < 0.1).astype(float)
    fy = (rng.random((50_000, 1)) < 0.3).astype(float)
    out = events.audit_features(fx, fy, 0.05)
    assert not out.choice.x_over_y
    assert np.log(3.0) - 0.15 < out.evaluation.lower_bound < np.log(3.0)
