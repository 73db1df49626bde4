"""Wasserstein-1 between data and synthetic measures: one module per method.

``exact`` (certified full-data W1 to a relative gap, by column generation on the
transport LP; ``ctransform``: its jitted passes over all atoms), ``tree`` (exact
tree-metric W1 and its certified upper bound), ``bounds`` (certified bracket),
``exact1d`` (the 1-D formula), ``sinkhorn`` (ott-jax, imported on use: it is slow to
import), ``dispatch`` (``w1``, the ``js.w1`` entry point) and ``evaluator``
(``Evaluator``, the batched W1 of every replicate of a ``simulate`` chunk).
"""

from jaxsynth.wasserstein.bounds import bracket, projection_lower, tree_upper
from jaxsynth.wasserstein.dispatch import GROUND_METRICS, METHODS, w1
from jaxsynth.wasserstein.exact import ExactData, prepare_exact, w1_exact
from jaxsynth.wasserstein.exact1d import w1_exact1d, wasserstein_1d
from jaxsynth.wasserstein.tree import TreeData, TreeW1, tree_w1
from jaxsynth.wasserstein.tree import prepare as prepare_w1

__all__ = [
    "GROUND_METRICS",
    "METHODS",
    "ExactData",
    "TreeData",
    "TreeW1",
    "bracket",
    "prepare_exact",
    "prepare_w1",
    "projection_lower",
    "tree_upper",
    "tree_w1",
    "w1",
    "w1_exact",
    "w1_exact1d",
    "w1_sinkhorn",
    "w1_sinkhorn_batch",
    "wasserstein_1d",
]


def __getattr__(name):
    # ott-jax is imported only when Sinkhorn is used (it is slow to import).
    if name in ("w1_sinkhorn", "w1_sinkhorn_batch"):
        from jaxsynth.wasserstein import sinkhorn

        return getattr(sinkhorn, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
