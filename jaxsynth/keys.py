"""Key handling: every node, replicate and placement draws from its own derived key.

Keys are handled internally as raw ``uint32[2]`` arrays so they can live in scan carries
and be scattered like any array.  A node with key ``k`` draws everything from
``fold_in(k, t)`` (one Threefry-2x32 block each):

* ``t = 0, 1``: the keys of its children (bit 0, bit 1),
* ``t = 2``: the two uniforms of its own discrete-Laplace noise,
* ``t = 3``: the fair coin used when its children's noisy counts are both 0.

This is a dyadic key descent (as in diffrax's Brownian tree): a node's noise depends only
on the replicate key and the node's path, never on batch size, chunking, capacity or on
which engine (dense or sparse) visits it.  The hash is written out here in elementwise
``uint32`` operations (Salmon et al. 2011; the same function as ``jax.random.fold_in``,
checked against it in the tests) because XLA compiles it far faster than the library
call under ``vmap``.  Placement draws of a replicate use
``fold_in(replicate_key, PLACEMENT_TAG)``, a tag no node draw uses.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

NOISE, COIN = 2, 3
PLACEMENT_TAG = 0x9E3779B9


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


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _rotl(x, r):
    return (x << jnp.uint32(r)) | (x >> jnp.uint32(32 - r))


def threefry2x32(key, counter):
    """Threefry-2x32 with 20 rounds: keys [..., 2], counters [..., 2] -> [..., 2] uint32."""
    k0, k1 = key[..., 0], key[..., 1]
    ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(0x1BD11BDA))
    x0, x1 = counter[..., 0] + ks[0], counter[..., 1] + ks[1]
    for group in range(5):
        for r in _ROTATIONS[group % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0 = x0 + ks[(group + 1) % 3]
        x1 = x1 + ks[(group + 2) % 3] + jnp.uint32(group + 1)
    return jnp.stack([x0, x1], axis=-1)


def fold_in(keys, tag):
    """``jax.random.fold_in(k, t)`` for every raw key in ``keys`` [..., 2].

    ``tag`` is an int, giving [..., 2], or a tuple of ints, giving [..., len(tag), 2] in
    one hash call.
    """
    keys = jnp.asarray(keys, jnp.uint32)
    tags = jnp.atleast_1d(jnp.asarray(tag, jnp.uint32))
    counter = jnp.stack([jnp.zeros_like(tags), tags], axis=-1)
    out = threefry2x32(jnp.broadcast_to(keys[..., None, :], keys.shape[:-1] + counter.shape), counter)
    return out if isinstance(tag, tuple) else out[..., 0, :]


def split_node(keys):
    """Child keys [..., 2, 2] (bit 0, bit 1) and fair coins [...] of node keys, one hash."""
    out = fold_in(keys, (0, 1, COIN))
    return out[..., :2, :], (out[..., 2, 0] & 1).astype(jnp.int32)


def noise_bits(keys):
    """The two uint32 words [..., 2] of each node's own noise draw."""
    return fold_in(keys, NOISE)
