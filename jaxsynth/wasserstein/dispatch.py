"""Wasserstein-1 between the data and released synthetic measures.

``w1(X, out, method, metric)`` is the single entry point (``js.w1``); every method
returns NumPy float64 of shape ``out.batch_shape``:

- ``"tree"``: exact W1 in the partition's tree metric (``tree.tree_w1``);
- ``"tree_upper"``: certified upper bound on W1, tree W1 + within-leaf term;
- ``"bracket"``: ``(lower, upper)``, 1-D projection lower bound and tree upper bound
  (``bounds.bracket``);
- ``"exact"``: ``(lower, upper)`` certified to ``upper − lower ≤ rtol · upper`` for the
  ground metric's W1 between the whole data set and each measure (``exact.w1_exact``:
  column generation on the transport LP, both ends proofs);
- ``"exact1d"``: exact W1 for ``d = 1`` (``exact1d.w1_exact1d``);
- ``"sinkhorn"``: certified entropic estimate of every replicate
  (``sinkhorn.w1_sinkhorn_batch``: one replicate per jitted round on CPU, vmapped groups of
  replicates on an accelerator), each shape compiled once.

Sweeps reuse the data preparation: pass ``prepare_w1(X, depth)`` (a ``TreeData``, with
``depth`` at least the deepest leaf of every measure) or the mechanism's ``DataTree``
(``js.prepare``) instead of ``X``; with a raw ``X`` the host preparation (Morton codes;
its cost is in BENCHMARKS.md) is redone at every call.  A ``DataTree`` deeper than the leaves is
cut to their depth; a shallower one (PrivTree with the shift sorts per seed) is prepared
again from its points.

``js.w1`` is this module's ``w1``; the package ``jaxsynth.wasserstein`` holds one module
per method (``tree``, ``bounds``, ``exact1d``, ``sinkhorn``), none named like a function,
and ``evaluator``, the batched W1 of ``simulate``'s chunks.
"""

from __future__ import annotations

import numpy as np

from jaxsynth.core.keys import as_typed_key
from jaxsynth.core.partition import GROUND_METRICS
from jaxsynth.wasserstein import tree as _tree
from jaxsynth.wasserstein.bounds import bracket, check_directions, check_valid, tree_upper
from jaxsynth.wasserstein.exact import (
    DEFAULT_CLUSTERS,
    DEFAULT_RTOL,
    ExactData,
    prepare_exact,
    w1_exact,
)
from jaxsynth.wasserstein.exact1d import w1_exact1d
from jaxsynth.wasserstein.tree import TreeData, tree_w1
from jaxsynth.wasserstein.tree import prepare as prepare_w1

__all__ = ["GROUND_METRICS", "METHODS", "w1"]

METHODS = ("exact", "tree", "tree_upper", "bracket", "exact1d", "sinkhorn")
"""The W1 methods: how W1 is measured (``method=``); ``metric=`` is the ground metric
(``GROUND_METRICS``, defined in ``jaxsynth.core.partition``)."""

_OPTIONS = {
    "tree": {"batch_size"},
    "tree_upper": {"batch_size"},
    "bracket": {"batch_size", "n_directions", "seed"},
    "exact1d": set(),
    "exact": {"rtol", "clusters"},
}
MASS_TOLERANCE = 1e-4
"""Largest ``|Σ weights − 1|`` of a replicate (float32 releases are within ~1e-7)."""


def _as_data(X, out):
    """``TreeData`` deep enough for ``out`` from ``X``, a ``TreeData`` or a ``DataTree``."""
    if isinstance(X, TreeData):
        return X
    return prepare_w1(X, int(np.max(np.asarray(out.leaf_depth), initial=0)))


