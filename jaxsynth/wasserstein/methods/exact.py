"""``exact``: the ground metric's W1 certified to a relative gap (``wasserstein.exact``)."""

from __future__ import annotations

import dataclasses
import os
from typing import ClassVar

import numpy as np

from jaxsynth.core.validate import check_positive_int, memory_limit
from jaxsynth.wasserstein.exact import (
    DEFAULT_CLUSTERS,
    DEFAULT_RTOL,
    ExactData,
    check_rtol,
    check_stacked,
    prepare_exact,
    w1_exact,
)
from jaxsynth.wasserstein.exact import levels
from jaxsynth.wasserstein.exact.solver import DENSE_ARCS, THREADS_PER_CORE
from jaxsynth.wasserstein.method import W1Method, atom_count
from jaxsynth.wasserstein.tree import data_points

POINT_BYTES = 240
"""Solver memory per block of the largest LP it solves (the points' level, or
``levels.MAX_LP_BLOCKS`` blocks on large data): the candidate arcs (``CANDIDATES`` to
``COARSE_CANDIDATES`` per block, more as rounds add them) with their codes, ends and
costs, the network simplex's arc and node arrays, the pass's best atoms and the plan."""
DATA_BYTES = 160
"""Solver memory per data point whatever the level: the c-transform of every point and,
on large data, the plan pushed to the points, the regions' LPs and the plan-adapted
level's arrays."""
ATOM_BYTES = 64
"""Solver memory per atom: its coordinates in float64 and float32 on the device, its
weight, duals and the columns' arrays of the LP."""
DENSE_ARC_BYTES = 48
"""Solver memory per block-atom pair of a coarsest level solved densely (its float64 cost
matrix and POT's network simplex on every pair: ``solver.DENSE_ARCS``)."""


@dataclasses.dataclass(frozen=True)
class Exact(W1Method):
    """Column generation on the transport LP; both ends are proofs.

    Attributes:
      rtol: the relative gap ``(upper − lower) / upper`` of the certified pair, a real
        number in (0, 1) (NumPy scalars accepted, ``np.float32(1e-3)`` too: its value is
        taken as a float; bools refused).
      clusters: Morton blocks of the data's coarsest level, an integer ``>= 1``;
        ``None``: ``DEFAULT_CLUSTERS``.  Any value from ``n`` up (however large) makes the
        points the only level (one LP).  Set it in ``prepare_exact`` when ``X`` is an
        ``ExactData``.
      stacked: stack the threads' passes on an accelerator (``None``: where JAX's backend
        is not the CPU); the pairs do not depend on it.

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> out = js.release(0, js.PMM(depth=5), X, eps=1.0)
      >>> from jaxsynth.wasserstein import Exact
      >>> lower, upper = js.w1(X, out, Exact(rtol=1e-3))
      >>> bool(0 < upper - lower <= 1e-3 * upper)
      True
      >>> Exact(rtol=1.5)
      Traceback (most recent call last):
      ValueError: rtol must be in (0, 1); got 1.5
    """

    rtol: float = DEFAULT_RTOL
    clusters: int | None = None
    stacked: bool | None = None
    name: ClassVar[str] = "exact"
    columns: ClassVar[dict] = {
        "w1_exact_lower": "certified lower end of the ground metric's W1 of the whole data "
                          "set (upper − lower ≤ rtol · upper)",
        "w1_exact_upper": "certified upper end of the ground metric's W1 of the whole data "
                          "set (upper − lower ≤ rtol · upper)"}
    in_chunk: ClassVar[bool] = False

    def __post_init__(self):
        self._set(rtol=check_rtol(self.rtol))
        if self.clusters is not None:
            self._set(clusters=check_positive_int(self.clusters, "clusters"))
        check_stacked(self.stacked)

    def prepare(self, X, metric):
        if isinstance(X, ExactData):
            if self.clusters is not None:
                raise ValueError("clusters: set it in prepare_exact when X is an ExactData")
            return X
        return prepare_exact(data_points(X), self.clusters or DEFAULT_CLUSTERS)

    def bytes_per_replicate(self, state, atom_bytes):
        m = atom_count(atom_bytes, state.X.shape[1])
        return exact_memory(state.n, m, state.levels_for(m)[0].size)

    def evaluate(self, state, batch, metric):
        points, weights = np.asarray(batch.points), np.asarray(batch.weights)
        return w1_exact(state, points, weights, metric, self.rtol, stacked=self.stacked,
                        workers=solver_threads(state, points.shape[1]), names=batch.names)


def solver_threads(data: ExactData, m: int) -> int | None:
    """Replicates of ``m`` atom slots the solver may hold at once within
    ``validate.memory_limit()`` under ``exact_memory``, or ``None`` when its default pool
    (``THREADS_PER_CORE`` per core) fits."""
    fit = int(memory_limit() // exact_memory(data.n, m, data.levels_for(m)[0].size))
    return None if fit >= THREADS_PER_CORE * (os.cpu_count() or 1) else max(1, fit)


def exact_memory(n: int, m: float, first: int) -> float:
    """The exact solver's memory model: bytes one replicate holds at its peak, for ``n``
    data points, ``m`` atoms and ``first`` blocks at the first level it solves
    (``ExactData.levels_for``; beyond the ``ExactData`` every replicate shares): its
    largest LP's arcs (or the dense first level's pairs), its point-sized arrays and its
    atoms' (``tests/wasserstein/test_memory.py`` checks it against the measured peak)."""
    largest_lp = POINT_BYTES * min(n, levels.MAX_LP_BLOCKS)
    dense = DENSE_ARC_BYTES * first * m if first * m <= DENSE_ARCS else 0.0
    return max(largest_lp, dense) + DATA_BYTES * n + ATOM_BYTES * m
