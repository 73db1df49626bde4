"""Empirical rates: the slope of log E W1 against log(εn), beside the papers' rates.

The slope is the weighted least-squares slope of ``log(mean W1)`` on ``log(εn)`` over
the (ε, n) cells of a sweep, each cell weighted by its precision (the inverse of the
variance of its log mean, ``seeds · mean² / sd²``), so a cell of many seeds counts more
than one of few.  Its confidence interval is a percentile bootstrap that resamples
replicates (seeds) with replacement within each cell, independently across cells, and
refits with the same weights; cells are the experimental design and stay fixed.

Theory (``theory``), by mechanism, with ``s`` the data's intrinsic dimension: the
bound of Zare Moayedi, Asadi, Yassaee, Aminian, "Geometry-Adaptive Mechanisms for
Private Synthetic Data" (arXiv 2609.33363) Thm 5 for the PMM family, of Y. He,
"Intrinsic-Dimensional Wasserstein Guarantees for Private Synthetic Measures" Thm 5.7
and 5.9 for PrivTree; which theorem gives which exponent: ``docs/guide/sweep-design.md``
(section "Rate theory").  Beside the exponent, ``bound_slope`` is the slope of the log of
that bound function over the sweep's own εn values, weighted as the fit is: the slope the
theory predicts there, log factors included.
"""

from __future__ import annotations

import zlib
from typing import Callable, NamedTuple

import numpy as np
import pandas as pd

from jaxsynth.core.validate import (
    check_fraction,
    check_names,
    check_positive_int,
    check_str,
    refuse_renamed,
)
from jaxsynth.experiments.store import control_only
from jaxsynth.experiments.summary import check_cells, check_fingerprints, summarize
from jaxsynth.mechanisms.schedules import default_depth

__all__ = ["Theory", "estimate_rate", "theory"]

_AMBIENT_DEPTH = ("pmm", "pruned-pmm")
RENAMED = {"metric": "metric= is now column= (the W1 column to fit, e.g. 'w1_exact_upper'); "
                     "the ground metric is the table's metric column"}
"""Arguments under their former names (``estimate_rate``, the plots): refused with the new."""


class Theory(NamedTuple):
    """A paper's rate: ``bound(εn)`` up to constants, its polynomial exponent and a label."""

    exponent: float
    label: str
    bound: Callable[[np.ndarray], np.ndarray]


def _power(k: float) -> Theory:
    return Theory(-1.0 / k, f"(eps n)^(-1/{k:g})", lambda x: np.asarray(x, float) ** (-1.0 / k))


def _log2_over(x):
    x = np.asarray(x, float)
    return np.log(x) ** 2 / x


_LOG2 = Theory(-1.0, "log^2(eps n)/(eps n)", _log2_over)


def theory(kind: str, d: int, s: int | None = None) -> Theory | None:
    """The papers' rate for mechanism ``kind`` in dimension ``d`` on data of dimension ``s``.

    Args:
      kind: the mechanism's name (``pmm``, ``pruned-pmm``, ``adaptive-pruned-pmm``,
        ``privtree``, ``privtree-shift``).
      d: ambient dimension.
      s: intrinsic (packing-growth) dimension; default ``d``.

    Returns:
      a ``Theory``, or ``None`` for an unknown mechanism.  Which theorem each case comes
      from: ``docs/guide/sweep-design.md``, section "Rate theory".
    """
    d = check_positive_int(int(d), "d")
    s = d if s is None or pd.isna(s) else check_positive_int(int(s), "s")
    if kind in _AMBIENT_DEPTH:
        return _LOG2 if d == 1 else _power(d)
    if kind == "adaptive-pruned-pmm":
        return _LOG2 if s == 1 else _power(s)
    if kind in ("privtree", "privtree-shift"):
        t = min(d, max(s, 2))
        return Theory(
            -1.0 / t,
            f"(log(eps n)/(eps n))^(1/{t})",
            lambda x: (np.log(np.asarray(x, float)) / np.asarray(x, float)) ** (1.0 / t),
        )
    return None


