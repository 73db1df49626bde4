"""``exact1d``: exact W1 for ``d = 1`` (``jaxsynth.wasserstein.exact1d``)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.wasserstein.exact1d import w1_against_sorted
from jaxsynth.wasserstein.method import atom_blocks
from jaxsynth.wasserstein.methods.common import check_options
from jaxsynth.wasserstein.tree import data_points


@jax.jit
def _block(data_sorted, points, weights):
    return jax.vmap(lambda p, w: w1_against_sorted(data_sorted, p[:, 0], w))(points, weights)


class Exact1D:
    """The 1-D formula ``∫ |F_μ − F_ν|`` against the sorted data."""

    name = "exact1d"
    options: dict = {}
    columns = {"w1_exact1d": "exact W1 on the line (d = 1)"}
    needs_atoms = True

    def check(self, options, metric):
        return check_options(self, options)

    def prepare(self, X, metric, options):
        points = data_points(X)
        if points.shape[1] != 1:
            raise ValueError(f"method='exact1d' needs d = 1; X has d = {points.shape[1]}")
        return jnp.asarray(np.sort(points[:, 0]).astype(np.float32))

    def bytes_per_replicate(self, state, atom_bytes):
        return 8.0 * state.shape[0]

    def evaluate(self, state, batch, metric, options):
        return (atom_blocks(functools.partial(_block, state), batch),)
