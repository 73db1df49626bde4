"""Means with intervals: one row per cell of a sweep, and the seeds a cell still needs.

A *cell* is one (mechanism, data, n, ε); its replicates (seeds) are i.i.d. draws of a
positive, right-skewed quantity (W1), few of them in the first rounds of a sweep.  The
interval of a cell's mean is Johnson's skewness-corrected t interval (N. J. Johnson,
"Modified t tests and confidence intervals for asymmetrical populations", JASA 73, 1978):
the Student-t interval shifted by the first-order skewness term, which the plain t
interval misses and which makes its coverage one-sided when the draws are skewed.  Why
this interval, and not a bootstrap or a log-scale one: ``docs/guide/precision.md``.

``next_target`` is the stopping rule of ``simulate(..., precision=...)``: a cell stops
when its interval's half-width is at most ``precision`` × its mean; otherwise it grows
along a fixed ladder of seed counts (the first round's count times powers of two, capped
at ``max_seeds``), so the rounds of a resumed or tightened run replay exactly.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from jaxsynth.core.validate import check_fraction, check_str

__all__ = ["CELL_COLUMNS", "LEVEL", "control_variate", "mean_interval", "next_target",
           "summarize"]

LEVEL = 0.95
"""The default confidence level of every interval."""
CELL_COLUMNS = ("mechanism", "data", "n", "eps")
"""The columns that name a cell; its replicates are the rows that share them."""
DEFINING = ("kind", "config", "d", "metric")
"""Columns every replicate of one cell must share: a table that mixes two of their values
under one cell (two files of different dimension, say) is refused, naming the column."""
GROWTH = 4
"""A round multiplies a cell's seed count by at most this (two rungs of the ladder)."""


def mean_interval(values, level: float = LEVEL):
    """The mean of the last axis and its skewness-corrected t interval.

    Args:
      values: array [..., S] of S ≥ 2 i.i.d. draws (NaN entries are not allowed).
      level: confidence level in (0, 1).

    Returns:
      ``(mean, low, high)`` arrays [...]: ``mean ± t·sd/√S`` shifted by Johnson's term
      ``m3 / (6 sd² S)`` (``m3`` the unbiased third central moment; no shift for S = 2).

    Example:
      >>> from jaxsynth.experiments.summary import mean_interval
      >>> mean, low, high = mean_interval([1.0, 2.0, 3.0])
      >>> float(mean), round(float(high - mean), 3)
      (2.0, 2.484)
    """
    x = np.asarray(values, np.float64)
    S = x.shape[-1]
    if S < 2:
        raise ValueError(f"values: an interval needs at least 2 draws; got {S}")
    # in units of a power of two near the largest value (exact): no moment overflows
    _, power = np.frexp(np.abs(x).max(axis=-1))
    x = np.ldexp(x, -power[..., None])
    mean = x.mean(axis=-1)
    dev = x - mean[..., None]
    var = (dev**2).sum(axis=-1) / (S - 1)
    shift = np.zeros_like(mean)
    if S > 2:
        m3 = (dev**3).sum(axis=-1) * S / ((S - 1) * (S - 2))
        with np.errstate(invalid="ignore", divide="ignore"):
            shift = np.where(var > 0, m3 / (6 * var * S), 0.0)
    half = stats.t.ppf(0.5 + level / 2, S - 1) * np.sqrt(var / S)
    return tuple(np.ldexp(v, power) for v in (mean, mean + shift - half, mean + shift + half))


