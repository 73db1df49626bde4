"""Monte Carlo sweeps: mechanisms × data sets × n × ε × seeds × W1 metrics (SPEC §9, §10).

``simulate`` returns one row per replicate.  Replicate ``s`` of mechanism ``M`` on data
``X`` at budget ``ε`` is ``js.release(jax.random.fold_in(key, s), M, X, ε)``, whatever
the chunking, the device count or an interruption, so a sweep can be split, resumed and
sharded without changing a number.

How the work is organised:

* **once per (data set, n)**: the data set is loaded (named generators, files, arrays)
  and its ``DataTree`` (every cell count) built at the largest depth any mechanism of
  the sweep needs (``max_M M.data_depth(n, d, eps)``);
* **per chunk of seeds**: every ε of one mechanism is released in one call of
  ``mech.run`` (jitted and vmapped over ε × seeds by the mechanism), then every W1
  metric is computed for the whole chunk.  Chunks are sized to the memory budget, all
  chunks of a group have the same shape (the last one is padded with repeated seeds that
  are discarded), so a group compiles once;
* **devices**: the replicate keys of a chunk are placed on a one-axis ``Mesh`` of the
  local devices with ``NamedSharding(mesh, P("seeds"))``; jit partitions the vmapped
  release along that axis (computation follows data), so each device releases its share
  of the seeds (a chunk holds a multiple of the device count).  Each replicate's
  computation is the same on every device count (tested with two simulated CPU
  devices).  With one device the keys stay uncommitted, so the compilations of
  ``js.release`` / ``js.release_batch`` are shared.  W1 metrics run where
  ``jaxsynth.w1`` puts them (the default device);
* **nothing lost**: with ``out="file.csv"`` the rows of each chunk are appended and
  flushed as soon as the chunk finishes; a rerun skips the (mechanism, data, n, ε, seed)
  units already in the file, checks that they were made with the same configuration and
  keys, and ends with the same table as an uninterrupted run.  A torn last line (a kill
  during a write) is discarded.  When the sweep completes, the file is rewritten
  atomically in the canonical row order (sorted by mechanism, data, n, eps, seed).

**Multi-host.**  Replicate keys depend only on ``(key, seed)``, so hosts need not talk to
each other: on each host call ``jax.distributed.initialize()`` (which makes
``jax.process_index()`` / ``jax.process_count()`` meaningful), then give each process a
disjoint set of seeds and its own file, e.g.
``simulate(..., seeds=range(jax.process_index(), S, jax.process_count()),
out=f"part-{jax.process_index()}.csv")``; each process shards its seeds over its own
local devices.  ``pd.concat`` of the parts (or ``jaxsynth rate part-*.csv``) is the table
of the whole sweep.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import time
from pathlib import Path

import jax
import numpy as np
import pandas as pd
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxsynth import batching, datasets
from jaxsynth._validate import check_data, check_epsilon, check_positive_int
from jaxsynth.datatree import DataTree
from jaxsynth.keys import as_raw_key, replicate_keys
from jaxsynth.measure import SyntheticMeasure

__all__ = ["MECHANISMS", "METHODS", "depth_sweep", "mechanism", "read_table",
           "release_sharded", "simulate"]

MECHANISMS = {
    "pmm": ("jaxsynth.pmm", "PMM", {}),
    "pruned-pmm": ("jaxsynth.pmm", "PrunedPMM", {}),
    "adaptive-pruned-pmm": ("jaxsynth.adaptive", "AdaptivePrunedPMM", {}),
    "privtree": ("jaxsynth.privtree", "PrivTree", {"shift": False}),
    "privtree-shift": ("jaxsynth.privtree", "PrivTree", {"shift": True}),
}
"""Command-line mechanism names: (module, class, fixed options).  Imported lazily."""

_DEPTH_OPTION = {"pmm": "depth", "pruned-pmm": "depth", "privtree": "depth_cap",
                 "privtree-shift": "depth_cap"}
"""The option a ``depth`` maps to: the tree depth, or PrivTree's depth cap."""

METHODS = ("tree", "tree_upper", "exact1d", "sinkhorn", "bracket")
"""W1 methods of ``jaxsynth.w1.w1``; ``bracket`` gives the columns ``w1_lower, w1_upper``."""

