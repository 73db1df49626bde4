"""What the engine, the sweep and the auditor ask of a mechanism config.

A mechanism is a frozen, keyword-only dataclass of public options with a ``name``, an
``is_oracle`` flag (True when it reads the true data beyond what its privacy accounting
covers, e.g. PMM's ``profile`` schedule), the depth of the data tree it needs
(``data_depth``) and an engine plan for a data tree and a list of budgets (``plan``).
``eps_groups`` says which budgets may share one plan (by default all).  ``check_mechanism``
refuses anything else at the public entry points.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Mechanism", "check_mechanism"]


@runtime_checkable
class Mechanism(Protocol):
    """The interface of every mechanism config (``PMM``, ``PrunedPMM``,
    ``AdaptivePrunedPMM``, ``PrivTree``)."""

    name: str
    is_oracle: bool

    def data_depth(self, n: int, d: int, eps) -> int:
        """Depth of the ``DataTree`` that ``plan`` needs for every budget of ``eps``."""

    def plan(self, tree, eps, *, piece: int | None = None):
        """The ``engine.Plan`` releasing from ``tree`` at the budgets ``eps`` [E].

        ``piece``: nodes per piece of the kernel's level loops (``None``: the platform's
        size); the released measure does not depend on it, but for the order of its
        atoms and the last bit of float32 values (sums in another order).  A plan is built whole here: nothing
        outside the mechanism edits one (the privacy auditor asks for small pieces).
        """

    def eps_groups(self, n: int, eps) -> list[np.ndarray]:
        """Indices of ``eps`` in groups that run as one plan (default: one group)."""
        return [np.arange(len(np.atleast_1d(eps)))]


def check_mechanism(mech, name: str = "mech"):
    """Return ``mech`` if it is a mechanism config (a ``Mechanism``).

    Raises:
      ValueError: naming ``name`` for a class or anything that is not a config.
    """
    if isinstance(mech, type):
        raise ValueError(f"{name} must be a mechanism config such as jaxsynth.PMM(), an "
                         f"instance; got the class {mech.__name__}")
    if not isinstance(mech, Mechanism):
        raise ValueError(
            f"{name} must be a mechanism config such as jaxsynth.PMM(); got {mech!r}"
        )
    return mech
