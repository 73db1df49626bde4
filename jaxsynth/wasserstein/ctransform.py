"""The c-transform of many points over all atoms, and each point's best atoms: jitted passes.

For atom potentials ``v`` (transport duals), the c-transform at a point ``x`` is
``min_j c(x, y_j) − v_j`` over *all* atoms ``y_j``.  It makes any ``v`` dual-feasible
(Kantorovich duality; the lower end of ``exact.w1_exact``), and the atoms of least
reduced cost ``c(x, y_j) − v_j`` are the arcs column generation adds.  ``reduced_pass``
returns both for every point, without an ``n × M`` matrix in memory: points go through
in chunks of ``CHUNK``.

**Pruning.**  Few atoms: one dense pass.  From ``PRUNE_ATOMS`` atoms on, each box of
``BOX`` consecutive points meets only the groups of ``GROUP`` consecutive atoms (Morton
order: both are compact) that can hold one of its points' best atoms.  The least
distance between the boxes minus the group's largest potential bounds its reduced costs
from below; the greatest distance minus the smallest potential of any one group bounds
each point's ``GROUP`` best values from above; a group whose lower bound exceeds that (by
more than the float32 rounding of both) is skipped.  The result is the dense pass's.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.core import partition
from jaxsynth.core.batching import capacity_bucket
from jaxsynth.wasserstein.hostpass import GROUP, host_pass, pruning_margin

__all__ = ["CHUNK", "PRUNE_ATOMS", "atom_bucket", "on_host", "pass_array", "pass_chunks",
           "point_chunks", "reduced_block", "reduced_pass"]

CHUNK = 1024
"""Points per step of the jitted pass over all atoms (memory ``CHUNK × M`` floats)."""
BOX = 128
"""Consecutive points (Morton order) per box of the pruned pass."""
PRUNE_ATOMS = 4096
"""Padded atom counts from which the pass over all atoms is pruned by boxes."""
HOST_PRUNE_ATOMS = 512
"""The same for the host kernel, whose pruned pass skips the groups it drops outright
(no padded widths): from this many atoms it was the faster (paired runs at n = 3·10^4,
``docs/theory/exact-w1.md``)."""
HOST_PRUNE_ATOMS_ALONE = 64
"""The same for the host kernel's c-transform alone (no best atoms: each box's atoms
bounded one by one, ``hostpass._near_atoms``)."""
MIN_WIDTH = 8
"""Fewest candidate groups a box of the pruned pass is given (few compiled widths)."""


def _cost_block(x, y, metric: str):
    """Cost matrix [P, M] between points [P, d] and atoms [M, d] (float32, on device).

    One coordinate at a time: XLA fuses it into a single [P, M] loop, where a reduction
    over a trailing size-``d`` axis of a [P, M, d] difference is several times slower.
    """
    total = None
    for k in range(x.shape[1]):
        diff = jnp.abs(x[:, k, None] - y[None, :, k])
        if metric == "linf":
            total = diff if total is None else jnp.maximum(total, diff)
        else:
            total = diff * diff if total is None else total + diff * diff
    return total if metric == "linf" else jnp.sqrt(total)


def _smallest(values, count):
    """Column indices of ``count`` small entries of each row of nonnegative float32
    ``values``: the smallest, up to near-ties.

    Each value's lowest ``b = ⌈log2(columns)⌉`` bits are replaced by its column, so one
    integer minimum per pick finds value and column together (XLA's CPU argmin is several
    times slower); values closer than a relative ``2^(b−23)`` may come in either order.
    Only candidate arcs are chosen this way, never a certified number.
    """
    bits = max(1, (values.shape[1] - 1).bit_length())
    low_bits = (1 << bits) - 1
    keys = ((jax.lax.bitcast_convert_type(values, jnp.int32) & ~low_bits)
            | jnp.arange(values.shape[1], dtype=jnp.int32)[None, :])
    picks = []
    for _ in range(count):
        smallest = keys.min(axis=1)
        picks.append(smallest & low_bits)
        keys = jnp.where(keys == smallest[:, None], jnp.iinfo(jnp.int32).max, keys)
    return jnp.stack(picks, axis=1)


def reduced_block(x, y, v, metric: str, k: int):
    """The c-transform ``min_j (c(x_i, y_j) − v_j)`` of points ``x`` [P, d] over atoms
    ``y`` [A, d] and, if ``k > 0``, the indices (into ``y``) of each point's ``k`` atoms of
    smallest reduced cost.

    The best atoms are found among the ``k`` groups of ``GROUP`` consecutive atoms with the
    smallest minima, which hold them: a group holding one of the ``k`` best atoms ``a`` has
    a minimum ``≤`` its value, and only groups holding one of the fewer than ``k`` atoms
    below ``a`` can have a smaller one (up to the near-ties of ``_smallest``: potentials
    ``v ≤ 0`` keep reduced costs nonnegative).  Padding atoms carry potentials far below
    the others and are never chosen.
    """
    reduced = _cost_block(x, y, metric) - v[None, :]
    if k == 0:
        return reduced.min(axis=1), jnp.zeros((x.shape[0], 0), jnp.int32)
    minima = reduced.reshape(x.shape[0], -1, GROUP).min(axis=2)
    fmin = minima.min(axis=1)
    groups = _smallest(minima, k)
    atoms = (groups[:, :, None] * GROUP + jnp.arange(GROUP)).reshape(x.shape[0], -1)
    best = _smallest(jnp.take_along_axis(reduced, atoms, axis=1), k)
    return fmin, jnp.take_along_axis(atoms, best, axis=1)


@functools.lru_cache(maxsize=None)
def _dense_pass(metric: str, k: int):
    """Jitted ``reduced_block`` of every point of ``chunks`` [C, CHUNK, d] against all
    atoms."""

    @jax.jit
    def run(chunks, y, v):
        fmin, best = jax.lax.map(lambda x: reduced_block(x, y, v, metric, k), chunks)
        return fmin.reshape(-1), best.reshape(fmin.size, k)

    return run


def _box_distances(lo, hi, glo, ghi, metric: str):
    """Least and greatest distance between boxes ``[lo, hi]`` [B, 1, d] and atom-group
    boxes ``[glo, ghi]`` [1, G, d]: [B, G] each."""
    gap = jnp.maximum(0.0, jnp.maximum(glo - hi, lo - ghi))
    far = jnp.maximum(hi - glo, ghi - lo)
    if metric == "linf":
        return gap.max(axis=-1), far.max(axis=-1)
    return jnp.sqrt((gap * gap).sum(axis=-1)), jnp.sqrt((far * far).sum(axis=-1))


@functools.lru_cache(maxsize=None)
def _candidate_groups(metric: str):
    """Jitted: which atom groups can hold one of the ``GROUP`` best atoms of some point of
    each box of ``BOX`` consecutive points (Morton order: boxes are small).

    For a box and a group, ``near − max v`` bounds the reduced cost of every pair from
    below; ``far − min v`` of any one group bounds from above the reduced cost of its
    ``GROUP`` atoms at every point of the box, hence each point's ``GROUP`` best values.
    A group whose lower bound exceeds the least upper bound (by more than ``margin``, the
    float32 rounding of both) holds none of them.  Returns [B, G] booleans.
    """

    @jax.jit
    def run(chunks, y, v, margin):
        x = chunks.reshape(-1, BOX, chunks.shape[-1])
        atoms, pots = y.reshape(-1, GROUP, y.shape[-1]), v.reshape(-1, GROUP)
        near, far = _box_distances(x.min(axis=1)[:, None], x.max(axis=1)[:, None],
                                   atoms.min(axis=1)[None], atoms.max(axis=1)[None], metric)
        upper = (far - pots.min(axis=1)[None]).min(axis=1)
        return near - pots.max(axis=1)[None] <= upper[:, None] + margin

    return run


@functools.lru_cache(maxsize=None)
def _pruned_pass(metric: str, k: int):
    """Jitted ``reduced_block`` of the boxes ``rows`` of ``chunks`` (``BOX`` points each)
    against their candidate atom groups ``groups`` [R, W] (index ``G``: an empty group of
    padding atoms appended to ``y``, ``v``)."""

    @jax.jit
    def run(chunks, y, v, rows, groups):
        x = chunks.reshape(-1, BOX, chunks.shape[-1])[rows]

        def box(args):
            points, ids = args
            ids = (ids[:, None] * GROUP + jnp.arange(GROUP)).reshape(-1)
            fmin, best = reduced_block(points, y[ids], v[ids], metric, k)
            return fmin, ids[best]

        fmin, best = jax.lax.map(box, (x, groups))
        return fmin.reshape(-1), best.reshape(fmin.size, k)

    return run


def reduced_pass(chunks, y, v, metric: str, k: int):
    """Host ``(fmin [C·CHUNK], best [C·CHUNK, k])``: the c-transform of every point of
    ``chunks`` [C, CHUNK, d] over the atoms ``y`` [S, d] with centred potentials
    ``v ≤ 0`` [S], and its ``k ≤ GROUP`` atoms of least reduced cost.

    Arrays on the CPU go to the host kernel (``hostpass.host_pass``: the same result,
    pruned alike from ``HOST_PRUNE_ATOMS``, the c-transform alone from
    ``HOST_PRUNE_ATOMS_ALONE``).  Few atoms (``S < PRUNE_ATOMS``): one dense
    pass.  Otherwise each box
    of ``BOX`` consecutive points meets only its candidate groups (``_candidate_groups``,
    which never drops a group that could hold a minimum), boxes of similar candidate
    counts together: the result is the dense pass's, for a fraction of its work.
    """
    size, d = y.shape
    if on_host(chunks):
        prune = HOST_PRUNE_ATOMS if k else HOST_PRUNE_ATOMS_ALONE
        return host_pass(np.asarray(chunks).reshape(-1, d), y, v, metric, k,
                         None if size < prune else BOX)
    if size < PRUNE_ATOMS:
        return jax.device_get(_dense_pass(metric, k)(chunks, y, v))
    diam = float(partition.diameter(0, d, metric))
    lowest = float(np.asarray(v).min())
    keep = np.asarray(_candidate_groups(metric)(chunks, y, v,
                                                np.float32(pruning_margin(v, d, metric))))
    boxes, groups = keep.shape
    counts = keep.sum(axis=1)
    # widths: powers of two, at least MIN_WIDTH groups, all groups past half of them
    width = capacity_bucket(counts, per_octave=1, minimum=MIN_WIDTH)
    width = np.where(width * 2 > groups, groups, width)
    y_ext = jnp.concatenate([y, jnp.repeat(y[:1], GROUP, axis=0)])
    v_ext = jnp.concatenate([v, jnp.full(GROUP, lowest - 4 * diam - 1, v.dtype)])  # never best
    fmin = np.empty(boxes * BOX, np.float32)
    best = np.empty((boxes * BOX, k), np.int32)
    for w in np.unique(width):
        rows = np.flatnonzero(width == w)
        padded = capacity_bucket(len(rows), per_octave=1, minimum=8)
        ids = np.full((padded, w), groups, np.int32)
        if w == groups:
            ids[:] = np.arange(groups)
        else:
            r, c = np.nonzero(keep[rows])
            ids[r, np.arange(len(r)) - np.repeat(np.cumsum(counts[rows]) - counts[rows],
                                                 counts[rows])] = c
        f, b = jax.device_get(_pruned_pass(metric, k)(
            chunks, y_ext, v_ext, np.concatenate([rows, np.repeat(rows[:1], padded - len(rows))]),
            ids))
        points = (rows[:, None] * BOX + np.arange(BOX)).ravel()
        fmin[points], best[points] = f[: len(points)], b[: len(points)]
    return fmin, best


def on_host(chunks) -> bool:
    """Whether the passes of ``chunks`` run on the host kernel: arrays on the CPU."""
    return isinstance(chunks, np.ndarray) or all(
        device.platform == "cpu" for device in chunks.devices())


def point_chunks(points: np.ndarray, bucket: bool = False) -> np.ndarray:
    """Points [P, d] as float32 [C, CHUNK, d] (host), padded by repeating the first; with
    ``bucket``, C is a power of two (few shapes to compile for varying P)."""
    count = -(-len(points) // CHUNK)
    count = capacity_bucket(count, per_octave=1, minimum=1) if bucket else count
    padded = np.concatenate([points, np.repeat(points[:1], count * CHUNK - len(points), 0)])
    return padded.astype(np.float32).reshape(-1, CHUNK, points.shape[1])


def pass_chunks(points: np.ndarray):
    """Points [P, d] as ``reduced_pass``'s chunks, where the passes run: host float32
    ``point_chunks`` when JAX's backend is the CPU (the host kernel reads them as they
    are: nothing to transfer, no shape to compile), else on the default device with a
    power-of-two chunk count (a data set of a similar size compiles no new shape)."""
    if jax.default_backend() == "cpu":
        return point_chunks(points)
    return jnp.asarray(point_chunks(points, bucket=True))


def pass_array(array: np.ndarray):
    """``array`` (atoms or potentials of a pass) where the passes run: ``pass_chunks``'s
    rule."""
    return array if jax.default_backend() == "cpu" else jnp.asarray(array)


def atom_bucket(m: int, minimum: int = 256) -> int:
    """Padded atom count: ``2^e · {4, 5, 6, 7} / 4``, at least ``minimum`` (256 by default,
    a multiple of ``GROUP``), so that a sweep's varying atom counts compile few shapes."""
    return capacity_bucket(m, per_octave=4, minimum=minimum)
