"""``tree``: exact W1 in the partition's tree metric (``jaxsynth.wasserstein.tree``)."""

from __future__ import annotations

import numpy as np

from jaxsynth.core.validate import check_positive_int
from jaxsynth.wasserstein.methods.common import check_options, tree_values
from jaxsynth.wasserstein.tree import DEFAULT_BATCH_SIZE


class Tree:
    """Exact tree-metric W1, from the kernel's level statistics or the released atoms."""

    name = "tree"
    options = {"batch_size": DEFAULT_BATCH_SIZE}
    columns = {"w1_tree": "exact W1 in the tree metric of the released partition "
                          "(an ultrametric: not the ground metric's W1)"}
    needs_atoms = False

    def check(self, options, metric):
        options = check_options(self, options)
        check_positive_int(options["batch_size"], "batch_size")
        return options

    def prepare(self, X, metric, options):
        return X

    def bytes_per_replicate(self, state, atom_bytes):
        return 0.0

    def evaluate(self, state, batch, metric, options):
        d = batch.d
        tree, _ = tree_values(state, batch, d, metric, options["batch_size"])
        return (np.asarray(tree, np.float64),)