KEY_COLUMNS = ("mechanism", "data", "n", "eps", "seed")
"""A unit of work: one replicate.  Rows are sorted on these columns."""

_PROVENANCE = ("kind", "config", "key", "data_key", "ground")
"""Columns that must agree between a resumed file and the sweep that resumes it."""

_TEXT_COLUMNS = ("mechanism", "kind", "data", "adjacency", "config", "key", "ground")

_BYTES_PER_ENTRY = 24
"""Working bytes per (data point or atom) × (d + 4), per replicate: the released atoms
(points, weights, leaf depths), their host copies and the W1 working set."""


# --------------------------------------------------------------------------- mechanisms


def mechanism(name: str, depth: int | None = None, **options):
    """A mechanism config from its command-line name (``MECHANISMS``).

    Args:
      name: ``pmm``, ``pruned-pmm``, ``adaptive-pruned-pmm``, ``privtree`` or
        ``privtree-shift``.
      depth: tree depth (PMM family) or depth cap (PrivTree); ``None`` for the
        mechanism's default.  Adaptive Pruned-PMM selects its depth and takes none.
      **options: further fields of the config class.

    Returns:
      the frozen config, e.g. ``jaxsynth.PMM(depth=depth)``.
    """
    key = str(name).strip().lower().replace("_", "-")
    if key not in MECHANISMS:
        raise ValueError(f"unknown mechanism {name!r}; known: {', '.join(MECHANISMS)}")
    module, cls, fixed = MECHANISMS[key]
    try:
        config_class = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError):
        raise ValueError(f"mechanism {key!r} is not available in this installation") from None
    if depth is not None:
        if key not in _DEPTH_OPTION:
            raise ValueError(f"depth does not apply to {key!r}, which selects its own depth")
        options[_DEPTH_OPTION[key]] = check_positive_int(depth, "depth")
    try:
        return config_class(**fixed, **options)
    except TypeError as exc:
        raise ValueError(f"bad options for mechanism {key!r}: {exc}") from None


def depth_sweep(mech, depths) -> dict:
    """``{"<name> r=<depth>": config}`` for ``mech`` at each depth: input for a depth sweep.

    Pass the result as ``simulate``'s ``mechanisms``; ``plots.depth_plot`` draws it.
    """
    field = _DEPTH_OPTION.get(getattr(mech, "name", None))
    if field is None:
        raise ValueError(f"mechanism {mech!r} has no depth to sweep")
    return {f"{mech.name} r={r}": dataclasses.replace(
        mech, **{field: check_positive_int(r, "depths")}) for r in depths}


def _mechanisms(mechanisms) -> list[tuple[str, object]]:
    """(label, config) pairs from a config, a name, a list of them or a ``{label: ...}`` dict."""
    if isinstance(mechanisms, dict):
        items = list(mechanisms.items())
    elif isinstance(mechanisms, (list, tuple)):
        items = [(None, m) for m in mechanisms]
    else:
        items = [(None, mechanisms)]
    if not items:
        raise ValueError("mechanisms is empty")
    out = []
    for label, m in items:
        if isinstance(m, str):
            m = mechanism(m)
        if not (hasattr(m, "run") and hasattr(m, "data_depth") and hasattr(m, "name")):
            raise ValueError(f"mechanisms: {m!r} is not a mechanism config or name")
        out.append((str(label) if label is not None else m.name, m))
    labels = [label for label, _ in out]
    if len(set(labels)) != len(labels):
        raise ValueError(
            f"mechanisms: duplicate labels {labels}; pass a dict {{label: config}} to tell "
            "configurations of the same mechanism apart"
        )
    return out


# --------------------------------------------------------------------------- data sets


@dataclasses.dataclass(frozen=True, eq=False)
class _DataSet:
    """One (data set, n) of the sweep: a generator name (loaded lazily), or given points."""

    label: str
    spec: object  # a generator name, an array [n, d] or a DataTree
    options: dict
    n: int
    data_key: int

    def load(self):
        """(points [n, d] float64, DataTree or None, intrinsic dimension)."""
        if isinstance(self.spec, DataTree):
            return self.spec.points, self.spec, self.spec.d
        if not isinstance(self.spec, str):
            return self.spec, None, self.spec.shape[1]
        X = datasets.load(self.spec, n=self.n, key=self.data_key, **self.options)
        opts = dict(self.options, d=X.shape[1])
        return X, None, datasets.intrinsic_dimension(self.spec, **opts)


