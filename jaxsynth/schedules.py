"""Level noise schedules and privacy accounting of the PMM family (SPEC §2; seed 001 §A.8).

A schedule gives the discrete-Laplace scales ``σ_1..σ_r`` of levels ``1..r``.  Every
public schedule spends the level budget tightly: ``2 Σ_j 1/σ_j = ε`` (replacement
adjacency, seed 001 Thm A.3).  All functions are jittable in ``eps``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

SCHEDULES = ("uniform", "packing", "profile")
ADJACENCIES = ("replacement", "add_remove")


def uniform_scales(eps, depth: int):
    """``σ_j = 2r/ε`` for ``j = 1..r``, shape [r]."""
    return jnp.full((depth,), 2.0 * depth, jnp.float32) / eps


def packing_scales(eps, depth: int, d: int, k: float):
    """``packing(k)``: ``q = 2^{(k-1)/(2d)}``, ``σ_i = 2 S_r/(ε q^{i-1})``, ``S_r = Σ_{j<r} q^j``."""
    q_pow = jnp.exp2(jnp.arange(depth, dtype=jnp.float32) * ((k - 1.0) / (2.0 * d)))
    return 2.0 * jnp.sum(q_pow) / (eps * q_pow)


def profile_scales(eps, occupancy, d: int):
    """ORACLE ``profile(O)`` (seed 001 Prop. 3), from the occupancy ``O_0..O_{r-1}`` [r].

    ``A_r = 2 Σ_j sqrt(O_j) 2^{-j/(2d)}``, ``σ_i = 2A_r/(ε sqrt(4 O_{i-1} 2^{-(i-1)/d}))``.
    With the true profile of the data this is NOT differentially private.
    """
    occ = jnp.asarray(occupancy, jnp.float32)
    j = jnp.arange(occ.shape[0], dtype=jnp.float32)
    a_r = 2.0 * jnp.sum(jnp.sqrt(occ) * jnp.exp2(-j / (2.0 * d)))
    return 2.0 * a_r / (eps * jnp.sqrt(4.0 * occ * jnp.exp2(-j / d)))


def level_scales(schedule: str, eps, depth: int, d: int, packing_k=None, occupancy=None):
    """Dispatch to a schedule by name; ``occupancy`` is required for ``"profile"``."""
    if schedule == "uniform":
        return uniform_scales(eps, depth)
    if schedule == "packing":
        return packing_scales(eps, depth, d, d if packing_k is None else packing_k)
    if schedule == "profile":
        return profile_scales(eps, np.asarray(occupancy)[:depth], d)
    raise ValueError(f"schedule must be one of {SCHEDULES}; got {schedule!r}")


def check_schedule(schedule: str, packing_k, d: int | None = None) -> None:
    """Validate a schedule name and its packing dimension."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}; got {schedule!r}")
    if packing_k is not None:
        if schedule != "packing":
            raise ValueError("packing_k is only used with schedule='packing'")
        if not (packing_k >= 1) or (d is not None and packing_k > d):
            raise ValueError(f"packing_k must lie in [1, d]; got {packing_k!r}")


def check_adjacency(adjacency: str) -> None:
    if adjacency not in ADJACENCIES:
        raise ValueError(f"adjacency must be one of {ADJACENCIES}; got {adjacency!r}")


def pmm_budget(eps, adjacency: str) -> tuple[dict, float | jnp.ndarray]:
    """Budget split of a PMM-family release and the root scale ``σ_0``.

    Replacement adjacency (seed 001 Thm A.3): the root count ``n`` is the same on
    neighbours, levels spend ``ε = 2 Σ 1/σ_j`` and ``σ_0 = 1/ε`` costs nothing.
    Add/remove adjacency: every level count and the root move by at most 1 at one node,
    so ``ε = 1/σ_0 + Σ 1/σ_j``; the same level scales then spend ``ε/2`` and ``σ_0 = 2/ε``
    spends the other ``ε/2`` (SPEC §2).

    Returns:
      (budget dict with "epsilon", "eps_levels", "eps_root"), sigma_0.
    """
    if adjacency == "replacement":
        return {"epsilon": eps, "eps_levels": eps, "eps_root": 0.0 * eps}, 1.0 / eps
    return {"epsilon": eps, "eps_levels": eps / 2.0, "eps_root": eps / 2.0}, 2.0 / eps


def default_depth(eps: float, n: int) -> int:
    """Ambient-depth rule of seed 001 §7: ``r = ⌈log2(ε n)⌉`` (at least 1)."""
    return max(1, int(np.ceil(np.log2(eps * n) - 1e-12)))
