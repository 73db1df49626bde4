"""Pieces shared by the dense and sparse PMM engines (SPEC §2–§3; seed 001 §3, §A.2).

Both engines visit nodes with the same derived keys (``jaxsynth.keys``), draw the same
node noise and apply the same consistency rules, so when they visit the same nodes they
release the same measure.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxsynth import keys as K
from jaxsynth.measure import place_in_cells
from jaxsynth.noise import discrete_laplace_from_bits


def root_mass(key, n, sigma0):
    """Root mass ``m_∅ = max(1, (n + λ_∅)_+)``, ``λ_∅ ~ LapZ(σ_0)`` (SPEC §2 step 3)."""
    return jnp.maximum(1, n + discrete_laplace_from_bits(K.noise_bits(key), sigma0))


def noisy_children(counts, child_keys, sigma):
    """Truncated noisy counts ``(n_θb + λ_θb)_+`` of nodes with true ``counts`` and keys."""
    return jnp.maximum(counts + discrete_laplace_from_bits(K.noise_bits(child_keys), sigma), 0)


def leaf_side(depth, d: int):
    """Side lengths [d] float32 of level-``depth`` cells (``depth`` may be traced)."""
    c = jnp.arange(d)
    k = depth // d + (c < depth % d).astype(jnp.int32)
    return jnp.exp2(-k.astype(jnp.float32))


def release_leaves(key, leaf_mass, leaf_lower, side, capacity: int, uniform: bool):
    """Turn leaf masses into representatives and weights (SPEC §2 step 5).

    Args:
      key: raw replicate key; placement draws use ``fold_in(PLACE)`` then the point index.
      leaf_mass: [L] int32 masses ``m_θ`` of leaf slots in Morton order.
      leaf_lower: [L, d] float32 lower corners of the leaf cells.
      side: [d] leaf side lengths.
      capacity: static number of output atoms when ``uniform`` (``≥ m``); ignored for
        centers, where each leaf is one atom of weight ``m_θ/m``.
      uniform: i.i.d. uniform points in the cell (one per unit of mass) instead of centers.

    Returns:
      points [M, d], weights [M] (summing to 1), m (int32 total mass).
    """
    m = jnp.sum(leaf_mass)
    if not uniform:
        return place_in_cells(None, leaf_lower, side, False), leaf_mass / m, m
    index = jnp.arange(capacity)
    leaf = jnp.searchsorted(jnp.cumsum(leaf_mass), index, side="right")
    leaf = jnp.minimum(leaf, leaf_mass.shape[0] - 1)
    place = jax.random.fold_in(key, K.PLACEMENT_TAG)
    point_keys = jax.vmap(lambda i: jax.random.fold_in(place, i))(index.astype(jnp.uint32))
    points = jax.vmap(lambda k, lo: place_in_cells(k, lo, side, True))(point_keys, leaf_lower[leaf])
    weights = (index < m).astype(jnp.float32) / m
    return points, weights, m
