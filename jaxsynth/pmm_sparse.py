"""Sparse engine: Pruned-PMM level by level on fixed-capacity slots (SPEC §3; seed 001 §A.2, §A.9).

Each of ``K`` slots holds an active node: its data range ``[lo, hi)`` in the Morton-sorted
data (empty for ghost nodes), its corrected mass, its key and its cell's lower corner.
A level step descends every slot to its two children in O(1) (``jaxsynth.descent``),
draws their noise, applies the zero-respecting rule, and compacts the children with
positive mass into the slots with a cumulative sum.  Active nodes never exceed the root
mass ``m``, so ``K ≥ m`` (chosen after the root draw) makes overflow impossible by
construction.  Cost per replicate: O(K·(r + d)) after the one-off data-tree build,
never ``2^r``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxsynth import keys as K
from jaxsynth.consistency import zero_respecting_split
from jaxsynth.descent import DeviceTree, child_boundary
from jaxsynth.frontier import compact
from jaxsynth.pmm_core import leaf_side, noisy_children, release_leaves, root_mass


def _level_step(dev, d, capacity, state, level, sigma, live):
    lo, hi, mass, node_keys, lower, visited = state
    p = child_boundary(dev, lo, hi, level)
    child_keys, coin = K.split_node(node_keys)  # [K, 2, 2], [K]
    counts = jnp.stack([p - lo, hi - p], axis=-1)
    noisy = noisy_children(counts, child_keys, sigma)
    m0, m1 = zero_respecting_split(mass, noisy[:, 0], noisy[:, 1], coin)
    half = jnp.exp2(-(level // d + 1).astype(jnp.float32))
    step = half * (jnp.arange(d) == level % d)
    child_mass = jnp.stack([m0, m1], axis=-1).reshape(-1)
    new_lo, new_hi, new_mass, new_keys, new_lower = compact(
        child_mass > 0,
        capacity,
        jnp.stack([lo, p], axis=-1).reshape(-1),
        jnp.stack([p, hi], axis=-1).reshape(-1),
        child_mass,
        child_keys.reshape(-1, 2),
        jnp.stack([lower, lower + step], axis=1).reshape(-1, d),
    )
    n_active = jnp.sum(child_mass > 0)
    new_mass = jnp.where(jnp.arange(capacity) < n_active, new_mass, 0)
    new_state = (new_lo, new_hi, new_mass, new_keys, new_lower, visited + 2 * jnp.sum(mass > 0))
    return jax.tree_util.tree_map(lambda a, b: jnp.where(live, a, b), new_state, state)


@functools.partial(jax.jit, static_argnames=("capacity", "uniform"))
def sparse_pruned_pmm(key, sigmas, sigma0, depth, dev: DeviceTree, *, capacity, uniform):
    """One replicate of Pruned-PMM (vmap it over keys and ε).

    Args:
      key: raw replicate key [2].
      sigmas: [R] level scales; only the first ``depth`` are used.
      sigma0: root scale ``σ_0``.
      depth: the depth ``r ≤ R`` (may be traced: Adaptive Pruned-PMM selects it).
      dev: the data tree on device.
      capacity: static slot count ``K``, at least the root mass of every replicate run.
      uniform: uniform placement in leaf cells instead of centers.

    Returns:
      points [K, d], weights [K], m, visited ``1 + 2 Σ_{j<r} |A_j|``, leaves ``|A_r|``.
    """
    n = dev.split.shape[0]
    d = dev.dim
    m = root_mass(key, n, sigma0)
    slot0 = jnp.arange(capacity) == 0
    state = (
        jnp.zeros(capacity, jnp.int32),
        jnp.where(slot0, n, 0).astype(jnp.int32),
        jnp.where(slot0, m, 0).astype(jnp.int32),
        jnp.where(slot0[:, None], key, 0).astype(jnp.uint32),
        jnp.zeros((capacity, d), jnp.float32),
        jnp.int32(1),
    )

    def body(state, inputs):
        level, sigma = inputs
        return _level_step(dev, d, capacity, state, level, sigma, level < depth), None

    levels = jnp.arange(sigmas.shape[0], dtype=jnp.int32)
    (_, _, mass, _, lower, visited), _ = jax.lax.scan(body, state, (levels, sigmas))
    points, weights, m = release_leaves(
        key, mass, lower, leaf_side(depth, d), capacity, uniform
    )
    return points, weights, m, visited, jnp.sum(mass > 0)
