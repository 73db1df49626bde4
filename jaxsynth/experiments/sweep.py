"""Monte Carlo sweeps: mechanisms × data sets × n × ε × seeds × W1 methods.

Words: a W1 *method* is how W1 is measured (``methods=["exact", "bracket"]``, the
``w1_*`` columns); the *metric* is the ground metric ``"linf"`` or ``"l2"``
(``metric=``, the ``metric`` column), as in ``js.w1(X, out, method=..., metric=...)``.

``simulate`` returns one row per replicate.  Replicate ``s`` of mechanism ``M`` on data
``X`` at budget ``ε`` is ``js.release(jax.random.fold_in(key, s), M, X, ε)``, whatever
the chunking, the device count, the round or an interruption, so a sweep can be split,
resumed, sharded and run to a stated precision without changing a number.

This module holds ``simulate``, its loop and its rounds; the work grid is checked in
``jaxsynth.experiments.grid``, every replicate measured by
``jaxsynth.wasserstein.evaluate.Evaluation`` (as ``js.w1``), written as a row by
``jaxsynth.experiments.rows`` into a ``ResultStore`` (``jaxsynth.experiments.store``),
its cost estimated by ``jaxsynth.experiments.cost`` and its cells summarized by
``jaxsynth.experiments.summary``.  How the work is organised (once per data set, once per
mechanism, per chunk, devices, several processes): ``docs/guide/sweep-design.md``;
precision, intervals and the cost estimate: ``docs/guide/precision.md``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
import warnings

import jax
import numpy as np
import pandas as pd

from jaxsynth import engine
from jaxsynth.api import seed_count, seed_indices
from jaxsynth.core.keys import replicate_keys
from jaxsynth.core.partition import GROUND_METRICS
from jaxsynth.core.validate import (
    check_bool,
    check_epsilon,
    check_positive_int,
    check_positive_number,
    check_str,
    refuse_renamed,
)
from jaxsynth.experiments import cluster, cost, grid
from jaxsynth.experiments import store as result_store
from jaxsynth.experiments.rows import replicate_rows, row_fields
from jaxsynth.experiments.store import KEY_COLUMNS, ResultStore, check_out_path, read_table
from jaxsynth.experiments.summary import next_target, summarize
from jaxsynth.wasserstein.evaluate import Evaluation, check_methods, check_metric
from jaxsynth.wasserstein.method import BLOCK
from jaxsynth.wasserstein.registry import METHODS

__all__ = ["DEFAULT_METHODS", "METHODS", "simulate"]

# METHODS: the W1 methods of ``js.w1`` (``jaxsynth.wasserstein.registry``); ``exact`` gives
# the columns ``w1_exact_lower, w1_exact_upper``, ``bracket`` the columns ``w1_lower, w1_upper``
DEFAULT_METHODS = ("exact",)
"""The default: the ground metric's W1 between the whole data set and each release,
certified to ``w1_exact_upper − w1_exact_lower ≤ rtol · w1_exact_upper`` (rtol 1%).

