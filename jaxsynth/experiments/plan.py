"""A sweep checked once and frozen: ``SweepPlan``, and the parts of its work (``Part``).

``plan_sweep`` turns ``simulate``'s arguments into a ``SweepPlan``: the mechanisms with
their labels, the data sets (one per data set and size, with the fingerprint of the points
each uses), the budgets, the seeds, the W1 methods and their columns, the key, the memory,
the devices and, for a sweep to a stated precision, its ``Precision``.  Every bad argument
is refused here with a ``ValueError`` naming it, before anything is computed or written.

A ``Part`` is a unit of work: one mechanism on one data set at some budgets, for some
seeds.  ``SweepPlan.parts`` lists the parts a table still lacks, data set by data set so
that each is prepared once.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from jaxsynth.api import seed_count, seed_indices
from jaxsynth.core.validate import (
    check_bool,
    check_epsilon,
    check_positive_int,
    check_positive_number,
    check_str,
)
from jaxsynth.experiments import grid, prepare
from jaxsynth.experiments import store as result_store
from jaxsynth.experiments.summary import CONTROLS
from jaxsynth.wasserstein.evaluate import check_methods, check_metric

__all__ = ["DEFAULT_SEEDS", "FIRST_ROUND", "Part", "Precision", "SweepPlan", "plan_sweep"]

DEFAULT_SEEDS = 100
"""Seeds of a fixed sweep when ``seeds`` is not given."""
FIRST_ROUND = 16
"""Seeds of every cell's first round under ``precision`` when ``seeds`` is not given: few
enough to be cheap, enough for a first estimate of the spread."""
FREE_METHODS = ("tree", "tree_upper")
"""W1 methods every sweep records: they read the release kernel's level statistics, at
no measurable cost, and ``w1_tree_upper`` is the control of ``summarize(control=...)``."""


@dataclasses.dataclass(frozen=True)
class Precision:
    """A sweep to a stated precision: every cell's interval of the mean of ``column``
    (or its control-variate estimate with ``control``) within ``target`` × the mean."""

    target: float
    first: int
    max_seeds: int
    column: str
    control: str | None = None


@dataclasses.dataclass(frozen=True)
class Part:
    """One mechanism (index) on one data set (index) at budgets ``eps``, for ``seeds``;
    ``controls``: replicates that measure only the free columns and the control of a
    sweep with ``precision_control`` (their other W1 columns stay empty)."""

    data: int
    mechanism: int
    eps: tuple
    seeds: tuple
    controls: bool = False

    @property
    def replicates(self) -> int:
        return len(self.eps) * len(self.seeds)


@dataclasses.dataclass(frozen=True, eq=False)
class SweepPlan:
    """``simulate``'s arguments, checked (see ``plan_sweep``)."""

    mechanisms: tuple  # (label, config) pairs
    data: tuple  # grid.DataSet
    eps: tuple
    seeds: tuple  # a fixed sweep's seeds; a precision sweep's first round
    methods: tuple  # configured W1Method objects, the free ones last
    columns: tuple  # the requested methods' W1 columns
    metric: str
    key: object
    data_key: int
    memory_bytes: int | None
    devices: tuple
    warmup: bool
    precision: Precision | None
    fingerprints: tuple  # per data set
    out: Path | None

    @property
    def key_label(self) -> str:
        return grid.key_label(self.key)

    @property
    def spec(self) -> dict:
        """What a result store records of the sweep (``store.ResultStore``)."""
        return {
            "key": self.key_label, "data_key": self.data_key, "metric": self.metric,
            "w1_columns": list(self.columns),
            "groups": {f"{label} | {ds.label}": {"kind": m.name, "config": repr(m)}
                       for label, m in self.mechanisms for ds in self.data},
            "data": {f"{ds.label} | n={ds.n}": fp
                     for ds, fp in zip(self.data, self.fingerprints)},
        }

    def cells(self) -> list[tuple[int, int, float]]:
        """(mechanism, data set, ε) of every cell, in the table's order."""
        return [(j, i, e) for j in range(len(self.mechanisms)) for i in range(len(self.data))
                for e in self.eps]

    def replicate(self, j: int, i: int, e: float, seed: int) -> tuple:
        """The key columns of a replicate (``store.KEY_COLUMNS``)."""
        return (self.mechanisms[j][0], self.data[i].label, self.data[i].n, float(e), int(seed))

    @property
    def control_methods(self) -> tuple:
        """The methods a control-only replicate runs: the free ones and the control's."""
        control = self.precision.control
        return tuple(m for m in self.methods if m.name in FREE_METHODS or control in m.columns)

    def first_counts(self) -> dict:
        """Every cell's seed count in the first round: a fixed sweep's seeds, a precision
        sweep's first round, or with a control ``(n, K)``: ``n`` seeds measured in full
        and ``K`` control-only seeds (none yet)."""
        target = self.precision
        count = len(self.seeds) if target is None else target.first
        return {cell: (count, 0) if target and target.control else count
                for cell in self.cells()}

    def seed_ranges(self, count, have=None) -> list[tuple[range, bool]]:
        """A cell's seeds at ``count`` beyond those at ``have``, as ``(seeds, controls)``
        pairs: ``range(n)`` measured in full and, with a control (``count = (n, K)``),
        ``K`` control-only seeds from ``max_seeds`` on (never a seed measured in full)."""
        if not isinstance(count, tuple):
            return [(range(have or 0, count), False)]
        (n, K), (n0, K0) = count, have or (0, 0)
        start = self.precision.max_seeds
        return [(range(n0, n), False), (range(start + K0, start + K), True)]

    def requested(self, counts=None) -> set:
        """The replicates asked for: every cell's seeds at ``counts[cell]`` (default: the
        plan's seeds)."""
        if counts is None:
            return {self.replicate(j, i, e, s) for j, i, e in self.cells() for s in self.seeds}
        return {self.replicate(j, i, e, s) for (j, i, e), count in counts.items()
                for seeds, _ in self.seed_ranges(count) for s in seeds}

    def parts(self, finished: set, ranges=None) -> list[Part]:
        """The parts that compute what ``finished`` lacks, data set by data set.

        ``ranges[cell]`` lists the ``(seeds, controls)`` a cell needs (default: the plan's
        seeds for every cell).  Cells of one mechanism and data set that need the same
        seeds run as one part; a seed is run again for every budget of its part if one
        lacks it.
        """
        out = []
        for i in range(len(self.data)):
            for j in range(len(self.mechanisms)):
                groups: dict[tuple, list] = {}
                for e in self.eps:
                    for seeds, controls in (ranges[j, i, e] if ranges is not None
                                            else [(self.seeds, False)]):
                        if len(seeds):
                            groups.setdefault((tuple(seeds), controls), []).append(e)
                for (seeds, controls), eps in groups.items():
                    left = tuple(s for s in seeds if any(
                        self.replicate(j, i, e, s) not in finished for e in eps))
                    if left:
                        out.append(Part(i, j, tuple(eps), left, controls))
        return out


