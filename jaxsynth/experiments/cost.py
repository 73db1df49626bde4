"""What a sweep will cost, estimated before it starts, from a short calibration.

``calibrate`` releases the first write's seeds of a (mechanism, data set) and measures
one batch of each ε, twice: the first run compiles (its extra time over the second is
the compilation), the second times a warm chunk's release and each ε's measurement; that
warm run is returned too, so that a sweep whose first write it measured in full keeps it
as that write.
``estimate`` turns those timings into the seconds of each cell (mechanism, data, n, ε)
of the work left: its share of the chunks its replicates fill, plus one measurement per
replicate.  It is an estimate: the calibration measures one batch per ε, and later
chunks may run at another capacity (``engine``), so the benchmark ``bench_cost``
compares it with the sweep's own time.
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np
import pandas as pd

__all__ = ["Timing", "calibrate", "describe", "estimate"]


class Timing(NamedTuple):
    """A calibration of one plan: seconds of compilation, of a warm chunk's release, the
    chunk's replicates, the plan's budgets and each budget's measurement per replicate."""

    compile: float
    release: float
    size: int
    eps: tuple
    measure: tuple


def calibrate(run_chunk, seeds, size: int, eps) -> tuple[Timing, tuple]:
    """Time ``run_chunk(seeds)`` cold, then warm (``sweep._chunk`` releasing the sweep's
    first write ``seeds`` in chunks of ``size``, its shapes, so its compilations, and
    measuring one batch of each ε).  Returns the ``Timing`` and the warm run's result."""
    start = time.perf_counter()
    run_chunk(seeds)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    warm = run_chunk(seeds)
    warm_seconds = time.perf_counter() - start
    seconds = warm[2]
    measured = np.asarray(seconds["measure_seconds"], np.float64)
    measure = np.nanmean(measured, axis=1)
    # the release of len(eps) × seeds replicates in ceil(len(eps) · seeds / size) chunks
    chunks = math.ceil(len(measure) * len(seeds) / size)
    release = float(seconds["release_seconds"]) * len(measure) * len(seeds) / chunks
    return Timing(max(0.0, cold - warm_seconds), release, int(size), tuple(map(float, eps)),
                  tuple(measure.tolist())), warm


def estimate(work, timings: dict, eps, most: int | None = None) -> pd.DataFrame:
    """The estimated seconds of each cell of ``work`` (``sweep._run``'s list).

    Returns one row per cell: ``mechanism``, ``data``, ``n``, ``eps``, ``replicates``
    (left to compute), ``release_seconds`` and ``measure_seconds`` (per replicate),
    ``seconds`` (the cell's total) and, with ``most`` (a sweep to a precision: the
    first round's replicates are ``replicates``), ``seconds_at_most`` (``most`` seeds).
    ``attrs["compile_seconds"]``: the calibration's compilation, all plans together.
    """
    rows, compiled = [], 0.0
    for ds, todo in work:
        for label, _, left in todo:
            for part in timings[label, ds.label, ds.n]:
                compiled += part.compile
                for e, measure in zip(part.eps, part.measure):
                    row = {"mechanism": label, "data": ds.label, "n": ds.n, "eps": e,
                           "replicates": len(left)}
                    for name, seeds in [("seconds", len(left))] + (
                            [("seconds_at_most", most)] if most else []):
                        filled = len(part.eps) * max(seeds, 1)
                        release = math.ceil(filled / part.size) * part.release / filled
                        row[name] = seeds * (release + measure)
                        if name == "seconds":
                            row.update(release_seconds=release, measure_seconds=measure)
                    rows.append(row)
    columns = ["mechanism", "data", "n", "eps", "replicates", "release_seconds",
               "measure_seconds", "seconds"] + (["seconds_at_most"] if most else [])
    table = pd.DataFrame(rows, columns=columns)
    table.attrs["compile_seconds"] = compiled
    table.attrs["most"] = most
    return table


def describe(table: pd.DataFrame) -> str:
    """The estimate as text: per cell, in all, and the compilation apart."""
    shown = table
    text = [("ESTIMATE (from a short calibration; not a measurement) of the work left, "
             "seconds per replicate and per cell:"),
            shown.to_string(index=False, float_format=lambda v: f"{v:.3g}"),
            f"estimated total: {_duration(table['seconds'].sum())} for "
            f"{int(table['replicates'].sum())} replicates"]
    if table.attrs.get("most"):
        text[-1] += (f" (the first round; at most {_duration(table['seconds_at_most'].sum())}"
                     f" with {table.attrs['most']} seeds per cell)")
    text.append(f"compilation (measured, apart): {_duration(table.attrs['compile_seconds'])}")
    return "\n".join(text)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
