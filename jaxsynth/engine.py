"""One engine for every mechanism: plans, chunked vmapped execution, the released measure.

A mechanism config (``jaxsynth.mechanisms``) turns a data tree and a list of budgets into
a ``Plan``: a pure per-replicate kernel, its static options (shapes, flags; hashable), the
per-ε arrays it reads and the arrays every replicate shares (the data tree).  ``run``
executes a plan for any number of replicate keys: the flat grid ε × seeds, vmapped in
chunks of one fixed size (``chunk_size``: the plan's memory model on this device), the
kernel jitted at this one boundary (``_run_chunk``; with the cache on, its traced
programs on disk), each chunk sharded over the devices given; ``release`` wraps the
results in one ``SyntheticMeasure``, and ``replicate_fn`` gives the pure per-replicate
release to jit and vmap by hand.

A plan may give an ``order`` (a cheap per-replicate cost: chunks then run in cost
order), ``retry`` (more capacity for replicates that report ``overflow``; node noise
depends only on the node, so a rerun releases the same measure) and ``shrink`` (a
capacity fitted to what the first chunk ``needed``, overflows rerun with the safe one).
Since every replicate depends only on its key, nothing depends on chunk size, order,
capacity or device count.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Hashable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxsynth.compilation import exported_jit
from jaxsynth.core.batching import (ACCELERATOR_MEMORY_SHARE, DEFAULT_MEMORY_BYTES,
                                    capacity_bucket, chunk_rows, device_memory,
                                    fitting_batch)
from jaxsynth.core.frontier import REPLICATES
from jaxsynth.core.measure import NotPrivateDiagnostics, SyntheticMeasure
from jaxsynth.core.validate import sizes

MAX_CHUNK = {"cpu": 32, "default": 8192}
"""Largest chunk per platform: on a CPU the loop bodies run on one core and small chunks
keep a piece's working set in cache; accelerators want wide batches."""

RESULT_SCALAR_BYTES = 256
"""Bytes of one replicate's scalars and diagnostics in a kept result (an upper bound)."""

SCALARS = ("size", "visited", "leaves", "depth")
"""Per-replicate fields every kernel returns besides its atoms."""
ATOMS = ("points", "weights", "leaf_depth")
"""Per-atom fields every kernel returns (with ``atoms=True``)."""


