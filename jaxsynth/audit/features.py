"""Features of released measures and transcripts, computed on the device per chunk.

A black-box audit sees only what a mechanism releases (``SyntheticMeasure``: the atoms ``points``,
``weights``, ``leaf_depth`` and the size ``m``); its events are level sets of these
features:

* the released mass of every cell of a fixed dyadic level (``mass[c]``); for the PMM
  family, whose release is an integer sample, the masses times ``m`` (``count[c]``,
  integers, so an event can isolate a single value);
* the size ``m`` (the number of atoms of positive weight for PrivTree, whose release is a
  probability vector);
* for each audit location ``x``: the weight and the level of the released atom nearest to
  it (ℓ∞), i.e. how finely and how heavily the release resolves the changed point.

A white-box audit reads the kernel's transcript instead (``transcript_features``).
Features are reduced on the device per chunk (``engine.run(reduce=...)``), so a million
releases never hold their atoms on the host.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.core import partition


def cell_names(level: int, d: int) -> list[str]:
    """Names of the cells of ``level`` in the order of ``measure_features``."""
    res = partition.coordinate_resolution(level, d)
    grid = np.stack(np.meshgrid(*[np.arange(2**k) for k in res], indexing="ij"), -1)
    return ["cell" + "(" + ",".join(map(str, idx)) + ")" for idx in grid.reshape(-1, d)]


def measure_reducer(level: int, d: int, locations, integer: bool):
    """``reduce(out) -> {"features": [C, F]}`` for ``engine.run``, and the feature names.

    Args:
      level: dyadic level of the mass grid (``2^level`` cells).
      d: dimension.
      locations: [L, d] points whose nearest atom is described.
      integer: masses times the size, rounded (the PMM family's integer leaf masses).
    """
    locations = tuple(map(tuple, np.atleast_2d(np.asarray(locations, np.float64))))
    return _measure_reducer(level, d, locations, integer)


@functools.lru_cache(maxsize=32)  # one jitted reducer (and compilation) per setting
def _measure_reducer(level: int, d: int, locations: tuple, integer: bool):
    res = np.asarray(partition.coordinate_resolution(level, d), np.int32)
    strides = np.cumprod(np.concatenate([[1], 2 ** res[::-1][:-1]]))[::-1].astype(np.int32)
    cells = int(2 ** res.sum())
    locations = jnp.asarray(np.atleast_2d(locations), jnp.float32)

    @jax.jit
    def reduce(out):
        points, weights = out["points"], out["weights"]  # [C, M, d], [C, M]
        scale = jnp.exp2(jnp.asarray(res, jnp.float32))
        index = jnp.clip(jnp.floor(points * scale), 0, scale - 1).astype(jnp.int32)
        cell = jnp.sum(index * jnp.asarray(strides), axis=-1)  # [C, M]
        mass = jnp.sum(jax.nn.one_hot(cell, cells, dtype=jnp.float32) * weights[..., None], 1)
        size = out["size"].astype(jnp.float32)
        if integer:
            mass = jnp.round(mass * size[:, None])
        dist = jnp.max(jnp.abs(points[:, None] - locations[None, :, None]), -1)  # [C, L, M]
        dist = jnp.where(weights[:, None] > 0, dist, jnp.inf)
        near = jnp.argmin(dist, axis=-1)  # [C, L]
        near_w = jnp.take_along_axis(weights, near, 1)
        near_depth = jnp.take_along_axis(out["leaf_depth"], near, 1).astype(jnp.float32)
        return {"features": jnp.concatenate([mass, size[:, None], near_w, near_depth], 1)}

    names = [("count " if integer else "mass ") + c for c in cell_names(level, d)] + ["size"]
    names += [f"weight near x{i}" for i in range(locations.shape[0])]
    names += [f"leaf depth near x{i}" for i in range(locations.shape[0])]
    return reduce, names


def transcript_reducer(changed):
    """``reduce(out)`` adding the transcript entries of the ``changed`` nodes [F] as
    ``"transcript"`` [C, F] to the measure features."""
    return _transcript_reducer(tuple(int(i) for i in np.ravel(changed)))


@functools.lru_cache(maxsize=32)
def _transcript_reducer(changed: tuple):
    changed = jnp.asarray(changed, jnp.int32)

    @jax.jit
    def reduce(out):
        return {"transcript": out["transcript"][:, changed]}

    return reduce


def combine(*reducers):
    """One ``reduce`` running several and merging their outputs."""

    def reduce(out):
        merged = {}
        for r in reducers:
            merged.update(r(out))
        return merged

    return reduce
