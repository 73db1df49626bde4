"""The released synthetic measure (``js.SyntheticMeasure``) and representative-point placement.

A mechanism's output is a weighted point set ``μ_Y = Σ_i w_i δ_{y_i}``: representatives
``points`` [..., M, d] with ``weights`` [..., M] summing to 1 (zero-weight padding keeps
shapes static).  Every atom lies strictly inside its leaf cell, whose level is
``leaf_depth`` [..., M]; the tree metric of the partition (``jaxsynth.wasserstein``)
reads it.  Leading axes ``...`` are batch axes (ε values × seeds) when the measure comes
from the batched entry point.  Arrays stay on the device that released them.

``check_measure`` is the one validation of a measure against data, ``positive_atoms``
its atoms of positive weight first, ``canonical_atoms`` the one canonical form of its atoms, and ``LEVEL_FIELDS`` the metric-free level
statistics a release kernel can report against the true data (NOT PRIVATE).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.core.frontier import fixed_reduce, fixed_sum

MASS_TOLERANCE = 1e-4
"""Largest ``|Σ weights − 1|`` of a replicate accepted as a probability measure."""
SMALL_MEASURE = 2**16
"""Atoms (all replicates together) up to which a measure is checked in NumPy, not jitted."""
MAX_BITS_PER_COORDINATE = 100
"""Partition digits per coordinate a measure's leaves may use (float32 ``x·2^k`` must
not overflow when the tree W1 computes their Morton codes)."""
LEVEL_FIELDS = ("level_gap", "leaf_mass")
"""NOT PRIVATE level statistics [..., L+1] a kernel reports against the true data:
``level_gap[j] = Σ_{θ at level j} |μ(θ) − ν(θ)|`` (0 at the root) and ``leaf_mass[j]``,
the data plus synthetic mass in leaves at level ``j``; both scaled by 2 on a shifted
partition.  Metric-free: the W1 methods weigh them (``jaxsynth.wasserstein``)."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SyntheticMeasure:
    """A released synthetic measure, possibly batched over leading axes.

    Attributes:
      points: [..., M, d] float32 representatives.
      weights: [..., M] float32 weights summing to 1 (zero on padding).
      leaf_depth: [..., M] int32 level of the partition cell holding each atom.
      size: [...] int32: for the PMM family, the synthetic sample size ``m``; for PrivTree
        and the oracle measures, which release a probability vector rather than a sample,
        the number of atoms of positive weight.
      visited: [...] int32, nodes whose noisy count was materialised (PrivTree: cells
        whose split test was drawn).
      leaves: [...] int32, leaves of the released tree: for the PMM family those with
        positive mass; for PrivTree and the oracle partitions every leaf, zero-mass ones
        included (each carries an atom, which the tree W1 needs).
      depth: [...] int32, deepest level of the released tree.
      budget: dict of [...] float arrays: ``"epsilon"`` (total) and its parts.
      info: dict of per-mechanism released fields (arrays with the same leading axes):
        functions of the release alone (e.g. Adaptive Pruned-PMM's ``selected``, PrivTree's
        ``noisy_mass`` and ``shift``) or public parameters.  Nothing computed from the
        true data is here; ``release_batch(..., diagnostics=True)`` returns that apart,
        as ``NotPrivateDiagnostics``.
      adjacency: ``"replacement"`` or ``"add_remove"`` (static).
      mechanism: the mechanism's name (static).

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> batch = js.release_batch(0, js.PMM(depth=6), X, eps=[1.0, 2.0], seeds=4)
      >>> batch.batch_shape, batch.points.shape      # [E, S] replicates of M atoms in [0,1]^2
      ((2, 4), (2, 4, 64, 2))
      >>> out = batch[1, 3]                          # ε = 2, seed 3: one replicate
      >>> round(float(out.weights.sum()), 5), out.accounting["epsilon"], out.mechanism
      (1.0, 2.0, 'pmm')
    """

    points: jax.Array
    weights: jax.Array
    leaf_depth: jax.Array
    size: jax.Array
    visited: jax.Array
    leaves: jax.Array
    depth: jax.Array
    budget: dict
    info: dict
    adjacency: str = dataclasses.field(metadata=dict(static=True), default="replacement")
    mechanism: str = dataclasses.field(metadata=dict(static=True), default="")

    @property
    def accounting(self) -> dict[str, Any]:
        """Budget accounting: ``"epsilon"`` (total), ``"adjacency"``, and the parts."""
        parts = {k: _scalar_or_array(v) for k, v in self.budget.items()}
        return {"adjacency": self.adjacency, **parts}

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return tuple(self.weights.shape[:-1])

    def __getitem__(self, index) -> "SyntheticMeasure":
        """Index the batch axes, e.g. ``out[e, s]`` for ε index ``e`` and seed ``s``."""
        if not self.batch_shape:
            raise IndexError("this SyntheticMeasure has no batch axes")
        return jax.tree_util.tree_map(lambda a: a[index], self)


