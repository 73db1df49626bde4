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
from jaxsynth.experiments.store import control_only

__all__ = ["CELL_COLUMNS", "CONTROLS", "LEVEL", "check_fingerprints", "control_variate",
           "mean_interval", "next_control_target", "next_target", "summarize"]

LEVEL = 0.95
"""The default confidence level of every interval."""
CELL_COLUMNS = ("mechanism", "data", "n", "eps")
"""The columns that name a cell; its replicates are the rows that share them."""
DEFINING = ("kind", "config", "d", "metric")
"""Columns every replicate of one cell must share: a table that mixes two of their values
under one cell (two files of different dimension, say) is refused, naming the column."""
GROWTH = 4
"""A round multiplies a cell's seed count by at most this (two rungs of the ladder)."""
CONTROLS = 16
"""With a control, a cell's control replicates are at most this many times its most
expensive ones (``next_control_target``)."""


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
    return _rung(count, need, first, max_seeds)


def _rung(count: int, need: float, first: int, most: int) -> int:
    """The smallest rung ``first·2^k`` above ``count`` at or above ``need``, at most
    ``GROWTH`` times ``count`` and at most ``most`` (``count`` itself when it is there)."""
    if count >= most:
        return count
    rung = first
    while rung <= count or (rung < need and rung < GROWTH * count):
        rung *= 2
    return int(min(rung, most))


def next_control_target(values, paired, control, costs, precision: float, first: int,
                        max_seeds: int, level: float = LEVEL) -> tuple[int, int]:
    """The (expensive, control) seed counts a cell needs next when a cheap control
    predicts the expensive quantity (``simulate(..., precision_control=...)``).

    The cell's estimate is the two-phase regression estimate (``control_variate``) from
    ``n`` expensive draws and ``N ≥ n`` controls.  Its variance is about
    ``s²[(1 − ρ²)/n + ρ²/N]``; for a given cost it is smallest at ``N/n = r =
    √(ρ²/(1 − ρ²) · c_e/c_c)`` (W. G. Cochran, Sampling Techniques, 3rd ed., 1977, §12.6;
    ``c_e``, ``c_c`` the seconds of an expensive and of a control-only replicate), kept
    between 1 and ``CONTROLS``.  An unfinished cell moves ``n`` along ``next_target``'s
    ladder to the rung its plain interval predicts, times the control's factor
    ``(1 − ρ²) + ρ²/r``, and ``N`` to ``r·n``; at ``max_seeds`` expensive draws only the
    controls grow, up to ``CONTROLS · max_seeds``.  Where the plain rule's next rung is
    predicted to meet the target at no more cost (the ladder's rungs are coarse: the
    control may not lower the rung, and its draws then only add cost), the cell takes that
    rung with no new control-only draw.

    Args:
      values: the expensive draws so far [n] (the cell's first n seeds), n ≥ 4.
      paired: the control on those replicates [n].
      control: the control on all N replicates [N] (the first n are ``paired``).
      costs: (seconds of an expensive replicate, seconds of a control-only one).
      precision, first, max_seeds, level: as ``next_target``.

    Returns:
      ``(n, N)`` unchanged when the two-phase interval meets the target or no count can
      grow; otherwise the next counts.
    """
    y, x = np.asarray(values, np.float64), np.asarray(paired, np.float64)
    n, N, most = len(y), len(control), CONTROLS * max_seeds
    width = relative_half_width(*control_variate(y, x, control, level)[:3])
    if width <= precision:
        return n, N
    with np.errstate(invalid="ignore", divide="ignore"):
        rho2 = float(np.nan_to_num(np.corrcoef(x, y)[0, 1] ** 2))
    rho2 = min(rho2, 0.99)
    ratio = float(np.clip(np.sqrt(rho2 / (1 - rho2) * costs[0] / max(costs[1], 1e-12)),
                          1.0, CONTROLS))
    plain = relative_half_width(*mean_interval(y, level))
    alone = n * (plain / precision) ** 2 if np.isfinite(plain) else np.inf
    need = alone * ((1 - rho2) + rho2 / ratio)
    grown = _rung(n, need, first, max_seeds)
    controls = min(max(int(np.ceil(ratio * grown)), N, grown), most)
    if (grown, controls) == (n, N):
        controls = min(GROWTH * N, most)
    rung = _rung(n, alone, first, max_seeds)  # the plain rule's next rung, no new control
    if rung >= alone and (rung - n) * costs[0] <= (grown - n) * costs[0] + (
            controls - N) * costs[1]:
        return rung, max(N, rung)
    return grown, controls


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
    # in units of powers of two near the largest values (exact): no moment overflows
    _, py = np.frexp(np.abs(y).max())
    _, px = np.frexp(max(np.abs(X).max(), np.abs(x).max()))
    y, x, X = np.ldexp(y, -py), np.ldexp(x, -px), np.ldexp(X, -px)
    sxx = x.var(ddof=1)
    beta = np.cov(x, y)[0, 1] / sxx if sxx > 0 else 0.0
    mean = y.mean() + beta * (X.mean() - x.mean())
    residual = y - y.mean() - beta * (x - x.mean())
    se2 = (residual**2).sum() / (n - 2)
    sy2 = y.var(ddof=1)
    var = se2 / n + max(sy2 - se2, 0.0) / N
    half = stats.t.ppf(0.5 + level / 2, n - 2) * np.sqrt(var)
    saved = sy2 / var - n if var > 0 else 0.0
    return tuple(float(np.ldexp(v, py)) for v in (mean, mean - half, mean + half)) + (
        float(saved),)


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


