"""Monte Carlo sweeps: ``simulate`` = checks + plan + execute.

``simulate`` checks its arguments into a frozen ``plan.SweepPlan``, chooses where the rows
go (a ``sinks`` sink: a table in memory, the result store, a cluster's writer) and how
progress shows (a ``progress`` meter), and hands them to the driver (``rounds``), which
runs ``execute`` once per round.  How the work is organised and why:
``docs/design/sweep.md``; the manual: the guide's pages on sweeps and precision.
"""

from __future__ import annotations

import contextlib

import pandas as pd

from jaxsynth.core.validate import check_bool, refuse_renamed
from jaxsynth.core.partition import GROUND_METRICS
from jaxsynth.experiments import cluster, rounds
from jaxsynth.experiments.cost import CalibrationFile
from jaxsynth.experiments.plan import plan_sweep
from jaxsynth.experiments.progress import NoProgress, Progress, TextProgress
from jaxsynth.experiments.sinks import ClusterSink, StoreSink, TableSink
from jaxsynth.experiments.store import readable
from jaxsynth.wasserstein.registry import METHODS

__all__ = ["DEFAULT_METHODS", "METHODS", "simulate"]

DEFAULT_METHODS = ("exact",)
"""The default: the ground metric's W1 between the whole data set and each release,
certified to ``w1_exact_upper − w1_exact_lower ≤ rtol · w1_exact_upper`` (rtol 1%)."""
RENAMED = {
    "metrics": "metrics= is now methods= (the W1 methods); metric= is the ground metric",
    "ground": f"ground= is now metric= (the ground metric, one of {GROUND_METRICS})",
}
"""Arguments of ``simulate`` under their former names: refused with the new name."""


def simulate(mechanisms, data, eps=(1.0,), seeds=None, methods=DEFAULT_METHODS, key=0,
             n=None, out=None, memory_bytes: int | None = None, progress=True,
             metric: str = "linf", data_key: int = 0, devices=None, warmup: bool = False,
             precision: float | None = None, max_seeds: int | None = None,
             precision_column: str | None = None, precision_control: str | None = None,
             dry_run: bool = False, **renamed) -> pd.DataFrame:
    """Run a Monte Carlo sweep and return one row per replicate.

    Every mechanism runs on every data set, size, ε and seed; every release is measured
    by every W1 method of ``methods`` in the ground metric ``metric``, and by the free
    tree W1 and its upper end (``w1_tree``, ``w1_tree_upper``).  Replicate ``s`` of
    mechanism ``M`` on data ``X`` at budget ``ε`` is ``js.release(fold_in(key, s), M, X,
    ε)`` measured as ``js.w1`` measures it, whatever the chunking, the devices, the
    processes, the round or an interruption.  Bad input is refused with a ``ValueError``
    naming the argument before any replicate is released.  The manual (every argument,
    the table's columns and attributes): the guide's pages "Sweeps and the result store"
    and "Sweeps to a stated precision".

    Args:
      mechanisms: a config, a name, a list of them, or a ``{label: config}`` dict.
      data: an array [n, d] in [0,1]^d, a ``DataTree``, a data set name, a file path, a
        pair ``(name, options)``, or a list or ``{label: ...}`` dict of these.
      eps: a budget or a list of budgets.
      seeds: a count, a ``range`` or a list of seed indices (default 100); with
        ``precision``, the first round's count (default 16).
      methods: W1 methods: names, ``(name, options)`` pairs or method objects.
      key: the sweep's key (an int or a JAX key).
      n: sizes: of the named data sets (default 10000), or nested subsamples of given
        points (``datasets.subsample`` with ``data_key``).
      out: a ``.csv`` result store: rows appended as they finish; a rerun resumes it.
      memory_bytes: working memory of one chunk (default: the device's).
      progress: show one progress line on stderr (or a ``progress.Progress`` meter).
      metric: the ground metric, ``"linf"`` (default) or ``"l2"``.
      data_key: the key of the data generators and subsamples.
      devices: local devices to shard over: ``None`` (all), a count or a list.
      warmup: release each plan's first chunk once, untimed, before the timed work.
      precision: run seeds in rounds until every cell's 95 % interval of the mean of
        ``precision_column`` is within ``precision`` × the mean (0.02: ±2 %).
      max_seeds: the most seeds of a cell (required with ``precision``).
      precision_column: the column ``precision`` is about (default ``w1_exact_upper``).
      precision_control: a cheap column that predicts ``precision_column`` (e.g.
        ``w1_tree_upper``), used by the stopping rule as a control variate.
      dry_run: return only the cost estimate, computing one calibration.

    Returns:
      a ``pandas.DataFrame`` sorted by (mechanism, data, n, eps, seed), one row per
      replicate; its ``attrs`` tell what was computed now and what it cost.

    Examples:
      >>> import jaxsynth as js
      >>> df = js.simulate([js.PMM(depth=6), "privtree"], "spiral", n=[500, 1000],
      ...                  eps=[1.0, 2.0], seeds=4, progress=False)
      >>> len(df), list(df.columns[:4])
      (32, ['mechanism', 'kind', 'data', 'n'])
      >>> bool((df.w1_exact_lower <= df.w1_exact_upper).all())
      True

      To a stated precision, resumable in a file::

          df = js.simulate("privtree", "spiral", eps=[0.5, 1, 2], precision=0.02,
                           max_seeds=400, out="sweep.csv")
          js.summarize(df)            # mean, interval and seeds of every cell
    """
    team = cluster.Team.current()  # a failure here stops every process of a cluster
    with team.guard() if team is not None else contextlib.nullcontext():
        refuse_renamed("simulate", renamed, RENAMED)
        check_bool(dry_run, "dry_run")
        meter = _meter(progress, team)
        plan = plan_sweep(mechanisms, data, eps=eps, seeds=seeds, methods=methods, key=key,
                          n=n, out=out, memory_bytes=memory_bytes, metric=metric,
                          data_key=data_key, devices=devices, warmup=warmup,
                          precision=precision, max_seeds=max_seeds,
                          precision_column=precision_column,
                          precision_control=precision_control)
        calibrations = CalibrationFile(plan.out) if plan.out is not None else None
        if dry_run:  # the file is read, never written
            start = readable(plan.out) if plan.out is not None and plan.out.exists() else None
            return rounds.dry_run(plan, TableSink(start), calibrations)
        with _sink(plan, team, meter) as sink:
            writes = team is None or team.writes
            return rounds.run(plan, sink, meter, calibrations if writes else None)


def _meter(progress, team) -> Progress:
    """The progress meter: ``progress`` itself, a line on stderr, or nothing (also on
    every process of a cluster but 0)."""
    if isinstance(progress, Progress) and not isinstance(progress, bool):
        meter = progress
    else:
        meter = TextProgress() if check_bool(progress, "progress") else NoProgress()
    return meter if team is None or team.writes else NoProgress()


def _sink(plan, team, meter):
    """Where the rows go: the store (``out``) or a table, through the cluster if any."""
    writes = team is None or team.writes
    inner = (StoreSink(plan.out) if plan.out is not None else TableSink()) if writes else None
    return inner if team is None else ClusterSink(team, inner, meter)