def relative_half_width(mean, low, high):
    """The larger distance from the mean to an end of its interval, over the mean."""
    mean = np.asarray(mean, np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.maximum(high - mean, mean - low) / mean


def next_target(values, precision: float, first: int, max_seeds: int,
                level: float = LEVEL) -> int:
    """The seed count a cell needs next (its current count when it is finished).

    Args:
      values: the cell's draws so far (its first ``len(values)`` seeds).
      precision: the target relative half-width of its ``level`` interval.
      first: the first round's seed count (the ladder's first rung).
      max_seeds: the most seeds any cell gets (the ladder's last rung).

    Returns:
      ``len(values)`` when the interval meets the target or ``max_seeds`` is reached;
      otherwise the smallest rung ``first·2^k`` (or ``max_seeds``) at or above the
      t-based estimate of the count that meets it, at most ``GROWTH`` times the current.
    """
    count = len(values)
    mean, low, high = mean_interval(values, level)
    width = relative_half_width(mean, low, high)
    if count >= max_seeds or width <= precision:
        return count
    need = count * (width / precision) ** 2 if np.isfinite(width) else np.inf
    rung = first
    while rung <= count or (rung < need and rung < GROWTH * count):
        rung *= 2
    return int(min(rung, max_seeds))


def _sd(values: np.ndarray) -> float:
    """The sample standard deviation, computed in units of a power of two (no overflow)."""
    _, power = np.frexp(np.abs(values).max())
    return float(np.ldexp(np.ldexp(values, -power).std(ddof=1), power))


def control_variate(values, paired, control, level: float = LEVEL):
    """The two-phase regression estimate of a mean, with its interval.

    The expensive quantity ``values`` [n] is measured on the first n replicates; a cheap
    one that predicts it, ``paired`` [n] on the same replicates and ``control`` [N] on
    N ≥ n replicates that include them.  The estimate ``ȳ + β̂ (X̄_N − x̄_n)`` (β̂ the
    least-squares slope of y on x) is unbiased to first order whatever the correlation
    ρ, and its variance ``s_e²/n + (s_y² − s_e²)/N`` (``s_e²`` the residual variance)
    is that of the plain mean, ``s_y²/n``, times ``1 − ρ²(1 − n/N)``; the interval uses
    Student's t with n − 2 degrees of freedom (two estimated coefficients).

    Args:
      values: the expensive draws [n], n ≥ 4.
      paired: the control on the same replicates [n].
      control: the control on all N replicates [N] (the first n are ``paired``).
      level: confidence level.

    Returns:
      ``(mean, low, high, saved)``: ``saved`` is how many more expensive replicates the
      plain mean would need for an interval as narrow (at its variance ``s_y²/n``).

    References:
      W. G. Cochran, Sampling Techniques, 3rd ed. (1977), §12.6 (double sampling for
      regression).
    """
    y, x, X = (np.asarray(v, np.float64) for v in (values, paired, control))
    n, N = len(y), len(X)
    if n < 4 or len(x) != n or N < n:
        raise ValueError(f"control: needs n ≥ 4 paired draws and N ≥ n controls; got n = {n}, "
                         f"{len(x)} paired, N = {N}")
    sxx = x.var(ddof=1)
    beta = np.cov(x, y)[0, 1] / sxx if sxx > 0 else 0.0
    mean = y.mean() + beta * (X.mean() - x.mean())
    residual = y - y.mean() - beta * (x - x.mean())
    se2 = (residual**2).sum() / (n - 2)
    sy2 = y.var(ddof=1)
    var = se2 / n + max(sy2 - se2, 0.0) / N
    half = stats.t.ppf(0.5 + level / 2, n - 2) * np.sqrt(var)
    saved = sy2 / var - n if var > 0 else 0.0
    return float(mean), float(mean - half), float(mean + half), float(saved)


def check_cells(df: pd.DataFrame, by) -> None:
    """Refuse rows of one group (``by``) that differ in a column defining a cell."""
    by = list(by)
    for column in DEFINING:
        if column not in df or column in by:
            continue
        if not by:
            if df[column].nunique() > 1:
                values = sorted(map(str, df[column].dropna().unique()))
                raise ValueError(f"{column}: the table holds {len(values)} values of {column} "
                                 f"({', '.join(values)}); they are different cells: fit them "
                                 f"apart (by={column!r})")
            continue
        counts = df.groupby(by, sort=True, dropna=False)[column].nunique()
        mixed = counts[counts > 1]
        if len(mixed):
            key = mixed.index[0] if isinstance(mixed.index[0], tuple) else (mixed.index[0],)
            name = ", ".join(f"{c}={v!r}" for c, v in zip(by, key))
            rows = df
            for c, v in zip(by, key):
                rows = rows[rows[c] == v]
            values = sorted(map(str, rows[column].dropna().unique()))
            raise ValueError(
                f"{column}: the rows of {name} hold {len(values)} values of {column} "
                f"({', '.join(values)}); they are different cells: fit or summarize them "
                f"apart (add {column} to by, e.g. --by {','.join([*by, column])})")


def summarize(df: pd.DataFrame, column: str = "w1_exact_upper", level: float = LEVEL,
              precision: float | None = None, by=(), control: str | None = None,
              controls: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per cell (mechanism, data, n, ε): mean, interval, seeds, target met.

    Args:
      df: a ``simulate`` table (one row per replicate).
      column: the column to summarize (default ``w1_exact_upper``).
      level: confidence level of the intervals.
      precision: the target relative half-width; default ``df.attrs["precision"]``
        (set by ``simulate(..., precision=...)``), else no ``target_met`` column.
      by: more columns that tell cells apart (``metric``, ``d``, ...), beside
        mechanism, data, n and ε.
      control: a cheap column that predicts ``column`` (``w1_tree_upper``,
        ``w1_upper``, ...), measured in ``df`` and in ``controls``.
      controls: a sweep of the same cells and key with more seeds, measuring only
        ``control`` (``simulate(..., methods=["tree_upper"])``: no full-data W1); its
        rows for ``df``'s seeds must hold ``df``'s values (the same replicates).

    Returns:
      a DataFrame sorted by cell: the cell columns (and ``kind``, ``d``,
      ``intrinsic_dim``, ``metric`` when present), ``column`` (its name), ``mean``,
      ``ci_low``, ``ci_high`` (``mean_interval``), ``rel_half_width``, ``sd``, ``seeds``,
      and ``target_met`` when a precision is known; with ``control``, the
      control-variate estimate (``control_variate``) ``cv_mean``, ``cv_low``,
      ``cv_high``, ``control_seeds`` (N) and ``replicates_saved``.

    Raises:
      ValueError: a missing column, a cell with a single seed, rows of one cell that
        differ in ``kind``, ``config``, ``d`` or ``metric`` (named).

    Example:
      >>> import pandas as pd
      >>> df = pd.DataFrame({"mechanism": "m", "data": "x", "n": 10, "eps": 1.0,
      ...                    "seed": [0, 1, 2], "w1_exact_upper": [1.0, 2.0, 3.0]})
      >>> js.summarize(df)[["mean", "seeds"]].to_dict("records")
      [{'mean': 2.0, 'seeds': 3}]
    """
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"df must be a pandas DataFrame; got {type(df).__name__}")
    check_str(column, "column")
    level = check_fraction(level, "level")
    keys = [*CELL_COLUMNS, *(c for c in by if c not in CELL_COLUMNS)]
    missing = [c for c in (*keys, column) if c not in df]
    if missing:
        raise ValueError(f"df lacks the column(s) {missing}")
    if precision is None:
        precision = df.attrs.get("precision")
    check_cells(df, keys)
    cheap = {}
    if control is not None:
        check_str(control, "control")
        if not isinstance(controls, pd.DataFrame) or control not in controls or control not in df:
            raise ValueError(f"control: {control!r} must be a column of df and of controls (a "
                             "DataFrame of the cheap sweep)")
        cheap = {cell: g for cell, g in controls.groupby(keys, sort=True)}
    extra = [c for c in ("kind", "d", "intrinsic_dim", "metric") if c in df and c not in keys]
    rows = []
    for cell, g in df.groupby(keys, sort=True):
        values = pd.to_numeric(g[column], errors="coerce").to_numpy(np.float64)
        name = ", ".join(f"{c}={v!r}" for c, v in zip(keys, cell))
        if len(values) < 2 or not np.isfinite(values).all():
            raise ValueError(f"{column}: the cell {name} has {len(values)} seed(s) or a "
                             "missing value; an interval needs two or more finite values")
        mean, low, high = mean_interval(values, level)
        row = {**dict(zip(keys, cell)), **{c: g[c].iloc[0] for c in extra},
               "column": column, "mean": float(mean), "ci_low": float(low),
               "ci_high": float(high), "rel_half_width": float(relative_half_width(
                   mean, low, high)), "sd": _sd(values), "seeds": len(values)}
        if precision is not None:
            row["target_met"] = bool(row["rel_half_width"] <= precision)
        if control is not None:
            row.update(_with_control(g, column, control, cheap.get(cell), name, level))
        rows.append(row)
    return pd.DataFrame(rows)


def _with_control(g, column, control, cheap, name, level) -> dict:
    """The control-variate columns of one cell (``summarize``)."""
    if cheap is None:
        raise ValueError(f"controls: no rows of the cell {name}")
    paired = g.set_index("seed")[control]
    others = cheap.set_index("seed")[control]
    missing = paired.index.difference(others.index)
    if len(missing):
        raise ValueError(f"controls: the cell {name} lacks seed {missing[0]} of df")
    if not np.array_equal(others.loc[paired.index].to_numpy(np.float64),
                          paired.to_numpy(np.float64)):
        raise ValueError(f"controls: the cell {name} holds other values of {control} than df "
                         "for the same seeds (another key or data key?)")
    ordered = np.concatenate([paired.to_numpy(np.float64), others.drop(
        paired.index).to_numpy(np.float64)])
    mean, low, high, saved = control_variate(g[column].to_numpy(np.float64),
                                             paired.to_numpy(np.float64), ordered, level)
    return {"cv_mean": mean, "cv_low": low, "cv_high": high, "control_seeds": len(ordered),
            "replicates_saved": saved}