def _numbers(df: pd.DataFrame, column: str, name: str) -> np.ndarray:
    """``df[column]`` as float64, or ``ValueError`` naming ``name`` and the column for text
    or booleans (never coerced to NaN or averaged)."""
    raw = df[column]
    value = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64, na_value=np.nan)
    text = raw.notna().to_numpy(bool) & np.isnan(value)
    if pd.api.types.is_bool_dtype(raw.dtype) or text.any():
        first = raw[text].iloc[0] if text.any() else raw.iloc[0]
        raise ValueError(f"{name}: the column {column!r} is not numeric (first: {first!r})")
    return value


def _check_range(df: pd.DataFrame, column: str, values: np.ndarray, name: str,
                 bounded: bool) -> None:
    """Refuse infinite or negative values; ``bounded`` (a control), also values of a W1
    column above the diameter of [0,1]^d in the row's metric (√d in ℓ2, 1 in ℓ∞), which
    no W1 between measures on the cube exceeds.  The summarized column itself is any
    non-negative number: a mean and its interval, like a rate, are the same for a
    rescaled column, whose values a W1 bound need not hold."""
    bad = np.isinf(values) | (values < 0)
    if bounded and column.startswith("w1_") and "d" in df and "metric" in df:
        d = pd.to_numeric(df["d"], errors="coerce").to_numpy(np.float64)
        diameter = np.where(df["metric"].astype(str).to_numpy() == "l2", np.sqrt(d), 1.0)
        with np.errstate(invalid="ignore"):
            bad |= values > diameter * (1 + 1e-6)
    if bad.any():
        raise ValueError(f"{name}: {int(bad.sum())} value(s) of {column!r} are infinite, "
                         f"negative or above the diameter of the cube (first: "
                         f"{values[np.argmax(bad)]!r})")


def _check_table(df, column: str, keys: list, name: str = "df",
                 bounded: bool = False) -> pd.DataFrame:
    """``df`` checked for ``summarize``: a table with rows, the key columns and the seed,
    ``column`` numeric and in range (``_check_range``), one point set per data set."""
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{name} must be a pandas DataFrame; got {type(df).__name__}")
    missing = [c for c in dict.fromkeys([*keys, "seed", column]) if c not in df]
    if missing:
        raise ValueError(f"{name} lacks the column(s) {missing}")
    if not len(df):
        raise ValueError(f"{name} has no rows: nothing to summarize")
    values = _numbers(df, column, name)
    _check_range(df, column, values, name, bounded)
    check_fingerprints(df, name)
    return df


def _check_replicates(df: pd.DataFrame, keys: list, name: str = "df") -> None:
    """Refuse a replicate (a cell's seed) that appears twice."""
    repeated = df.duplicated([*keys, "seed"])
    if repeated.any():
        row = {c: getattr(v, "item", lambda v=v: v)() for c, v in df[repeated].iloc[0].items()}
        raise ValueError(f"{name}: {int(repeated.sum())} repeated replicate(s), e.g. seed "
                         f"{row['seed']!r} of " + ", ".join(f"{c}={row[c]!r}" for c in keys)
                         + ": a replicate counts once (concatenated the same table twice?)")


