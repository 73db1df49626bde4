"""Monte Carlo sweeps: mechanisms × data sets × n × ε × seeds × W1 methods.

Words: a W1 *method* is how W1 is measured (``methods=["exact", "bracket"]``, the
``w1_*`` columns); the *metric* is the ground metric ``"linf"`` or ``"l2"``
(``metric=``, the ``metric`` column), as in ``js.w1(X, out, method=..., metric=...)``.

``simulate`` returns one row per replicate.  Replicate ``s`` of mechanism ``M`` on data
``X`` at budget ``ε`` is ``js.release(jax.random.fold_in(key, s), M, X, ε)``, whatever
the chunking, the device count or an interruption, so a sweep can be split, resumed and
sharded without changing a number.

This module holds ``simulate`` and its loop; the work grid (mechanisms, data sets,
devices) is checked in ``jaxsynth.experiments.grid``, every replicate measured by
``jaxsynth.wasserstein.evaluate.Evaluation`` (as ``js.w1``) and written as a row by
``jaxsynth.experiments.rows``.

How the work is organised:

* **once per (data set, n)**: the data set is loaded (named generators, files, arrays)
  and its ``DataTree`` (every cell count) built at the largest depth any mechanism of
  the sweep needs; the data projections of the bracket's lower bound are sorted once;
* **once per (mechanism, data set)**: the mechanism's engine plan (``mech.plan``): one
  compiled kernel for every ε, with one fixed chunk shape taken from the plan's memory
  model, so every replicate is computed by the same program whatever is left to do
  (a resumed run reproduces the uninterrupted one bit for bit); a mechanism whose ε run
  on different engines alone (``eps_groups``: ``PrunedPMM(engine='auto')`` at the
  ambient depth) gets one plan per engine, so a replicate's numbers, the fused tree W1
  included, are those of its ε alone whatever the ε list;
* **per chunk of seeds**: ``engine.run`` releases every ε × seed on the device; the tree
  W1 and its upper bound come out of the kernel itself (it descends the tree), the
  bracket's lower bound is computed on the device from the released atoms, and only the
  finished per-replicate numbers go to the host (Sinkhorn, an iterative host-driven
  solver, is the exception: it reads the atoms of each replicate);
* **devices**: each chunk's replicates are sharded over ``devices`` (default: all local
  devices; a chunk holds a multiple of their number); replicates do not depend on it;
* **nothing lost**: with ``out="file.csv"`` rows go to a ``ResultStore``
  (``jaxsynth.experiments.store``): appended as each chunk finishes, atomically and
  under a lock; a rerun skips the replicates already there, and the file ends sorted.

**Several processes.**  In a ``jax.distributed`` cluster (``js.join_cluster``, or
``jax.distributed.initialize``), every process calls ``simulate`` with the same
arguments; the work is split between them and process 0 writes the one store
(``jaxsynth.experiments.cluster``).  Process 0 returns the sweep's table, the others
the rows they computed.
"""

from __future__ import annotations

import contextlib
import time

import jax
import pandas as pd

from jaxsynth import engine
from jaxsynth.api import seed_count, seed_indices
from jaxsynth.core.keys import replicate_keys
from jaxsynth.core.partition import GROUND_METRICS
from jaxsynth.core.validate import check_bool, check_epsilon, check_positive_int, refuse_renamed
from jaxsynth.experiments import cluster, grid
from jaxsynth.experiments import store as result_store
from jaxsynth.experiments.rows import replicate_rows
from jaxsynth.experiments.store import KEY_COLUMNS, ResultStore, check_out_path, read_table
from jaxsynth.wasserstein.evaluate import Evaluation, check_methods, check_metric
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
PREFLIGHT_CACHE_BYTES = 512 * 2**20
"""Data sets loaded by the pre-flight checks are kept for the run up to this many bytes."""


