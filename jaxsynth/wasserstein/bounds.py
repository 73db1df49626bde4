"""A certified bracket ``lower ≤ W1 ≤ upper`` at near-linear cost.

**Lower bound.**  Every 1-Lipschitz ``f`` gives ``W1(μ, ν) ≥ W1(f#μ, f#ν)``; a projection
``x ↦ u·x`` is 1-Lipschitz when ``u`` has unit *dual* norm (ℓ1 for ℓ∞, ℓ2 for ℓ2).  The
lower end is the largest exact 1-D W1 (``exact1d``) over the coordinate axes plus
``n_directions`` seeded random directions normalised in the dual norm (by default none
for ℓ∞, two for ℓ2).

**Upper bound.**  The tree-metric upper bound of ``jaxsynth.wasserstein.tree``.

**Rounding.**  Both ends are computed in float32 and widened by ``ρ = 2^-16`` relative,
and the lower end by the projections' rounding ``(d + 1)·2^-24·R`` (``R = 2`` for ℓ∞,
``2√d`` for ℓ2); proofs in ``docs/theory/w1-methods.md``.

**Cost.**  Per direction and replicate one exact 1-D W1 against data projections sorted
once (``exact1d.w1_against_sorted``), ``O(M log M + n)``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.core import partition
from jaxsynth.core.validate import check_fits, check_positive_int
from jaxsynth.wasserstein.exact1d import w1_against_sorted
from jaxsynth.core.measure import check_measure
from jaxsynth.wasserstein.method import run_blocks
from jaxsynth.wasserstein.tree import (
    DEFAULT_BATCH_SIZE,
    TreeData,
    compact_atoms,
    data_points,
    prepare,
    tree_w1,
)

__all__ = ["RELATIVE_MARGIN", "bracket", "check_directions", "directions", "projection_lower",
           "tree_upper", "upper_margin"]

RELATIVE_MARGIN = 2.0**-16
"""Relative widening of both bracket ends against float32 rounding."""

DEFAULT_DIRECTIONS = dict(zip(partition.GROUND_METRICS, (0, 2)))
"""Random directions added to the coordinate axes by default, per metric (ℓ∞ 0, ℓ2 2)."""


def check_directions(n_directions, seed, metric: str, d: int, n: int) -> tuple[int, int]:
    """``(n_directions, seed)`` of the lower bound, checked before any work.

    ``n_directions`` (``None``: ``DEFAULT_DIRECTIONS[metric]``; 0: the axes alone) and
    ``seed`` must be integers ``>= 0`` (not bools), and the ``[d + n_directions, n]`` data
    projections must fit: in float64 (as ``sorted_projections`` makes them; its sort and
    float32 result are copies of that size or less) within ``validate.memory_limit()``,
    like any input-sized array.

    Raises:
      ValueError: naming ``n_directions`` or ``seed``.
    """
    if n_directions is None:
        n_directions = DEFAULT_DIRECTIONS[metric]
    n_directions = check_positive_int(n_directions, "n_directions", minimum=0)
    seed = check_positive_int(seed, "seed", minimum=0)
    k = d + n_directions
    check_fits(8.0 * k * (n + d), "n_directions",
               f"the data projections on {k} directions ([{k}, n = {n}])",
               hint="use fewer n_directions")
    return n_directions, seed


def directions(d: int, metric: str, n_directions: int, seed: int = 0) -> np.ndarray:
    """Coordinate axes then ``n_directions`` seeded Gaussian directions, unit dual norm.

    Returns:
      [d + n_directions, d] float32 directions (ℓ1-normalised for ℓ∞, ℓ2 for ℓ2).
    """
    rng = np.random.default_rng(seed)
    random = rng.standard_normal((n_directions, d))
    order = 1 if metric == "linf" else 2
    random /= np.linalg.norm(random, ord=order, axis=1, keepdims=True)
    return np.concatenate([np.eye(d), random]).astype(np.float32)


def sorted_projections(X: np.ndarray, dirs: np.ndarray) -> np.ndarray:
    """Projections ``u·x + ‖u‖_1`` (all ``≥ 0``) of the data on each direction, sorted, [K, n].

    Projected in float64, sorted, then rounded to float32 (rounding keeps the order).
    The offset makes every value non-negative for ``w1_against_sorted``; W1 is invariant
    under the common translation.
    """
    dirs64 = dirs.astype(np.float64)
    proj = X @ dirs64.T + np.abs(dirs64).sum(axis=1)
    return np.sort(proj, axis=0).T.astype(np.float32)


@jax.jit
def projected_w1(data_sorted, dirs, points, weights):
    """Largest 1-D W1 over directions, for a batch [B, M, d] of measures (on device).

    Args:
      data_sorted: [K, n] float32 sorted data projections (``sorted_projections``).
      dirs: [K, d] float32 directions.
      points: [B, M, d]; weights: [B, M].

    Returns:
      [B] float32, before the rounding margins of ``projection_lower``.
    """
    offset = jnp.sum(jnp.abs(dirs), axis=1)

    def one(p, w):
        proj = jnp.matmul(p, dirs.T, precision=jax.lax.Precision.HIGHEST).T + offset[:, None]
        per_dir = jax.vmap(w1_against_sorted, in_axes=(0, 0, None))(data_sorted, proj, w)
        return jnp.max(per_dir)

    return jax.vmap(one)(points, weights)


def lower_margin(raw, d: int, metric: str):
    """Certified lower bound from a raw float32 projection W1 (module docstring margins)."""
    reach = 2.0 * (1.0 if metric == "linf" else np.sqrt(d))  # |u·x| + ‖u‖_1 offset
    return np.maximum(np.asarray(raw, np.float64) * (1 - RELATIVE_MARGIN)
                      - (d + 1) * 2.0**-24 * reach, 0.0)


_PROJECTION_OPTIONS = ("n_directions", "seed")
"""The keywords of ``projection_lower`` beyond ``batch_size``, which ``bracket`` passes on."""


def projection_lower(
    X,
    out,
    metric: str = "linf",
    *,
    n_directions: int | None = None,
    seed: int = 0,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> np.ndarray:
    """Certified lower bound on W1: the largest 1-D W1 of 1-Lipschitz projections.

    Args:
      X: [n, d] data in [0,1]^d, or a prepared ``TreeData``.
      out: ``SyntheticMeasure`` with points [..., M, d].
      metric: ``"linf"`` or ``"l2"``.
      n_directions: random directions added to the ``d`` axes (default per metric,
        ``DEFAULT_DIRECTIONS``).
      seed: seed of the random directions (fixed, so repeated calls agree).
      batch_size: replicates per vmapped chunk.

    Returns:
      [...] float64 lower bounds, ``out.batch_shape``, rounding margins applied.
    """
    X = data_points(X)
    d = X.shape[1]
    if metric not in partition.GROUND_METRICS:
        raise ValueError(f"metric must be one of {partition.GROUND_METRICS}; got {metric!r}")
    n_directions, seed = check_directions(n_directions, seed, metric, d, X.shape[0])
    batch_size = check_positive_int(batch_size, "batch_size")
    dirs = directions(d, metric, n_directions, seed)
    points, weights, leaf_depth, _ = check_measure(out, d)
    points, weights, _ = compact_atoms(points, weights, leaf_depth, weights > 0)
    kernel = functools.partial(
        projected_w1, jnp.asarray(sorted_projections(X, dirs)), jnp.asarray(dirs)
    )
    raw = run_blocks(kernel, (points, weights), batch_size)
    return lower_margin(raw, d, metric).reshape(out.batch_shape)


def tree_upper(X, out, metric: str = "linf", *, batch_size: int = DEFAULT_BATCH_SIZE) -> np.ndarray:
    """Certified upper bound on W1: tree W1 plus the within-leaf term, widened by ``ρ``.

    Args:
      X: [n, d] data or a prepared ``TreeData``.
      out: ``SyntheticMeasure``.
      metric: ``"linf"`` or ``"l2"``.
      batch_size: replicates per vmapped chunk.

    Returns:
      [...] float64 upper bounds, ``out.batch_shape``.

    Raises:
      ValueError: naming ``out`` if a replicate's leaves do not form a valid tree.
    """
    result = tree_w1(X, out, metric, batch_size=batch_size)
    check_valid(result.valid)
    return upper_margin(result.upper, data_points(X).shape[1], metric)


def upper_margin(raw, d: int, metric: str) -> np.ndarray:
    """A float32 upper bound widened by ``ρ`` and clipped at the cube's diameter (1 for
    ℓ∞, ``√d`` for ℓ2: no two points of [0,1]^d are farther apart)."""
    diameter = float(partition.diameter(0, d, metric))
    return np.minimum(np.asarray(raw, np.float64) * (1 + RELATIVE_MARGIN), diameter)


def check_valid(valid) -> None:
    """Raise ``ValueError`` naming ``out`` when some replicate's tree is malformed."""
    valid = np.asarray(valid)
    if not valid.all():
        bad = np.argwhere(~valid.reshape(valid.shape or (1,)))
        raise ValueError(
            f"out: {len(bad)} replicate(s) (first at batch index {tuple(bad[0])}) have leaf "
            "cells that are nested, or data outside every leaf of an unbalanced tree; the "
            "tree metric is undefined (see jaxsynth.wasserstein.tree)"
        )