@dataclasses.dataclass(frozen=True, eq=False)
class Plan:
    """A mechanism ready to run on one data set for a list of budgets.

    Attributes:
      mechanism: the mechanism's name (``SyntheticMeasure.mechanism``).
      kernel: module-level function ``kernel(static, key, params, shared, token) -> dict``
        releasing one replicate (run under ``vmap`` over ``REPLICATES``).
      static: hashable static options of the kernel.
      params: per-ε arrays (leading axis E) the kernel reads as ``params``.
      shared: arrays common to every replicate (``shared``).
      eps: [E] budgets.
      budget: [E] accounting parts (``"epsilon"`` and its split).
      adjacency: the adjacency the accounting assumes (oracles say so here).
      bytes_per_replicate: working memory of one replicate (atoms included).
      atom_bytes: bytes of one replicate's released atoms (an upper bound); ``release``
        keeps them for every replicate.
      info_fields: per-replicate released fields the kernel returns besides ``SCALARS``
        (``out.info``: functions of the release alone, e.g. the selected candidate).
      atom_fields: per-atom fields besides ``ATOMS`` (e.g. PrivTree's ``noisy_mass``).
      info: per-ε public host arrays [E, ...] added to ``out.info``.
      diagnostic_fields: per-replicate statistics the kernel computes against the *true
        data* (the level statistics ``measure.LEVEL_FIELDS``): NOT private, never in the
        released measure
        (``NotPrivateDiagnostics``).
      diagnostics: per-ε host arrays [E, ...] computed from the true data (e.g. exact
        selection scores): NOT private, like ``diagnostic_fields``.
      order: optional ``order(static, key, params, shared) -> cost`` (a scalar).
      retry: optional ``retry(static) -> static`` with more capacity, for ``overflow``.
      shrink: optional ``shrink(static, needed) -> static`` fitted to ``needed`` slots (the
        largest ``needed`` output of the first chunk); requires ``retry``.
      finish: optional host post-processing of the finished measure.
      fitted_width: the atom arrays' width (a capacity) was fitted to the data: ``run``
        cuts them to the power of two holding the batch's most leaves (released values,
        the leaves first), so no shape of the release depends on the data.
    """

    mechanism: str
    kernel: Callable
    static: Hashable
    params: dict
    shared: Any
    eps: np.ndarray
    budget: dict
    adjacency: str
    bytes_per_replicate: float
    atom_bytes: float = 0.0
    info_fields: tuple = ()
    atom_fields: tuple = ()
    info: dict = dataclasses.field(default_factory=dict)
    diagnostic_fields: tuple = ()
    diagnostics: dict = dataclasses.field(default_factory=dict)
    order: Callable | None = None
    retry: Callable | None = None
    shrink: Callable | None = None
    finish: Callable | None = None
    fitted_width: bool = False

    def fields(self, atoms: bool, diagnostics: bool = True) -> tuple:
        """Kernel outputs to keep: scalars and info, plus the diagnostics and the atoms if
        asked (XLA then drops the work of the outputs not kept)."""
        extra = ATOMS + self.atom_fields if atoms else ()
        kept = self.diagnostic_fields if diagnostics else ()
        overflow = ("overflow",) if self.retry is not None else ()
        needed = ("needed",) if self.shrink is not None else ()
        return SCALARS + self.info_fields + kept + overflow + needed + extra


@exported_jit(static_argnames=("kernel", "static", "fields"))
def _run_chunk(kernel, static, fields, keys, eps_index, params, shared, token):
    """One chunk: the kernel vmapped over replicates (keys [C, 2], ε indices [C])."""
    per_replicate = jax.tree_util.tree_map(lambda a: a[eps_index], params)

    def one(key, p):
        return kernel(static, key, p, shared, token)

    out = jax.vmap(one, axis_name=REPLICATES)(keys, per_replicate)
    return {f: out[f] for f in fields}


@functools.partial(jax.jit, static_argnames=("order", "static"))
def _costs(order, static, keys, eps_index, params, shared):
    per_replicate = jax.tree_util.tree_map(lambda a: a[eps_index], params)
    return jax.vmap(lambda k, p: order(static, k, p, shared))(keys, per_replicate)


def result_memory(device=None) -> int:
    """Memory the kept results of a release may fill: the host's RAM on a CPU, else the
    accelerator's (where ``release`` leaves them)."""
    device = device or jax.devices()[0]
    if device.platform != "cpu":
        limit = (device.memory_stats() or {}).get("bytes_limit", 0)
        if limit > 0:
            return int(limit)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_results_fit(plan: Plan, seeds: int) -> None:
    """Refuse, before any work, a release whose kept atoms would not fit in memory.

    Raises:
      ValueError: naming ``seeds``.
    """
    replicates = len(plan.eps) * seeds
    need = replicates * (plan.atom_bytes + RESULT_SCALAR_BYTES)
    limit = result_memory()
    if need > limit:
        raise ValueError(
            f"seeds: {len(plan.eps)} ε × {seeds} seeds keep {need / 2**30:.1f} GiB of released "
            f"atoms but {limit / 2**30:.1f} GiB is available; use fewer seeds, or js.simulate, "
            "which keeps only each replicate's W1 values"
        )