def simulate(
    mechanisms,
    data,
    eps=(1.0,),
    seeds=100,
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
      seeds: a count S (seeds ``0..S-1``), a ``range`` or a list of seed indices.
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
      warmup: run each (mechanism, data set)'s first chunk once untimed, so that
        ``seconds`` measure the compiled computation only.

    Returns:
      a ``pandas.DataFrame`` sorted by (mechanism, data, n, eps, seed) with columns
      ``mechanism`` (label), ``kind`` (the mechanism's name), ``data``, ``n``, ``d``,
      ``intrinsic_dim``, ``eps``, ``seed``, ``depth``, ``m``, ``leaves``, ``visited``, the
      ``w1_*`` columns, ``seconds`` (the replicate's share of its chunk's wall time,
      release and W1; a group's first chunk includes compilation unless ``warmup``),
      ``release_seconds`` (the release alone), ``adjacency``, the budget parts
      (``epsilon``, ``eps_levels``, ...), scalar diagnostics (``selected``, ``cap_hits``,
      ...), and provenance: ``config``, ``key``, ``data_key``, ``metric`` (the ground
      metric).  Its
      ``attrs`` hold ``new_rows`` (replicates computed by this call), ``computed`` (those
      this process computed: all of them, or its share in a cluster) and, with ``out``,
      ``file_rows`` (the rows the file holds, which may include other sweeps' rows).
      In a cluster, processes other than 0 return the rows they computed (``new_rows``
      counts them) and no ``file_rows``.

    Raises:
      ValueError: bad arguments (the former names ``metrics=`` and ``ground=`` are
        refused, naming ``methods=`` and ``metric=``), a foreign, changed or
        earlier-format ``out`` file, another writer on it, or a sweep of more than
        ``store.MAX_ROWS`` rows (split it over disjoint seeds, one file per part); always
        before any replicate is released.  In a cluster also a sweep that differs from
        process 0's, and any other process's failure (``cluster.PeerFailure``, naming it).
    """
    team = cluster.Team.current()  # a failure here stops every process of a cluster
    with team.guard() if team is not None else contextlib.nullcontext():
        refuse_renamed("simulate", renamed, RENAMED)
        mechs = grid.mechanisms(mechanisms)
        eps = check_epsilon(eps).ravel()
        if len(set(eps.tolist())) != len(eps):
            raise ValueError(f"eps has duplicate values: {eps.tolist()}")
        n_seeds = seed_count(seeds)
        metric = check_metric(metric)
        methods = check_methods(methods, metric)
        check_bool(progress, "progress")
        check_bool(warmup, "warmup")
        if memory_bytes is not None:
            memory_bytes = check_positive_int(memory_bytes, "memory_bytes")
        data_key = check_positive_int(data_key, "data_key", minimum=0)
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
            "w1_columns": [c for m, _ in methods for c in m.columns],
            "groups": {f"{label} | {ds.label}": {"kind": m.name, "config": repr(m)}
                       for label, m in mechs for ds in sets},
            "data": {f"{ds.label} | n={ds.n}": fp for ds in sets
                     if (fp := grid.fingerprint(ds)) is not None},
        }
        return _run(team, mechs, sets, eps, seed_list, total, methods, metric, key, key_label,
                    data_key, spec, out, memory_bytes, devs, progress, warmup)


def _run(team, mechs, sets, eps, seed_list, total, methods, metric, key, key_label, data_key,
         spec, out, memory_bytes, devs, progress, warmup) -> pd.DataFrame:
    """``simulate`` after its checks: alone, or as one process of a ``cluster.Team``."""
    from tqdm.auto import tqdm

    writes = team is None or team.writes
    if team is not None:
        team.agree({"spec": spec, "eps": eps.tolist(), "seeds": seed_list,
                    "data sets": [[ds.label, ds.n] for ds in sets],
                    "methods": repr([(m.name, o) for m, o in methods])})
    w1_columns = spec["w1_columns"]
    store = ResultStore(out, spec, w1_columns) if out is not None and writes else None
    frames = []
    new_rows = computed = 0
    with store or contextlib.nullcontext():
        done = store.table() if store is not None else pd.DataFrame(columns=list(KEY_COLUMNS))
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
        bar = tqdm(total=total, unit="rep", disable=not (progress and writes), delay=2.0,
                   desc="simulate")
        bar.update(total - remaining if writes else 0)

        def keep(rows):
            """Process 0 (or the only process): new rows into the store or the table."""
            nonlocal new_rows
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
                chunk = min(size for _, _, size in parts)
                common = {"mechanism": label, "kind": mech.name, "data": ds.label,
                          "n": X.shape[0], "d": X.shape[1], "intrinsic_dim": intrinsic}
                provenance = {"config": repr(mech), "key": key_label, "data_key": data_key,
                              "metric": metric}
                per_chunk = max(1, max(chunk, CHUNK_REPLICATES) // len(eps))
                runs = [left[j: j + per_chunk] for j in range(0, len(left), per_chunk)]
                if warmup:
                    for plan, memory, size in parts:
                        _chunk(plan, evaluator, key, runs[0], memory, devs, size)
                for seeds_now in runs:
                    rows = []
                    for plan, memory, size in parts:
                        result, values, seconds = _chunk(plan, evaluator, key, seeds_now,
                                                         memory, devs, size)
                        rows.append(replicate_rows(result, values, plan, seeds_now, common,
                                                   seconds))
                    rows = rows[0] if len(rows) == 1 else pd.concat(rows, ignore_index=True)
                    for column, value in provenance.items():
                        rows[column] = value
                    computed += len(rows)
                    if writes:
                        keep(rows)
                        for sent in team.receive() if team is not None else ():
                            keep(sent)
                    else:
                        team.send(rows)
                        frames.append(rows)
            prepared.pop(i, None)
        if team is not None and writes:
            for sent in team.remaining():
                keep(sent)
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
    if store is not None:
        result.attrs["file_rows"] = len(table)
    return result


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


def _chunk(plan, evaluator, key, seeds, memory, devices, chunk):
    """Release seeds × every ε and measure them; finished numbers on the host."""
    keys = replicate_keys(key, seeds)
    start = time.perf_counter()
    out = engine.run(plan, keys, atoms=evaluator.atoms, memory_bytes=memory, devices=devices,
                     chunk=chunk)
    out = jax.block_until_ready(out)
    released = time.perf_counter()
    values = evaluator.evaluate_outputs(out, seeds)
    per = len(plan.eps) * len(seeds)
    seconds = {"seconds": (time.perf_counter() - start) / per,
               "release_seconds": (released - start) / per}
    return out, values, seconds