def check_fingerprints(df: pd.DataFrame, name: str = "df") -> None:
    """Refuse rows of one data set and size measured on different points (the column
    ``fingerprint``: rows of two data sets under one label never pool)."""
    if "fingerprint" not in df or "data" not in df or "n" not in df:
        return
    counts = df.dropna(subset=["fingerprint"]).groupby(["data", "n"])["fingerprint"].unique()
    for (data, n), prints in counts.items():
        if len(prints) > 1:
            raise ValueError(f"{name}: the rows of data={data!r}, n={n} were measured on "
                             f"{len(prints)} different point sets (fingerprints "
                             f"{', '.join(sorted(prints))}): they are different data sets "
                             "under one label and cannot be pooled")


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
      control: a cheap column that predicts ``column`` (``w1_tree_upper``, which every
        sweep records, ``w1_upper``, ...): the two-phase estimate of each cell's mean
        with ``column`` on the replicates that measured it and ``control`` on all of them
        (``df``'s rows, the control-only rows of a ``precision_control`` sweep included),
        or on ``controls``'.
      controls: a sweep of the same cells and key with more seeds, measuring only
        ``control`` (``simulate(..., methods=["tree_upper"])``: no full-data W1); its
        rows for ``df``'s seeds must hold ``df``'s values (the same replicates).

    Returns:
      a DataFrame sorted by cell: the cell columns (and ``kind``, ``d``,
      ``intrinsic_dim``, ``metric`` when present), ``column`` (its name), ``mean``,
      ``ci_low``, ``ci_high`` (``mean_interval``), ``rel_half_width``, ``sd``, ``seeds``,
      and ``target_met`` when a precision is known (of the control-variate interval with
      ``control``); with ``control``, the control-variate estimate (``control_variate``)
      ``cv_mean``, ``cv_low``, ``cv_high``, ``cv_rel_half_width``, ``control_seeds`` (N)
      and ``replicates_saved`` (negative when the control costs precision: a control
      that predicts nothing still estimates a slope).

    Raises:
      ValueError: naming the argument and the column: ``df`` (or ``controls``) that is
        not a table, has no rows or lacks a column, a replicate twice, a column that is
        not numeric, a value that is infinite or negative (a control's, also above the
        cube's diameter), a cell with a single seed or a missing value, rows of one cell that
        differ in ``kind``, ``config``, ``d`` or ``metric``, rows of one data set and
        size measured on different points (``fingerprint``), a control with a missing
        value, ``controls`` of another metric, ``controls`` without ``control``.

    Example:
      >>> import pandas as pd
      >>> df = pd.DataFrame({"mechanism": "m", "data": "x", "n": 10, "eps": 1.0,
      ...                    "seed": [0, 1, 2], "w1_exact_upper": [1.0, 2.0, 3.0]})
      >>> js.summarize(df)[["mean", "seeds"]].to_dict("records")
      [{'mean': 2.0, 'seeds': 3}]
    """
    check_str(column, "column")
    level = check_fraction(level, "level")
    keys = [*CELL_COLUMNS, *(c for c in by if c not in CELL_COLUMNS)]
    df = _check_table(df, column, keys)
    if precision is None:
        precision = df.attrs.get("precision")
    check_cells(df, keys)
    _check_replicates(df, keys)
    cheap = {}
    if controls is not None and control is None:
        raise ValueError("controls needs control= (the cheap column it measures)")
    if control is not None:
        check_str(control, "control")
        if control not in df:
            raise ValueError(f"control: {control!r} is not a column of df")
        _check_table(df, control, keys, bounded=True)
        _finite(df, control, "df")
        if controls is not None:
            cheap = _controls(df, controls, control, keys)
    extra = [c for c in ("kind", "d", "intrinsic_dim", "metric") if c in df and c not in keys]
    rows = []
    for cell, g in df.groupby(keys, sort=True):
        name = ", ".join(f"{c}={v!r}" for c, v in zip(keys, cell))
        measured = g[~control_only(g)]
        values = pd.to_numeric(measured[column]).to_numpy(np.float64)
        if len(values) < 2 or not np.isfinite(values).all():
            raise ValueError(f"{column}: the cell {name} has {len(values)} seed(s) or a "
                             "missing value; an interval needs two or more finite values")
        mean, low, high = mean_interval(values, level)
        row = {**dict(zip(keys, cell)), **{c: g[c].iloc[0] for c in extra},
               "column": column, "mean": float(mean), "ci_low": float(low),
               "ci_high": float(high), "rel_half_width": float(relative_half_width(
                   mean, low, high)), "sd": _sd(values), "seeds": len(values)}
        if control is not None:
            others = cheap.get(cell) if controls is not None else g
            row.update(_with_control(measured, column, control, others, name, level))
        if precision is not None:
            width = row["cv_rel_half_width"] if control is not None else row["rel_half_width"]
            row["target_met"] = bool(width <= precision)
        rows.append(row)
    return pd.DataFrame(rows)


def _finite(df: pd.DataFrame, column: str, name: str) -> None:
    values = pd.to_numeric(df[column]).to_numpy(np.float64)
    if not np.isfinite(values).all():
        raise ValueError(f"{name}: {int((~np.isfinite(values)).sum())} value(s) of the control "
                         f"{column!r} are missing or not finite; every replicate has one")


def _controls(df: pd.DataFrame, controls, control: str, keys: list) -> dict:
    """The control sweep's rows by cell, checked against ``df``."""
    controls = _check_table(controls, control, keys, "controls", bounded=True)
    _check_replicates(controls, keys, "controls")
    _finite(controls, control, "controls")
    if "metric" in df and "metric" in controls:
        ours, theirs = set(df["metric"].astype(str)), set(controls["metric"].astype(str))
        if ours != theirs:
            raise ValueError(f"controls: measured in the metric {sorted(theirs)}, df in "
                             f"{sorted(ours)}: the same replicates need the same metric")
    return {cell: g for cell, g in controls.groupby(keys, sort=True)}


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
    return {"cv_mean": mean, "cv_low": low, "cv_high": high,
            "cv_rel_half_width": float(relative_half_width(mean, low, high)),
            "control_seeds": len(ordered), "replicates_saved": saved}
