"""``exact1d``: exact W1 for ``d = 1`` (``jaxsynth.wasserstein.exact1d``)."""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.wasserstein.exact1d import w1_against_sorted
from jaxsynth.wasserstein.bounds import projection_bytes
from jaxsynth.wasserstein.method import W1Method, atom_blocks, atom_count
from jaxsynth.wasserstein.tree import data_points


@jax.jit
def _block(data_sorted, points, weights):
    return jax.vmap(lambda p, w: w1_against_sorted(data_sorted, p[:, 0], w))(points, weights)


@dataclasses.dataclass(frozen=True)
class Exact1D(W1Method):
    """The 1-D formula ``∫ |F_μ − F_ν|`` against the sorted data (no options).

    Examples:
      >>> import numpy as np, scipy.stats
      >>> import jaxsynth as js
      >>> from jaxsynth.wasserstein import Exact1D
      >>> X = js.datasets.load("uniform", n=500, d=1, key=0)
      >>> out = js.release(0, js.PMM(depth=6), X, eps=1.0)
      >>> truth = scipy.stats.wasserstein_distance(
      ...     X[:, 0], np.asarray(out.points)[:, 0], v_weights=np.asarray(out.weights))
      >>> bool(np.isclose(js.w1(X, out, Exact1D()), truth, rtol=1e-5))
      True
    """

    name: ClassVar[str] = "exact1d"
    columns: ClassVar[dict] = {"w1_exact1d": "exact W1 on the line (d = 1)"}

    def prepare(self, X, metric):
        points = data_points(X)
        if points.shape[1] != 1:
            raise ValueError(f"method='exact1d' needs d = 1; X has d = {points.shape[1]}")
        return jnp.asarray(np.sort(points[:, 0]).astype(np.float32))

    def bytes_per_replicate(self, state, atom_bytes):
        return projection_bytes(state.shape[0], 1, atom_count(atom_bytes, 1))

    def evaluate(self, state, batch, metric):
        return (atom_blocks(functools.partial(_block, state), batch),)
