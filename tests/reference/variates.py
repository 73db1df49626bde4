"""Word -> variate, via the package's ``jaxsynth.core.noise`` on NumPy arrays of words.

Allowed by design (the laws of these functions are tested separately against exact
pmfs): the reference computes every word itself and only borrows the float32 value
map, so the noise agrees bit for bit.  Inputs are padded to power-of-two lengths so
the eager JAX ops compile for few shapes.
"""

from __future__ import annotations

import numpy as np

from jaxsynth.core import noise


def _pad(x, dtype):
    x = np.asarray(x, dtype)
    size = max(8, 1 << max(0, (x.size - 1)).bit_length())
    return np.pad(x, (0, size - x.size)), x.size


def noisy_counts(words, counts, inv_sigma):
    """``(c + LapZ(σ))_+`` of each word: (int64 saturated values, float32 scaled values)."""
    w, k = _pad(words, np.uint32)
    c, _ = _pad(counts, np.int32)
    value, scaled = noise.noisy_count(w, c, np.float32(inv_sigma))
    return np.asarray(value, np.int64)[:k], np.asarray(scaled, np.float32)[:k]


def laplace(words, scale):
    """``Lap(scale)`` float32 of each word."""
    w, k = _pad(words, np.uint32)
    return np.asarray(noise.laplace(w, np.float32(scale)), np.float32)[:k]


def uniform(words):
    """Uniform ``[0, 1)`` float32 of each word."""
    w, k = _pad(words, np.uint32)
    return np.asarray(noise.uniform(w), np.float32)[:k]


def exponential(words, bits: int = 31):
    """``Exp(1)`` float32 of each word (its low ``bits`` bits)."""
    w, k = _pad(words, np.uint32)
    return np.asarray(noise.exponential(w, bits), np.float32)[:k]

