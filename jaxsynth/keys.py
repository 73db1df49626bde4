"""Key handling: every node, replicate and placement draws from its own derived key.

Keys are handled internally as raw ``uint32[2]`` arrays so they can live in scan carries
and be scattered like any array.  A node's key is derived from its parent's key by
``fold_in(parent, child_bit)`` (a dyadic key descent, as in diffrax's Brownian tree), so a
node's noise depends only on the replicate key and the node's path: never on batch size,
chunking, capacity or which engine (dense or sparse) visits it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

NOISE, COIN, PLACE, SELECT = 2, 3, 4, 5
"""Tags folded into a node key for its own draws (children use tags 0 and 1)."""


def as_raw_key(key) -> jax.Array:
    """An int seed, a typed key or a raw ``uint32[2]`` key as a raw ``uint32[2]`` key."""
    if isinstance(key, (int, np.integer)):
        return jax.random.PRNGKey(int(key))
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    if key.dtype != jnp.uint32 or key.shape[-1:] != (2,):
        raise ValueError(f"key must be an int seed or a jax PRNG key; got dtype {key.dtype}")
    return key


def replicate_keys(key, seeds) -> jax.Array:
    """Raw keys [S, 2] of replicates: ``fold_in(key, s)`` for each seed index ``s``.

    ``seeds`` is a count S (indices ``0..S-1``) or a sequence of non-negative indices.
    The same replicate key serves every ε (common random numbers across ε).
    """
    base = as_raw_key(key)
    if isinstance(seeds, (int, np.integer)):
        if seeds < 1:
            raise ValueError(f"seeds must be >= 1; got {seeds}")
        idx = np.arange(int(seeds))
    else:
        idx = np.asarray(seeds)
        if idx.ndim != 1 or idx.size == 0 or not np.issubdtype(idx.dtype, np.integer) or idx.min() < 0:
            raise ValueError("seeds must be a positive count or a 1-D list of non-negative ints")
    return jax.vmap(lambda s: jax.random.fold_in(base, s))(jnp.asarray(idx, jnp.uint32))


def fold(keys, tag):
    """``fold_in`` over any leading shape of raw keys [..., 2]."""
    flat = keys.reshape(-1, 2)
    out = jax.vmap(lambda k: jax.random.fold_in(k, tag))(flat)
    return out.reshape(keys.shape)


def children(keys):
    """Child keys [..., 2, 2] (bit 0, bit 1) of node keys [..., 2]."""
    return jnp.stack([fold(keys, 0), fold(keys, 1)], axis=-2)


def fair_bit(keys):
    """A fair coin (int32 0/1) per node key, from the node's ``COIN`` key."""
    flat = fold(keys, COIN).reshape(-1, 2)
    bits = jax.vmap(lambda k: jax.random.bits(k, (), jnp.uint32))(flat)
    return (bits & 1).astype(jnp.int32).reshape(keys.shape[:-1])
