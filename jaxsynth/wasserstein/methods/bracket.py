"""``bracket``: certified ``lower ≤ W1 ≤ upper`` (``jaxsynth.wasserstein.bounds``)."""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import jax.numpy as jnp

from jaxsynth.core.validate import check_positive_int
from jaxsynth.wasserstein import bounds
from jaxsynth.wasserstein.method import W1Method, atom_blocks, atom_count
from jaxsynth.wasserstein.methods.common import tree_values
from jaxsynth.wasserstein.tree import data_points


@dataclasses.dataclass(frozen=True)
class Bracket(W1Method):
    """Largest 1-D projection W1 (lower end) and the tree upper bound (upper end).

    Attributes:
      n_directions: random directions (``>= 1``) added to the coordinate axes; ``None``:
        ``bounds.DEFAULT_DIRECTIONS`` of the metric (none for ℓ∞, two for ℓ2).
      seed: seed (``>= 0``) of the random directions, so repeated calls agree.
      batch_size: replicates per vmapped chunk of the upper end, as ``Tree``'s.

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> out = js.release(0, js.PMM(depth=5), X, eps=1.0)
      >>> from jaxsynth.wasserstein import Bracket
      >>> low, up = js.w1(X, out, Bracket(n_directions=4))
      >>> lower, upper = js.w1(X, out)               # the certified W1 lies inside
      >>> bool(low <= upper and lower <= up)
      True
    """

    n_directions: int | None = None
    seed: int = 0
    batch_size: int | None = None
    name: ClassVar[str] = "bracket"
    columns: ClassVar[dict] = {
        "w1_lower": "certified lower bound on the ground metric's W1 (projections)",
        "w1_upper": "certified upper bound on the ground metric's W1 (tree)"}

    def __post_init__(self):
        n_dir = self.n_directions
        if n_dir is not None:  # random directions beyond the d axes
            if isinstance(n_dir, int) and not isinstance(n_dir, bool) and n_dir < 1:
                raise ValueError(f"n_directions must be >= 1 (random directions added to the "
                                 f"coordinate axes; omit it for the default); got {n_dir}")
            self._set(n_directions=check_positive_int(n_dir, "n_directions"))
        self._set(seed=check_positive_int(self.seed, "seed", minimum=0))
        if self.batch_size is not None:
            self._set(batch_size=check_positive_int(self.batch_size, "batch_size"))

    def prepare(self, X, metric):
        points = data_points(X)
        n_dir = bounds.check_directions(self.n_directions, metric, *points.shape[::-1])
        dirs = bounds.directions(points.shape[1], metric, n_dir, self.seed)
        return X, jnp.asarray(dirs), jnp.asarray(bounds.sorted_projections(points, dirs))

    def bytes_per_replicate(self, state, atom_bytes):
        # the lower end's blocks (its upper end, the tree W1, sizes its own batches)
        _, dirs, data = state
        atoms = atom_count(atom_bytes, dirs.shape[1])
        return bounds.projection_bytes(data.shape[1], dirs.shape[0], atoms)

    def evaluate(self, state, batch, metric):
        X, dirs, data = state
        raw = atom_blocks(functools.partial(bounds.projected_w1, data, dirs), batch)
        _, upper = tree_values(X, batch, metric, self.batch_size)
        return (bounds.lower_margin(raw, batch.d, metric),
                bounds.upper_margin(upper, batch.d, metric))