def _is_file(spec) -> bool:
    return isinstance(spec, os.PathLike) or str(spec).lower().endswith(datasets.FILE_SUFFIXES)


def _label(name, options: dict) -> str:
    if not options:
        return str(name)
    return f"{name}(" + ",".join(f"{k}={v}" for k, v in sorted(options.items())) + ")"


def _data_sets(data, n, data_key) -> list[_DataSet]:
    """Expand ``data`` × ``n`` into the sweep's data sets, in order.

    Generated data sets get one entry per size in ``n``; files are read here and, like
    arrays, keep their own size (``n``, if given, must match it).
    """
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list):
        items = [(None, item) for item in data]
    else:
        items = [(None, data)]
    if not items:
        raise ValueError("data is empty")
    sizes = None if n is None else [check_positive_int(v, "n") for v in np.atleast_1d(n).tolist()]
    if sizes is not None and len(set(sizes)) != len(sizes):
        raise ValueError(f"n has duplicate values: {sizes}")
    out = []
    for label, item in items:
        options = {}
        if _is_pair(item):
            item, options = item
            bad = sorted({"n", "key"} & set(options))
            if bad:
                raise ValueError(f"data options {bad} are set by simulate's n and data_key")
        if isinstance(item, (str, os.PathLike)) and not _is_file(item):
            name = _label(item, options) if label is None else str(label)
            out += [_DataSet(name, str(item), options, size, int(data_key))
                    for size in (sizes or [datasets.DEFAULT_N])]
            continue
        if isinstance(item, (str, os.PathLike)):
            default, item = str(item), datasets.load(item, **options)
        elif options:
            raise ValueError("data options apply only to named data sets and files")
        else:
            default = "array"
            item = item if isinstance(item, DataTree) else check_data(item, "data")
        size = item.n if isinstance(item, DataTree) else item.shape[0]
        if sizes is not None and sizes != [size]:
            raise ValueError(f"n={sizes} does not match the data set {default} of {size} points")
        name = default if label is None else str(label)
        out.append(_DataSet(name, item, {}, size, int(data_key)))
    keys = [(ds.label, ds.n) for ds in out]
    if len(set(keys)) != len(keys):
        raise ValueError(f"data: duplicate data sets {keys}; pass a dict {{label: data}}")
    return out


# --------------------------------------------------------------------------- devices


def _devices(devices) -> list:
    local = jax.local_devices()
    if devices is None:
        return local
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        if not 1 <= devices <= len(local):
            raise ValueError(f"devices must be between 1 and {len(local)}; got {devices}")
        return local[: int(devices)]
    devices = list(devices)
    if not devices:
        raise ValueError("devices is empty")
    return devices


def release_sharded(key, mech, tree: DataTree, eps, seeds, devices=None,
                    memory_bytes: int = batching.DEFAULT_MEMORY_BYTES) -> SyntheticMeasure:
    """``release_batch`` with the replicate axis sharded over devices.

    Args:
      key: int seed or JAX key; replicate ``s`` uses ``fold_in(key, s)``.
      mech: a mechanism config.
      tree: the data's ``DataTree``, deep enough for ``mech`` at every ε.
      eps: [E] budgets.
      seeds: S seed indices; S must be a multiple of the number of devices.
      devices: ``None`` (all local devices), a count, or a list of devices.
      memory_bytes: passed to the mechanism.

    Returns:
      a ``SyntheticMeasure`` of batch shape [E, S], equal to
      ``release_batch(key, mech, tree, eps, seeds)`` (its arrays sharded on axis 1).
    """
    devs = _devices(devices)
    seeds = list(seeds)
    if len(seeds) % len(devs):
        raise ValueError(f"{len(seeds)} seeds cannot be split evenly over {len(devs)} devices")
    keys = replicate_keys(key, seeds)
    if len(devs) > 1:
        mesh = Mesh(np.array(devs), ("seeds",))
        keys = jax.device_put(keys, NamedSharding(mesh, PartitionSpec("seeds")))
    elif keys.devices() != {devs[0]}:  # on the default device keys stay uncommitted, so
        keys = jax.device_put(keys, devs[0])  # the compilations of js.release are reused
    return mech.run(keys, np.asarray(eps, np.float64), tree, memory_bytes)


