"""Clopper–Pearson bounds and lower confidence bounds on a privacy loss.

An ε-DP mechanism ``M`` satisfies ``P[M(X) ∈ E] ≤ e^ε P[M(X') ∈ E]`` for every event ``E``
and neighbours ``X, X'`` (each mechanism's ``accounting`` names the adjacency it claims).  With
``k`` of ``n`` independent releases of ``X`` in ``E`` and ``k'`` of ``n'`` releases of
``X'``, the one-sided Clopper–Pearson bounds ``p_lo(k, n)`` and ``p_hi(k', n')``, each at
level ``1 − α/2``, hold together with probability at least ``1 − α`` (a union bound),
so

    ε ≥ ln P[M(X) ∈ E] / P[M(X') ∈ E] ≥ ln p_lo − ln p_hi

with confidence ``1 − α``, whatever the true probabilities: the bound is exact (not
asymptotic), and conservative for every sample size.  This is the standard audit bound
(Jagielski et al. 2020; Nasr et al. 2021 use it with Clopper–Pearson intervals).
"""

from __future__ import annotations

import numpy as np


def cp_lower(k, n, alpha):
    """One-sided Clopper–Pearson lower bound of a binomial proportion at level ``1 − α``.

    ``P[p ≥ cp_lower(k, n, α)] ≥ 1 − α``: the ``α`` quantile of ``Beta(k, n − k + 1)``,
    and 0 when ``k = 0``.  Vectorised over arrays.
    """
    from scipy import stats  # here: scipy.stats takes ~1 s to import, the CLI's start-up

    k, n = np.asarray(k, np.float64), np.asarray(n, np.float64)
    with np.errstate(invalid="ignore"):
        value = stats.beta.ppf(alpha, np.maximum(k, 1e-300), n - k + 1)
    return np.where(k > 0, value, 0.0)


def cp_upper(k, n, alpha):
    """One-sided Clopper–Pearson upper bound at level ``1 − α``: the ``1 − α`` quantile
    of ``Beta(k + 1, n − k)``, and 1 when ``k = n``."""
    from scipy import stats

    k, n = np.asarray(k, np.float64), np.asarray(n, np.float64)
    with np.errstate(invalid="ignore"):
        value = stats.beta.ppf(1.0 - alpha, k + 1, np.maximum(n - k, 1e-300))
    return np.where(k < n, value, 1.0)


def log_ratio_lower(k_num, n_num, k_den, n_den, alpha):
    """Lower bound at confidence ``1 − α`` on ``ln(p_num / p_den)``.

    ``ln cp_lower(k_num, n_num, α/2) − ln cp_upper(k_den, n_den, α/2)`` (``−inf`` when
    ``k_num = 0``).  The two samples must be independent.  Vectorised.
    """
    lo = cp_lower(k_num, n_num, alpha / 2.0)
    hi = cp_upper(k_den, n_den, alpha / 2.0)
    with np.errstate(divide="ignore"):
        return np.log(lo) - np.log(hi)


def log_ratio_estimate(k_num, n_num, k_den, n_den):
    """The plug-in estimate ``ln((k_num/n_num)/(k_den/n_den))`` (``±inf`` at zero counts)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.log(np.asarray(k_num, np.float64) / n_num)
                - np.log(np.asarray(k_den, np.float64) / n_den))
