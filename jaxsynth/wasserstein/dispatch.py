"""``w1`` (``js.w1``): W1 between the data and released synthetic measures.

Every method is a ``W1Method`` (``Exact``, ``Tree``, ``TreeUpper``, ``Bracket``,
``Exact1D``, ``Sinkhorn``: a frozen dataclass whose fields are its options) and runs
through ``evaluate.Evaluation``, the router ``simulate`` uses too: ``"exact"`` (the ground
metric's W1, certified to ``rtol``), ``"tree"`` (exact tree-metric W1), ``"tree_upper"``
and ``"bracket"`` (certified bounds), ``"exact1d"`` (d = 1) and ``"sinkhorn"`` (entropic,
certified).  A name with options builds its class (``method="exact", rtol=1e-3`` is
``Exact(rtol=1e-3)``).  The measure is validated once here (``core.measure.check_measure``).

Sweeps reuse the data preparation: pass ``prepare_w1(X, depth)`` (a ``TreeData``), the
mechanism's ``DataTree`` or ``prepare_exact(X)`` instead of ``X``.  With ``levels=`` (the
``NotPrivateDiagnostics`` of ``release_batch(..., diagnostics=True)``) the tree W1 and
upper bound are read from the kernel's level statistics, as ``simulate`` reads them.
"""

from __future__ import annotations

import numpy as np

from jaxsynth.core.measure import LEVEL_FIELDS, check_measure
from jaxsynth.wasserstein.evaluate import Evaluation, check_method, check_metric, data_dimension
from jaxsynth.wasserstein.method import Batch

__all__ = ["w1"]


def w1(X, out, method="exact", metric: str = "linf", levels=None, **options):
    """W1 between the data ``μ_X`` (weights ``1/n``) and synthetic measure(s) ``out``.

    Args:
      X: [n, d] data in [0,1]^d (an array or a list of lists of real numbers, integers
        included), or a prepared ``TreeData`` (``prepare_w1``), ``ExactData``
        (``prepare_exact``, method ``"exact"`` only) or ``DataTree``.
      out: ``SyntheticMeasure``, possibly batched (points [..., M, d]).
      method: a configured method (``jaxsynth.wasserstein.Exact(rtol=1e-3)``, ``Tree()``,
        ``TreeUpper()``, ``Bracket()``, ``Exact1D()``, ``Sinkhorn()``) or its name:
        ``"exact"`` (default: the certified W1 of the whole data set, the quantity the
        papers bound), ``"tree"``, ``"tree_upper"``, ``"bracket"``, ``"exact1d"`` or
        ``"sinkhorn"``.
      metric: ground metric ``"linf"`` (default, as in Zare Moayedi et al., arXiv
        2609.33363, §7) or ``"l2"``.
      levels: NOT PRIVATE level statistics of ``out`` (the ``NotPrivateDiagnostics`` of
        ``release_batch(..., diagnostics=True)``, or a dict of ``LEVEL_FIELDS``
        [*out.batch_shape, L+1]); the tree methods then read them instead of the atoms.
      **options: with a method's name, its options (the fields of its class): ``rtol``,
        ``clusters``, ``stacked`` (exact); ``batch_size`` (tree, tree_upper, bracket);
        ``n_directions``, ``seed`` (bracket); ``rtol``, ``subsample``, ``key``, ...,
        ``group`` (sinkhorn; with ``key``, flat replicate ``i`` subsamples with
        ``jax.random.fold_in(key, i)``).

    Returns:
      float64 NumPy array of shape ``out.batch_shape`` (0-d when unbatched); for methods
      with two columns (``"bracket"``, ``"exact"``) a tuple ``(lower, upper)``.

    Raises:
      ValueError: naming the argument for bad data, a bad measure (weights negative,
        NaN, or not summing to 1), an unknown method, metric or option (listing the
        accepted ones), a bad option value, options beside a configured method,
        ``exact1d`` with ``d ≠ 1``, ``levels`` of the wrong shape, or leaves that are
        not a tree.

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=1000, key=0)
      >>> out = js.release(0, js.PMM(depth=6), X, eps=1.0)
      >>> lower, upper = js.w1(X, out)           # certified: lower ≤ W1 ≤ upper
      >>> bool(upper - lower <= 0.01 * upper)    # the default rtol
      True
      >>> lower, upper = js.w1(X, out, js.wasserstein.Exact(rtol=1e-3))
      >>> bool(js.w1(X, out, "tree_upper") >= upper)   # a free, looser upper bound
      True
      >>> js.w1(X, js.release_batch(0, js.PMM(depth=6), X, [0.5, 2.0], seeds=3),
      ...       "tree").shape                     # one value per ε and seed
      (2, 3)
    """
    chosen = check_method(method, options)
    metric = check_metric(metric, "method")
    d = data_dimension(X)
    points, weights, leaf_depth, shift = check_measure(out, d, mass=True)
    batch = Batch(d, points, weights, leaf_depth, shift, _levels(levels, out.batch_shape),
                  [(i,) for i in range(len(weights))], _names(out.batch_shape))
    values = Evaluation.build(X, [chosen], metric).evaluate(batch)
    result = tuple(np.asarray(values[c], np.float64).reshape(out.batch_shape)
                   for c in chosen.columns)
    return result if len(result) > 1 else result[0]


def _names(batch_shape) -> list[str]:
    """How messages name each replicate of ``out``: ``out[e, s]`` (``out`` unbatched)."""
    if not batch_shape:
        return ["out"]
    return [f"out[{', '.join(map(str, index))}]" for index in np.ndindex(*batch_shape)]


def _levels(levels, batch_shape) -> dict | None:
    """``LEVEL_FIELDS`` [B, L+1] from ``levels``, or ``ValueError`` naming ``levels``."""
    if levels is None:
        return None
    try:
        arrays = {k: np.asarray(levels[k]) for k in LEVEL_FIELDS}
    except (KeyError, TypeError):
        raise ValueError(f"levels must hold {LEVEL_FIELDS} (release_batch(..., "
                         "diagnostics=True)); got {type(levels).__name__}") from None
    for k, a in arrays.items():
        if a.shape[:-1] != tuple(batch_shape) or a.ndim != len(batch_shape) + 1:
            raise ValueError(f"levels[{k!r}] must have shape {tuple(batch_shape)} + (L+1,) "
                             f"to match out; got {a.shape}")
    return {k: a.reshape(-1, a.shape[-1]) for k, a in arrays.items()}
