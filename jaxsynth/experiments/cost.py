"""What a sweep will cost, estimated before its work from one calibration.

``calibrate`` runs, once per (mechanism, data set, size) and budget, the first seeds of
its first part (at most ``execute.MEASURE_BATCH``: one chunk's release and one batch of
measurements per ε), with JAX's compilation timed apart (``clock.Clock``).  Those rows are
real replicates, identical to what the work would compute: the sweep keeps them.  From
each run comes a ``Timing`` per budget; ``Estimate.table`` turns the timings into the
seconds of each cell of any later work (its share of the chunks its replicates fill, plus
one measurement per replicate), so a sweep to a precision calibrates once for all its
rounds.  ``CalibrationFile`` keeps the timings beside a result file, so a resumed or
tightened sweep on the same machine and package version calibrates nothing.

It is an estimate: later chunks may run at another capacity (``engine``), so the benchmark
``bench_cost`` compares it with the sweep's own time.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np
import pandas as pd

from jaxsynth.compilation import cpu_model
from jaxsynth.experiments import execute
from jaxsynth.experiments.progress import duration
from jaxsynth.experiments.store import write_atomic

__all__ = ["CalibrationFile", "Estimate", "Timing", "calibrate", "describe"]

FORMAT = "jaxsynth-calibration/1"
"""The format of a calibration file."""


class Timing(NamedTuple):
    """The calibration of one budget of a (mechanism, data set, size).

    Attributes:
      compile: seconds of compilation (this budget's share of its plan's).
      release: seconds of one warm chunk's release.
      size: the chunk's replicates.
      group: how many budgets the plan releases together (they fill its chunks).
      measure: seconds of one replicate's W1 measurement.
    """

    compile: float
    release: float
    size: int
    group: int
    measure: float

    def seconds(self, seeds: int) -> tuple[float, float]:
        """(release, measure) seconds per replicate when ``seeds`` seeds run."""
        filled = self.group * max(seeds, 1)
        return math.ceil(filled / self.size) * self.release / filled, self.measure


def _timings(chunk, sized, seeds: int) -> dict:
    """A ``Timing`` per budget of one plan's calibration run (an ``execute.Chunk``)."""
    E = len(sized.plan.eps)
    chunks = math.ceil(E * seeds / sized.chunk)
    release = float(chunk.seconds["release_seconds"]) * E * seeds / chunks
    measure = np.nanmean(np.asarray(chunk.seconds["measure_seconds"], np.float64), axis=1)
    return {float(e): Timing(chunk.compile / E, release, sized.chunk, E, float(m))
            for e, m in zip(sized.plan.eps, measure)}


class Estimate:
    """Timings by (mechanism label, data label, n, ε), and the estimate they give."""

    def __init__(self, timings: dict | None = None):
        self.timings = dict(timings or {})

    def missing(self, plan, part) -> bool:
        """Whether some budget of ``part`` has no timing yet."""
        label, ds = plan.mechanisms[part.mechanism][0], plan.data[part.data]
        return any((label, ds.label, ds.n, e) not in self.timings for e in part.eps)

    def table(self, plan, parts, most: int | None = None) -> pd.DataFrame:
        """The estimated seconds of every cell of ``parts``: ``mechanism``, ``data``,
        ``n``, ``eps``, ``replicates``, ``release_seconds`` and ``measure_seconds`` (per
        replicate), ``seconds`` (the cell's) and, with ``most`` (a sweep to a precision),
        ``seconds_at_most`` (``most`` seeds per cell).  ``attrs["compile_seconds"]``: the
        calibration's compilation."""
        rows, compiled = [], set()
        for part in parts:
            label, ds = plan.mechanisms[part.mechanism][0], plan.data[part.data]
            for e in part.eps:
                timing = self.timings[label, ds.label, ds.n, e]
                compiled.add((label, ds.label, ds.n, e))
                release, measure = timing.seconds(len(part.seeds))
                row = {"mechanism": label, "data": ds.label, "n": ds.n, "eps": e,
                       "replicates": len(part.seeds), "release_seconds": release,
                       "measure_seconds": measure,
                       "seconds": len(part.seeds) * (release + measure)}
                if most:
                    row["seconds_at_most"] = most * sum(timing.seconds(most))
                rows.append(row)
        columns = ["mechanism", "data", "n", "eps", "replicates", "release_seconds",
                   "measure_seconds", "seconds"] + (["seconds_at_most"] if most else [])
        table = pd.DataFrame(rows, columns=columns)
        table.attrs["compile_seconds"] = sum(self.timings[k].compile for k in compiled)
        table.attrs["most"] = most
        return table