def bracket(X, out, metric: str = "linf", *, batch_size: int = DEFAULT_BATCH_SIZE,
            **projection):
    """Certified ``(lower, upper)`` with ``lower ≤ W1(μ_X, out) ≤ upper``.

    Args:
      X: [n, d] data or a prepared ``TreeData`` (reused across calls).
      out: ``SyntheticMeasure`` with points [..., M, d].
      metric: ``"linf"`` or ``"l2"`` ground metric.
      batch_size: replicates per vmapped chunk.
      projection: ``n_directions`` and ``seed`` of the lower end, as in
        ``projection_lower``.

    Returns:
      ``(lower, upper)``, two float64 NumPy arrays of shape ``out.batch_shape``.

    Raises:
      TypeError: naming a keyword that is neither ``batch_size`` nor a projection option.
    """
    unknown = sorted(set(projection) - set(_PROJECTION_OPTIONS))
    if unknown:
        raise TypeError(f"bracket() got unexpected keyword argument(s) {unknown}; it takes "
                        f"batch_size and {', '.join(_PROJECTION_OPTIONS)} (as in "
                        "projection_lower)")
    if metric not in partition.GROUND_METRICS:
        raise ValueError(f"metric must be one of {partition.GROUND_METRICS}; got {metric!r}")
    if not isinstance(X, TreeData):
        _, _, leaf_depth, _ = check_measure(out, data_points(X).shape[1])
        X = prepare(X, int(leaf_depth.max(initial=0)))
    lower = projection_lower(X, out, metric, batch_size=batch_size, **projection)
    return lower, tree_upper(X, out, metric, batch_size=batch_size)