def chunk_size(bytes_per_replicate: float, replicates: int, memory_bytes: int | None = None,
               platform: str | None = None) -> int:
    """Replicates per chunk: a power of two that fits the memory, at most the platform's cap.

    ``memory_bytes``: the working memory of one chunk; ``None``, the default device's
    (``device_memory()``).  Smaller grids use the next power of two of their size, so
    seed counts of one bucket share a compilation.

    Raises:
      ValueError: naming ``memory_bytes`` (or its default) when not even one replicate fits.
    """
    given = memory_bytes is not None
    memory_bytes = memory_bytes if given else device_memory()
    if bytes_per_replicate > memory_bytes:
        need, have = sizes(bytes_per_replicate, memory_bytes)
        budget = f"memory_bytes is {have}" if given else (
            f"a chunk may use {have}, the device's memory for one chunk (the default, as "
            f"memory_bytes was not given: {DEFAULT_MEMORY_BYTES / 2**30:g} GiB on a CPU, "
            f"{ACCELERATOR_MEMORY_SHARE:.0%} of an accelerator's free memory)")
        raise ValueError(f"one replicate needs {need} but {budget}; raise memory_bytes (the "
                         "command line: --memory-mb) or reduce the depth or n")
    platform = platform or jax.devices()[0].platform
    size = fitting_batch(bytes_per_replicate, memory_bytes,
                         MAX_CHUNK.get(platform, MAX_CHUNK["default"]))
    return min(size, capacity_bucket(replicates, per_octave=1, minimum=1))


def _pad_atoms(a, size: int):
    """Zero-pad per-atom arrays [N, M, ...] to ``M = size`` along axis 1."""
    if a.ndim < 2 or a.shape[1] >= size:
        return a
    pad = [(0, 0), (0, size - a.shape[1])] + [(0, 0)] * (a.ndim - 2)
    return np.pad(a, pad) if isinstance(a, np.ndarray) else jnp.pad(a, pad)


@functools.partial(jax.jit, static_argnames=("grid", "cut"))
def _assemble(parts, source, *, grid, cut=None):
    """Chunk outputs (dicts of [C, ...] arrays) to one [E, S, ...] array per field; with
    ``source`` ``None`` the chunks are already in grid order (no gather).  ``cut``:
    ``(fields, width)``, per-atom fields kept to their first ``width`` slots."""
    total = grid[0] * grid[1]

    def field(name, xs):
        flat = jnp.concatenate(xs)
        flat = flat[:total] if source is None else flat[source]
        if cut is not None and name in cut[0]:
            flat = flat[:, :cut[1]]
        return flat.reshape(grid + flat.shape[1:])

    return {k: field(k, [p[k] for p in parts]) for k in parts[0]}


XLA_ALIGNMENT = 64
"""Bytes to which a host buffer is aligned for a CPU device to adopt it with no copy."""


def _assemble_on_host(parts, source, *, grid, cut=None):
    """``_assemble`` on a CPU device: each field copied once, by NumPy, into a host buffer
    aligned to ``XLA_ALIGNMENT``, which ``jax.device_put`` then adopts without a copy (XLA's
    concatenation on a CPU copies several times slower, and compiles per grid shape).
    Nothing else holds the buffer, so the array is as immutable as any."""
    total = grid[0] * grid[1]

    def field(name, xs):
        xs = [np.asarray(x) for x in xs]
        if cut is not None and name in cut[0]:
            xs = [x[:, :cut[1]] for x in xs]
        shape = (total,) + xs[0].shape[1:]
        out = _aligned_empty(shape, xs[0].dtype)
        if source is None:
            start = 0
            for x in xs:
                rows = min(len(x), total - start)
                out[start:start + rows] = x[:rows]
                start += rows
        else:
            np.take(np.concatenate(xs), source, axis=0, out=out)
        return jax.device_put(out.reshape(grid + shape[1:]))

    return {k: field(k, [p[k] for p in parts]) for k in parts[0]}


