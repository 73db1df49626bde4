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

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.core import partition
from jaxsynth.core.validate import check_fits, check_positive_int
from jaxsynth.wasserstein.exact1d import w1_against_sorted

__all__ = ["RELATIVE_MARGIN", "check_directions", "check_valid", "directions", "lower_margin",
           "projected_w1", "projection_bytes", "sorted_projections", "upper_margin"]

RELATIVE_MARGIN = 2.0**-16
"""Relative widening of both bracket ends against float32 rounding."""

MERGED_BYTES = 56
"""Bytes per entry of a 1-D transport's merged support (``projection_bytes``)."""
DEFAULT_DIRECTIONS = dict(zip(partition.GROUND_METRICS, (0, 2)))
"""Random directions added to the coordinate axes by default, per metric (ℓ∞ 0, ℓ2 2)."""


def check_directions(n_directions, metric: str, d: int, n: int) -> int:
    """The random directions of the lower bound, checked before any work.

    ``n_directions`` (``None``: ``DEFAULT_DIRECTIONS[metric]``; 0: the axes alone) must be
    an integer ``>= 0`` (not a bool), and the ``[d + n_directions, n]`` data projections
    must fit: in float64 (as ``sorted_projections`` makes them; its sort and float32
    result are copies of that size or less) within ``validate.memory_limit()``, like any
    input-sized array.

    Raises:
      ValueError: naming ``n_directions``.
    """
    if n_directions is None:
        n_directions = DEFAULT_DIRECTIONS[metric]
    n_directions = check_positive_int(n_directions, "n_directions", minimum=0)
    k = d + n_directions
    check_fits(8.0 * k * (n + d), "n_directions",
               f"the data projections on {k} directions ([{k}, n = {n}])",
               hint="use fewer n_directions")
    return n_directions


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
      [B] float32, before the rounding margins of ``lower_margin``.
    """
    offset = jnp.sum(jnp.abs(dirs), axis=1)

    def one(p, w):
        proj = jnp.matmul(p, dirs.T, precision=jax.lax.Precision.HIGHEST).T + offset[:, None]
        # one direction at a time: each direction's value is the same program's,
        # whatever the number of directions (adding some never lowers a bit of the max)
        per_dir = jax.lax.map(lambda arrays: w1_against_sorted(*arrays, w), (data_sorted, proj))
        return jnp.max(per_dir)

    return jax.vmap(one)(points, weights)


def projection_bytes(n: int, directions: int, atoms: float) -> float:
    """``projected_w1``'s memory model: its working memory per replicate of ``atoms``
    atoms: the atoms projected on every direction (float32, and their sort keys), and one
    1-D transport at a time against ``n`` data projections, a merged support of
    ``n + atoms`` entries (``exact1d.w1_against_sorted``: values, weight parts, positions
    and cumulative sums, ``MERGED_BYTES`` each)."""
    return MERGED_BYTES * (n + atoms) + 8.0 * directions * atoms


def lower_margin(raw, d: int, metric: str):
    """Certified lower bound from a raw float32 projection W1 (module docstring margins)."""
    reach = 2.0 * (1.0 if metric == "linf" else np.sqrt(d))  # |u·x| + ‖u‖_1 offset
    return np.maximum(np.asarray(raw, np.float64) * (1 - RELATIVE_MARGIN)
                      - (d + 1) * 2.0**-24 * reach, 0.0)


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
