"""The sweep's driver: rounds of ``execute`` into one sink, and the dry run.

A fixed sweep is one round: every cell's seeds.  A sweep to a stated precision runs
rounds: each cell starts with the first round's seeds and, after each round, gets the
count its interval asks for (``summary.next_target``, decided from the cell's first seeds
alone, where the table is, and given to every process by ``sink.decide``), until every
cell has what it needs.  Each round: the work left (``plan.parts``), this process's share
(``sink.share``), every data set prepared and every mechanism planned (``PreparedSets``:
bad input is refused before any row is written), a calibration of what has no timing yet
(once per mechanism, data set and budget for the whole sweep: ``cost.calibrate``), then
``execute``.  The estimate is shown once, before the first round's work.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np
import pandas as pd

from jaxsynth.experiments import cost
from jaxsynth.experiments.execute import Tally, execute
from jaxsynth.experiments.prepare import PreparedSets
from jaxsynth.experiments.store import KEY_COLUMNS, control_only, keys_of
from jaxsynth.experiments.summary import next_control_target, next_target, summarize

__all__ = ["Outcome", "dry_run", "run"]

log = logging.getLogger("jaxsynth")


def _ranges(plan, have: dict, counts: dict) -> dict | None:
    """Each cell's seeds this round (``None``: a fixed sweep's seeds for every cell)."""
    if plan.precision is None:
        return None
    return {cell: plan.seed_ranges(counts[cell], have[cell]) for cell in counts}


def _prepare(plan, parts, sets) -> None:
    """Every data set of ``parts`` prepared and its mechanisms planned (the checks)."""
    for i in dict.fromkeys(part.data for part in parts):
        sets.get(i, {plan.mechanisms[p.mechanism][0] for p in parts if p.data == i})


def _after(parts, kept) -> list:
    """The parts less the seeds the calibration computed (a part may be left empty)."""
    return [dataclasses.replace(p, seeds=p.seeds[kept[p].seeds:]) if p in kept else p
            for p in parts]


def _decide(plan, table: pd.DataFrame, have: dict) -> list:
    """Every cell's next count (in ``plan.cells()`` order, as a message carries it), from
    the cell's seeds at ``have[cell]`` alone."""
    target = plan.precision
    groups = dict(iter(table.groupby(list(KEY_COLUMNS[:4]), sort=False)))
    out = []
    for (j, i, e), count in have.items():
        g = groups[plan.replicate(j, i, e, 0)[:4]].sort_values("seed")
        if target.control is None:
            drawn = g[g["seed"] < count][target.column].to_numpy(np.float64)
            out.append(next_target(drawn, target.target, target.first, target.max_seeds))
        else:
            out.append(_decide_with_control(target, g, *count))
    return out


def _decide_with_control(target, g: pd.DataFrame, n: int, K: int) -> list:
    """A cell's next ``[n, K]`` with a control (``summary.next_control_target``): the
    costs are the cell's recorded seconds per replicate, so a resumed run decides as the
    run that computed the rows did."""
    only, seed = control_only(g), g["seed"].to_numpy()
    full = g[~only & (seed < n)]
    extra = g[only & (seed >= target.max_seeds) & (seed < target.max_seeds + K)]
    paired = full[target.control].to_numpy(np.float64)
    spent = full["release_seconds"] + full["measure_seconds"]
    cheap = (extra["release_seconds"] + extra["measure_seconds"]) if len(extra) \
        else full["release_seconds"]
    grown, controls = next_control_target(
        full[target.column].to_numpy(np.float64), paired,
        np.concatenate([paired, extra[target.control].to_numpy(np.float64)]),
        (float(spent.mean()), float(cheap.mean())), target.target, target.first,
        target.max_seeds)
    return [grown, max(K, controls - grown)]


@dataclasses.dataclass
class Outcome:
    """What the rounds did: the final seed counts (``None``: a fixed sweep), the work's
    tally, the first round's estimate, and the seconds of calibration and of work."""

    counts: dict | None
    tally: Tally
    estimate: pd.DataFrame
    calibration_seconds: float
    work_seconds: float


