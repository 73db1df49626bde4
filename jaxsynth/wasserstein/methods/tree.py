"""``tree``: exact W1 in the partition's tree metric (``jaxsynth.wasserstein.tree``)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from jaxsynth.core.validate import check_positive_int
from jaxsynth.wasserstein import tree
from jaxsynth.wasserstein.method import W1Method
from jaxsynth.wasserstein.methods.common import tree_values


@dataclasses.dataclass(frozen=True)
class Tree(W1Method):
    """Exact tree-metric W1, from the kernel's level statistics or the released atoms.

    Attributes:
      batch_size: replicates per vmapped chunk of the atom route (``None``: as many as
        ``tree.BLOCK_BYTES`` holds under ``bytes_per_replicate``); the values do not
        depend on it.

    Examples:
      >>> import jaxsynth as js
      >>> from jaxsynth.wasserstein import Tree
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> out, levels = js.release(0, js.PMM(depth=5), X, eps=1.0, diagnostics=True)
      >>> from_atoms = js.w1(X, out, Tree())
      >>> from_levels = js.w1(X, out, Tree(), levels=levels)   # the kernel's statistics
      >>> bool(abs(from_atoms - from_levels) <= 1e-6 * from_atoms)
      True
    """

    batch_size: int | None = None
    name: ClassVar[str] = "tree"
    columns: ClassVar[dict] = {
        "w1_tree": "exact W1 in the tree metric of the released partition (an ultrametric: "
                   "not the ground metric's W1)"}
    needs_atoms: ClassVar[bool] = False
    in_chunk: ClassVar[bool] = False

    def __post_init__(self):
        if self.batch_size is not None:
            self._set(batch_size=check_positive_int(self.batch_size, "batch_size"))

    def prepare(self, X, metric):
        return X

    def bytes_per_replicate(self, state, atom_bytes):
        return tree.bytes_per_replicate(state, atom_bytes)

    def evaluate(self, state, batch, metric):
        value, _ = tree_values(state, batch, metric, self.batch_size)
        return (np.asarray(value, np.float64),)