def _scalar_or_array(v):
    a = np.asarray(v)
    return a.item() if a.ndim == 0 else a


@dataclasses.dataclass(frozen=True)
class NotPrivateDiagnostics:
    """NOT PRIVATE: statistics of a release computed from the true data.

    What a mechanism's kernels compute for free against the data (the tree W1 of each
    replicate, ``tree_<metric>`` and its upper end ``upper_<metric>``) and, for Adaptive
    Pruned-PMM, the exact selection ``scores``, ``probabilities`` and ``sensitivity``.
    They are for studying the mechanism; publishing any of them voids the privacy
    guarantee of the release they describe.  Read them as ``diag["tree_linf"]``.

    Attributes:
      values: dict of arrays with the release's batch axes.
      mechanism: the mechanism's name.

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> out, diag = js.release(0, js.PMM(depth=6), X, eps=1.0, diagnostics=True)
      >>> diag.mechanism, "tree_linf" in diag.keys()
      ('pmm', True)
      >>> bool(0 <= diag["tree_linf"] <= diag["upper_linf"])   # the tree W1, its upper end
      True
    """

    values: dict
    mechanism: str

    def __getitem__(self, name: str):
        if name not in self.values:
            raise KeyError(f"{name!r}: these diagnostics hold {sorted(self.values)}")
        return self.values[name]

    def keys(self):
        return self.values.keys()


def check_measure(out, d: int, name: str = "out", mass: bool = False):
    """Validate a ``SyntheticMeasure`` against data of dimension ``d`` (host, once).

    Args:
      out: the measure, batch shape [...], atoms [..., M].
      d: the data dimension.
      name: the argument's name in messages.
      mass: also require every replicate's weights to sum to 1 within ``MASS_TOLERANCE``.

    Returns:
      ``(points [B, M, d] float32, weights [B, M] float32, leaf_depth [B, M] int32,
      shift [B, d] float32 or None)`` NumPy arrays, batch axes flattened to ``B``.

    Raises:
      ValueError: naming ``name`` for a non-measure, wrong shapes, points outside the
        cube, negative or non-finite weights, an empty replicate, negative depths, a bad
        ``info["shift"]``, or (``mass``) a replicate whose mass is not 1.
    """
    if not isinstance(out, SyntheticMeasure):
        raise ValueError(  # noqa: TRY004 (bad input is a ValueError naming the argument)
            f"{name} must be a jaxsynth.SyntheticMeasure; got {type(out).__name__}"
        )
    points = np.asarray(out.points, np.float32)
    weights = np.asarray(out.weights, np.float32)
    leaf_depth = np.asarray(out.leaf_depth)
    if points.ndim < 2 or points.shape[-1] != d:
        raise ValueError(
            f"{name}.points must have shape (..., M, {d}) to match X; got {points.shape}"
        )
    if weights.shape != points.shape[:-1] or leaf_depth.shape != weights.shape:
        raise ValueError(
            f"{name}.weights {weights.shape} and {name}.leaf_depth {leaf_depth.shape} must "
            f"have shape {points.shape[:-1]}"
        )
    if not np.issubdtype(leaf_depth.dtype, np.integer):
        raise ValueError(f"{name}.leaf_depth must hold non-negative integers")
    if weights.size == 0:
        raise ValueError(f"{name} has an empty batch, no atoms, or a replicate of total weight 0")
    points_ok, weights_ok, depth_ok, totals = _measure_checks(points, weights, leaf_depth)
    if not points_ok:
        raise ValueError(f"{name}.points must be finite and inside [0,1]^d")
    if not weights_ok:
        raise ValueError(f"{name}.weights must be finite and non-negative")
    if np.any(totals <= 0):
        raise ValueError(f"{name} has an empty batch, no atoms, or a replicate of total weight 0")
    if not depth_ok:
        raise ValueError(f"{name}.leaf_depth must hold non-negative integers")
    shift = out.info.get("shift") if isinstance(out.info, dict) else None
    batch = points.shape[:-2]
    if shift is not None:
        shift = np.asarray(shift, np.float32)
        if shift.shape != batch + (d,) or not np.all((shift >= 0) & (shift <= 1)):
            raise ValueError(
                f"{name}.info['shift'] must have shape {batch + (d,)} with values in [0, 1]"
            )
        shift = shift.reshape(-1, d)
    m = points.shape[-2]
    if mass:
        _check_mass(totals.reshape(-1), name)
    return (points.reshape(-1, m, d), weights.reshape(-1, m),
            leaf_depth.astype(np.int32, copy=False).reshape(-1, m), shift)


