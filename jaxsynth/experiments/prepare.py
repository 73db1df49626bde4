"""A sweep's data sets prepared once: points, data tree, W1 evaluation, sized plans.

``Prepared`` is one data set made ready for every mechanism of the sweep: its points, its
``DataTree`` (every cell count) deep enough for every mechanism at every ε, the W1
methods prepared on it (``Evaluation``) and, per mechanism and group of budgets, the
engine plan with its chunk size (``Sized``).  ``PreparedSets`` holds them while the sweep
runs, up to a share of the host's memory (``MEMORY_SHARE``): a data set is prepared once,
and again only if memory made the sweep drop it.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from jaxsynth import engine
from jaxsynth.wasserstein.evaluate import Evaluation

__all__ = ["MEMORY_SHARE", "Prepared", "PreparedSets", "Sized", "memory_budget"]

MEMORY_SHARE = 0.25
"""The share of the host's memory that prepared data sets may hold between their uses."""
HELD_COPIES = 4
"""Bytes a prepared data set holds, in copies of its points (tree, sorted projections)."""


@dataclasses.dataclass(frozen=True)
class Sized:
    """An engine plan with the memory, the chunk size and the devices it runs at."""

    plan: engine.Plan
    memory: int
    chunk: int
    devices: tuple


@dataclasses.dataclass(eq=False)
class Prepared:
    """One data set made ready for the sweep (see the module docstring)."""

    points: np.ndarray
    tree: object
    intrinsic_dim: int
    evaluation: Evaluation
    sized: dict = dataclasses.field(default_factory=dict)  # (label, ε) -> [Sized]
    controls: Evaluation | None = None  # the control-only replicates' (``evaluating``)

    @property
    def nbytes(self) -> int:
        return HELD_COPIES * self.points.nbytes

    def evaluating(self, sweep, part) -> Evaluation:
        """The W1 methods that measure ``part``: the sweep's, or for control-only
        replicates the free ones and the control's (``SweepPlan.control_methods``)."""
        if not part.controls:
            return self.evaluation
        if self.controls is None:
            self.controls = Evaluation.build(self.points, list(sweep.control_methods),
                                             sweep.metric)
        return self.controls

    def plans(self, sweep, label: str, mech, eps) -> list[Sized]:
        """The sized plans of ``mech`` at the budgets ``eps``: one per group of ε that run
        on the same engine (``eps_groups``), so no replicate depends on the other budgets.

        Raises ``ValueError`` naming the mechanism and the data set that cannot run.
        """
        eps = tuple(float(e) for e in eps)
        if (label, eps) not in self.sized:
            budgets = np.asarray(eps, np.float64)
            groups = mech.eps_groups(self.tree.n, budgets)
            self.sized[label, eps] = [self._size(sweep, mech, budgets[g]) for g in groups]
        return self.sized[label, eps]

    def _size(self, sweep, mech, eps) -> Sized:
        plan = mech.plan(self.tree, eps)
        device = sweep.devices[0]
        memory = sweep.memory_bytes or engine.device_memory(device)
        per_replicate = self.evaluation.bytes_per_replicate(plan.bytes_per_replicate)
        # memory_bytes as given (None: the default, which a refusal names as such)
        chunk = engine.chunk_size(per_replicate, 2**30, sweep.memory_bytes, device.platform)
        count = len(sweep.devices)
        return Sized(plan, memory, -(-chunk // count) * count, sweep.devices)


def memory_budget() -> int:
    """Bytes the sweep's prepared data sets may hold: ``MEMORY_SHARE`` of the host's."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * MEMORY_SHARE)


class PreparedSets:
    """The sweep's prepared data sets, by index, held up to ``MEMORY_SHARE`` of the host's
    memory (the one in use is always held)."""

    def __init__(self, sweep, budget: int | None = None):
        self.sweep = sweep
        self.budget = memory_budget() if budget is None else budget
        self.held: dict[int, Prepared] = {}
        self.preparations = 0  # how many times a data set was prepared (a test reads it)

    def get(self, index: int, labels=None) -> Prepared:
        """Data set ``index`` prepared (and its mechanisms ``labels`` planned at every ε
        of the sweep, which checks that they can run); held while memory allows."""
        if index not in self.held:
            self._hold(index, self._prepare(index))
        prepared = self.held[index]
        ds = self.sweep.data[index]
        for label, mech in self.sweep.mechanisms:
            if labels is None or label in labels:
                try:
                    prepared.plans(self.sweep, label, mech, self.sweep.eps)
                except ValueError as exc:
                    raise ValueError(f"mechanism {label} on {ds.label} (n = {ds.n}): "
                                     f"{exc}") from None
        return prepared

    def _prepare(self, index: int) -> Prepared:
        ds = self.sweep.data[index]
        try:
            X, tree, intrinsic = ds.load([m for _, m in self.sweep.mechanisms], self.sweep.eps)
            evaluation = Evaluation.build(X, list(self.sweep.methods), self.sweep.metric)
        except ValueError as exc:
            raise ValueError(f"data set {ds.label} (n = {ds.n}): {exc}") from None
        self.preparations += 1
        ds.held.clear()  # the prepared data set holds its points now
        return Prepared(X, tree, intrinsic, evaluation)

    def _hold(self, index: int, prepared: Prepared) -> None:
        used = sum(p.nbytes for p in self.held.values())
        while self.held and used + prepared.nbytes > self.budget:
            _, dropped = self.held.popitem()
            used -= dropped.nbytes
        self.held[index] = prepared