def calibrate(plan, parts, sets, estimate: Estimate) -> dict:
    """Time every (mechanism, data set, budget) of ``parts`` that ``estimate`` lacks, on
    its part's first seeds; add the timings to ``estimate``.

    Returns the rows computed, by part (``execute.Kept``), for the work to keep.
    """
    kept = {}
    for part in parts:
        if not estimate.missing(plan, part):
            continue
        label, ds = plan.mechanisms[part.mechanism][0], plan.data[part.data]
        first = part.seeds[:execute.MEASURE_BATCH]
        rows, chunks = execute.release_rows(plan, sets.get(part.data), part, first)
        for chunk, sized in chunks:
            for e, timing in _timings(chunk, sized, len(first)).items():
                estimate.timings[label, ds.label, ds.n, e] = timing
        kept[part] = execute.Kept(len(first), rows, sum(c.compile for c, _ in chunks))
    return kept


def describe(table: pd.DataFrame) -> str:
    """The estimate as text: per cell, in all, and the compilation apart; with ``most``
    (a sweep to a precision), the cost of ``most`` seeds per cell.  "" when there is
    nothing to estimate (never a table of zero replicates)."""
    left, most = int(table["replicates"].sum()) if len(table) else 0, table.attrs.get("most")
    if not left and not (most and len(table)):
        return ""
    text = ["ESTIMATE (from a short calibration; not a measurement) of the work left"]
    if left:
        text[0] += ", seconds per replicate and per cell:"
        text += [table.to_string(index=False, float_format=lambda v: f"{v:.3g}"),
                 f"estimated total: {duration(table['seconds'].sum())} for {left} replicates"]
    if most:
        text[-1] += (f"{' (the first round);' if left else ':'} at most "
                     f"{duration(table['seconds_at_most'].sum())} with {most} seeds per cell")
    text.append(f"compilation (measured, apart): {duration(table.attrs['compile_seconds'])}")
    return "\n".join(text)


# ------------------------------------------------------------------ calibrations on disk


def _machine() -> dict:
    """What a calibration is valid for: the package, JAX, the devices and the CPU."""
    import jaxsynth  # the facade, for its version

    return {"jaxsynth": jaxsynth.__version__, "jax": jax.__version__, "cpu": cpu_model(),
            "cores": os.cpu_count(), "devices": [d.device_kind for d in jax.local_devices()]}


def _context(plan, label: str, mech, ds, fingerprint: str, e: float) -> str:
    """The key of one timing: every setting its replicates' cost depends on."""
    return hashlib.sha256(json.dumps([
        label, repr(mech), ds.label, ds.n, fingerprint, e, plan.eps, plan.metric,
        repr(plan.methods), plan.memory_bytes,
        [str(d) for d in plan.devices]], default=str).encode()).hexdigest()


class CalibrationFile:
    """Timings kept beside a result file ``FILE.csv`` in ``FILE.csv.jaxsynth-timing.json``.

    Read only when it was written by this package version on this machine (``_machine``);
    written atomically, and never over a file of that name that is not one (a foreign
    file is left untouched, and the sweep calibrates as if there were none).
    """

    def __init__(self, out):
        self.path = Path(out).with_name(Path(out).name + ".jaxsynth-timing.json")
        self.machine = _machine()

    def _read(self) -> dict | None:
        """The file's content if it is a calibration file (``None`` if not; ``{}`` if
        there is no file)."""
        if not self.path.exists():
            return {}
        try:
            meta = json.loads(self.path.read_bytes())
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            return None
        return meta

    def load(self, plan) -> Estimate:
        """The timings of ``plan``'s cells measured here before (those that match)."""
        meta = self._read()
        if not meta or meta.get("machine") != self.machine:
            return Estimate()
        entries, timings = meta.get("entries", {}), {}
        for label, mech in plan.mechanisms:
            for ds, fingerprint in zip(plan.data, plan.fingerprints):
                for e in plan.eps:
                    entry = entries.get(_context(plan, label, mech, ds, fingerprint, e))
                    if isinstance(entry, list) and len(entry) == len(Timing._fields):
                        timings[label, ds.label, ds.n, e] = Timing(*entry)
        return Estimate(timings)

    def save(self, plan, estimate: Estimate) -> None:
        """Add ``estimate``'s timings of ``plan``'s cells to the file."""
        meta = self._read()
        if meta is None:
            return  # not ours: left untouched
        entries = meta.get("entries", {}) if meta.get("machine") == self.machine else {}
        for label, mech in plan.mechanisms:
            for ds, fingerprint in zip(plan.data, plan.fingerprints):
                for e in plan.eps:
                    timing = estimate.timings.get((label, ds.label, ds.n, e))
                    if timing is not None:
                        entries[_context(plan, label, mech, ds, fingerprint, e)] = list(timing)
        data = {"format": FORMAT, "machine": self.machine, "entries": entries}
        try:
            write_atomic(self.path, json.dumps(data, indent=1).encode())
        except (OSError, ValueError):
            pass  # a calibration that cannot be kept is measured again next time