The papers bound ℓ∞ (ℓ2) W1; ``bracket`` bounds the same quantity cheaply but loosely,
and the ultrametric tree W1 (``tree``) is another quantity, far below it in high
dimension (0 while the depth is below d)."""
RENAMED = {
    "metrics": "metrics= is now methods= (the W1 methods); metric= is the ground metric",
    "ground": f"ground= is now metric= (the ground metric, one of {GROUND_METRICS})",
}
"""Arguments of ``simulate`` under their former names: refused with the new name."""
CHUNK_REPLICATES = 256
"""Replicates released between two writes of the result store (at least one engine chunk)."""
DEFAULT_SEEDS = 100
"""Seeds of a fixed sweep when ``seeds`` is not given."""
FIRST_ROUND = 16
"""Seeds of every cell's first round under ``precision`` when ``seeds`` is not given: few
enough to be cheap, enough for a first estimate of the spread."""
MEASURE_BATCH = max(BLOCK, 2 * (os.cpu_count() or 1))
"""Replicates measured together (the exact W1 solves them in parallel threads, the
atom-based methods in blocks of ``jaxsynth.wasserstein.method.BLOCK``): the progress bar and
``measure_seconds`` advance batch by batch."""
PREFLIGHT_CACHE_BYTES = 512 * 2**20
"""Data sets loaded by the pre-flight checks are kept for the run up to this many bytes."""


def simulate(
    mechanisms,
    data,
    eps=(1.0,),
    seeds=None,
    methods=DEFAULT_METHODS,
    key=0,
    n=None,
    out=None,
    memory_bytes: int | None = None,
    progress: bool = True,
    metric: str = "linf",
    data_key: int = 0,
    devices=None,
    warmup: bool = False,
    precision: float | None = None,
    max_seeds: int | None = None,
    precision_column: str = "w1_exact_upper",
    dry_run: bool = False,
    **renamed,
) -> pd.DataFrame:
    """Run a Monte Carlo sweep and return one row per replicate.

    Sweeps mechanisms × data sets × n × ε × seeds; every replicate is measured by every
    W1 method (``methods``) in the ground metric ``metric``.
    Replicate ``s`` uses the key ``jax.random.fold_in(key, s)`` for every mechanism, data
    set and ε, so its row equals ``js.release(fold_in(key, s), M, X, ε)`` measured with
    ``js.w1``, independent of chunking, device count, the other seeds and ε values of the
    sweep, and interruptions (both measure through ``wasserstein.evaluate``).

    Every argument is checked, every data set loaded and every mechanism planned and
    sized for memory before the first replicate is released: bad input is refused with
    a ``ValueError`` naming it, before any row is written.

    Args:
      mechanisms: a config (``js.PMM(...)``), a name (``registry.MECHANISMS``), a list of
        them, or a dict ``{label: config}`` (labels tell configurations apart).
      data: an array [n, d] in [0,1]^d, a ``DataTree``, a data set name or file path
        (``datasets.load``), a pair ``(name, options)`` (e.g. ``("subspace", {"d": 5,
        "k": 2})``), or a list or ``{label: ...}`` dict of these.
      eps: a budget or list of E budgets.
      seeds: a count S (seeds ``0..S-1``; default ``DEFAULT_SEEDS``), a ``range`` or a
        list of seed indices; with ``precision``, the first round's count (default
        ``FIRST_ROUND``).
      methods: W1 methods (``METHODS``), each a name or ``(name, options)``; columns
        ``w1_<name>`` (``exact``: ``w1_exact_lower``, ``w1_exact_upper``; ``bracket``:
        ``w1_lower``, ``w1_upper``).  Default ``exact``: the ``metric`` W1 between the
        whole data set and each release, the quantity the papers bound, certified to
        ``rtol`` (options ``rtol``, ``clusters``).  ``bracket`` bounds it cheaply but
        loosely; ``tree`` is the ultrametric tree W1, a different quantity (far below the
        ℓ∞ W1 in high dimension).  ``tree`` and ``tree_upper`` (and ``w1_upper``) come
        from the release kernel at no cost; ``bracket`` options: ``n_directions``,
        ``seed``; ``sinkhorn`` options: those of ``w1_sinkhorn``.
      key: int or JAX key of the sweep.
      n: sizes for named data sets (default ``datasets.DEFAULT_N``); arrays and files
        keep their own size.
      out: a ``.csv`` path: a ``ResultStore`` (resumable and extendable; see
        ``jaxsynth.experiments.store``).  Rows are appended as each chunk finishes.
      memory_bytes: working memory of one chunk (default: ``engine.device_memory()``).
      progress: show a tqdm progress bar (on stderr) when the sweep runs longer than 2 s.
      metric: ground metric (``GROUND_METRICS``), ``"linf"`` (default, as in Zare Moayedi
        et al., arXiv 2609.33363, §7) or ``"l2"``.
      data_key: key of the data generators (the same for every n).
      devices: ``None`` (all local devices), a count or a list; chunks are sharded over them.
      warmup: release each (mechanism, data set)'s first chunk once more untimed, without
        measuring it (compilation is kept out of the timing columns in any case, by the
        calibration, whose warm run is the first write where it measured all of it).
      precision: run seeds in rounds, each cell (mechanism, data, n, ε) on its own,
        until the 95 % interval of its mean of ``precision_column`` has half-width at
        most ``precision`` × the mean (``summary.next_target``), or ``max_seeds``
        seeds; cells that stop short are named in a warning.  Replicate ``s`` is the
        same whatever round computes it, so with ``out`` an interrupted run resumes and
        a finished one is tightened by asking again with a smaller ``precision``.
      max_seeds: the most seeds of a cell (required with ``precision``).
      precision_column: the W1 column whose mean ``precision`` is about.
      dry_run: return only the cost estimate (``cost.estimate``), computing nothing else.
        Every sweep first releases the first seeds of each (mechanism, data set) and
        measures one batch of each ε, twice, outside the table: a calibration that
        compiles the kernels and times a warm chunk and each ε's measurement; from it
        an estimate of the time per cell and in all is printed (with ``progress``)
        before any work.

    Returns:
      a ``pandas.DataFrame`` sorted by (mechanism, data, n, eps, seed) with columns
      ``mechanism`` (label), ``kind`` (the mechanism's name), ``data``, ``n``, ``d``,
      ``intrinsic_dim``, ``eps``, ``seed``, ``depth``, ``m``, ``leaves``, ``visited``, the
      ``w1_*`` columns, ``release_seconds`` (the replicate's share of its chunk's
      release), ``measure_seconds`` (its W1 measurement: its ε's share of a batch of
      ``MEASURE_BATCH`` replicates), ``seconds`` (their sum; compilation is in neither,
      but in ``attrs["compile_seconds"]``), ``adjacency``, the budget parts
      (``epsilon``, ``eps_levels``, ...), scalar diagnostics (``selected``, ``cap_hits``,
      ...), and provenance: ``config``, ``key``, ``data_key``, ``metric`` (the ground
      metric).  Its
      ``attrs`` hold ``new_rows`` (replicates computed by this call), ``computed`` (those
      this process computed: all of them, or its share in a cluster) and, with ``out``,
      ``file_rows`` (the rows the file holds, which may include other sweeps' rows),
      ``estimate`` (the calibration's cost estimate, ``cost.estimate``, as records) and
      ``compile_seconds`` (by mechanism and data set, measured by the calibration),
      ``calibration_seconds`` and ``work_seconds`` (the wall time after it).
      In a cluster, processes other than 0 return the rows they computed (``new_rows``
      counts them) and no ``file_rows``.  With ``precision``, ``attrs`` also hold
      ``precision``, ``precision_column`` and ``short`` (the cells that stopped at
      ``max_seeds`` short of the target); ``summary.summarize`` gives the per-cell means.

    Raises:
      ValueError: bad arguments (the former names ``metrics=`` and ``ground=`` are
        refused, naming ``methods=`` and ``metric=``), a foreign, changed or
        earlier-format ``out`` file, another writer on it, or a sweep of more than
        ``store.MAX_ROWS`` rows (split it over disjoint seeds, one file per part; with
        ``precision``, cells × ``max_seeds``), a ``precision`` that is not positive,
        ``max_seeds`` without ``precision`` (or below ``seeds``), a ``precision_column``
        the methods do not measure; always before any replicate is released.  In a
        cluster also a sweep that differs from process 0's, and any other process's
        failure (``cluster.PeerFailure``, naming it).
    """
    team = cluster.Team.current()  # a failure here stops every process of a cluster
    with team.guard() if team is not None else contextlib.nullcontext():
        refuse_renamed("simulate", renamed, RENAMED)
        mechs = grid.mechanisms(mechanisms)
        eps = check_epsilon(eps).ravel()
        if len(set(eps.tolist())) != len(eps):
            raise ValueError(f"eps has duplicate values: {eps.tolist()}")
        if precision is not None:
            precision = check_positive_number(precision, "precision")
            if isinstance(seeds, bool) or not isinstance(seeds, (int, type(None))):
                raise ValueError(f"seeds: with precision, seeds is the first round's count "
                                 f"(an int); got {seeds!r}")
            seeds = FIRST_ROUND if seeds is None else check_positive_int(seeds, "seeds", 2)
            if max_seeds is None:
                raise ValueError("max_seeds: precision needs a most seeds per cell")
            max_seeds = check_positive_int(max_seeds, "max_seeds", minimum=seeds)
        elif max_seeds is not None:
            raise ValueError("max_seeds goes with precision (the seeds of a fixed sweep: seeds)")
        seeds = DEFAULT_SEEDS if seeds is None else seeds
        n_seeds = seed_count(seeds) if precision is None else max_seeds
        check_str(precision_column, "precision_column")
        metric = check_metric(metric)
        methods = check_methods(methods)
        check_bool(progress, "progress")
        check_bool(warmup, "warmup")
        check_bool(dry_run, "dry_run")
        if memory_bytes is not None:
            memory_bytes = check_positive_int(memory_bytes, "memory_bytes")
        data_key = check_positive_int(data_key, "data_key", minimum=0)
        w1_columns = [c for m in methods for c in m.columns]
        if precision is not None and precision_column not in w1_columns:
            raise ValueError(f"precision_column: {precision_column!r} is not a column of the "
                             f"sweep's methods ({', '.join(w1_columns)})")
        devs = grid.devices(devices)
        key_label = grid.key_label(key)
        if out is not None:
            check_out_path(out)  # a foreign file is refused before the data are read
        sets = grid.data_sets(data, n, data_key)
        total = len(mechs) * len(sets) * len(eps) * n_seeds
        if total > result_store.MAX_ROWS:
            raise ValueError(
                f"seeds: the sweep asks for {total} replicates ({len(mechs)} mechanism(s) × "
                f"{len(sets)} data set(s) × {len(eps)} eps × {n_seeds} seeds); one sweep holds at "
                f"most {result_store.MAX_ROWS} rows: run it in parts over disjoint seeds "
                "(seeds=range(a, b); jaxsynth simulate --first-seed), one file per part")
        seed_list = seed_indices(seeds).tolist()
        spec = {
            "key": key_label, "data_key": data_key, "metric": metric,
            "w1_columns": w1_columns,
            "groups": {f"{label} | {ds.label}": {"kind": m.name, "config": repr(m)}
                       for label, m in mechs for ds in sets},
            "data": {f"{ds.label} | n={ds.n}": fp for ds in sets
                     if (fp := grid.fingerprint(ds)) is not None},
        }
        run = functools.partial(_run, methods=methods, metric=metric, key=key,
                                key_label=key_label, data_key=data_key, spec=spec, out=out,
                                memory_bytes=memory_bytes, devs=devs, progress=progress,
                                warmup=warmup, dry_run=dry_run)
        if precision is None or dry_run:
            # a dry run to a precision: the first round, and at most max_seeds per cell
            seed_list = seed_list if precision is None else list(range(seeds))
            return run(team, mechs, sets, eps, seed_list, most=max_seeds)
        return _rounds(run, mechs, sets, eps, seeds, max_seeds, precision, precision_column)


def _rounds(run, mechs, sets, eps, first, max_seeds, precision, column) -> pd.DataFrame:
    """``simulate(..., precision=...)``: rounds of seeds, each cell to its own count.

    Each round runs, per (mechanism, data set, seeds to add), the cells that need those
    seeds (``run``: one ``_run`` through the store); the next counts are decided from the
    cells' first seeds alone (``summary.next_target``), on process 0 in a cluster and
    sent to the others, so every process runs the same rounds.  In a cluster each step
    is one exchange of its own (``_together``), in the same order on every process.
    """
    cells = [(j, i, float(e)) for j in range(len(mechs)) for i in range(len(sets)) for e in eps]
    have = dict.fromkeys(cells, 0)
    target = dict.fromkeys(cells, first)
    frames, new_rows, computed, file_rows = [], 0, 0, None
    while any(target[c] > have[c] for c in cells):
        groups: dict[tuple, list] = {}
        for j, i, e in cells:
            if target[j, i, e] > have[j, i, e]:
                groups.setdefault((j, i, have[j, i, e], target[j, i, e]), []).append(e)
        for (j, i, low, high), group_eps in groups.items():
            part = _together(lambda team: run(team, [mechs[j]], [sets[i]],
                                              np.asarray(group_eps), list(range(low, high))))
            frames.append(part)
            new_rows += part.attrs["new_rows"]
            computed += part.attrs["computed"]
            file_rows = part.attrs.get("file_rows", file_rows)
            for e in group_eps:
                have[j, i, e] = high
        table = pd.concat(frames, ignore_index=True)

        def decide(team):
            if team is not None and not team.writes:
                return team.work(None)
            values = {cell: g[column].to_numpy(np.float64) for cell, g in table.groupby(
                ["mechanism", "data", "n", "eps"], sort=False)}
            decided = [next_target(values[mechs[j][0], sets[i].label, sets[i].n, e],
                                   precision, first, max_seeds) for j, i, e in cells]
            return decided if team is None else team.work(decided)

        target = dict(zip(cells, _together(decide)))
    table = pd.concat(frames, ignore_index=True).sort_values(
        list(KEY_COLUMNS), kind="stable").reset_index(drop=True)
    table.attrs.update(new_rows=new_rows, computed=computed, precision=precision,
                       precision_column=column)
    if file_rows is not None:
        table.attrs["file_rows"] = file_rows
    if jax.process_index() == 0:  # the whole table (other processes hold their rows)
        cells = summarize(table, column, precision=precision)
        short = cells[~cells["target_met"]]
        table.attrs["short"] = [tuple(r) for r in short[["mechanism", "data", "n", "eps"]]
                                .itertuples(index=False)]
        if len(short):
            warnings.warn(f"precision: {len(short)} cell(s) stopped at max_seeds = {max_seeds} "
                          f"short of ±{precision:g}: " + "; ".join(
                              f"{m} on {d}, n={n}, eps={e:g} (±{w:.3g})" for m, d, n, e, w in
                              short[["mechanism", "data", "n", "eps", "rel_half_width"]]
                              .itertuples(index=False)), stacklevel=3)
    return table


def _together(step):
    """``step(team)`` with a fresh ``cluster.Team`` (``None`` alone): its own messages,
    and a failure published to the processes waiting in it."""
    team = cluster.Team.current()
    with team.guard() if team is not None else contextlib.nullcontext():
        return step(team)


def _run(team, mechs, sets, eps, seed_list, *, methods, metric, key, key_label, data_key,
         spec, out, memory_bytes, devs, progress, warmup, dry_run, most=None) -> pd.DataFrame:
    """``simulate`` after its checks: alone, or as one process of a ``cluster.Team``.

    ``most``: the most seeds a cell may get (a sweep to a precision), for the estimate.
    """
    from tqdm.auto import tqdm

    total = len(mechs) * len(sets) * len(eps) * len(seed_list)
    writes = team is None or team.writes
    if team is not None:
        team.agree({"spec": spec, "eps": eps.tolist(), "seeds": seed_list,
                    "out": None if out is None else str(out),
                    "data sets": [[ds.label, ds.n] for ds in sets],
                    "methods": repr(methods)})
    w1_columns = spec["w1_columns"]
    store = ResultStore(out, spec, w1_columns) if out is not None and writes and not dry_run \
        else None
    frames = []
    new_rows = computed = 0
    with store or contextlib.nullcontext():
        if store is not None:
            done = store.table()
        elif dry_run and out is not None and os.path.exists(out):  # read, never written
            done = result_store.readable(out)
        else:
            done = pd.DataFrame(columns=list(KEY_COLUMNS))
        finished = set(zip(*(done[c].tolist() for c in KEY_COLUMNS))) if len(done) else set()
        if writes:  # (data set, [(mechanism, seeds to do)]) by index, with something to do
            work = [(i, todo) for i, ds in enumerate(sets) if (todo := [
                (j, left) for j, (label, _) in enumerate(mechs)
                if (left := [s for s in seed_list if any(
                    (label, ds.label, ds.n, float(e), s) not in finished for e in eps)])])]
            remaining = sum(len(eps) * len(left) for _, todo in work for _, left in todo)
            if store is not None:
                store.check_room(remaining)
        if team is not None:  # process 0's list; each process keeps its share of every group
            work = [(i, todo) for i, group in team.work(work if writes else None)
                    if (todo := [(j, part) for j, left in group
                                 if (part := cluster.share(left, team.index, team.count))])]
        work = [(sets[i], [(*mechs[j], left) for j, left in todo]) for i, todo in work]
        prepared = _preflight(work, mechs, eps, methods, metric, memory_bytes, devs)
        if team is not None:
            team.ready()  # every process's share checked before any row is written
        timings, calibration = {}, time.perf_counter()
        first_writes = {}  # the calibration's warm runs that measured a whole first write
        for i, (ds, todo) in enumerate(work):  # compiles every kernel; times warm ones
            loaded, evaluator, sized = prepared[i] if i in prepared else _prepare(
                ds, mechs, todo, eps, methods, metric, memory_bytes, devs)
            for label, _, left in todo:
                first = left[:_seeds_per_write(sized[label], eps)]  # the first write's
                parts = [cost.calibrate(
                    lambda seeds, plan=plan, memory=memory, size=size: _chunk(
                        plan, evaluator, key, seeds, memory, devs, size, batches=1),
                    first, size, plan.eps) for plan, memory, size in sized[label]]
                timings[label, ds.label, ds.n] = [timing for timing, _ in parts]
                if len(first) <= MEASURE_BATCH:  # kept without the atoms
                    first_writes[label, ds.label, ds.n] = len(first), [
                        (jax.device_get(row_fields(out, plan)), values, seconds)
                        for (_, (out, values, seconds)), (plan, _, _) in zip(parts, sized[label])]
        # a sweep's estimate is of the work after the calibration (which kept first writes);
        # a dry run's, which keeps nothing, of all of it
        left_after = [(ds, [(label, mech, left[first_writes.get((label, ds.label, ds.n),
                                                                (0,))[0]:])
                            for label, mech, left in todo]) for ds, todo in work]
        estimate = cost.estimate(work if dry_run else left_after, timings, eps, most)
        if dry_run:
            return estimate
        if progress and writes and len(estimate):
            print(cost.describe(estimate), file=sys.stderr, flush=True)
        started = time.perf_counter()
        calibration = started - calibration
        bar = tqdm(total=total, unit="rep", disable=not (progress and writes), delay=2.0,
                   desc="simulate")
        bar.update(total - remaining if writes else 0)

        def keep(rows, counted=True):
            """Process 0 (or the only process): new rows into the store or the table
            (``counted``: already on the progress bar, replicate by replicate)."""
            nonlocal new_rows
            if not counted:
                bar.update(len(rows))
            rows = rows[[(label, data, n, e, s) not in finished for label, data, n, e, s in
                         zip(*(rows[c] for c in KEY_COLUMNS))]]
            if store is not None:
                store.append(rows)
            else:
                frames.append(rows)
            new_rows += len(rows)

        for i, (ds, todo) in enumerate(work):
            loaded, evaluator, sized = prepared[i] if i in prepared else _prepare(
                ds, mechs, todo, eps, methods, metric, memory_bytes, devs)
            X, _, intrinsic = loaded
            for label, mech, left in todo:
                parts = sized[label]  # (plan, memory, chunk) per group of ε
                common = {"mechanism": label, "kind": mech.name, "data": ds.label,
                          "n": X.shape[0], "d": X.shape[1], "intrinsic_dim": intrinsic}
                provenance = {"config": repr(mech), "key": key_label, "data_key": data_key,
                              "metric": metric}
                per_chunk = _seeds_per_write(parts, eps)
                runs = [left[j: j + per_chunk] for j in range(0, len(left), per_chunk)]
                measured = first_writes.pop((label, ds.label, ds.n), (0, None))[1]
                if warmup and measured is None:  # the release kernels once more, untimed
                    for plan, memory, size in parts:
                        _chunk(plan, evaluator, key, runs[0], memory, devs, size, batches=0)
                for run, seeds_now in enumerate(runs):
                    rows = []
                    for p, (plan, memory, size) in enumerate(parts):
                        if run == 0 and measured is not None:  # measured by the calibration
                            result, values, seconds = measured[p]
                            if writes:
                                bar.update(len(plan.eps) * len(seeds_now))
                        else:
                            result, values, seconds = _chunk(
                                plan, evaluator, key, seeds_now, memory, devs, size,
                                advance=bar.update if writes else None)
                        rows.append(replicate_rows(result, values, plan, seeds_now, common,
                                                   seconds))
                    rows = rows[0] if len(rows) == 1 else pd.concat(rows, ignore_index=True)
                    for column, value in provenance.items():
                        rows[column] = value
                    computed += len(rows)
                    if writes:
                        keep(rows)
                        for sent in team.receive() if team is not None else ():
                            keep(sent, counted=False)
                    else:
                        team.send(rows)
                        frames.append(rows)
            prepared.pop(i, None)
        if team is not None and writes:
            for sent in team.remaining():
                keep(sent, counted=False)
        elif team is not None:
            team.done()
        bar.close()
        if store is not None:
            table = store.finish()
        elif frames:
            table = pd.concat(frames, ignore_index=True)
            if team is not None:  # one set of column types, rows from other processes included
                table = read_table("the sweep's rows", table.to_csv(index=False).encode())
        else:
            table = pd.DataFrame(columns=list(KEY_COLUMNS))
    requested = pd.MultiIndex.from_tuples(
        [(label, ds.label, ds.n, float(e), s) for label, _ in mechs for ds in sets
         for e in eps for s in seed_list], names=list(KEY_COLUMNS))
    keep_rows = table.set_index(list(KEY_COLUMNS)).index.isin(requested)
    result = table[keep_rows].sort_values(list(KEY_COLUMNS), kind="stable").reset_index(drop=True)
    result.attrs["new_rows"] = new_rows if writes else computed
    result.attrs["computed"] = computed
    result.attrs["estimate"] = estimate.to_dict("records")  # attrs hold no frames
    result.attrs["calibration_seconds"] = calibration
    result.attrs["work_seconds"] = time.perf_counter() - started
    result.attrs["compile_seconds"] = {f"{label} | {data} | n={n}": sum(t.compile for t in parts)
                                       for (label, data, n), parts in timings.items()}
    if store is not None:
        result.attrs["file_rows"] = len(table)
    return result


def _seeds_per_write(parts, eps) -> int:
    """Seeds released (every ε) between two writes of the store: at least one chunk."""
    chunk = min(size for _, _, size in parts)
    return max(1, max(chunk, CHUNK_REPLICATES) // len(eps))


def _prepare(ds, mechs, todo, eps, methods, metric, memory_bytes, devs):
    """Load a data set, plan each mechanism to run on it and size its chunks.

    Raises ``ValueError`` naming the data set (and the mechanism) that cannot run.
    """
    try:
        loaded = grid.load(ds, [m for _, m in mechs], eps)
        evaluator = Evaluation.build(loaded[0], methods, metric)
    except ValueError as exc:
        raise ValueError(f"data set {ds.label} (n = {ds.n}): {exc}") from None
    sized = {}
    for label, mech, _ in todo:
        # one plan per group of ε that run on the same engine alone (``eps_groups``, e.g.
        # PrunedPMM(engine='auto')), so no replicate depends on the sweep's other budgets
        groups = mech.eps_groups(loaded[1].n, eps)
        sized[label] = []
        for index in groups:
            try:
                plan = mech.plan(loaded[1], eps[index])
                memory = memory_bytes or engine.device_memory(devs[0])
                chunk = engine.chunk_size(evaluator.bytes_per_replicate(plan.bytes_per_replicate),
                                          2**30, memory,
                                          devs[0].platform)
            except ValueError as exc:
                raise ValueError(f"mechanism {label} on {ds.label} (n = {ds.n}): {exc}") from None
            sized[label].append((plan, memory, -(-chunk // len(devs)) * len(devs)))
    return loaded, evaluator, sized


def _preflight(work, mechs, eps, methods, metric, memory_bytes, devs) -> dict:
    """Every data set loaded, every mechanism planned and sized, before any release.

    Bad input (a data set that cannot be generated, a depth the W1 cannot measure, a
    replicate larger than the memory, ...) is refused here, before any row is written.
    Returns the prepared data sets to keep for the run (up to ``PREFLIGHT_CACHE_BYTES``).
    """
    kept, used = {}, 0
    for i, (ds, todo) in enumerate(work):
        prepared = _prepare(ds, mechs, todo, eps, methods, metric, memory_bytes, devs)
        size = prepared[0][0].nbytes * 4
        if i == 0 or used + size <= PREFLIGHT_CACHE_BYTES:
            kept[i] = prepared
            used += size
    return kept


def _chunk(plan, evaluator, key, seeds, memory, devices, chunk, advance=None, batches=None):
    """Release seeds × every ε and measure them; finished numbers on the host.

    The measurement runs per ε in batches of ``MEASURE_BATCH`` replicates (each
    replicate's W1 depends on its own atoms only), each batch timed and counted on
    ``advance`` as it finishes; ``batches`` measures only the first that many batches of
    each ε (the calibration).  Returns the engine outputs, the W1 values [E, S] and the
    timing columns (``release_seconds``: the chunk's release per replicate;
    ``measure_seconds`` [E, S]: its batch's measurement per replicate).
    """
    keys = replicate_keys(key, seeds)
    start = time.perf_counter()
    out = engine.run(plan, keys, atoms=evaluator.atoms, memory_bytes=memory, devices=devices,
                     chunk=chunk)
    out = jax.block_until_ready(out)
    released = time.perf_counter()
    E, S = len(plan.eps), len(seeds)
    values, measured = {}, np.full((E, S), np.nan)
    for e in range(E):
        for a in range(0, S, MEASURE_BATCH)[:batches]:
            b = min(a + MEASURE_BATCH, S)
            begin = time.perf_counter()
            block = jax.tree.map(lambda v, e=e, a=a, b=b: v[e:e + 1, a:b], out)
            part = evaluator.evaluate_outputs(block, seeds[a:b])
            measured[e, a:b] = (time.perf_counter() - begin) / (b - a)
            for name, v in part.items():
                values.setdefault(name, np.empty((E, S)))[e, a:b] = np.asarray(v).reshape(-1)
            if advance is not None:
                advance(b - a)
    release = (released - start) / (E * S)
    seconds = {"seconds": release + measured, "release_seconds": release,
               "measure_seconds": measured}
    return out, values, seconds