def w1(X, out, method: str = "exact", metric: str = "linf", **options):
    """W1 between the data ``μ_X`` (weights ``1/n``) and synthetic measure(s) ``out``.

    Args:
      X: [n, d] data in [0,1]^d, or a prepared ``TreeData`` (``prepare_w1``),
        ``ExactData`` (``prepare_exact``, method ``"exact"`` only) or ``DataTree``
        reused across calls.
      out: ``SyntheticMeasure``, possibly batched (points [..., M, d]).
      method: ``"exact"`` (default: the certified W1 of the whole data set, the quantity
        the papers bound) | ``"tree"`` | ``"tree_upper"`` | ``"bracket"`` | ``"exact1d"``
        | ``"sinkhorn"``.
      metric: ground metric ``"linf"`` (default, as in Zare Moayedi et al., arXiv
        2609.33363, §7) or ``"l2"``.
      **options: ``rtol`` (exact: relative gap, default 0.01), ``clusters`` (exact:
        coarse blocks of the data); ``batch_size`` (tree, tree_upper, bracket: replicates
        per vmapped chunk); ``n_directions``, ``seed`` (bracket: random projections); everything
        ``w1_sinkhorn`` accepts (sinkhorn: ``rtol``, ``subsample``, ``key``, ...).  With
        ``key``, replicate ``i`` (flat batch index) uses ``jax.random.fold_in(key, i)``.

    Returns:
      float64 NumPy array of shape ``out.batch_shape`` (0-d when unbatched); for
      ``"bracket"`` and ``"exact"`` a tuple ``(lower, upper)`` of two such arrays.

    Raises:
      ValueError: naming the argument for bad data, a bad measure (weights negative,
        NaN, or not summing to 1 within ``MASS_TOLERANCE``), an unknown method, metric or
        option, a bad option value (``n_directions``, ``seed``: integers >= 0, and
        projections that fit in memory; ``key``: an int seed or one JAX key),
        ``exact1d`` with ``d ≠ 1``, or leaves that are not a tree.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    if metric not in GROUND_METRICS:
        hint = "; W1 methods are chosen with method=" if metric in METHODS else ""
        raise ValueError(f"metric must be one of {GROUND_METRICS} (the ground metric); got "
                         f"{metric!r}{hint}")
    if method != "sinkhorn":
        unknown = set(options) - _OPTIONS[method]
        if unknown:
            raise ValueError(
                f"unknown option(s) {sorted(unknown)} for method={method!r}; "
                f"accepted: {sorted(_OPTIONS[method])}"
            )
    if isinstance(X, ExactData) and method != "exact":
        raise ValueError(f"X: an ExactData serves method='exact' only; got method={method!r}")
    points_of_X = X.X if isinstance(X, ExactData) else _tree.data_points(X)
    points, weights, _, _ = _tree.check_measure(out, points_of_X.shape[1])
    _check_mass(weights)
    if method == "bracket":  # before any work (the projections are sized here)
        check_directions(options.get("n_directions"), options.get("seed", 0), metric,
                         points_of_X.shape[1], points_of_X.shape[0])
    if method == "sinkhorn" and options.get("key") is not None:
        options = {**options, "key": as_typed_key(options["key"])}  # ValueError naming key
    if method == "exact":
        if not isinstance(X, ExactData):
            X = prepare_exact(points_of_X, options.get("clusters", DEFAULT_CLUSTERS))
        elif "clusters" in options:
            raise ValueError("clusters: set it in prepare_exact when X is an ExactData")
        lower, upper = w1_exact(X, points, weights, metric, options.get("rtol", DEFAULT_RTOL))
        return lower.reshape(out.batch_shape), upper.reshape(out.batch_shape)

    if method == "exact1d":
        if points_of_X.shape[1] != 1:
            raise ValueError(f"method='exact1d' needs d = 1; X has d = {points_of_X.shape[1]}")
        return np.asarray(w1_exact1d(points_of_X, out.points, out.weights), np.float64)
    if method == "sinkhorn":
        return _sinkhorn(points_of_X, out, metric, options)
    data = _as_data(X, out)
    if method == "bracket":
        return bracket(data, out, metric, **options)
    if method == "tree_upper":
        return tree_upper(data, out, metric, **options)
    result = tree_w1(data, out, metric, **options)
    check_valid(result.valid)
    return np.asarray(result.value, np.float64)


def _check_mass(weights) -> None:
    """Refuse a measure whose replicates do not have mass 1 (W1 compares probability
    measures; a total of 2, say, would be silently renormalised by some methods)."""
    totals = np.asarray(weights, np.float64).sum(axis=-1)
    bad = np.abs(totals - 1.0) > MASS_TOLERANCE
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"out.weights must sum to 1 in every replicate (a probability measure); "
            f"{int(bad.sum())} replicate(s) do not (flat batch index {i} sums to "
            f"{totals[i]:.6g})"
        )


def _sinkhorn(X, out, metric, options):
    """Certified Sinkhorn of every replicate (``sinkhorn.w1_sinkhorn_batch``); replicate
    ``i`` of the flat batch subsamples with ``fold_in(key, i)``."""
    import jax

    from jaxsynth.wasserstein.sinkhorn import w1_sinkhorn_batch

    points, weights, _, _ = _tree.check_measure(out, X.shape[1])
    options = dict(options)
    key = options.pop("key", None)
    keys = None
    if key is not None:
        key = as_typed_key(key)  # an int seed, a typed or a raw key; else ValueError
        keys = [jax.random.fold_in(key, i) for i in range(len(weights))]
    results = w1_sinkhorn_batch(X, points, weights, keys=keys, metric=metric, **options)
    return np.array([r.value for r in results]).reshape(out.batch_shape)