def _rounds(plan, sink, progress, sets, estimate) -> Outcome:
    """Run every round (see the module docstring)."""
    counts = plan.first_counts()
    have = {cell: (0, 0) if isinstance(count, tuple) else 0 for cell, count in counts.items()}
    tally, spent, number = Tally(), 0.0, 0
    started = time.perf_counter()
    while any(counts[cell] > have[cell] for cell in counts):
        number += 1
        every = plan.parts(sink.finished, _ranges(plan, have, counts))
        parts = sink.share(every)
        _prepare(plan, parts, sets)
        sink.ready()
        begin = time.perf_counter()
        kept = cost.calibrate(plan, parts, sets, estimate)
        spent += time.perf_counter() - begin
        if number == 1:
            first = estimate.table(plan, _after(parts, kept),
                                   plan.precision.max_seeds if plan.precision else None)
            if text := cost.describe(first):
                progress.note(text)
        there = len(plan.requested(counts if plan.precision else None) & sink.finished)
        progress.plan(there + sum(part.replicates for part in every), there,
                      number if plan.precision else None)
        execute(plan, parts, sink, progress, sets, kept, tally)
        sink.end_round()
        have = counts
        if plan.precision is not None:
            decided = sink.decide(lambda: _decide(plan, sink.table(), have))
            counts = {cell: tuple(c) if isinstance(c, list) else c
                      for cell, c in zip(plan.cells(), decided)}
    return Outcome(counts if plan.precision else None, tally, first, spent,
                   time.perf_counter() - started - spent)


def run(plan, sink, progress, calibrations=None) -> pd.DataFrame:
    """Run the sweep into ``sink`` (opened here); the table of the requested replicates.

    ``calibrations``: a ``cost.CalibrationFile`` to reuse timings from and keep them in.
    """
    sets = PreparedSets(plan)
    estimate = calibrations.load(plan) if calibrations is not None else cost.Estimate()
    sink.open(plan)
    try:
        done = _rounds(plan, sink, progress, sets, estimate)
    finally:
        progress.close()
    if calibrations is not None:
        calibrations.save(plan, estimate)
    table = sink.finish()
    wanted = plan.requested(done.counts)
    result = table[[k in wanted for k in keys_of(table)]].reset_index(drop=True)
    result.attrs.update(
        new_rows=sink.new_rows, computed=done.tally.computed,
        estimate=done.estimate.to_dict("records"),
        calibration_seconds=done.calibration_seconds, work_seconds=done.work_seconds,
        compile_seconds={f"{label} | {data} | n={n}": seconds
                         for (label, data, n), seconds in done.tally.compile.items()})
    if sink.file_rows is not None:
        result.attrs["file_rows"] = sink.file_rows
    if plan.precision is not None:
        _report(plan, result)
    return result


def _report(plan, table: pd.DataFrame) -> None:
    """A sweep to a precision: its attributes, and the cells that stopped short."""
    target = plan.precision
    table.attrs.update(precision=target.target, precision_column=target.column,
                       precision_control=target.control, short=[])
    if not len(table):
        return  # a process other than 0 of a cluster may hold no rows
    cells = summarize(table, target.column, precision=target.target, control=target.control)
    short = cells[~cells["target_met"]]
    table.attrs["short"] = [tuple(r) for r in short[["mechanism", "data", "n", "eps"]]
                            .itertuples(index=False)]
    width = "rel_half_width" if target.control is None else "cv_rel_half_width"
    if len(short):
        log.warning("precision: %d cell(s) stopped at max_seeds = %d short of ±%g: %s",
                    len(short), target.max_seeds, target.target, "; ".join(
                        f"{m} on {d}, n={n}, eps={e:g} (±{w:.3g})" for m, d, n, e, w in
                        short[["mechanism", "data", "n", "eps", width]]
                        .itertuples(index=False)))


def dry_run(plan, sink, calibrations=None) -> pd.DataFrame:
    """The cost estimate of the first round's work, computing one calibration per
    mechanism, data set and budget that has no timing yet, and keeping nothing."""
    sets = PreparedSets(plan)
    estimate = calibrations.load(plan) if calibrations is not None else cost.Estimate()
    sink.open(plan)
    counts = plan.first_counts()
    parts = plan.parts(sink.finished, _ranges(plan, dict.fromkeys(counts), counts))
    _prepare(plan, parts, sets)
    cost.calibrate(plan, parts, sets, estimate)
    return estimate.table(plan, parts, plan.precision.max_seeds if plan.precision else None)
