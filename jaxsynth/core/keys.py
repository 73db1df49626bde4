"""Counter-based random words of replicates and tree nodes (Threefry-2x32).

Every random word of a release is ``H(k, c)``, one block of Threefry-2x32-20 ([SMDS11],
the hash of ``jax.random``) of a 64-bit key ``k`` and a 64-bit counter ``c = (c0, c1)``.
Replicate ``s`` of a batch drawn with key ``K`` uses ``fold_in(K, s)``.  Inside a
replicate a node at level ``j`` is addressed by a *chunk key* (rehashed every 32 levels
from the path bits above) and a *path word* (its last path bits, left-aligned); the
counter of a node draw is ``(tag·32 + j mod 32, path word)``, unique per node and tag.
Nothing depends on batch size, chunking, capacity, device count or engine, so every
execution of a mechanism draws the same words for the same node.

Tags (``c0 >> 5``): ``EXPAND`` (a parent's block: its children's draws and its coin),
``ROOT``, ``LEAF``, ``PLACE + t``, ``POINT``, ``SELECT``, ``SHIFT``, ``MAIN``; what each
one draws is on the documentation's theory page "Noise and random words".  How a word
becomes a variate is in ``jaxsynth.core.noise``.  Everything here is elementwise
``uint32`` arithmetic.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.core.batching import capacity_bucket

EXPAND, ROOT, LEAF, CHUNK, SELECT, SHIFT, MAIN = 1, 2, 3, 4, 5, 6, 7
PLACE = 16
"""First tag of a PrivTree leaf's placement words (``PLACE + t``, ``t < 8``)."""
POINT = 32
"""Tag of a leaf's point key; ``POINT + 1 + t`` (``t < 31``) its points' placement words."""
LEVELS_PER_CHUNK = 32

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA


def _rotl(x, r: int):
    return (x << jnp.uint32(r)) | (x >> jnp.uint32(32 - r))


def threefry2x32(k0, k1, c0, c1):
    """Threefry-2x32 with 20 rounds, elementwise: ``(x0, x1) = H((k0, k1), (c0, c1))``.

    All arguments are broadcastable ``uint32`` arrays; returns two ``uint32`` arrays.
    """
    k0, k1, c0, c1 = (jnp.asarray(a, jnp.uint32) for a in (k0, k1, c0, c1))
    ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(_PARITY))
    x0, x1 = c0 + ks[0], c1 + ks[1]
    for group in range(5):
        for r in _ROTATIONS[group % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0 = x0 + ks[(group + 1) % 3]
        x1 = x1 + ks[(group + 2) % 3] + jnp.uint32(group + 1)
    return x0, x1


def counter(tag: int, level=0):
    """Counter word ``c0 = tag·32 + (level mod 32)`` (``level`` may be an array)."""
    return (jnp.uint32(tag) << 5) | (jnp.asarray(level, jnp.uint32) & jnp.uint32(31))


def draw(key, tag: int, level=0, word=0):
    """The two words ``H(key, (tag·32 + level mod 32, word))``; ``key`` is ``(k0, k1)``."""
    return threefry2x32(key[0], key[1], counter(tag, level), word)


def child_word(word, level, bit):
    """Path word of a child: ``bit`` (0/1) appended at position ``31 − level mod 32``."""
    shift = jnp.uint32(31) - (jnp.asarray(level, jnp.uint32) & jnp.uint32(31))
    return jnp.asarray(word, jnp.uint32) | (jnp.asarray(bit, jnp.uint32) << shift)


def next_chunk_key(key, word):
    """Chunk key below a full path word (the node at level ``32(t+1)``), ``(k0', k1')``."""
    return draw(key, CHUNK, 0, word)


def bit_reverse(x):
    """Reverse the 32 bits of ``uint32`` values: index ``Σ b_t 2^t`` to path word."""
    x = jnp.asarray(x, jnp.uint32)
    for shift, mask in ((1, 0x55555555), (2, 0x33333333), (4, 0x0F0F0F0F), (8, 0x00FF00FF)):
        m = jnp.uint32(mask)
        x = ((x >> shift) & m) | ((x & m) << shift)
    return (x >> 16) | (x << 16)


def as_raw_key(key) -> jax.Array:
    """An int seed, a typed key or a raw ``uint32[2]`` key as a raw ``uint32[2]`` key.

    An int seed ``k < 2^63`` is the raw key ``(k >> 32, k mod 2^32)``, the 64-bit seeding
    of ``jax.random.key`` (what it gives with ``jax_enable_x64``): the whole integer, so
    distinct seeds are distinct keys, and seeds below ``2^32`` are ``jax.random.key(k)``.

    Raises:
      ValueError: naming ``key`` for anything else (bools, floats, strings, wrong shapes,
        a batch of typed keys, a typed key of another implementation, ints outside
        ``[0, 2^63)``).
    """
    if isinstance(key, (bool, np.bool_)):
        raise ValueError(f"key must be an int seed or a jax PRNG key; got {key!r}")
    if isinstance(key, (int, np.integer)):
        if not 0 <= int(key) < 2**63:
            raise ValueError(f"key must be a non-negative int below 2^63; got {key}")
        return jnp.asarray([int(key) >> 32, int(key) & 0xFFFFFFFF], jnp.uint32)
    if not isinstance(key, (jax.Array, np.ndarray)):
        raise ValueError(f"key must be an int seed or a jax PRNG key; got {type(key).__name__}")
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():  # a batch of keys (jax.random.split) is not one key
            raise ValueError(f"key must be one jax PRNG key; got a batch of shape {key.shape} "
                             "(replicates come from seeds: pass one key and seeds=...)")
        data = jax.random.key_data(key)
        if data.dtype != np.uint32 or data.shape != (2,):
            raise ValueError(f"key must be a threefry2x32 jax PRNG key (jax.random.key); got "
                             f"key data {data.dtype}{data.shape}")
        return data
    if key.dtype != np.uint32 or key.shape != (2,):
        raise ValueError(f"key must be an int seed or a jax PRNG key; got {key.dtype}{key.shape}")
    return jnp.asarray(key)


def as_typed_key(key) -> jax.Array:
    """``as_raw_key(key)`` as a typed key (``jax.random.key`` of the whole int seed)."""
    return jax.random.wrap_key_data(as_raw_key(key))


@jax.jit
def _fold_in(key, seeds):
    base = jax.random.wrap_key_data(key)
    return jax.random.key_data(jax.vmap(lambda s: jax.random.fold_in(base, s))(seeds))


def replicate_keys(key, seeds) -> np.ndarray:
    """Raw keys [S, 2] (NumPy uint32) of replicates ``fold_in(key, s)``.

    ``seeds`` is a count ``S`` (seeds ``0..S−1``) or an array of seed indices.  The same
    replicate key serves every ε (common random numbers across ε).  Seeds are padded to a
    power of two before the (jitted) hash, so seed counts share compilations.
    """
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        seeds = np.arange(seeds)
    seeds = np.asarray(seeds, np.uint32).ravel()
    padded = np.zeros(capacity_bucket(len(seeds), per_octave=1, minimum=1), np.uint32)
    padded[: len(seeds)] = seeds
    return np.asarray(_fold_in(as_raw_key(key), padded))[: len(seeds)]
