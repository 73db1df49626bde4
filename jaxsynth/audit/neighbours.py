"""Worst-case neighbouring data sets for the privacy audit, under each mechanism's adjacency.

Every data set here is made of points stacked at two far corners of the cube,
``x0 = (2^-20, …)`` and ``x1 = (1 − 2^-20, …)``: they lie in the first and the last cell
of every level up to 20 bisections per coordinate, so a neighbouring pair changes the true
counts of whole root-to-leaf paths at once, and nothing else.  That is the worst case of
every mechanism audited (the noisy counts of a path carry the whole privacy loss of Zare
Moayedi et al., arXiv 2609.33363, Thm A.3 and of PrivTree's path argument), and it lets a
small tree (depth 1–3) reveal the noise most directly.

* **replacement** (PMM, Pruned-PMM, Adaptive Pruned-PMM): ``X`` has ``k + 1`` points at
  ``x0`` and ``k`` at ``x1``; ``X'`` moves one point from ``x0`` to ``x1``.  The counts
  of the two paths move by one in opposite directions (``2r`` noisy counts change at
  depth ``r``, every level's budget is spent); the occupancy profile is unchanged.  ``k``
  is chosen large enough (three noise scales) that the clamp ``(·)_+`` rarely hides a
  count.
* **add/remove** (PrivTree; PMM with ``adjacency="add_remove"``): ``X'`` is ``X`` plus one
  point, at ``x0`` (on top of ``X``'s points: the counts of one whole path, the root
  included, move by one) or at ``x1`` (an otherwise empty region).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxsynth.core.validate import check_choice, check_positive_int

CORNER = 2.0**-20
"""Distance of the two point locations from the corners of the cube."""


@dataclasses.dataclass(frozen=True)
class Neighbours:
    """A pair of neighbouring data sets.

    Attributes:
      X, Y: [n, d] and [n', d] data sets (``Y`` is written ``X'`` in the docs).
      adjacency: ``"replacement"`` or ``"add_remove"``.
      description: one line for reports.
    """

    X: np.ndarray
    Y: np.ndarray
    adjacency: str
    description: str


def corners(d: int) -> tuple[np.ndarray, np.ndarray]:
    """The two locations ``x0 = (2^-20, …)`` and ``x1 = (1 − 2^-20, …)`` in [0,1]^d."""
    d = check_positive_int(d, "d")
    return np.full(d, CORNER), np.full(d, 1.0 - CORNER)


def _stack(d: int, at0: int, at1: int) -> np.ndarray:
    x0, x1 = corners(d)
    return np.concatenate([np.tile(x0, (at0, 1)), np.tile(x1, (at1, 1))])


def replacement(k: int, d: int = 1) -> Neighbours:
    """``X``: ``k + 1`` points at ``x0``, ``k`` at ``x1``; ``X'``: one of them moved to ``x1``."""
    k = check_positive_int(k, "k", minimum=0)
    return Neighbours(
        X=_stack(d, k + 1, k), Y=_stack(d, k, k + 1), adjacency="replacement",
        description=f"{k + 1}|{k} points at two far corners vs {k}|{k + 1} (d = {d})",
    )


def add_remove(at0: int, at1: int = 0, added: str = "x0", d: int = 1) -> Neighbours:
    """``X``: ``at0`` points at ``x0`` and ``at1`` at ``x1``; ``X'``: one more at ``added``."""
    at0 = check_positive_int(at0, "at0", minimum=0)
    at1 = check_positive_int(at1, "at1", minimum=0)
    check_choice(added, "added", ("x0", "x1"))
    if at0 + at1 == 0:
        raise ValueError("at0 + at1 must be at least 1 (the smaller data set is not empty)")
    extra = (1, 0) if added == "x0" else (0, 1)
    return Neighbours(
        X=_stack(d, at0, at1), Y=_stack(d, at0 + extra[0], at1 + extra[1]),
        adjacency="add_remove",
        description=f"{at0}|{at1} points at two far corners, plus one at {added} (d = {d})",
    )
