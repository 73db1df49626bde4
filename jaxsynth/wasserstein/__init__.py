"""Wasserstein-1 between data and synthetic measures.

The public surface is the router ``w1`` (``js.w1``), the method classes (each a frozen
dataclass whose fields are its options: ``Exact``, ``Tree``, ``TreeUpper``, ``Bracket``,
``Exact1D``, ``Sinkhorn``) and the prepared data types with their constructors
(``TreeData`` by ``prepare_w1``, ``ExactData`` by ``prepare_exact``), which let sweeps
prepare a data set once.  Inside: every method is a ``W1Method`` (``method``), one module
in ``methods/`` registered in ``registry``; ``evaluate`` is the one router, used by
``dispatch.w1`` and by ``simulate``.  The computations: ``exact`` (certified full-data
W1; ``ctransform``: its jitted passes), ``tree`` (exact tree-metric W1 and its upper
bound), ``bounds`` (certified bracket), ``exact1d`` (the one 1-D code) and ``sinkhorn``
(ott-jax, imported on use: it is slow to import).
"""

from jaxsynth.wasserstein.dispatch import w1
from jaxsynth.wasserstein.exact import ExactData, prepare_exact
from jaxsynth.wasserstein.methods.bracket import Bracket
from jaxsynth.wasserstein.methods.exact import Exact
from jaxsynth.wasserstein.methods.exact1d import Exact1D
from jaxsynth.wasserstein.methods.sinkhorn import Sinkhorn
from jaxsynth.wasserstein.methods.tree import Tree
from jaxsynth.wasserstein.methods.tree_upper import TreeUpper
from jaxsynth.wasserstein.tree import TreeData
from jaxsynth.wasserstein.tree import prepare as prepare_w1

__all__ = [
    "Bracket",
    "Exact",
    "Exact1D",
    "ExactData",
    "Sinkhorn",
    "Tree",
    "TreeData",
    "TreeUpper",
    "prepare_exact",
    "prepare_w1",
    "w1",
]