def _slopes(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Weighted least-squares slopes of ``y`` [..., C] on ``x`` [C] (weights ``w`` [C])."""
    w = np.ones_like(x) if w is None else w / w.sum()
    xc = x - (w @ x) / w.sum()
    return (y - (y @ w)[..., None] / w.sum()) @ (w * xc) / (xc @ (w * xc))


def _weights(values: list) -> np.ndarray:
    """Each cell's precision: 1 / variance of its log mean (delta method).

    A cell without spread gets the largest weight of the others; equal weights when no
    cell has any.
    """
    var = np.array([v.var(ddof=1) / (len(v) * v.mean() ** 2) for v in values])
    spread = var[var > 0]
    if not len(spread):
        return np.ones_like(var)
    return 1.0 / np.maximum(var, spread.min())


def _group_fit(g: pd.DataFrame, column: str, n_boot: int, level: float, rng, name: str):
    """Fit columns and the log εn of the cells; refuses a group that cannot be fitted."""
    cells = [c for _, c in g.groupby(["eps", "n"], sort=True)]
    values = [c[column].to_numpy(np.float64) for c in cells]
    # in units of a power of two near the largest value (exact): no mean overflows, and a
    # common factor leaves every slope unchanged
    _, power = np.frexp(max(v.max() for v in values))
    values = [np.ldexp(v, -power) for v in values]
    en = np.array([c["eps"].iloc[0] * c["n"].iloc[0] for c in cells], np.float64)
    x = np.log(en)
    means = np.array([v.mean() for v in values])
    bad = ~(means > 0)
    if bad.any():
        raise ValueError(f"{column} must be positive in every cell to take logs; {name} has "
                         f"a cell mean of {_show(np.ldexp(means[bad][0], power))}")
    if np.ptp(x) == 0:
        raise ValueError(f"{name} has a single eps·n value ({en[0]:g}); a slope needs cells "
                         "at two or more values of eps·n")
    if min(len(v) for v in values) < 2:
        raise ValueError(f"{name} has a cell with a single replicate; a bootstrap interval "
                         "needs at least 2 seeds per (eps, n) cell")
    row = {"cells": len(cells), "seeds": min(len(v) for v in values),
           "eps_n_min": float(en.min()), "eps_n_max": float(en.max())}
    weights = _weights(values)
    boot = np.stack(
        [v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1) for v in values], axis=1
    )
    with np.errstate(divide="ignore"):  # a resample of zeros: slope -inf or nan, rare
        slopes = _slopes(x, np.log(boot), weights)
    alpha = (1.0 - level) / 2.0
    row.update(slope=float(_slopes(x, np.log(means), weights)), se=float(slopes.std(ddof=1)),
               ci_low=float(np.quantile(slopes, alpha)),
               ci_high=float(np.quantile(slopes, 1 - alpha)))
    return row, x, weights


def _show(value) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


def _numeric(df: pd.DataFrame, fitted: str) -> pd.DataFrame:
    """``df`` with ``eps``, ``n`` and ``fitted`` as floats, or ``ValueError`` naming the column.

    The theory's columns ``d``, ``intrinsic_dim`` (positive integers) and ``depth``
    (non-negative integers) are checked too when present, and left as they are: text,
    booleans, fractions or out-of-range numbers there are refused, not skipped; a missing
    value (a table concatenated with one that lacks the column) is allowed, and a group
    with one gets no theory columns.
    """
    out = {}
    rules = [("eps", "positive numbers"), ("n", "positive integers"),
             (fitted, "non-negative numbers")]
    rules += [(c, r) for c, r in (("d", "positive integers"), ("intrinsic_dim",
                                  "positive integers"), ("depth", "non-negative integers"))
              if c in df]
    for column, rule in rules:
        raw = df[column]
        value = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64, na_value=np.nan)
        bad = ~np.isfinite(value)
        if pd.api.types.is_bool_dtype(raw.dtype):
            bad |= True
        elif raw.dtype == object:
            bad |= raw.map(lambda v: isinstance(v, (bool, np.bool_))).to_numpy(bool)
        with np.errstate(invalid="ignore"):
            bad |= (value < 0) if "non-negative" in rule else (value <= 0)
            if "integers" in rule:
                bad |= value != np.floor(value)
        if column not in ("eps", "n", fitted):
            bad &= raw.notna().to_numpy(bool)  # missing is allowed, text is not
        if bad.any():
            raise ValueError(f"{column} must hold {rule}; {int(bad.sum())} row(s) do not "
                             f"(first: {_show(raw.iloc[int(np.argmax(bad))])})")
        if column in ("eps", "n", fitted):
            out[column] = value
    return df.assign(**out)


def _exponent_dimension(kind: str, d: int, s: int, stated: bool) -> str:
    """Which dimension the theory's exponent uses, and where it comes from."""
    if kind in _AMBIENT_DEPTH:
        return f"ambient d = {d} (the depth rule's leaf resolution, whatever s)"
    if stated:
        return f"s = {s} (stated)"
    if s < d:
        return f"s = {s} (the data set's intrinsic dimension)"
    return (f"ambient d = {d} (intrinsic dimension not stated: pass intrinsic_dim, "
            "rate --intrinsic-dim)")


def _theory_columns(g: pd.DataFrame, x, intrinsic_dim: int | None = None,
                    weights=None) -> dict:
    """Theory of the group's mechanism, when the group has one mechanism, d and s."""
    kind_col = "kind" if "kind" in g else "mechanism"
    if intrinsic_dim is not None:
        g = g.assign(intrinsic_dim=intrinsic_dim)
    s_col = "intrinsic_dim" if "intrinsic_dim" in g else "d"
    out = {"d": np.nan, "intrinsic_dim": np.nan, "theory": "", "theory_exponent": np.nan,
           "bound_slope": np.nan, "exponent_dimension": ""}
    columns = [kind_col, "d", s_col]
    if any(c not in g for c in columns) or any(
            g[c].isna().any() or g[c].nunique() != 1 for c in columns):
        return out
    kind, d, s = g[kind_col].iloc[0], int(g["d"].iloc[0]), int(g[s_col].iloc[0])
    if s > d:
        raise ValueError(f"intrinsic_dim: {s} exceeds the ambient dimension d = {d}")
    out.update(d=d, intrinsic_dim=s)
    th = theory(kind, d, s)
    if th is None:
        return out
    if kind in _AMBIENT_DEPTH and "depth" in g and g["depth"].notna().any():
        if g["depth"].isna().any():  # some rows' depth unknown: the rule cannot be checked
            return out
        ambient = [default_depth(e, n) for e, n in zip(g["eps"], g["n"])]
        if not np.array_equal(g["depth"].to_numpy(), ambient):
            out["theory"] = "fixed depth: saturates at the leaf resolution"
            return out
    out.update(theory=th.label, theory_exponent=th.exponent,
               exponent_dimension=_exponent_dimension(kind, d, s, intrinsic_dim is not None))
    if x is not None:
        out["bound_slope"] = float(_slopes(x, np.log(th.bound(np.exp(x))), weights))
    return out


def estimate_rate(
    df: pd.DataFrame,
    column: str = "w1_exact_upper",
    by=("mechanism", "data"),
    n_boot: int = 1000,
    level: float = 0.95,
    key: int = 0,
    intrinsic_dim: int | None = None,
    **renamed,
) -> pd.DataFrame:
    """Fit the slope of log E W1 against log(εn) per group, with a bootstrap interval.

    Each cell (ε, n) enters as the log of its mean, weighted by its precision; the
    input's per-cell means and intervals (``summary.summarize``) come back in
    ``attrs["cells"]`` (records).

    Args:
      df: a ``simulate`` table: columns ``eps``, ``n``, ``column`` and ``by`` (``kind``,
        ``d``, ``intrinsic_dim`` and ``depth`` enable the theory columns).
      column: the W1 column to fit.  Default ``"w1_exact_upper"``: the W1 of the sweep's
        ground metric between the whole data set and each release, certified within
        ``rtol`` (1%), the quantity the papers' rates bound; ``"w1_upper"`` the cheap
        certified upper bound of the bracket, ``"w1_tree"`` the ultrametric tree W1 (a
        different quantity, below the ℓ∞ W1).
      by: columns defining the groups; one fit per group.
      n_boot: bootstrap resamples.
      level: confidence level of the percentile interval, in (0, 1).
      key: non-negative int seeding the bootstrap; each group draws from its own stream
        (keyed by the group's values), so a fit does not depend on the other groups.
      intrinsic_dim: the data's intrinsic dimension ``s`` for the theory columns,
        replacing the table's ``intrinsic_dim`` column; without either, the exponent is
        the ambient one, and ``exponent_dimension`` says so.

    Returns:
      one row per group: the ``by`` columns, ``column`` (the fitted column's name),
      ``slope`` (fit on the cell
      means), ``ci_low``, ``ci_high``, ``level``, ``se`` (bootstrap standard error),
      ``cells`` (distinct (ε, n)), ``seeds`` (fewest replicates in a cell),
      ``eps_n_min``, ``eps_n_max``, ``d``, ``intrinsic_dim``, ``theory`` (the bound's
      formula), ``theory_exponent``, ``bound_slope`` (see the module docstring) and
      ``exponent_dimension`` (the dimension in the exponent and where it comes from).
      ``attrs["cells"]``: the input's cells, one record each (``summary.summarize``;
      ``pd.DataFrame(rates.attrs["cells"])``), when the table has the columns
      ``mechanism`` and ``data``.

    Raises:
      ValueError: naming the argument or the group: ``metric=`` (now ``column=``), a
        ``column`` that is not a W1 column,
        ``by`` naming ``eps``, ``n``, ``seed`` or a W1 column, a missing column, a row with a
        non-positive or non-numeric ``eps``/``n`` (or ``d``, ``intrinsic_dim``, ``depth``
        when present), a missing, non-numeric or negative ``column`` value, a group with
        a single εn value (no slope) or a cell with a single
        replicate (no interval), a non-positive cell mean (no logarithm), a group whose
        rows differ in ``kind``, ``config``, ``d`` or ``metric`` (they are different
        cells: the column is named, to be added to ``by``), rows of one data set and
        size measured on different points (``fingerprint``), an ``intrinsic_dim`` that
        is not a positive integer or exceeds ``d``.

    Examples:
      A table whose cell means fall exactly as ``(εn)^(-1/2)``, three seeds a cell:

      >>> import jaxsynth as js
      >>> import pandas as pd
      >>> df = pd.DataFrame([
      ...     {"mechanism": "pmm", "kind": "pmm", "data": "plane", "d": 2, "eps": 1.0, "n": n,
      ...      "seed": s, "w1_exact_upper": spread * n ** -0.5}
      ...     for n in (1000, 2000, 4000, 8000) for s, spread in enumerate((0.9, 1.0, 1.1))])
      >>> rates = js.estimate_rate(df, n_boot=200)
      >>> rates[["slope", "cells", "seeds", "theory", "theory_exponent"]].round(3)
         slope  cells  seeds          theory  theory_exponent
      0   -0.5      4      3  (eps n)^(-1/2)             -0.5
      >>> bool(rates.ci_low[0] < -0.5 < rates.ci_high[0])
      True
    """
    refuse_renamed("estimate_rate", renamed, RENAMED)
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"df must be a pandas DataFrame; got {type(df).__name__}")
    check_str(column, "column")
    if not column.startswith("w1_"):
        raise ValueError(f"column must be a W1 column (w1_exact_upper, w1_upper, w1_tree, ...); "
                         f"got {column!r}")
    by = [] if isinstance(by, (list, tuple)) and not by else check_names(by, "by")
    across = [c for c in by if c in ("eps", "n", "seed") or c.startswith("w1_")]
    if across:
        raise ValueError(f"by: {across} cannot group a fit: the slope runs across eps and n, "
                         "seeds are its replicates and W1 columns its values; group by columns "
                         "such as mechanism, data, kind or d")
    missing = [c for c in ["eps", "n", column, *by] if c not in df]
    if missing:
        raise ValueError(f"df lacks the column(s) {missing} (column={column!r}, by={by})")
    df = df[~control_only(df)]  # a precision_control sweep's rows without column
    if len(df) == 0:
        raise ValueError("df has no rows")
    check_fingerprints(df)
    n_boot = check_positive_int(n_boot, "n_boot", minimum=2)
    level = check_fraction(level, "level")
    key = check_positive_int(key, "key", minimum=0)
    if intrinsic_dim is not None:
        intrinsic_dim = check_positive_int(intrinsic_dim, "intrinsic_dim")
    df = _numeric(df, column)
    check_cells(df, by)
    rows = []
    for values, g in df.groupby(by, sort=True) if by else [((), df)]:
        values = values if isinstance(values, tuple) else (values,)
        rng = np.random.default_rng([key, zlib.crc32(repr(values).encode())])
        name = "the group " + ", ".join(f"{c}={v!r}" for c, v in zip(by, values)) if by \
            else "the table"
        fit, x, weights = _group_fit(g, column, n_boot, level, rng, name)
        rows.append({**dict(zip(by, values)), "column": column, **fit, "level": level,
                     **_theory_columns(g, x, intrinsic_dim, weights)})
    columns = [*by, "column", "slope", "ci_low", "ci_high", "level", "se", "cells", "seeds",
               "eps_n_min", "eps_n_max", "d", "intrinsic_dim", "theory", "theory_exponent",
               "bound_slope", "exponent_dimension"]
    out = pd.DataFrame(rows, columns=columns)
    if "mechanism" in df and "data" in df:
        out.attrs["cells"] = summarize(df, column, level, by=by).to_dict("records")
    return out
