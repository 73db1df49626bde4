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
    ``Tree``).

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> out = js.release(0, js.PMM(depth=5), X, eps=1.0)
      >>> from jaxsynth.wasserstein import TreeUpper
      >>> lower, upper = js.w1(X, out)                # the certified W1
      >>> bool(js.w1(X, out, TreeUpper()) >= upper)   # free, and an upper bound
      True
    """

    name: ClassVar[str] = "tree_upper"
    columns: ClassVar[dict] = {"w1_tree_upper": "certified upper bound on the ground metric's W1"}

    def evaluate(self, state, batch, metric):
        _, upper = tree_values(state, batch, metric, self.batch_size)
        return (upper_margin(upper, batch.d, metric),)