# --------------------------------------------------------------------------- metrics


def _metrics(metrics) -> list[tuple[str, dict, list[str]]]:
    """(method, options, columns) for each requested W1 metric."""
    if isinstance(metrics, str) or _is_pair(metrics):
        metrics = [metrics]
    out = []
    for item in metrics:
        method, options = item if _is_pair(item) else (item, {})
        if method not in METHODS:
            raise ValueError(f"metrics: unknown W1 method {method!r}; known: {', '.join(METHODS)}")
        columns = ["w1_lower", "w1_upper"] if method == "bracket" else [f"w1_{method}"]
        out.append((method, dict(options), columns))
    names = [c for _, _, cols in out for c in cols]
    if len(set(names)) != len(names):
        raise ValueError(f"metrics: duplicate columns {names}")
    return out


def _is_pair(item) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict)


def _w1(X, tree, out, method, ground, options, seeds):
    """``js.w1`` of a chunk ``out`` [E, S] (``seeds`` [S]).

    Tree methods read the prepared ``tree`` (no per-chunk preparation); Sinkhorn and
    exact 1-D read the points ``X`` in their given order, as ``js.w1(X, ...)`` does (a
    Sinkhorn subsample draws data points by index).  Sinkhorn with a ``key`` (random
    subsamples) folds it with the flat batch index, which depends on the chunk; here
    replicate ``(ε, s)`` gets ``fold_in(key, s)`` instead (the same for every ε, like the
    release), so chunking changes nothing.
    """
    from jaxsynth.w1 import w1

    data = X if method in ("sinkhorn", "exact1d") else tree
    if method != "sinkhorn" or options.get("key") is None:
        return w1(data, out, method=method, metric=ground, **options)
    key = options["key"]
    key = jax.random.key(int(key)) if isinstance(key, (int, np.integer)) else key
    values = np.empty(out.batch_shape)
    for e, j in np.ndindex(*out.batch_shape):
        rep = dict(options, key=jax.random.fold_in(key, seeds[j]))
        values[e, j] = w1(data, out[e, j], method=method, metric=ground, **rep)
    return values


# --------------------------------------------------------------------------- the file


class _Table:
    """Rows of a sweep, kept in memory or appended to a CSV file as chunks finish."""

    def __init__(self, path):
        self.path = None if path is None else Path(path)
        self.frames = []
        self.written = False
        if self.path is not None and self.path.suffix.lower() != ".csv":
            raise ValueError(f"out must be a .csv file; got {path}")

    def existing(self) -> pd.DataFrame:
        """Rows already in the file (after dropping a torn last line), or an empty frame."""
        if self.path is None or not self.path.is_file():
            return pd.DataFrame(columns=list(KEY_COLUMNS))
        with open(self.path, "r+b") as f:
            raw = f.read()
            if raw and not raw.endswith(b"\n"):  # a write was interrupted: drop its tail
                f.truncate(raw.rfind(b"\n") + 1)
        return read_table(self.path)

    def header(self) -> list[str] | None:
        if self.path is None or not self.path.is_file() or self.path.stat().st_size == 0:
            return None
        with open(self.path) as f:
            return pd.read_csv(f, nrows=0).columns.tolist()

    def append(self, rows: pd.DataFrame) -> None:
        if self.path is None:
            self.frames.append(rows)
            return
        header = self.header()
        self.written = True
        if header is None:
            _write_atomic(rows, self.path)
        elif set(rows.columns) <= set(header):
            with open(self.path, "a") as f:
                f.write(rows.reindex(columns=header).to_csv(header=False, index=False))
                f.flush()
                os.fsync(f.fileno())
        else:  # new columns (e.g. a mechanism with more diagnostics): rewrite atomically
            _write_atomic(pd.concat([read_table(self.path), rows], ignore_index=True), self.path)

    def result(self, units: pd.DataFrame) -> pd.DataFrame:
        """The requested units' rows, in canonical order; the file rewritten in that order."""
        if self.path is None:
            table = pd.concat(self.frames, ignore_index=True) if self.frames else units.iloc[:0]
        else:
            table = _sorted(read_table(self.path))
            if self.written:
                _write_atomic(table, self.path)
        keys = list(KEY_COLUMNS)
        return _sorted(table[table.set_index(keys).index.isin(units.set_index(keys).index)])


