"""The released synthetic measure (``js.SyntheticMeasure``) and representative-point placement.

A mechanism's output is a weighted point set ``μ_Y = Σ_i w_i δ_{y_i}``: representatives
``points`` [..., M, d] with ``weights`` [..., M] summing to 1 (zero-weight padding keeps
shapes static).  Every atom lies strictly inside its leaf cell, whose level is
``leaf_depth`` [..., M]; the tree metric of the partition (``jaxsynth.wasserstein``)
reads it.  Leading axes ``...`` are batch axes (ε values × seeds) when the measure comes
from the batched entry point.  Arrays stay on the device that released them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SyntheticMeasure:
    """A released synthetic measure, possibly batched over leading axes.

    Attributes:
      points: [..., M, d] float32 representatives.
      weights: [..., M] float32 weights summing to 1 (zero on padding).
      leaf_depth: [..., M] int32 level of the partition cell holding each atom.
      size: [...] int32: for the PMM family, the synthetic sample size ``m``; for PrivTree
        and the oracle measures, which release a probability vector rather than a sample,
        the number of atoms of positive weight.
      visited: [...] int32, nodes whose noisy count was materialised (PrivTree: cells
        whose split test was drawn).
      leaves: [...] int32, leaves of the released tree: for the PMM family those with
        positive mass; for PrivTree and the oracle partitions every leaf, zero-mass ones
        included (each carries an atom, which the tree W1 needs).
      depth: [...] int32, deepest level of the released tree.
      budget: dict of [...] float arrays: ``"epsilon"`` (total) and its parts.
      info: dict of per-mechanism released fields (arrays with the same leading axes):
        functions of the release alone (e.g. Adaptive Pruned-PMM's ``selected``, PrivTree's
        ``noisy_mass`` and ``shift``) or public parameters.  Nothing computed from the
        true data is here; ``release_batch(..., diagnostics=True)`` returns that apart,
        as ``NotPrivateDiagnostics``.
      adjacency: ``"replacement"`` or ``"add_remove"`` (static).
      mechanism: the mechanism's name (static).
    """

    points: jax.Array
    weights: jax.Array
    leaf_depth: jax.Array
    size: jax.Array
    visited: jax.Array
    leaves: jax.Array
    depth: jax.Array
    budget: dict
    info: dict
    adjacency: str = dataclasses.field(metadata=dict(static=True), default="replacement")
    mechanism: str = dataclasses.field(metadata=dict(static=True), default="")

    @property
    def accounting(self) -> dict[str, Any]:
        """Budget accounting: ``"epsilon"`` (total), ``"adjacency"``, and the parts."""
        parts = {k: _scalar_or_array(v) for k, v in self.budget.items()}
        return {"adjacency": self.adjacency, **parts}

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return tuple(self.weights.shape[:-1])

    def __getitem__(self, index) -> "SyntheticMeasure":
        """Index the batch axes, e.g. ``out[e, s]`` for ε index ``e`` and seed ``s``."""
        if not self.batch_shape:
            raise IndexError("this SyntheticMeasure has no batch axes")
        return jax.tree_util.tree_map(lambda a: a[index], self)


def _scalar_or_array(v):
    a = np.asarray(v)
    return a.item() if a.ndim == 0 else a


@dataclasses.dataclass(frozen=True)
class NotPrivateDiagnostics:
    """NOT PRIVATE: statistics of a release computed from the true data.

    What a mechanism's kernels compute for free against the data (the tree W1 of each
    replicate, ``tree_<metric>`` and its upper end ``upper_<metric>``) and, for Adaptive
    Pruned-PMM, the exact selection ``scores``, ``probabilities`` and ``sensitivity``.
    They are for studying the mechanism; publishing any of them voids the privacy
    guarantee of the release they describe.  Read them as ``diag["tree_linf"]``.

    Attributes:
      values: dict of arrays with the release's batch axes.
      mechanism: the mechanism's name.
    """

    values: dict
    mechanism: str

    def __getitem__(self, name: str):
        if name not in self.values:
            raise KeyError(f"{name!r}: these diagnostics hold {sorted(self.values)}")
        return self.values[name]

    def keys(self):
        return self.values.keys()