def _check_precision(precision, seeds, max_seeds, column, control, columns) -> Precision | None:
    """The ``Precision`` of a sweep to a stated precision, or ``None``; an option that
    needs ``precision`` is refused without it, naming both."""
    if precision is None:
        for name, value in (("max_seeds", max_seeds), ("precision_column", column),
                            ("precision_control", control)):
            if value is not None:
                raise ValueError(f"{name} needs precision= (a sweep to a stated precision); "
                                 "a fixed sweep's count is seeds=")
        return None
    precision = check_positive_number(precision, "precision")
    if precision >= 1:
        raise ValueError(f"precision is a relative half-width, below 1: e.g. 0.02 for ±2 %; "
                         f"got {precision:g}")
    if isinstance(seeds, bool) or not isinstance(seeds, (int, type(None))):
        raise ValueError(f"seeds: with precision, seeds is the first round's count (an int); "
                         f"got {seeds!r}")
    first = FIRST_ROUND if seeds is None else check_positive_int(seeds, "seeds", 2)
    if max_seeds is None:
        raise ValueError("max_seeds: precision needs the most seeds a cell may get (e.g. "
                         "max_seeds=1024)")
    max_seeds = check_positive_int(max_seeds, "max_seeds", minimum=first)
    column = "w1_exact_upper" if column is None else check_str(column, "precision_column")
    for name, value in (("precision_column", column), ("precision_control", control)):
        if value is not None and value not in columns:
            raise ValueError(f"{name}: {value!r} is not a column of the sweep's methods "
                             f"({', '.join(columns)})")
    if control is not None and control == column:
        raise ValueError(f"precision_control: {control!r} is the precision_column itself; "
                         "a control is another, cheaper column")
    if control is not None and first < 4:
        raise ValueError(f"seeds: with precision_control the first round needs at least 4 "
                         f"seeds (the control's slope and the interval); got {first}")
    return Precision(precision, first, max_seeds, column, control)


