"""Monte Carlo sweeps: mechanisms × data sets × n × ε × seeds × W1 methods.

Words: a W1 *method* is how W1 is measured (``methods=["exact", "bracket"]``, the
``w1_*`` columns); the *metric* is the ground metric ``"linf"`` or ``"l2"``
(``metric=``, the ``metric`` column), as in ``js.w1(X, out, method=..., metric=...)``.

``simulate`` returns one row per replicate.  Replicate ``s`` of mechanism ``M`` on data
``X`` at budget ``ε`` is ``js.release(jax.random.fold_in(key, s), M, X, ε)``, whatever
the chunking, the device count or an interruption, so a sweep can be split, resumed and
sharded without changing a number.

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

import contextlib
import dataclasses
import functools
import hashlib
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from jaxsynth import engine
from jaxsynth.api import check_measurable, check_mechanism, seed_count, seed_indices
from jaxsynth.core.datatree import DataTree
from jaxsynth.core.keys import as_raw_key, as_typed_key, replicate_keys
from jaxsynth.core.partition import GROUND_METRICS
from jaxsynth.core.validate import (
    check_bool,
    check_choice,
    check_data,
    check_epsilon,
    check_positive_int,
    refuse_renamed,
)
from jaxsynth.experiments import datasets
from jaxsynth.experiments import store as result_store
from jaxsynth.experiments.store import KEY_COLUMNS, ResultStore, check_out_path
from jaxsynth.mechanisms.registry import mechanism
from jaxsynth.wasserstein import bounds, exact, exact1d
from jaxsynth.wasserstein.dispatch import METHODS

__all__ = ["DEFAULT_METHODS", "METHODS", "simulate"]

# METHODS: the W1 methods of ``js.w1`` (``jaxsynth.wasserstein.dispatch``); ``exact`` gives
# the columns ``w1_exact_lower, w1_exact_upper``, ``bracket`` the columns ``w1_lower, w1_upper``
DEFAULT_METHODS = ("exact",)
"""The default: the ground metric's W1 between the whole data set and each release,
certified to ``w1_exact_upper − w1_exact_lower ≤ rtol · w1_exact_upper`` (rtol 1%).

