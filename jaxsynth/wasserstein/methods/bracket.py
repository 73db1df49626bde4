"""``bracket``: certified ``lower ≤ W1 ≤ upper`` (``jaxsynth.wasserstein.bounds``)."""

from __future__ import annotations

import functools

import jax.numpy as jnp

from jaxsynth.core.validate import check_positive_int
from jaxsynth.wasserstein import bounds
from jaxsynth.wasserstein.method import atom_blocks
from jaxsynth.wasserstein.methods.common import check_options, tree_values
from jaxsynth.wasserstein.tree import DEFAULT_BATCH_SIZE, data_points


class Bracket:
    """Largest 1-D projection W1 (lower end) and the tree upper bound (upper end)."""

    name = "bracket"
    options = {"n_directions": None, "seed": 0, "batch_size": DEFAULT_BATCH_SIZE}
    columns = {"w1_lower": "certified lower bound on the ground metric's W1 (projections)",
               "w1_upper": "certified upper bound on the ground metric's W1 (tree)"}
    needs_atoms = True

    def check(self, options, metric):
        options = check_options(self, options)
        if options["n_directions"] is not None:  # random directions beyond the d axes
            n_dir = options["n_directions"]
            if isinstance(n_dir, int) and not isinstance(n_dir, bool) and n_dir < 1:
                raise ValueError(f"n_directions must be >= 1 (random directions added to the "
                                 f"coordinate axes; omit it for the default); got {n_dir}")
            check_positive_int(n_dir, "n_directions")
        check_positive_int(options["seed"], "seed", minimum=0)
        check_positive_int(options["batch_size"], "batch_size")
        return options

    def prepare(self, X, metric, options):
        points = data_points(X)
        n_dir, seed = bounds.check_directions(options["n_directions"], options["seed"], metric,
                                              points.shape[1], points.shape[0])
        dirs = bounds.directions(points.shape[1], metric, n_dir, seed)
        return X, jnp.asarray(dirs), jnp.asarray(bounds.sorted_projections(points, dirs))

    def bytes_per_replicate(self, state, atom_bytes):
        _, dirs, data = state
        d = dirs.shape[1]
        return 12.0 * data.shape[0] * (data.shape[1] + 2 * atom_bytes / (4 * (d + 2)))

    def evaluate(self, state, batch, metric, options):
        X, dirs, data = state
        d = batch.d
        raw = atom_blocks(functools.partial(bounds.projected_w1, data, dirs), batch)
        _, upper = tree_values(X, batch, d, metric, options["batch_size"])
        return bounds.lower_margin(raw, d, metric), bounds.upper_margin(upper, d, metric)
