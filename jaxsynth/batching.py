"""Running a per-replicate kernel over ε values × seeds, chunked to a memory budget.

Kernels are written for one replicate; here they are vmapped over seeds (inner) and ε
(outer), jitted once per static configuration, and run over chunks of seeds.  Each
replicate depends only on its own key, so results do not depend on the chunk size.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

DEFAULT_MEMORY_BYTES = 2 * 2**30
"""Default working-memory budget of one jitted chunk (2 GiB)."""


def capacity_bucket(m_max: int) -> int:
    """Round a required capacity up to ≤ 1/8 slack on a coarse grid (few recompiles)."""
    m_max = max(int(m_max), 8)
    step = 1 << max(0, m_max.bit_length() - 4)
    return -(-m_max // step) * step


def seeds_per_chunk(bytes_per_replicate: float, n_eps: int, memory_bytes: int) -> int:
    """How many seeds fit in one chunk for ``n_eps`` ε values."""
    return max(1, int(memory_bytes // max(1.0, bytes_per_replicate * n_eps)))


@functools.lru_cache(maxsize=None)
def _vmapped(kernel, in_axes_eps):
    over_seeds = jax.vmap(kernel, in_axes=(0,) + tuple(None for _ in in_axes_eps))
    return jax.jit(jax.vmap(over_seeds, in_axes=(None,) + in_axes_eps))


def run_grid(kernel, keys, eps_args, shared_args, chunk: int):
    """Run ``kernel(key, *eps_args_e, *shared_args)`` for all ε × seeds.

    Args:
      kernel: a per-replicate function (its static options bound with ``functools.partial``;
        the partial must be reused across calls so its compilation is cached).
      keys: [S, 2] raw replicate keys.
      eps_args: arrays with a leading ε axis [E, ...] (e.g. level scales, root scale).
      shared_args: arguments common to all replicates (e.g. the data tree on device).
      chunk: seeds per jitted call.

    Returns:
      the kernel's outputs with leading axes [E, S].
    """
    axes = (0,) * len(eps_args) + (None,) * len(shared_args)
    fn = _vmapped(kernel, axes)
    outs = [
        fn(keys[s : s + chunk], *eps_args, *shared_args) for s in range(0, keys.shape[0], chunk)
    ]
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs, axis=1), *outs)


def pad_atoms(a, size: int):
    """Pad a per-atom array [E, S, M, ...] with zeros along the atom axis to ``size``."""
    return jnp.pad(a, [(0, 0), (0, 0), (0, size - a.shape[2])] + [(0, 0)] * (a.ndim - 3))