The papers bound ℓ∞ (ℓ2) W1; ``bracket`` bounds the same quantity cheaply but loosely,
and the ultrametric tree W1 (``tree``) is another quantity, far below it in high
dimension (0 while the depth is below d)."""
OPTIONS = {"exact": {"rtol", "clusters"}, "bracket": {"n_directions", "seed"}}
"""Options of the W1 methods that take any (Sinkhorn: those of ``w1_sinkhorn``)."""
COLUMNS = {"exact": ["w1_exact_lower", "w1_exact_upper"], "bracket": ["w1_lower", "w1_upper"]}
RENAMED = {
    "metrics": "metrics= is now methods= (the W1 methods); metric= is the ground metric",
    "ground": f"ground= is now metric= (the ground metric, one of {GROUND_METRICS})",
}
"""Arguments of ``simulate`` under their former names: refused with the new name."""
CHUNK_REPLICATES = 256
"""Replicates released between two writes of the result store (at least one engine chunk)."""
MEASURE_BLOCK = 16
"""Replicates per call of the atom-based methods (lower bound, exact1d): a fixed shape."""
PREFLIGHT_CACHE_BYTES = 512 * 2**20
"""Data sets loaded by the pre-flight checks are kept for the run up to this many bytes."""


# --------------------------------------------------------------------------- mechanisms


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
        check_mechanism(m, "mechanisms")
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


# --------------------------------------------------------------------------- W1 methods


def _is_pair(item) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict)


def _methods(methods) -> list[tuple[str, dict, list[str]]]:
    """(method, options, columns) for each requested W1 method."""
    if isinstance(methods, str) or _is_pair(methods):
        methods = [methods]
    if not isinstance(methods, (list, tuple)) or not methods:
        raise ValueError(f"methods must be a non-empty list of {METHODS}; got {methods!r}")
    out = []
    for item in methods:
        method, options = item if _is_pair(item) else (item, {})
        if not isinstance(method, str) or method not in METHODS:
            hint = f" ({method!r} is a ground metric: metric=)" if method in GROUND_METRICS \
                else ""
            raise ValueError(f"methods: unknown W1 method {method!r}; known: "
                             f"{', '.join(METHODS)}{hint}")
        unknown = set(options) - OPTIONS.get(method, set())
        if method != "sinkhorn" and unknown:
            raise ValueError(f"methods: {method!r} takes the options "
                             f"{sorted(OPTIONS.get(method, ()))}; got {sorted(options)}")
        if method == "exact":
            exact.check_rtol(options.get("rtol", exact.DEFAULT_RTOL))
            check_positive_int(options.get("clusters", exact.DEFAULT_CLUSTERS), "clusters")
        options = dict(options)
        if method == "bracket":  # sized against each data set in _Measurer.build
            if options.get("n_directions", 0) is None:
                del options["n_directions"]  # the default
            check_positive_int(options.get("n_directions", 0), "n_directions", minimum=0)
            check_positive_int(options.get("seed", 0), "seed", minimum=0)
        if method == "sinkhorn" and options.get("key") is not None:
            as_raw_key(options["key"])  # ValueError naming key, before any release
        columns = COLUMNS.get(method, [f"w1_{method}"])
        out.append((method, options, columns))
    names = [c for _, _, cols in out for c in cols]
    if len(set(names)) != len(names):
        raise ValueError(f"methods: duplicate columns {names}")
    return out


def _check_metric(metric) -> str:
    """The ground metric (``GROUND_METRICS``), or ``ValueError``; W1 methods given as
    ``metric=`` are told to use ``methods=``."""
    if isinstance(metric, (list, tuple)) or (isinstance(metric, str) and metric in METHODS):
        raise ValueError(f"metric is the ground metric, one of {GROUND_METRICS}; got "
                         f"{metric!r}: W1 methods are chosen with methods=")
    return check_choice(metric, "metric", GROUND_METRICS)


@dataclasses.dataclass(frozen=True, eq=False)
class _Measurer:
    """The W1 methods of a sweep for one data set, computed from engine outputs."""

    X: np.ndarray
    methods: list
    metric: str  # the ground metric
    projections: dict  # (n_directions, seed) -> (dirs, sorted data projections), on device
    exact_data: dict  # clusters -> ExactData

    @classmethod
    def build(cls, X, methods, metric):
        projections, exact_data = {}, {}
        for method, options, _ in methods:
            if method == "exact":
                clusters = options.get("clusters", exact.DEFAULT_CLUSTERS)
                exact_data[clusters] = exact.prepare_exact(X, clusters)
            if method == "bracket":
                n_dir, seed = bounds.check_directions(options.get("n_directions"),
                                                      options.get("seed", 0), metric,
                                                      X.shape[1], X.shape[0])
                dirs = bounds.directions(X.shape[1], metric, n_dir, seed)
                projections[n_dir, seed] = (jnp.asarray(dirs),
                                            jnp.asarray(bounds.sorted_projections(X, dirs)))
            if method == "exact1d" and X.shape[1] != 1:
                raise ValueError(f"method 'exact1d' needs d = 1; the data have d = {X.shape[1]}")
        return cls(X, methods, metric, projections, exact_data)

    @property
    def atoms(self) -> bool:
        return any(m not in ("tree", "tree_upper") for m, _, _ in self.methods)

    def bytes_per_replicate(self, plan) -> float:
        atoms = plan.bytes_per_replicate
        dirs = sum(p[1].shape[0] for p in self.projections.values())
        return atoms + 12.0 * dirs * (self.X.shape[0] + 2 * atoms / (4 * (self.X.shape[1] + 2)))

    def device_values(self, out: dict) -> dict:
        """Per-replicate W1 arrays [E, S] (every method but Sinkhorn).

        The tree W1 and its upper end come from the kernel.  The atom-based ones (the
        bracket's lower end, exact1d) are computed per replicate on its own atoms,
        compacted to a width set by its own atom count, in blocks of ``MEASURE_BLOCK``:
        one program per width, so a replicate's value does not depend on the other
        replicates of its chunk, on the ε list, on the chunk size or on the atom capacity
        (``_atom_w1``).
        """
        values = {}
        upper = out[f"upper_{self.metric}"]  # margin and clip on the host
        for method, options, columns in self.methods:
            if method == "tree":
                values[columns[0]] = out[f"tree_{self.metric}"]
            elif method == "tree_upper":
                values[columns[0]] = upper
            elif method == "bracket":
                key = (options.get("n_directions", bounds.DEFAULT_DIRECTIONS[self.metric]),
                       options.get("seed", 0))
                dirs, data = self.projections[key]
                values["w1_lower"] = _atom_w1("bracket", data, dirs, out["points"],
                                                  out["weights"])
                values["w1_upper"] = upper
            elif method == "exact1d":
                data = jnp.asarray(np.sort(self.X[:, 0]).astype(np.float32))
                values[columns[0]] = _atom_w1("exact1d", data, None, out["points"],
                                                  out["weights"])
        return values

    def host_values(self, values: dict, out: dict, seeds) -> dict:
        """Bring the finished numbers to the host; margins; Sinkhorn per replicate."""
        values = {k: np.asarray(v, np.float64) for k, v in jax.device_get(values).items()}
        d = self.X.shape[1]
        if "w1_lower" in values:
            values["w1_lower"] = bounds.lower_margin(values["w1_lower"], d, self.metric)
        for column in ("w1_upper", "w1_tree_upper"):
            if column in values:
                values[column] = bounds.upper_margin(values[column], d, self.metric)
        for method, options, columns in self.methods:
            if method == "sinkhorn":
                values[columns[0]] = self._sinkhorn(out, options, seeds)
            elif method == "exact":
                values.update(zip(columns, self._exact(out, options)))
        return values

    def _exact(self, out, options):
        """``exact.w1_exact`` of every replicate: the numbers ``js.w1(method="exact")`` gives."""
        points, weights = np.asarray(out["points"]), np.asarray(out["weights"])
        grid = weights.shape[:2]
        data = self.exact_data[options.get("clusters", exact.DEFAULT_CLUSTERS)]
        lower, upper = exact.w1_exact(data, points.reshape((-1,) + points.shape[2:]),
                                      weights.reshape(-1, weights.shape[-1]), self.metric,
                                      options.get("rtol", exact.DEFAULT_RTOL))
        return lower.reshape(grid), upper.reshape(grid)

    def _sinkhorn(self, out, options, seeds):
        from jaxsynth.wasserstein.sinkhorn import w1_sinkhorn

        points, weights = np.asarray(out["points"]), np.asarray(out["weights"])
        options = dict(options)
        key = options.pop("key", None)
        if key is not None:
            key = as_typed_key(key)
        result = np.empty(weights.shape[:2])
        for e, s in np.ndindex(*result.shape):
            # replicate (ε, s) gets js.w1(..., key=fold_in(key, s)) of its own measure, which
            # folds in the measure's flat index 0: the same numbers as js.w1 on js.release
            rep = None if key is None else jax.random.fold_in(
                jax.random.fold_in(key, int(seeds[s])), 0)
            # its own atoms in canonical order: padding and order depend on the chunk
            p, w = exact.canonical_atoms(points[e, s], weights[e, s])
            result[e, s] = w1_sinkhorn(self.X, p, w, metric=self.metric, key=rep,
                                       **options).value
        return result


@jax.jit
def _canonical_chunk(points, weights):
    """Every replicate's atoms [R, M, ...] in canonical order, and its positive-atom count.

    Positive atoms first, sorted by coordinates then weight (the engine's atom order
    depends on its capacity, which depends on the chunk).  Exact: a sort and gathers.
    """
    keep = weights > 0
    keys = (weights,) + tuple(points[..., k] for k in reversed(range(points.shape[-1])))
    order = jnp.lexsort(keys + (~keep,), axis=-1)
    points = jnp.take_along_axis(points, order[..., None], axis=1)
    weights = jnp.take_along_axis(weights, order, axis=1)
    return points, weights, jnp.sum(keep, axis=1)


@functools.partial(jax.jit, static_argnames=("width",))
def _select(points, weights, counts, rows, width):
    """Canonical replicates ``rows`` [B] cut (or padded) to ``width`` slots each.

    Slots past a replicate's own atoms repeat its first atom with weight 0.  Exact.
    """
    p, w, c = points[rows], weights[rows], counts[rows]
    if width > w.shape[1]:
        extra = width - w.shape[1]
        p = jnp.concatenate([p, jnp.repeat(p[:, :1], extra, axis=1)], axis=1)
        w = jnp.concatenate([w, jnp.zeros((w.shape[0], extra), w.dtype)], axis=1)
    p, w = p[:, :width], w[:, :width]
    pad = jnp.arange(width)[None] >= c[:, None]
    return jnp.where(pad[..., None], p[:, :1], p), jnp.where(pad, jnp.zeros_like(w), w)


def _width(count: int) -> int:
    """Atom slots of a replicate with ``count`` positive atoms: a power of two, at least 64."""
    return max(64, 1 << max(0, int(count) - 1).bit_length())


@functools.partial(jax.jit, static_argnames=("method",))
def _measure_block(method, data, dirs, points, weights):
    """Raw atom-based W1 (bracket lower end, exact1d) of a block [MEASURE_BLOCK, width, d]."""
    if method == "bracket":
        return bounds.projected_w1(data, dirs, points, weights)
    return jax.vmap(lambda p, w: exact1d.w1_against_sorted(data, p[:, 0], w))(points, weights)


def _atom_w1(method, data, dirs, points, weights):
    """``_measure_block`` of every replicate of [E, S, M, ...] atoms; [E, S] (host).

    Replicates are grouped by ``_width`` of their own positive-atom count and measured
    in blocks of ``MEASURE_BLOCK`` (the last padded by repeating a replicate):
    every call has the same shapes for a given width, whatever the chunk.
    """
    grid = weights.shape[:2]
    flat_p, flat_w, counts_dev = _canonical_chunk(points.reshape((-1,) + points.shape[2:]),
                                                  weights.reshape((-1,) + weights.shape[2:]))
    counts = np.asarray(counts_dev)
    widths = np.array([_width(c) for c in counts])
    parts, source, done = [], np.empty(len(counts), np.int64), 0
    for width in np.unique(widths):
        index = np.flatnonzero(widths == width)
        rows = np.concatenate([index, np.repeat(index[-1:], -len(index) % MEASURE_BLOCK)])
        source[index] = done + np.arange(len(index))
        done += len(rows)
        for start in range(0, len(rows), MEASURE_BLOCK):
            block = jnp.asarray(rows[start: start + MEASURE_BLOCK], jnp.int32)
            p, w = _select(flat_p, flat_w, counts_dev, block, width=int(width))
            parts.append(_measure_block(method, data, dirs, p, w))
    return np.concatenate(jax.device_get(parts))[source].reshape(grid)


# --------------------------------------------------------------------------- the sweep


def _devices(devices) -> list:
    local = jax.local_devices()
    if devices is None:
        return local
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, (bool, np.bool_)):
        if not 1 <= devices <= len(local):
            raise ValueError(f"devices must be between 1 and {len(local)}; got {devices}")
        return local[: int(devices)]
    if not isinstance(devices, (list, tuple)):
        raise ValueError(f"devices must be None, a count or a list of jax devices; got {devices!r}")
    devices = list(devices)
    if not devices:
        raise ValueError("devices is empty")
    for dev in devices:
        if not isinstance(dev, jax.Device):
            raise ValueError(f"devices must be jax devices (jax.local_devices()); got {dev!r}")
    if len(set(devices)) != len(devices):
        raise ValueError(f"devices has duplicates: {devices}")
    return devices


def _key_label(key) -> str:
    """The sweep key as text: the int, or the raw key words ``w0:w1``."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return str(int(key))
    return ":".join(str(int(w)) for w in np.asarray(as_raw_key(key)).ravel())


def _fingerprint(ds) -> str | None:
    """SHA-256 of given points (arrays, files, trees), so a store never mixes two data sets
    of one label; ``None`` for generated data (fixed by name, options, n and data key)."""
    if isinstance(ds.spec, str):
        return None
    X = ds.spec.points if isinstance(ds.spec, DataTree) else ds.spec
    X = np.ascontiguousarray(X, np.float64)
    return "sha256:" + hashlib.sha256(repr(X.shape).encode() + X.tobytes()).hexdigest()


def _load(ds, mechs, eps):
    """(points, DataTree deep enough for every mechanism at every ε, intrinsic dimension)."""
    X, tree, intrinsic = ds.load()
    need = max(check_measurable(m, X.shape[0], X.shape[1], eps) for m in mechs)
    if tree is None or tree.depth < need:
        tree = DataTree.build(X, need)
    return X, tree, int(intrinsic)


def _rows(out: dict, values: dict, plan, seeds, common: dict, seconds: dict) -> pd.DataFrame:
    """One row per replicate of ``out`` [E, S] (E-major)."""
    E, S = len(plan.eps), len(seeds)
    host = jax.device_get({k: out[k] for k in ("depth", "size", "leaves", "visited")
                           + tuple(plan.info_fields) if k in out})
    cols = dict(common)
    cols["eps"] = np.repeat(np.asarray(plan.eps, np.float64), S)
    cols["seed"] = np.tile(np.asarray(seeds, np.int64), E)
    for name, field in (("depth", "depth"), ("m", "size"), ("leaves", "leaves"),
                        ("visited", "visited")):
        cols[name] = np.asarray(host[field]).reshape(E * S).astype(np.int64)
    for name, v in values.items():
        cols[name] = np.asarray(v, np.float64).reshape(E * S)
    cols.update({k: np.full(E * S, v) for k, v in seconds.items()})
    cols["adjacency"] = plan.adjacency
    for name, v in plan.budget.items():
        cols[name] = np.repeat(np.asarray(v, np.float64), S)
    for name in plan.info_fields:
        a = np.asarray(host.get(name))
        if a.shape == (E, S):  # scalar diagnostics per replicate (vectors are left out)
            cols[name] = a.reshape(E * S)
    for name, v in {**plan.info, **plan.diagnostics}.items():  # a table of measurements
        a = np.asarray(v)
        if a.shape == (E,):
            cols[name] = np.repeat(a, S)
    return pd.DataFrame(cols)


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
    sweep, and interruptions (float32 rounding of ``js.w1``'s own batching apart).

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
      ``attrs`` hold ``new_rows`` (replicates computed by this call) and, with ``out``,
      ``file_rows`` (the rows the file holds, which may include other sweeps' rows).

    Raises:
      ValueError: bad arguments (the former names ``metrics=`` and ``ground=`` are
        refused, naming ``methods=`` and ``metric=``), a foreign, changed or
        earlier-format ``out`` file, another writer on it, or a sweep of more than
        ``store.MAX_ROWS`` rows (split it over disjoint seeds, one file per part); always
        before any replicate is released.
    """
    from tqdm.auto import tqdm

    refuse_renamed("simulate", renamed, RENAMED)
    mechs = _mechanisms(mechanisms)
    eps = check_epsilon(eps).ravel()
    if len(set(eps.tolist())) != len(eps):
        raise ValueError(f"eps has duplicate values: {eps.tolist()}")
    n_seeds = seed_count(seeds)
    methods = _methods(methods)
    metric = _check_metric(metric)
    check_bool(progress, "progress")
    check_bool(warmup, "warmup")
    if memory_bytes is not None:
        memory_bytes = check_positive_int(memory_bytes, "memory_bytes")
    data_key = check_positive_int(data_key, "data_key", minimum=0)
    devs = _devices(devices)
    key_label = _key_label(key)
    if out is not None:
        check_out_path(out)  # a foreign file is refused before the data are read
    sets = _data_sets(data, n, data_key)
    total = len(mechs) * len(sets) * len(eps) * n_seeds
    if total > result_store.MAX_ROWS:
        raise ValueError(
            f"seeds: the sweep asks for {total} replicates ({len(mechs)} mechanism(s) × "
            f"{len(sets)} data set(s) × {len(eps)} eps × {n_seeds} seeds); one sweep holds at "
            f"most {result_store.MAX_ROWS} rows: run it in parts over disjoint seeds "
            "(seeds=range(a, b); jaxsynth simulate --first-seed), one file per part")
    seed_list = seed_indices(seeds).tolist()
    w1_columns = [c for _, _, cols in methods for c in cols]
    spec = {
        "key": key_label, "data_key": data_key, "metric": metric, "w1_columns": w1_columns,
        "groups": {f"{label} | {ds.label}": {"kind": m.name, "config": repr(m)}
                   for label, m in mechs for ds in sets},
        "data": {f"{ds.label} | n={ds.n}": fp for ds in sets
                 if (fp := _fingerprint(ds)) is not None},
    }
    store = ResultStore(out, spec, w1_columns) if out is not None else None
    frames = []
    new_rows = 0
    with store or contextlib.nullcontext():
        done = store.table() if store is not None else pd.DataFrame(columns=list(KEY_COLUMNS))
        finished = set(zip(*(done[c].tolist() for c in KEY_COLUMNS))) if len(done) else set()
        work = []  # (data set, [(label, mech, seeds to do)]) with something to do
        for ds in sets:
            todo = []
            for label, mech in mechs:
                left = [s for s in seed_list
                        if any((label, ds.label, ds.n, float(e), s) not in finished for e in eps)]
                if left:
                    todo.append((label, mech, left))
            if todo:
                work.append((ds, todo))
        remaining = sum(len(eps) * len(left) for _, todo in work for _, _, left in todo)
        if store is not None:
            store.check_room(remaining)
        prepared = _preflight(work, mechs, eps, methods, metric, memory_bytes, devs)
        bar = tqdm(total=total, unit="rep", disable=not progress, delay=2.0, desc="simulate")
        bar.update(total - remaining)
        for i, (ds, todo) in enumerate(work):
            loaded, measurer, sized = prepared[i] if i in prepared else _prepare(
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
                        _chunk(plan, measurer, key, runs[0], memory, devs, size)
                for seeds_now in runs:
                    rows = []
                    for plan, memory, size in parts:
                        result, values, seconds = _chunk(plan, measurer, key, seeds_now,
                                                         memory, devs, size)
                        rows.append(_rows(result, values, plan, seeds_now, common, seconds))
                    rows = rows[0] if len(rows) == 1 else pd.concat(rows, ignore_index=True)
                    for column, value in provenance.items():
                        rows[column] = value
                    fresh = [(label, ds.label, ds.n, e, s) not in finished
                             for e, s in zip(rows["eps"], rows["seed"])]
                    rows = rows[fresh]
                    if store is not None:
                        store.append(rows)
                    else:
                        frames.append(rows)
                    new_rows += len(rows)
                    bar.update(len(eps) * len(seeds_now))
            prepared.pop(i, None)
        bar.close()
        if store is not None:
            table = store.finish()
        elif frames:
            table = pd.concat(frames, ignore_index=True)
        else:
            table = pd.DataFrame(columns=list(KEY_COLUMNS))
    requested = pd.MultiIndex.from_tuples(
        [(label, ds.label, ds.n, float(e), s) for label, _ in mechs for ds in sets
         for e in eps for s in seed_list], names=list(KEY_COLUMNS))
    keep = table.set_index(list(KEY_COLUMNS)).index.isin(requested)
    result = table[keep].sort_values(list(KEY_COLUMNS), kind="stable").reset_index(drop=True)
    result.attrs["new_rows"] = new_rows
    if store is not None:
        result.attrs["file_rows"] = len(table)
    return result


def _prepare(ds, mechs, todo, eps, methods, metric, memory_bytes, devs):
    """Load a data set, plan each mechanism to run on it and size its chunks.

    Raises ``ValueError`` naming the data set (and the mechanism) that cannot run.
    """
    try:
        loaded = _load(ds, [m for _, m in mechs], eps)
        measurer = _Measurer.build(loaded[0], methods, metric)
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
                chunk = engine.chunk_size(measurer.bytes_per_replicate(plan), 2**30, memory,
                                          devs[0].platform)
            except ValueError as exc:
                raise ValueError(f"mechanism {label} on {ds.label} (n = {ds.n}): {exc}") from None
            sized[label].append((plan, memory, -(-chunk // len(devs)) * len(devs)))
    return loaded, measurer, sized


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


def _chunk(plan, measurer, key, seeds, memory, devices, chunk):
    """Release seeds × every ε and measure them; finished numbers on the host."""
    keys = replicate_keys(key, seeds)
    start = time.perf_counter()
    out = engine.run(plan, keys, atoms=measurer.atoms, memory_bytes=memory, devices=devices,
                     chunk=chunk)
    out = jax.block_until_ready(out)
    released = time.perf_counter()
    values = measurer.host_values(measurer.device_values(out), out, seeds)
    per = len(plan.eps) * len(seeds)
    seconds = {"seconds": (time.perf_counter() - start) / per,
               "release_seconds": (released - start) / per}
    return out, values, seconds