def _aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialised host array whose data start at a multiple of ``XLA_ALIGNMENT``."""
    size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    raw = np.empty(size + XLA_ALIGNMENT, np.uint8)
    offset = -raw.ctypes.data % XLA_ALIGNMENT
    return raw[offset:offset + size].view(dtype).reshape(shape)


def _padded_params(params: dict) -> dict:
    """Per-ε arrays padded to a power-of-two ε count ≥ 8 (repeating the last ε): one shape per bucket."""
    def pad(a):
        a = np.asarray(a)
        rows = capacity_bucket(a.shape[0], per_octave=1, minimum=8)
        return np.concatenate([a, np.repeat(a[-1:], rows - a.shape[0], axis=0)])

    return {k: pad(v) for k, v in params.items()}


def run(plan: Plan, keys, *, atoms: bool = True, diagnostics: bool = True,
        memory_bytes: int | None = None, devices=None, chunk: int | None = None,
        reduce: Callable | None = None, host: bool = False) -> dict:
    """Release every (ε, key) replicate of ``plan``.

    Args:
      plan: the mechanism's plan.
      keys: [S, 2] raw replicate keys (``keys.replicate_keys``).
      atoms: keep the released atoms (``False``: scalars and diagnostics only).
      diagnostics: keep the plan's ``diagnostic_fields`` (NOT private).
      memory_bytes: working memory of one chunk (default: ``device_memory()``).
      devices: devices to shard each chunk over (default: the default device).
      chunk: replicates per chunk (default: ``chunk_size`` of the grid).
      reduce: optional ``reduce(outputs) -> dict`` applied to each chunk's outputs
        [C, ...] on the device (e.g. W1 values); its results replace the outputs.
      host: return NumPy arrays (each chunk's results are copied once, when finished)
        instead of device arrays.

    Returns:
      dict of arrays with leading axes [E, S].
    """
    keys = np.asarray(keys, np.uint32)
    devices = list(devices) if devices else [jax.devices()[0]]
    E, S = len(plan.eps), keys.shape[0]
    total = E * S
    size = chunk or chunk_size(plan.bytes_per_replicate, total, memory_bytes)
    size = -(-size // len(devices)) * len(devices)
    grid_keys = np.tile(keys, (E, 1))
    grid_eps = np.repeat(np.arange(E, dtype=np.int32), S)
    params = _padded_params(plan.params)
    order = np.arange(total)
    if plan.order is not None and total > 1:
        costs = np.concatenate([
            np.asarray(_costs(plan.order, plan.static, grid_keys[i], grid_eps[i], params,
                              plan.shared))
            for i in chunk_rows(total, size)
        ])[:total]
        order = np.argsort(costs, kind="stable")
    fields = plan.fields(atoms, diagnostics)
    runner = functools.partial(_run_grid, plan, fields=fields, params=params, devices=devices,
                               reduce=reduce, host=host)
    parts = _run_shrinking(plan, runner, grid_keys[order], grid_eps[order], size)
    source = np.empty(total, np.int64)
    source[order] = np.arange(total)  # grid position -> position in the ordered run
    if plan.retry is not None:
        parts, source = _rerun_overflows(plan, runner, grid_keys, grid_eps, size, parts, source)
    cut = None
    if "weights" in parts[0]:  # a shrunk capacity gives narrower atoms than the first chunk's
        width = max(p["weights"].shape[1] for p in parts)
        parts = [{k: (_pad_atoms(v, width) if k in ATOMS + plan.atom_fields else v)
                  for k, v in p.items()} for p in parts]
        if plan.fitted_width and "leaves" in parts[0]:  # the leaves' width, not the capacity's
            # the replicates the grid keeps (not an overflowed first try's)
            leaves = int(np.concatenate([np.asarray(p["leaves"]) for p in parts])[source].max())
            cut = (ATOMS + plan.atom_fields,
                   min(width, capacity_bucket(leaves, per_octave=1, minimum=1)))
    if host:
        out = {k: np.concatenate([p[k] for p in parts])[source] for k in parts[0]}
        out = {k: v.reshape((E, S) + v.shape[1:]) for k, v in out.items()}
        return out if cut is None else {
            k: v[:, :, :cut[1]] if k in cut[0] else v for k, v in out.items()}
    in_order = np.array_equal(source, np.arange(total))
    assemble = (_assemble_on_host if len(devices) == 1 and devices[0].platform == "cpu"
                else _assemble)
    return assemble(tuple(parts), None if in_order else source.astype(np.int32), grid=(E, S),
                    cut=cut)


def _run_grid(plan, static, grid_keys, grid_eps, size, *, fields, params, devices, reduce,
              host) -> list:
    """Run the (ordered) grid in chunks of ``size`` replicates; one output dict per chunk."""
    token = jnp.bool_(True)
    place = None
    if len(devices) > 1:
        place = NamedSharding(Mesh(np.array(devices), (REPLICATES,)), PartitionSpec(REPLICATES))
    parts = []
    for index in chunk_rows(grid_keys.shape[0], size):
        chunk_keys, chunk_eps = grid_keys[index], grid_eps[index]
        if place is not None:
            chunk_keys, chunk_eps = jax.device_put((chunk_keys, chunk_eps), place)
        out = _run_chunk(plan.kernel, static, fields, chunk_keys, chunk_eps, params, plan.shared,
                         token)
        if reduce is not None:
            out = reduce(out)
        parts.append(jax.device_get(out) if host else out)
    return parts


def _run_shrinking(plan, runner, grid_keys, grid_eps, size) -> list:
    """All chunks; with ``plan.shrink``, the first at the safe capacity and the rest fitted."""
    if plan.shrink is None or grid_keys.shape[0] <= size:
        return runner(plan.static, grid_keys, grid_eps, size)
    first = runner(plan.static, grid_keys[:size], grid_eps[:size], size)
    static = plan.shrink(plan.static, int(np.max(np.asarray(first[0]["needed"]))))
    return first + runner(static, grid_keys[size:], grid_eps[size:], size)


def _rerun_overflows(plan, runner, grid_keys, grid_eps, size, parts, source):
    """Rerun replicates that overflowed their capacity with the plan's retry options.

    Returns the chunk outputs with the reruns appended as extra chunks, and the source
    positions updated to point at them.
    """
    static = plan.static
    while True:
        overflow = np.concatenate([np.asarray(p["overflow"]) for p in parts])
        bad = np.flatnonzero(overflow[source])  # grid positions still overflowing
        if bad.size == 0:
            return parts, source
        static = plan.retry(static)
        done = sum(p["overflow"].shape[0] for p in parts)
        redo = runner(static, grid_keys[bad], grid_eps[bad], size)
        width = max(p["weights"].shape[1] for p in parts + redo) if "weights" in parts[0] else 0
        parts = [{k: (_pad_atoms(v, width) if k in ATOMS + plan.atom_fields else v)
                  for k, v in p.items()} for p in parts + redo]
        source = source.copy()
        source[bad] = done + np.arange(bad.size)


def replicate_fn(plan: Plan) -> Callable:
    """The pure release of one replicate of ``plan``: ``fn(key, eps_index) -> SyntheticMeasure``.

    ``key`` is a raw ``uint32[2]`` or typed JAX key, ``eps_index`` an int index into
    ``plan.eps``; the result is the unbatched measure ``release`` gives that replicate
    (the kernel under a one-replicate ``vmap``, so the user may ``jit``/``vmap`` it).

    Raises:
      ValueError: naming ``mech`` for plans that may need the host between or after
        kernel calls (a capacity that can overflow and is rerun with ``retry``, a
        ``finish`` post-processing): use ``release_batch`` for those.
    """
    if plan.finish is not None or not _capacity_is_safe(plan):
        raise ValueError(f"mech: a {plan.mechanism} release may overflow its capacity (rerun "
                         "with more) or be finished on the host; use release_batch")
    fields = plan.fields(atoms=True)
    params = jax.tree_util.tree_map(jnp.asarray, plan.params)
    info = {k: jnp.asarray(_public(v)) for k, v in plan.info.items()}
    budget = {k: jnp.asarray(_public(v)) for k, v in plan.budget.items()}

    def fn(key, eps_index):
        if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.key_data(key)
        token = jnp.asarray(eps_index) >= 0  # runtime-true, as the engine's token
        one = jax.tree_util.tree_map(lambda a: a[eps_index][None], params)
        out = jax.vmap(lambda k, p: plan.kernel(plan.static, k, p, plan.shared, token),
                       axis_name=REPLICATES)(key[None].astype(jnp.uint32), one)
        out = {f: out[f][0] for f in fields}
        return SyntheticMeasure(
            points=out["points"], weights=out["weights"], leaf_depth=out["leaf_depth"],
            size=out["size"], visited=out["visited"], leaves=out["leaves"],
            depth=out["depth"], budget={k: v[eps_index] for k, v in budget.items()},
            info={**{k: out[k] for k in plan.info_fields + plan.atom_fields},
                  **{k: v[eps_index] for k, v in info.items()}},
            adjacency=plan.adjacency, mechanism=plan.mechanism)

    return fn


def _capacity_is_safe(plan: Plan) -> bool:
    """Whether ``plan.static`` never overflows: no ``retry``, or ``retry`` gives it back."""
    if plan.retry is None:
        return True
    try:
        return plan.retry(plan.static) == plan.static
    except ValueError:  # a fixed capacity that cannot grow
        return False


def release(plan: Plan, keys, memory_bytes: int | None = None, diagnostics: bool = False):
    """Run ``plan`` for ``keys`` [S, 2] and return the [E, S] ``SyntheticMeasure``; with
    ``diagnostics``, the pair ``(measure, NotPrivateDiagnostics)``."""
    out = run(plan, keys, atoms=True, diagnostics=diagnostics, memory_bytes=memory_bytes)
    result = measure(plan, out)
    return (result, not_private_diagnostics(plan, out)) if diagnostics else result


def _public(a) -> np.ndarray:
    """A per-ε host array as the measure holds it (32-bit floats and ints)."""
    a = np.asarray(a)
    return a.astype(np.float32 if a.dtype.kind == "f" else np.int32 if a.dtype.kind in "iu"
                    else a.dtype)


def _per_eps(a, grid: tuple):
    """A small per-ε host array [E, ...] broadcast over seeds to [E, S, ...] (32-bit)."""
    a = _public(a)
    return jax.device_put(np.ascontiguousarray(
        np.broadcast_to(a.reshape(a.shape[:1] + (1,) + a.shape[1:]), grid + a.shape[1:])
    ))


def not_private_diagnostics(plan: Plan, out: dict) -> NotPrivateDiagnostics:
    """The data-dependent statistics of a plan's outputs [E, S, ...] (NOT private)."""
    grid = out["size"].shape
    values = {k: out[k] for k in plan.diagnostic_fields}
    values.update({k: _per_eps(v, grid) for k, v in plan.diagnostics.items()})
    return NotPrivateDiagnostics(values, plan.mechanism)


def measure(plan: Plan, out: dict) -> SyntheticMeasure:
    """The ``SyntheticMeasure`` of a plan's outputs [E, S, ...] (the one constructor)."""
    grid = out["size"].shape
    info = {k: out[k] for k in plan.info_fields + plan.atom_fields}
    info.update({k: _per_eps(v, grid) for k, v in plan.info.items()})
    result = SyntheticMeasure(
        points=out["points"],
        weights=out["weights"],
        leaf_depth=out["leaf_depth"],
        size=out["size"],
        visited=out["visited"],
        leaves=out["leaves"],
        depth=out["depth"],
        budget={k: _per_eps(v, grid) for k, v in plan.budget.items()},
        info=info,
        adjacency=plan.adjacency,
        mechanism=plan.mechanism,
    )
    return plan.finish(result) if plan.finish is not None else result
