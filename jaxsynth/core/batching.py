"""Batches: the one rounding rule of shapes, the one sizing rule and the one chunker.

``capacity_bucket`` rounds a size onto a grid of powers of two (``per_octave`` values per
octave), so that varying sizes compile few shapes; every padded count of the package
(engine chunks, atom widths, stacked passes, seed lists) is one of its values.
``device_memory`` is the budget one chunk may fill and ``fitting_batch`` the most items of
a memory model that fit a budget (a power of two), the rule behind every batch size: the
engine's chunks, a W1 method's blocks, the exact solver's replicates at once.
``chunk_rows`` and ``chunked`` split a leading axis into chunks of one fixed size, the
last padded by repeating its last row, so one compiled program serves every chunk (as
ott-jax's ``utils.batched_vmap``).  ``on_cores`` splits a batch over the cores for the
host kernels.
"""

from __future__ import annotations

import concurrent.futures
import os
from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["capacity_bucket", "chunk_rows", "chunked", "device_memory", "fitting_batch",
           "on_cores"]

DEFAULT_MEMORY_BYTES = 2 * 2**30
"""Working memory of one chunk on a CPU (2 GiB); on accelerators, a share of the device's."""
ACCELERATOR_MEMORY_SHARE = 0.6


def capacity_bucket(size, per_octave: int = 8, minimum: int = 8, down: bool = False):
    """Round a size (at least ``minimum``) up onto a grid of ``per_octave`` (a power of two)
    values per octave: at most ``1/per_octave`` slack, few distinct shapes.

    ``per_octave=1`` gives powers of two; ``down`` rounds down onto the grid instead (the
    most that fits).  ``size`` may be an integer array (rounded elementwise).
    """
    sizes = np.maximum(np.asarray(size, np.int64), minimum)
    step = np.left_shift(np.int64(1), np.maximum(0, np.frexp(sizes)[1] - per_octave.bit_length()))
    rounded = sizes // step * step if down else -(-sizes // step) * step
    return int(rounded) if rounded.ndim == 0 else rounded


def fitting_batch(item_bytes: float, memory_bytes: float, most: int) -> int:
    """Items per batch under a memory model: the largest power of two of at most ``most``
    items whose ``item_bytes`` each fit ``memory_bytes`` (at least one)."""
    fit = int(memory_bytes // max(float(item_bytes), 1.0))
    return capacity_bucket(max(1, min(fit, int(most))), per_octave=1, minimum=1, down=True)


def device_memory(device=None) -> int:
    """Working memory of one chunk on ``device``: a share of an accelerator's, or 2 GiB."""
    device = device or jax.devices()[0]
    if device.platform == "cpu":
        return DEFAULT_MEMORY_BYTES
    stats = device.memory_stats() or {}
    limit = stats.get("bytes_limit", 0) - stats.get("bytes_in_use", 0)
    return int(limit * ACCELERATOR_MEMORY_SHARE) if limit > 0 else DEFAULT_MEMORY_BYTES


def chunk_rows(total: int, size: int) -> Iterator[np.ndarray]:
    """Row indices of the chunks of ``size`` rows covering ``total`` rows; the last chunk
    is padded by repeating row ``total - 1``."""
    for start in range(0, total, size):
        yield np.minimum(np.arange(start, start + size), total - 1)


def chunked(fn: Callable, arrays, size: int):
    """Apply a batch function to ``arrays`` (a sequence, leading axis B) in chunks.

    Every chunk has ``min(size, B)`` rows (the last padded by repeating row ``B - 1``, as
    ``chunk_rows``), so one compilation of a jitted ``fn`` serves every chunk; the results
    (a pytree of arrays with leading axis of the chunk) are concatenated and trimmed to
    ``B``.  Arrays stay where they are (NumPy on the host, JAX arrays on their device);
    chunks are contiguous slices.
    """
    total = arrays[0].shape[0]
    rows = max(1, min(int(size), total))
    extra = -total % rows
    if extra:
        arrays = [_pad_rows(a, extra) for a in arrays]
    outs = [fn(*(a[start:start + rows] for a in arrays)) for start in range(0, total, rows)]
    return jax.tree_util.tree_map(lambda *xs: _library(xs[0]).concatenate(xs)[:total], *outs)


def on_cores(batch: int, run: Callable[[int, int], None]) -> None:
    """``run(lo, hi)`` over contiguous pieces of ``range(batch)``, one per core, each on
    its own thread (for host kernels that release the GIL; in the caller's thread when
    there is one piece)."""
    pieces = np.linspace(0, batch, min(batch, os.cpu_count() or 1) + 1).astype(np.int64)
    if len(pieces) <= 2:
        if batch:
            run(0, batch)
        return
    with concurrent.futures.ThreadPoolExecutor(len(pieces) - 1) as pool:
        list(pool.map(run, pieces[:-1], pieces[1:]))


def _pad_rows(a, extra: int):
    """``a`` with its last row repeated ``extra`` times."""
    xp = _library(a)
    return xp.concatenate([a, xp.repeat(a[-1:], extra, axis=0)])


def _library(a):
    """NumPy for host arrays (float64 stays float64), JAX for the rest."""
    return np if isinstance(a, np.ndarray) else jnp
