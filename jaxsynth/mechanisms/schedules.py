"""Level noise schedules and privacy accounting of the PMM family.

The schedules of Zare Moayedi, Asadi, Yassaee, Aminian, "Geometry-Adaptive Mechanisms for
Private Synthetic Data" (arXiv 2609.33363) §A.8 and Prop. 3.

A schedule gives the discrete-Laplace scales ``σ_1..σ_r`` of levels ``1..r``; here it is
computed as the inverse scales ``ν_j = 1/σ_j`` in float64 from logarithms, so no depth
overflows a number format (``ν`` underflows to 0, the ``σ = ∞`` limit, only where
``σ`` exceeds every float).  Every public schedule spends the level budget tightly:
``2 Σ_j ν_j = ε`` (replacement adjacency, Zare Moayedi et al. Thm A.3).
"""

from __future__ import annotations

import math

import numpy as np

SCHEDULES = ("uniform", "packing", "profile")
ADJACENCIES = ("replacement", "add_remove")


def _log_sum_exp(x: np.ndarray) -> float:
    top = float(np.max(x))
    return top + float(np.log(np.sum(np.exp(x - top))))


def uniform_inverse_scales(eps: float, depth: int) -> np.ndarray:
    """``σ_j = 2r/ε``: ``ν_j = ε/(2r)`` for ``j = 1..r``, float64 [r]."""
    return np.full(depth, eps / (2.0 * depth))


def packing_inverse_scales(eps: float, depth: int, d: int, k: float) -> np.ndarray:
    """``packing(k)``: ``q = 2^{(k−1)/(2d)}``, ``σ_i = 2S_r/(ε q^{i−1})``, ``S_r = Σ_{j<r} q^j``."""
    log_q = (k - 1.0) / (2.0 * d) * np.log(2.0)
    powers = np.arange(depth) * log_q
    return np.exp(np.log(eps / 2.0) + powers - _log_sum_exp(powers))


def profile_inverse_scales(eps: float, occupancy: np.ndarray, d: int) -> np.ndarray:
    """ORACLE ``profile(O)`` (Zare Moayedi et al. Prop. 3) from the occupancy ``O_0..O_{r−1}`` [r].

    ``A_r = 2 Σ_j sqrt(O_j) 2^{−j/(2d)}``, ``σ_i = 2A_r/(ε sqrt(4 O_{i−1} 2^{−(i−1)/d}))``.
    With the true profile of the data this is NOT differentially private.
    """
    occ = np.asarray(occupancy, np.float64)
    weight = np.sqrt(occ) * np.exp2(-np.arange(occ.shape[0]) / (2.0 * d))
    return eps * weight / (2.0 * np.sum(weight))


def inverse_scales(schedule: str, eps: float, depth: int, d: int, packing_k=None,
                   occupancy=None) -> np.ndarray:
    """Dispatch to a schedule by name; ``occupancy`` is required for ``"profile"``."""
    if schedule == "uniform":
        return uniform_inverse_scales(eps, depth)
    if schedule == "packing":
        return packing_inverse_scales(eps, depth, d, d if packing_k is None else packing_k)
    if schedule == "profile":
        return profile_inverse_scales(eps, np.asarray(occupancy)[:depth], d)
    raise ValueError(f"schedule must be one of {SCHEDULES}; got {schedule!r}")


def pmm_budget(eps: float, adjacency: str) -> tuple[dict, float]:
    """Budget split of a PMM-family release and the root scale ``σ_0``.

    Replacement adjacency (Zare Moayedi et al. Thm A.3): the root count ``n`` is the same on
    neighbours, levels spend ``ε = 2 Σ 1/σ_j`` and ``σ_0 = 1/ε`` costs nothing.
    Add/remove adjacency: every level count and the root move by at most 1 at one node,
    so ``ε = 1/σ_0 + Σ 1/σ_j``; the same level scales then spend ``ε/2`` and ``σ_0 = 2/ε``
    spends the other ``ε/2`` (a jaxsynth choice: neither paper fixes the split).

    Returns:
      (budget dict with "epsilon", "eps_levels", "eps_root"), sigma_0.
    """
    if adjacency == "replacement":
        return {"epsilon": eps, "eps_levels": eps, "eps_root": 0.0}, 1.0 / eps
    return {"epsilon": eps, "eps_levels": eps / 2.0, "eps_root": eps / 2.0}, 2.0 / eps


def log2_product(*factors: float) -> float:
    """``log2`` of a product of positive numbers, finite where the product overflows
    (``ε = 1e308`` times ``n``): the product's own ``log2`` while it is finite (so no
    result moves by a rounding), else the sum of the factors' ``log2``."""
    product = math.prod(factors)
    if math.isfinite(product):
        return float(np.log2(product))
    return float(sum(np.log2(f) for f in factors))


def default_depth(eps: float, n: int) -> int:
    """Ambient-depth rule of Zare Moayedi et al. §7: ``r = ⌈log2(ε n)⌉`` (at least 1)."""
    return max(1, int(np.ceil(log2_product(eps, n) - 1e-12)))
