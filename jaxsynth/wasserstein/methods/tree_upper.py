"""``tree_upper``: certified upper bound on W1, the tree W1 plus the within-leaf term."""

from __future__ import annotations

from jaxsynth.wasserstein.bounds import upper_margin
from jaxsynth.wasserstein.methods.tree import Tree
from jaxsynth.wasserstein.methods.common import tree_values


class TreeUpper(Tree):
    """Tree W1 plus the within-leaf term, widened by the rounding margin."""

    name = "tree_upper"
    columns = {"w1_tree_upper": "certified upper bound on the ground metric's W1"}

    def evaluate(self, state, batch, metric, options):
        d = batch.d
        _, upper = tree_values(state, batch, d, metric, options["batch_size"])
        return (upper_margin(upper, d, metric),)
