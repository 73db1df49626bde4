"""Dense engine: PMM on the complete tree, level by level (SPEC §2; seed 001 §3).

Every node of the complete depth-``r`` tree gets its true count and noise, so memory and
time are ``Θ(2^r)`` per replicate: use it for shallow trees (the full-tree PMM of He et
al., and the dense form of Pruned-PMM whose zero-respecting rule masks pruned subtrees).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxsynth import keys as K
from jaxsynth.consistency import RULES
from jaxsynth.pmm_core import leaf_side, noisy_children, release_leaves, root_mass


@functools.partial(jax.jit, static_argnames=("rule", "uniform", "capacity"))
def dense_pmm(key, sigmas, sigma0, counts, leaf_lower, *, rule, uniform, capacity):
    """One replicate of PMM on the complete tree (vmap it over keys and ε).

    Args:
      key: raw replicate key [2].
      sigmas: [r] level scales ``σ_1..σ_r``.
      sigma0: root scale ``σ_0``.
      counts: tuple of int32 arrays, ``counts[j]`` [2^j] true counts of level ``j``.
      leaf_lower: [2^r, d] lower corners of the leaves in Morton order.
      rule: ``"proportional"`` (PMM) or ``"zero_respecting"`` (dense Pruned-PMM).
      uniform, capacity: placement, see ``pmm_core.release_leaves``.

    Returns:
      points, weights, m, visited (nodes with materialised noise; for the zero-respecting
      rule only the children of active nodes count, as in the sparse execution), leaves.
    """
    depth = len(counts) - 1
    split = RULES[rule]
    mass = root_mass(key, counts[0][0], sigma0)[None]
    node_keys = key[None]
    active_sum = jnp.int32(0)
    for j in range(depth):  # levels are unrolled at trace time; nodes are vectorised
        child_keys, coin = K.split_node(node_keys)  # [2^j, 2, 2], [2^j]
        noisy = noisy_children(counts[j + 1].reshape(-1, 2), child_keys, sigmas[j])
        m0, m1 = split(mass, noisy[:, 0], noisy[:, 1], coin)
        active_sum += jnp.sum(mass > 0)
        mass = jnp.stack([m0, m1], axis=-1).reshape(-1)
        node_keys = child_keys.reshape(-1, 2)
    if rule == "zero_respecting":
        visited = 1 + 2 * active_sum
    else:
        visited = jnp.int32(2 ** (depth + 1) - 1)
    d = leaf_lower.shape[-1]
    points, weights, m = release_leaves(
        key, mass, leaf_lower, leaf_side(depth, d), capacity, uniform
    )
    return points, weights, m, visited, jnp.sum(mass > 0)
