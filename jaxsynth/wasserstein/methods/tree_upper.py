"""``tree_upper``: certified upper bound on W1, the tree W1 plus the within-leaf term."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from jaxsynth.wasserstein.bounds import upper_margin
from jaxsynth.wasserstein.methods.common import tree_values
from jaxsynth.wasserstein.methods.tree import Tree


@dataclasses.dataclass(frozen=True)
class TreeUpper(Tree):
    """Tree W1 plus the within-leaf term, widened by the rounding margin (options as
    ``Tree``)."""

    name: ClassVar[str] = "tree_upper"
    columns: ClassVar[dict] = {"w1_tree_upper": "certified upper bound on the ground metric's W1"}

    def evaluate(self, state, batch, metric):
        _, upper = tree_values(state, batch, metric, self.batch_size)
        return (upper_margin(upper, batch.d, metric),)
