"""The W1 methods by name: adding one is one module in ``methods/`` and one line here."""

from __future__ import annotations

from jaxsynth.wasserstein.methods.bracket import Bracket
from jaxsynth.wasserstein.methods.exact import Exact
from jaxsynth.wasserstein.methods.exact1d import Exact1D
from jaxsynth.wasserstein.methods.sinkhorn import Sinkhorn
from jaxsynth.wasserstein.methods.tree import Tree
from jaxsynth.wasserstein.methods.tree_upper import TreeUpper

__all__ = ["METHODS", "REGISTRY"]

REGISTRY = {
    "exact": Exact(),
    "tree": Tree(),
    "tree_upper": TreeUpper(),
    "bracket": Bracket(),
    "exact1d": Exact1D(),
    "sinkhorn": Sinkhorn(),
}
"""Every ``W1Method`` by its ``method=`` name."""
METHODS = tuple(REGISTRY)
"""The W1 methods: how W1 is measured (``method=``); ``metric=`` is the ground metric."""
