"""The batched W1 evaluator of ``simulate``: every W1 method of a sweep, from engine outputs.

``Evaluator`` measures every replicate of a chunk ([E, S] releases) with the sweep's W1
methods and gives the numbers ``js.w1`` gives for each release alone; ``js.w1``
(``dispatch``) stays the per-call entry point.  ``check_methods`` and ``check_metric``
parse ``simulate``'s ``methods=`` and ``metric=``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.core.keys import as_raw_key, as_typed_key
from jaxsynth.core.partition import GROUND_METRICS
from jaxsynth.core.validate import check_choice, check_positive_int, is_pair
from jaxsynth.wasserstein import bounds, exact, exact1d
from jaxsynth.wasserstein.dispatch import METHODS

__all__ = ["COLUMNS", "MEASURE_BLOCK", "OPTIONS", "Evaluator", "check_methods", "check_metric"]

OPTIONS = {"exact": {"rtol", "clusters"}, "bracket": {"n_directions", "seed"}}
"""Options of the W1 methods that take any (Sinkhorn: those of ``w1_sinkhorn``)."""
COLUMNS = {"exact": ["w1_exact_lower", "w1_exact_upper"], "bracket": ["w1_lower", "w1_upper"]}
"""Result columns of the W1 methods with two ends; any other method's is ``w1_<method>``."""
MEASURE_BLOCK = 16
"""Replicates per call of the atom-based methods (lower bound, exact1d): a fixed shape."""


def check_methods(methods) -> list[tuple[str, dict, list[str]]]:
    """(method, options, columns) for each requested W1 method."""
    if isinstance(methods, str) or is_pair(methods):
        methods = [methods]
    if not isinstance(methods, (list, tuple)) or not methods:
        raise ValueError(f"methods must be a non-empty list of {METHODS}; got {methods!r}")
    out = []
    for item in methods:
        method, options = item if is_pair(item) else (item, {})
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
        if method == "bracket":  # sized against each data set in Evaluator.build
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


def check_metric(metric) -> str:
    """The ground metric (``GROUND_METRICS``), or ``ValueError``; W1 methods given as
    ``metric=`` are told to use ``methods=``."""
    if isinstance(metric, (list, tuple)) or (isinstance(metric, str) and metric in METHODS):
        raise ValueError(f"metric is the ground metric, one of {GROUND_METRICS}; got "
                         f"{metric!r}: W1 methods are chosen with methods=")
    return check_choice(metric, "metric", GROUND_METRICS)


@dataclasses.dataclass(frozen=True, eq=False)
class Evaluator:
    """The W1 methods of a sweep for one data set, computed from engine outputs.

    ``Evaluator.build(X, check_methods(methods), metric)`` prepares the data once (the
    bracket's sorted projections, the exact method's ``ExactData``); for each chunk of
    engine outputs [E, S], ``device_values`` computes on the device what can be, and
    ``host_values`` brings the per-replicate numbers to the host and adds the rest
    (margins, exact, Sinkhorn): one float64 array [E, S] per ``w1_*`` column.
    """

    X: np.ndarray
    methods: list
    metric: str  # the ground metric
    projections: dict  # (n_directions, seed) -> (dirs, sorted data projections), on device
    exact_data: dict  # clusters -> ExactData

    @classmethod
    def build(cls, X, methods, metric):
        """Prepare the data ``X`` for ``methods`` (``check_methods``); ``ValueError`` if it
        cannot be measured (bracket projections too large, exact1d with d ≠ 1)."""
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
        from jaxsynth.wasserstein.sinkhorn import w1_sinkhorn_batch

        points, weights = np.asarray(out["points"]), np.asarray(out["weights"])
        options = dict(options)
        key = options.pop("key", None)
        if key is not None:
            key = as_typed_key(key)
        grid = weights.shape[:2]
        # replicate (ε, s) gets js.w1(..., key=fold_in(key, s)) of its own measure, which
        # folds in the measure's flat index 0: the same numbers as js.w1 on js.release
        keys = None if key is None else [
            jax.random.fold_in(jax.random.fold_in(key, int(seeds[s])), 0)
            for _, s in np.ndindex(*grid)]
        # each replicate's own atoms in canonical order: padding and order depend on the chunk
        flat_p, flat_w, _ = jax.device_get(_canonical_chunk(
            points.reshape((-1,) + points.shape[2:]), weights.reshape(-1, weights.shape[-1])))
        results = w1_sinkhorn_batch(self.X, flat_p, flat_w, keys=keys, metric=self.metric,
                                    **options)
        return np.array([r.value for r in results]).reshape(grid)


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

