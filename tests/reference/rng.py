"""Counter-based random words, re-implemented in NumPy from the scheme's description.

Scheme (from the docstring of ``jaxsynth.core.keys``; nothing is imported from it):

* every word is one block ``H(k, c)`` of Threefry-2x32 with 20 rounds, 64-bit key
  ``k = (k0, k1)``, 64-bit counter ``c = (c0, c1)``;
* ``c0 = tag·32 + (level mod 32)``, ``c1`` = the node's path word (or an index);
* a node at level ``j`` with path bits ``b_0 … b_{j−1}`` lives in chunk ``t = ⌊j/32⌋``;
  its chunk key is the replicate key for ``t = 0`` and otherwise
  ``H(chunk key of t−1, (CHUNK·32, word of bits b_{32(t−1)} … b_{32t−1}))`` (first word);
  its path word holds ``b_{32t} … b_{j−1}`` left-aligned (``b_{32t}`` at bit 31);
* replicate ``s`` of a batch drawn with key ``K`` uses ``jax.random.fold_in(K, s)``.
"""

from __future__ import annotations

import jax
import numpy as np

# tags, as listed in the scheme's description
EXPAND, ROOT, LEAF, CHUNK, SELECT, SHIFT, MAIN = 1, 2, 3, 4, 5, 6, 7
PLACE = 16
POINT = 32
LEVELS_PER_CHUNK = 32

_MASK = 0xFFFFFFFF
_PARITY = 0x1BD11BDA  # Threefry key-schedule parity constant (Salmon et al. 2011)
_ROT = ((13, 15, 26, 6), (17, 29, 16, 24))  # Threefry-2x32 rotation constants


def _u32(x):
    return np.asarray(x, dtype=np.uint64) & np.uint64(_MASK)


def threefry2x32(k0, k1, c0, c1):
    """Threefry-2x32-20 block ``(x0, x1) = H((k0, k1), (c0, c1))`` elementwise.

    Computed in uint64 with explicit masking (no reliance on uint32 wrap-around), returns
    two uint32 arrays of the broadcast shape.
    """
    k0, k1, c0, c1 = np.broadcast_arrays(_u32(k0), _u32(k1), _u32(c0), _u32(c1))
    m = np.uint64(_MASK)
    ks = [k0, k1, (k0 ^ k1 ^ np.uint64(_PARITY)) & m]
    x0 = (c0 + ks[0]) & m
    x1 = (c1 + ks[1]) & m
    for block in range(5):  # 5 blocks of 4 rounds, a key injection after each
        for r in _ROT[block % 2]:
            x0 = (x0 + x1) & m
            x1 = (((x1 << np.uint64(r)) & m) | (x1 >> np.uint64(32 - r))) ^ x0
        x0 = (x0 + ks[(block + 1) % 3]) & m
        x1 = (x1 + ks[(block + 2) % 3] + np.uint64(block + 1)) & m
    return x0.astype(np.uint32), x1.astype(np.uint32)


def counter0(tag: int, level=0):
    """``c0 = tag·32 + (level mod 32)``."""
    return (np.uint64(tag) << np.uint64(5)) | (_u32(level) & np.uint64(31))


def draw(key, tag: int, level=0, word=0):
    """The two words ``H(key, (tag·32 + level mod 32, word))``; ``key = (k0, k1)``."""
    return threefry2x32(key[0], key[1], counter0(tag, level), word)


def pack_bits(bits) -> int:
    """Bits ``b_0, b_1, …`` (at most 32) left-aligned in a 32-bit word (``b_0`` at bit 31)."""
    assert len(bits) <= LEVELS_PER_CHUNK
    word = 0
    for i, b in enumerate(bits):
        word |= int(b) << (31 - i)
    return word


class Addresser:
    """Chunk keys and path words of nodes of one replicate (chunk keys memoised by prefix)."""

    def __init__(self, key):
        self.key = (int(key[0]), int(key[1]))
        self._chunk = {(): self.key}

    def chunk_key(self, prefix: tuple) -> tuple:
        """Chunk key below the bits ``prefix`` (length a multiple of 32)."""
        assert len(prefix) % LEVELS_PER_CHUNK == 0
        if prefix not in self._chunk:
            parent = self.chunk_key(prefix[:-LEVELS_PER_CHUNK])
            word = pack_bits(prefix[-LEVELS_PER_CHUNK:])
            x0, x1 = draw(parent, CHUNK, 0, word)
            self._chunk[prefix] = (int(x0), int(x1))
        return self._chunk[prefix]

    def address(self, bits: tuple):
        """``(chunk key, path word)`` of the node with path ``bits``."""
        t = len(bits) // LEVELS_PER_CHUNK
        start = t * LEVELS_PER_CHUNK
        return self.chunk_key(tuple(bits[:start])), pack_bits(bits[start:])

    def words(self, tag: int, nodes_bits: list) -> tuple:
        """Both words of ``H(chunk key, (tag·32 + level mod 32, path word))`` of many nodes."""
        if not nodes_bits:
            return np.zeros(0, np.uint32), np.zeros(0, np.uint32)
        addr = [self.address(b) for b in nodes_bits]
        k0 = np.array([a[0][0] for a in addr], np.uint64)
        k1 = np.array([a[0][1] for a in addr], np.uint64)
        w = np.array([a[1] for a in addr], np.uint64)
        level = np.array([len(b) for b in nodes_bits], np.uint64)
        return threefry2x32(k0, k1, counter0(tag, level), w)


def replicate_key(key: int, s: int) -> tuple:
    """Raw key ``(k0, k1)`` of replicate ``s``: ``fold_in(jax.random.key(key), s)``."""
    raw = jax.random.key_data(jax.random.fold_in(jax.random.key(key), s))
    raw = np.asarray(raw, np.uint32)
    return int(raw[0]), int(raw[1])