def read_table(path) -> pd.DataFrame:
    """Read a ``simulate`` CSV file with its text columns as text (``ValueError`` if unreadable)."""
    try:
        return pd.read_csv(path, dtype={c: str for c in _TEXT_COLUMNS}, keep_default_na=True)
    except pd.errors.EmptyDataError:
        return pd.DataFrame(columns=list(KEY_COLUMNS))
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"could not read the table {path}: {exc}") from None


def _write_atomic(table: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(table.to_csv(index=False))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _sorted(table: pd.DataFrame) -> pd.DataFrame:
    return table.sort_values(list(KEY_COLUMNS), kind="stable").reset_index(drop=True)


def _check_done(done: pd.DataFrame, expected: dict, columns: list[str], path) -> None:
    """Refuse to resume from rows made with another configuration, key or metric set."""
    for column, value in expected.items():
        if column not in done or not (done[column].astype(str) == str(value)).all():
            raise ValueError(
                f"out file {path} already holds rows for these units made with a different "
                f"{column} (expected {value}); choose another out file"
            )
    missing = [c for c in columns if c not in done or done[c].isna().any()]
    if missing:
        raise ValueError(
            f"out file {path} lacks {missing} for completed rows; choose another out file")


# --------------------------------------------------------------------------- the sweep


def _chunk_plan(todo: list[int], per_chunk: int, n_dev: int) -> tuple[list[list[int]], int]:
    """Balanced chunks of equal padded size (a multiple of ``n_dev``): one compile per group."""
    n_chunks = -(-len(todo) // per_chunk)
    size = -(-len(todo) // n_chunks)
    size = -(-size // n_dev) * n_dev
    return [todo[i : i + size] for i in range(0, len(todo), size)], size


def _seeds_per_chunk(mech, n: int, d: int, eps: np.ndarray, memory_bytes: int) -> int:
    """Seeds per chunk for the memory budget, from a bound on the atoms per replicate.

    A tree of depth ``r = mech.data_depth(n, d, eps)`` has at most ``2^r`` leaves, which
    the complete-tree engines (PMM, ``engine="dense"``) all output; the sparse engines
    output about ``m ≈ n`` atoms (Pruned-PMM family) or ``O(εn)`` leaves (PrivTree).
    """
    depth = mech.data_depth(n, d, eps)
    if mech.name == "pmm" or getattr(mech, "engine", None) == "dense":
        atoms = 2.0**depth
    else:
        atoms = min(2.0**depth, 2.0 * n * max(1.0, float(np.max(eps))) + 4096)
    per_rep = _BYTES_PER_ENTRY * (d + 4) * (n + atoms)
    return batching.seeds_per_chunk(per_rep, len(eps), memory_bytes)


def _rows(out: SyntheticMeasure, values: dict, eps, seeds, common: dict) -> pd.DataFrame:
    """One row per replicate of ``out`` [E, S] (E-major)."""
    E, S = len(eps), len(seeds)
    flat = lambda a: np.asarray(a).reshape(E * S)  # noqa: E731
    cols = dict(common)
    cols["eps"] = np.repeat(np.asarray(eps, np.float64), S)
    cols["seed"] = np.tile(np.asarray(seeds, np.int64), E)
    for name, field in (("depth", out.depth), ("m", out.size), ("leaves", out.leaves),
                        ("visited", out.visited)):
        cols[name] = flat(field).astype(np.int64)
    for name, v in values.items():
        cols[name] = np.broadcast_to(np.asarray(v, np.float64), (E, S)).reshape(E * S)
    cols["adjacency"] = out.adjacency
    for name, v in out.budget.items():
        cols[name] = flat(v).astype(np.float64)
    for name, v in out.info.items():
        a = np.asarray(v)
        if a.shape == (E, S):  # scalar diagnostics per replicate (vectors are left out)
            cols[name] = a.reshape(E * S)
    return pd.DataFrame(cols)


def simulate(
    mechanisms,
    data,
    eps=(1.0,),
    seeds=100,
    metrics=("tree",),
    key=0,
    n=None,
    out=None,
    memory_bytes: int = batching.DEFAULT_MEMORY_BYTES,
    progress: bool = True,
    ground: str = "linf",
    data_key: int = 0,
    devices=None,
    warmup: bool = False,
) -> pd.DataFrame:
    """Run a Monte Carlo sweep and return one row per replicate (SPEC §9, §10).

    Sweeps mechanisms × data sets × n × ε × seeds; every replicate gets every metric.
    Replicate ``s`` uses the key ``jax.random.fold_in(key, s)`` for every mechanism, data
    set and ε, so its row equals ``js.release(fold_in(key, s), M, X, ε)`` measured with
    ``js.w1``, independent of chunking, device count and interruptions.

    Args:
      mechanisms: a config (``js.PMM(...)``), a name from ``MECHANISMS``, a list of them,
        or a dict ``{label: config}`` (labels tell configurations of one mechanism apart).
      data: an array [n, d] in [0,1]^d, a ``DataTree``, a data set name or file path
        (``datasets.load``), a pair ``(name, options)`` (e.g. ``("subspace", {"d": 5,
        "k": 2})``), or a list or ``{label: ...}`` dict of these.
      eps: a budget or list of E budgets.
      seeds: a count S (seeds ``0..S-1``) or a list of seed indices.
      metrics: W1 methods (``METHODS``), each a name or ``(name, options)`` passed to
        ``js.w1``; columns ``w1_<name>`` (``bracket``: ``w1_lower``, ``w1_upper``).
      key: int or JAX key of the sweep.
      n: sizes for named data sets (default ``datasets.DEFAULT_N``); arrays and files
        keep their own size.
      out: a ``.csv`` path: rows are appended as chunks finish, existing units are
        skipped (resume), and the file ends in canonical order.
      memory_bytes: working-memory budget of one chunk (release and metrics).
      progress: show a tqdm progress bar (on stderr) when the sweep runs longer than 2 s.
      ground: ground metric, ``"linf"`` (default, seed 001 §7) or ``"l2"``.
      data_key: key of the data generators (the same for every n).
      devices: ``None`` (all local devices), a count or a list; the seeds of a chunk are
        sharded over them.
      warmup: run each (mechanism, data set)'s first chunk once untimed, so that
        ``seconds`` measure the compiled computation only (costs one extra chunk each).

    Returns:
      a ``pandas.DataFrame`` sorted by (mechanism, data, n, eps, seed) with columns
      ``mechanism`` (label), ``kind`` (the mechanism's name), ``data``, ``n``, ``d``,
      ``intrinsic_dim`` (``datasets.intrinsic_dimension`` for named data, else ``d``),
      ``eps``, ``seed``, ``depth``, ``m``, ``leaves``, ``visited``, the ``w1_*`` columns,
      ``seconds`` (the replicate's share of its chunk's wall time, release plus metrics;
      a group's first chunk includes compilation unless ``warmup``), ``release_seconds``
      (the release alone), ``adjacency``, the budget parts (``epsilon`` and e.g.
      ``eps_levels``, ``eps_sel``, ``eps_main``, ``eps_tree``), scalar diagnostics (e.g.
      ``selected``, ``sensitivity``, ``cap_hits``), and provenance: ``config`` (the
      config's repr), ``key``, ``data_key``, ``ground``.

    Multi-host: see the module docstring (``jax.distributed.initialize()``, disjoint
    seeds per process, one file per process).
    """
    from tqdm.auto import tqdm

    mechs = _mechanisms(mechanisms)
    sets = _data_sets(data, n, data_key)
    eps = check_epsilon(eps).ravel()
    if len(set(eps.tolist())) != len(eps):
        raise ValueError(f"eps has duplicate values: {eps.tolist()}")
    seed_list = _seed_list(seeds)
    methods = _metrics(metrics)
    if ground not in ("linf", "l2"):
        raise ValueError(f"ground must be 'linf' or 'l2'; got {ground!r}")
    memory_bytes = check_positive_int(memory_bytes, "memory_bytes")
    devs = _devices(devices)
    key_label = _key_label(key)
    w1_columns = [c for _, _, cols in methods for c in cols]

    table = _Table(out)
    done = table.existing()
    units = pd.DataFrame(
        [(label, ds.label, ds.n, e, s) for label, _ in mechs for ds in sets
         for e in eps.tolist() for s in seed_list],
        columns=list(KEY_COLUMNS),
    )
    groups = dict(list(done.groupby(["mechanism", "data", "n"]))) if len(done) else {}
    requested = pd.MultiIndex.from_product([eps.tolist(), seed_list], names=["eps", "seed"])
    bar = tqdm(total=len(units), unit="rep", disable=not progress, delay=2.0, desc="simulate")
    for ds in sets:
        loaded = None
        for label, mech in mechs:
            rows_done = groups.get((label, ds.label, ds.n), done.iloc[:0])
            if len(rows_done):
                rows_done = rows_done[rows_done.set_index(["eps", "seed"]).index.isin(requested)]
            finished = set(zip(rows_done["eps"].astype(float), rows_done["seed"].astype(int)))
            todo = [s for s in seed_list if any((e, s) not in finished for e in eps.tolist())]
            bar.update(len(finished))
            provenance = {"kind": mech.name, "config": repr(mech), "key": key_label,
                          "data_key": int(data_key), "ground": ground}
            if finished:
                _check_done(rows_done, provenance, w1_columns, out)
            if not todo:
                continue
            if loaded is None:
                loaded = _load(ds, [m for _, m in mechs], eps)
            X, tree, intrinsic = loaded
            common = {"mechanism": label, "kind": mech.name, "data": ds.label, "n": X.shape[0],
                      "d": X.shape[1], "intrinsic_dim": intrinsic}
            per_chunk = _seeds_per_chunk(mech, X.shape[0], X.shape[1], eps, memory_bytes)
            chunks, size = _chunk_plan(todo, per_chunk, len(devs))
            run = functools.partial(_run_chunk, key, mech, X, tree, eps, devs, memory_bytes,
                                    methods, ground, size)
            if warmup:  # compile (and discard) once, so that timings exclude compilation
                run(chunks[0])
            for chunk in chunks:
                result, values = run(chunk)
                rows = _rows(result, values, eps, chunk, common)
                for column, value in provenance.items():
                    rows[column] = value
                if finished:  # a torn earlier run: keep the rows already written
                    fresh = [(e, s) not in finished for e, s in zip(rows["eps"], rows["seed"])]
                    rows = rows[fresh]
                table.append(rows)
                bar.update(len(rows))
    bar.close()
    return table.result(units)


def _run_chunk(key, mech, X, tree, eps, devs, memory_bytes, methods, ground, size, chunk):
    """Release the seeds ``chunk`` (padded to ``size``) at every ε and measure them.

    Returns the [E, len(chunk)] measure and a dict of [E, len(chunk)] metric columns plus
    ``seconds`` / ``release_seconds`` (wall time per replicate).
    """
    padded = chunk + [chunk[-1]] * (size - len(chunk))
    start = time.perf_counter()
    result = jax.block_until_ready(
        release_sharded(key, mech, tree, eps, padded, devs, memory_bytes))
    released = time.perf_counter()
    values = {}
    for method, options, cols in methods:  # on the padded chunk: one shape, one compile
        v = _w1(X, tree, result, method, ground, options, padded)
        values.update(zip(cols, v if method == "bracket" else (v,)))
    values = {k: np.asarray(v)[:, : len(chunk)] for k, v in values.items()}
    per_rep = len(eps) * len(chunk)
    values["seconds"] = (time.perf_counter() - start) / per_rep
    values["release_seconds"] = (released - start) / per_rep
    return result[:, : len(chunk)], values


def _load(ds: _DataSet, mechs, eps):
    """(points, DataTree deep enough for every mechanism at every ε, intrinsic dimension)."""
    X, tree, intrinsic = ds.load()
    need = max(m.data_depth(X.shape[0], X.shape[1], eps) for m in mechs)
    if tree is None or tree.depth < need:
        tree = DataTree.build(X, need)
    return X, tree, int(intrinsic)


def _seed_list(seeds) -> list[int]:
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, bool):
        return list(range(check_positive_int(seeds, "seeds")))
    values = np.asarray(list(seeds))
    if values.ndim != 1 or values.size == 0 or not np.issubdtype(values.dtype, np.integer) \
            or values.min() < 0:
        raise ValueError("seeds must be a positive count or a list of non-negative ints")
    if len(set(values.tolist())) != values.size:
        raise ValueError("seeds has duplicate values")
    return values.tolist()


def _key_label(key) -> str:
    """The sweep key as text: the int, or the raw key words ``w0:w1``."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return str(int(key))
    return ":".join(str(int(w)) for w in np.asarray(as_raw_key(key)).ravel())