def _methods(methods) -> tuple[tuple, tuple]:
    """The requested methods with the free ones added, and the requested columns."""
    requested = check_methods(methods)
    columns = tuple(c for m in requested for c in m.columns)
    names = {m.name for m in requested}
    free = [name for name in FREE_METHODS if name not in names]
    return tuple(requested) + (check_methods(free) if free else ()), columns


def plan_sweep(mechanisms, data, *, eps, seeds, methods, key, n, out, memory_bytes, metric,
               data_key, devices, warmup, precision, max_seeds, precision_column,
               precision_control) -> SweepPlan:
    """Check ``simulate``'s arguments (see its docstring) and freeze them in a plan.

    Raises:
      ValueError: naming the argument, before anything is computed or written.
    """
    mechs = grid.mechanisms(mechanisms)
    eps = check_epsilon(eps).ravel()
    if len(set(eps.tolist())) != len(eps):
        raise ValueError(f"eps has duplicate values: {eps.tolist()}")
    metric = check_metric(metric)
    all_methods, columns = _methods(methods)
    every = tuple(c for m in all_methods for c in m.columns)
    target = _check_precision(precision, seeds, max_seeds, precision_column,
                              precision_control, every)
    if target is None:
        seeds = DEFAULT_SEEDS if seeds is None else seeds
        most = seed_count(seeds)
    else:
        most = target.max_seeds * (CONTROLS if target.control else 1)
    check_bool(warmup, "warmup")
    if memory_bytes is not None:
        memory_bytes = check_positive_int(memory_bytes, "memory_bytes")
    data_key = check_positive_int(data_key, "data_key", minimum=0)
    devs = grid.devices(devices)
    grid.key_label(key)  # a bad key is refused here
    path = None if out is None else result_store.check_out_path(out)
    sets = grid.data_sets(data, n, data_key)
    total = len(mechs) * len(sets) * len(eps) * most
    if total > result_store.MAX_ROWS:
        what = f"{len(mechs)} mechanism(s) × {len(sets)} data set(s) × {len(eps)} eps × {most}"
        if target is None:
            raise ValueError(
                f"seeds: the sweep asks for {total} replicates ({what} seeds); one sweep "
                f"holds at most {result_store.MAX_ROWS} rows: run it in parts over disjoint "
                "seeds (seeds=range(a, b); jaxsynth simulate --first-seed), one file per part")
        raise ValueError(
            f"max_seeds: the sweep may ask for {total} replicates ({what} seeds at most); one "
            f"sweep holds at most {result_store.MAX_ROWS} rows: lower max_seeds, or run it in "
            "parts over disjoint eps, data sets or mechanisms, one file per part")
    seed_list = tuple(range(target.first)) if target else tuple(seed_indices(seeds).tolist())
    return SweepPlan(tuple(mechs), tuple(sets), tuple(map(float, eps)), seed_list, all_methods,
                     columns, metric, key, data_key, memory_bytes, tuple(devs), warmup, target,
                     _fingerprints(sets), path)


def _fingerprints(sets) -> tuple:
    """The fingerprint of every data set's points; the points are held for the sweep's
    preparation while they fit in its share of memory (``prepare.PreparedSets``)."""
    budget, used, out = prepare.memory_budget(), 0, []
    for ds in sets:
        try:
            X = ds.points()
        except ValueError as exc:
            raise ValueError(f"data set {ds.label} (n = {ds.n}): {exc}") from None
        out.append(grid.fingerprint(X))
        if used + prepare.HELD_COPIES * X.nbytes <= budget:
            ds.held["points"] = X
            used += prepare.HELD_COPIES * X.nbytes
    return tuple(out)
