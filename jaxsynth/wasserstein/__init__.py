"""Wasserstein-1 between data and synthetic measures.

Every way of measuring W1 is a ``W1Method`` (``method``), one module in ``methods/``
registered in ``registry``; ``evaluate`` is the one router, used by ``dispatch.w1``
(``js.w1``) and by ``simulate``.  The computations: ``exact`` (certified full-data W1;
``ctransform``: its jitted passes), ``tree`` (exact tree-metric W1 and its upper
bound), ``bounds`` (certified bracket), ``exact1d`` (the 1-D formula) and ``sinkhorn``
(ott-jax, imported on use: it is slow to import).
"""

from jaxsynth.core.partition import GROUND_METRICS
from jaxsynth.wasserstein.bounds import bracket, projection_lower, tree_upper
from jaxsynth.wasserstein.dispatch import w1
from jaxsynth.wasserstein.exact import ExactData, prepare_exact, w1_exact
from jaxsynth.wasserstein.exact1d import w1_exact1d, wasserstein_1d
from jaxsynth.wasserstein.method import Batch, W1Method
from jaxsynth.wasserstein.registry import METHODS, REGISTRY
from jaxsynth.wasserstein.tree import TreeData, TreeW1, tree_w1
from jaxsynth.wasserstein.tree import prepare as prepare_w1

__all__ = [
    "GROUND_METRICS",
    "METHODS",
    "REGISTRY",
    "Batch",
    "ExactData",
    "TreeData",
    "TreeW1",
    "W1Method",
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
