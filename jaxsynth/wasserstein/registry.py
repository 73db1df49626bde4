"""The W1 methods by name: adding one is one module in ``methods/`` and one line here."""

from __future__ import annotations

from jaxsynth.wasserstein.methods.bracket import Bracket
from jaxsynth.wasserstein.methods.exact import Exact
from jaxsynth.wasserstein.methods.exact1d import Exact1D
from jaxsynth.wasserstein.methods.sinkhorn import Sinkhorn
from jaxsynth.wasserstein.methods.tree import Tree
from jaxsynth.wasserstein.methods.tree_upper import TreeUpper

__all__ = ["GROUND", "METHODS", "REGISTRY", "certified_pairs", "column_descriptions"]

REGISTRY = {
    "exact": Exact,
    "tree": Tree,
    "tree_upper": TreeUpper,
    "bracket": Bracket,
    "exact1d": Exact1D,
    "sinkhorn": Sinkhorn,
}
"""Every ``W1Method`` class by its ``method=`` name (``method="exact", rtol=1e-3`` builds
``Exact(rtol=1e-3)``)."""
METHODS = tuple(REGISTRY)
"""The W1 methods: how W1 is measured (``method=``); ``metric=`` is the ground metric."""
GROUND = "the ground metric's"
"""How a column description names the ground metric (``metric=``: ℓ∞ or ℓ2); a figure
puts the metric's symbol in its place."""


def column_descriptions() -> dict[str, str]:
    """What every registered method's column measures (``W1Method.columns``), by column."""
    return {c: text for method in REGISTRY.values() for c, text in method.columns.items()}


def certified_pairs() -> dict[str, str]:
    """The lower end of each certified pair, by its upper end's column: a method's columns
    ``<stem>_upper`` and ``<stem>_lower`` both."""
    return {c: c[: -len("upper")] + "lower" for method in REGISTRY.values()
            for c in method.columns
            if c.endswith("_upper") and c[: -len("upper")] + "lower" in method.columns}