def _measure_checks(points, weights, leaf_depth):
    """The checks of a measure (host arrays): points finite in [0,1], weights finite and
    >= 0, depths >= 0, and every replicate's total weight (in float32: ``MASS_TOLERANCE``
    is far above its rounding).  NumPy for at most ``SMALL_MEASURE`` atoms in all (a new
    shape then traces nothing: a one-off call's first check), else jitted."""
    if weights.size > SMALL_MEASURE:
        return jax.device_get(_jitted_checks(points, weights, leaf_depth))
    return (np.all(np.isfinite(points) & (points >= 0) & (points <= 1)),
            np.all(np.isfinite(weights) & (weights >= 0)), np.all(leaf_depth >= 0),
            weights.sum(axis=-1))


@jax.jit
def _jitted_checks(points, weights, leaf_depth):
    """``_measure_checks`` reduced in fixed halvings (``frontier.fixed_reduce``: on a CPU
    several times faster than NumPy's passes over a large batch)."""
    points = points.reshape(points.shape[:-2] + (-1,))
    points_ok = fixed_reduce(jnp.isfinite(points) & (points >= 0) & (points <= 1),
                             jnp.logical_and, True)
    weights_ok = fixed_reduce(jnp.isfinite(weights) & (weights >= 0), jnp.logical_and, True)
    depth_ok = fixed_reduce(leaf_depth, jnp.minimum, 0) >= 0
    return (jnp.all(points_ok), jnp.all(weights_ok), jnp.all(depth_ok), fixed_sum(weights))


def _check_mass(totals, name: str) -> None:
    """Refuse replicates whose mass is not 1 (W1 compares probability measures; a total
    of 2, say, would be silently renormalised by some methods)."""
    totals = np.asarray(totals, np.float64)
    bad = np.abs(totals - 1.0) > MASS_TOLERANCE
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"{name}.weights must sum to 1 in every replicate (a probability measure); "
            f"{int(bad.sum())} replicate(s) do not (flat batch index {i} sums to "
            f"{totals[i]:.6g})"
        )


def positive_atoms(weights, *arrays, width: int | None = None, keep=None):
    """Every replicate's atoms of positive weight first, in their order (host NumPy).

    Args:
      weights: [B, M] weights; arrays: per-atom arrays [B, M, ...] (points, depths).
      width: atom slots kept (at least the largest count; default: that count).
      keep: [B, M] bool, the atoms kept (default ``weights > 0``).

    Returns:
      ``(weights [B, width], *arrays [B, width, ...], counts [B])``: slots past a
      replicate's ``count`` kept atoms have weight 0 and repeat its first kept atom.
    """
    weights = np.asarray(weights)
    keep = weights > 0 if keep is None else np.asarray(keep)
    counts = keep.sum(axis=1)
    rows, cols = np.nonzero(keep)
    slot = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    width = int(counts.max(initial=1)) if width is None else width
    out = [np.zeros((len(weights), width), weights.dtype)]
    out[0][rows, slot] = weights[rows, cols]
    first = np.argmax(keep, axis=1)
    for a in map(np.asarray, arrays):
        filled = np.repeat(a[np.arange(len(a)), first][:, None], width, axis=1)
        filled[rows, slot] = a[rows, cols]
        out.append(filled)
    return (*out, counts)


def canonical_atoms(points, weights):
    """Positive atoms in the canonical order: the one canonical form of a measure (host).

    A replicate's atoms of positive weight, sorted by their coordinates (the first
    coordinate most significant) then weight; zero-weight atoms are dropped.  A
    replicate's form then depends on its atoms alone, not on the capacity, the batch or
    the device it was released in.  Exact (a sort and copies, in NumPy: on a CPU many
    times faster than XLA's sort of every slot, zero-weight padding included).

    Args:
      points: [..., M, d] atoms; weights: [..., M] (host or device arrays).

    Returns:
      unbatched (``weights`` [M]): ``(points [K, d], weights [K])``, the ``K`` positive
      atoms.  Batched: ``(points [B, W, d], weights [B, W], counts [B])``, the batch axes
      flattened, ``W`` the largest count; slots past a replicate's ``count`` repeat its
      first atom with weight 0.
    """
    weights = np.asarray(weights)
    flat = weights.reshape(-1, weights.shape[-1])
    points = np.asarray(points).reshape(flat.shape + np.shape(points)[-1:])
    w, p, counts = positive_atoms(flat, points)
    pad = np.arange(w.shape[1])[None] >= counts[:, None]
    order = np.lexsort((w,) + tuple(p[..., k] for k in reversed(range(p.shape[-1])))
                       + (pad,), axis=-1)
    p = np.take_along_axis(p, order[..., None], axis=1)
    w = np.take_along_axis(w, order, axis=1)
    p = np.where(pad[..., None], p[:, :1], p)  # the padding repeats the canonical first atom
    if weights.ndim == 1:
        return p[0, :counts[0]], w[0, :counts[0]]
    return p, w, counts.astype(np.int32)
