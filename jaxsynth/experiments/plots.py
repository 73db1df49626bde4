"""Figures of sweeps: W1 against εn with rates, and depth sweeps.

Figures are built with ``matplotlib.figure.Figure`` (Agg rendering), never through
``pyplot``: nothing opens a window and importing this module changes no global
matplotlib state.  Each function returns the ``Figure`` (notebooks display it) and
writes it to ``path`` when given (checked before any work).  matplotlib is the optional
dependency ``jaxsynth[plots]``, imported when a figure is made: without it, an
``ImportError`` names the extra (``quantity``, in words, needs none).  Every figure names the
quantity it shows (``quantity``) in the words of the W1 method that writes the column
(``W1Method.columns``, with the ground metric's symbol ℓ∞ or ℓ2), and pairs a certified
upper end with its lower end as the methods' columns do (``registry.certified_pairs``):
a new method's columns need no change here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from jaxsynth.core.partition import GROUND_METRICS
from jaxsynth.core.validate import check_output_path, check_str, refuse_renamed
from jaxsynth.experiments.rates import RENAMED, estimate_rate, theory
from jaxsynth.experiments.summary import mean_interval

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["check_figure_path", "depth_plot", "metric_name", "quantity", "rate_plot"]

INSTALL = 'pip install "jaxsynth[plots]"'
"""What installs matplotlib, the optional dependency of figures."""


def _matplotlib(module: str):
    """matplotlib's ``module``, imported on first use; an ``ImportError`` naming the extra
    that installs it when matplotlib is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is None or not exc.name.startswith("matplotlib"):
            raise  # matplotlib is there, and something it needs is not
        raise ImportError(f"figures need matplotlib, an optional dependency of jaxsynth: "
                          f"{INSTALL}", name="matplotlib") from exc


_SYMBOLS = dict(zip(GROUND_METRICS, ("ℓ∞", "ℓ2")))
"""The ground metrics in symbols."""


def metric_name(df: pd.DataFrame | None = None) -> str:
    """The ground metric(s) of ``df``'s ``metric`` column in symbols (default ``ℓ∞``).

    Examples:
      >>> import jaxsynth as js
      >>> import pandas as pd
      >>> js.plots.metric_name(), js.plots.metric_name(pd.DataFrame({"metric": ["l2"]}))
      ('ℓ∞', 'ℓ2')
    """
    metrics = sorted(set(df["metric"].dropna())) if df is not None and "metric" in df else []
    return "/".join(_SYMBOLS.get(m, m) for m in metrics) or _SYMBOLS[GROUND_METRICS[0]]


def quantity(column: str, df: pd.DataFrame | None = None) -> str:
    """What a result column measures, in words: its method's description
    (``W1Method.columns``) with the ground metric of ``df`` in symbols; else its name.

    Examples:
      >>> import jaxsynth as js
      >>> js.plots.quantity("w1_exact_upper")
      'certified upper end of the ℓ∞ W1 of the whole data set (upper − lower ≤ rtol · upper)'
      >>> js.plots.quantity("seconds")
      'seconds'
    """
    from jaxsynth.wasserstein.registry import GROUND, column_descriptions

    return column_descriptions().get(column, column).replace(GROUND, f"the {metric_name(df)}")


def _lower_end(column: str, df: pd.DataFrame) -> str | None:
    """The lower end of the certified pair whose upper end is ``column``, if ``df`` has it."""
    from jaxsynth.wasserstein.registry import certified_pairs

    lower = certified_pairs().get(column)
    return lower if lower in df else None


def check_figure_path(path, name: str = "path"):
    """Validate where a figure will be written, before any work (suffix, directory).

    Examples:
      >>> import jaxsynth as js
      >>> str(js.plots.check_figure_path("rates.png"))
      'rates.png'
      >>> js.plots.check_figure_path("rates.txt")
      Traceback (most recent call last):
      ...
      ValueError: path must end in .eps, .gif, ... .png, ...; got 'rates.txt'
    """
    canvas = _matplotlib("matplotlib.backend_bases").FigureCanvasBase
    suffixes = tuple("." + k for k in canvas.get_supported_filetypes())
    return check_output_path(path, name, suffixes)


def _check_df(df, columns, name="df") -> None:
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{name} must be a pandas DataFrame (a simulate table); got "
                         f"{type(df).__name__}")
    missing = [c for c in columns if c not in df]
    if missing:
        raise ValueError(f"{name} lacks the column(s) {missing}")
    if len(df) == 0:
        raise ValueError(f"{name} has no rows")


def _groups(df: pd.DataFrame, by) -> list[tuple[tuple, str, pd.DataFrame]]:
    """(key tuple, label, rows) per group of ``by``."""
    if not isinstance(by, (str, list, tuple)):
        raise ValueError(f"by must be a column name or a list of them; got {by!r}")
    by = [by] if isinstance(by, str) else list(by)
    missing = [c for c in by if c not in df]
    if missing:
        raise ValueError(f"df lacks the column(s) {missing} named in by")
    out = []
    for key, g in df.groupby(by, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        out.append((key, " / ".join(map(str, key)), g))
    return out


def _save(fig: Figure, path) -> Figure:
    if path is not None:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


def rate_plot(df: pd.DataFrame, column: str = "w1_exact_upper", by=("mechanism", "data"),
              rates: pd.DataFrame | None = None, path=None, **renamed) -> Figure:
    """Mean W1 against εn on log-log axes, with each mean's interval, the fit and theory.

    Args:
      df: a ``simulate`` table (columns ``eps``, ``n``, ``column``, ``by``).
      column: the W1 column plotted (default ``w1_exact_upper``: the full-data W1,
        certified within ``rtol``); ``metric=``, its former name, is refused.
      by: columns defining one curve each.
      rates: ``estimate_rate(df, column, by)`` if already computed (else computed with
        200 bootstrap resamples, enough for the legend's interval).
      path: where to save the figure (PNG, PDF, ... by suffix), or ``None``.

    Returns:
      the ``Figure``.  Points are cell means with their 95 % intervals as error bars
      (``summary.mean_interval``; the legend says so); each group's fitted line has its
      own colour, marker and line style, its slope and interval in the legend; the grey
      dotted line is the papers' bound function (``rates.theory``), one per distinct
      bound: only its slope is meaningful, and it is drawn through the fits at the
      geometric middle of the εn range (the legend says so).  The axes are named in
      words (``quantity``) and the title gives the ε values and the seeds per cell.
      When ``column`` is the upper end of a certified pair (``registry.certified_pairs``)
      and the table has the lower end, the lower end's means are drawn as larger open
      markers beside the filled ones, so the pair is visible.  Coinciding groups stay
      visible: each is offset horizontally by a few percent.  The legend sits below the
      axes.

    Examples:
      >>> import jaxsynth as js
      >>> import pandas as pd
      >>> df = pd.DataFrame({"mechanism": "pmm", "data": "plane", "eps": 1.0,
      ...                    "n": [1000, 1000, 4000, 4000], "seed": [0, 1, 0, 1],
      ...                    "w1_exact_upper": [0.030, 0.034, 0.015, 0.017]})
      >>> fig = js.plots.rate_plot(df)               # path="rates.png" also writes it
      >>> ax = fig.axes[0]
      >>> ax.get_xscale(), ax.get_yscale(), ax.get_xlabel()
      ('log', 'log', 'ε n (privacy budget × sample size)')
    """
    refuse_renamed("rate_plot", renamed, RENAMED)
    check_str(column, "column")
    _check_df(df, ["eps", "n", column])
    if path is not None:
        check_figure_path(path)
    by = [by] if isinstance(by, str) else list(by)
    if rates is None:
        rates = estimate_rate(df, column=column, by=by, n_boot=200)
    fig = _matplotlib("matplotlib.figure").Figure(figsize=(7.2, 6.6), layout="constrained")
    ax = fig.add_subplot()
    lower = _lower_end(column, df)
    fits = {tuple(r[c] for c in by): r for _, r in rates.iterrows()}
    groups = _groups(df, by)
    cells, theories = set(), {}
    for i, (key, label, g) in enumerate(groups):
        dodge = DODGE ** (i - (len(groups) - 1) / 2)  # coinciding curves stay visible
        x = _draw_group(ax, g, (column, lower), (i, label, dodge), fits[key], theories)
        cells.update(x.tolist())
    for (name, slope), (th, grid, mid, heights) in theories.items():
        at_mid = np.exp(np.mean(np.log(heights)))
        ax.plot(grid, at_mid * th.bound(grid) / th.bound(mid), ":", color="0.35", lw=1.6,
                label=f"theory {name}, slope {slope:.2f} (height arbitrary: through the "
                      "fits' middle)")
    _rate_axes(ax, df, column, lower, cells)
    entries = len(ax.get_legend_handles_labels()[0])
    fig.legend(loc="outside lower center", fontsize=7, ncol=2 if entries > 4 else 1)
    return _save(fig, path)


def _draw_group(ax, g: pd.DataFrame, columns, style, fit, theories: dict) -> np.ndarray:
    """One group of a rate plot: its cell means with intervals, its fitted line, its lower
    ends; its theory is gathered in ``theories``.  Returns the group's εn values."""
    (column, lower), (i, label, dodge) = columns, style
    color, marker = f"C{i % 10}", _MARKERS[i % len(_MARKERS)]
    x, mean, err = _cell_means(g, column)
    ax.errorbar(x * dodge, mean, yerr=err, fmt=marker, color=color, ms=5, capsize=3,
                zorder=3, label=f"{label}: mean, 95 % interval")
    if np.isfinite(fit["slope"]):
        mid = np.sqrt(x.min() * x.max())
        at_mid = np.exp(np.log(mean).mean() + fit["slope"] * (np.log(mid) - np.log(x).mean()))
        grid = np.geomspace(x.min(), x.max(), 50)
        ax.plot(grid, at_mid * (grid / mid) ** fit["slope"], _STYLES[i % len(_STYLES)],
                color=color, lw=1.4,
                label=f"{label}: fitted slope {fit['slope']:.2f} "
                      f"[{fit['ci_low']:.2f}, {fit['ci_high']:.2f}]")
        th = _group_theory(g, fit.get("intrinsic_dim"))
        if th is not None and fit["theory"] == th.label:
            theories.setdefault((th.label, round(float(fit["bound_slope"]), 2)),
                                (th, grid, mid, []))[3].append(at_mid)
    if lower is not None:
        lx, low, _ = _cell_means(g, lower)
        ax.plot(lx * dodge * DODGE ** 0.5, low, marker, color=color, ms=8, mfc="none",
                mew=1.3, ls="none", zorder=4, label=f"{label}: lower end")
    return x


def _rate_axes(ax, df: pd.DataFrame, column: str, lower, cells: set) -> None:
    """A rate plot's log axes, their labels in words, the title and the grid."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(_matplotlib("matplotlib.ticker").NullFormatter())
    if len(cells) <= CELL_TICKS:  # few cells (often within one decade): label each εn
        ticks = sorted(cells)
        ax.set_xticks(ticks, [f"{v:g}" for v in ticks])
    ax.set_xlabel("ε n (privacy budget × sample size)")
    what = quantity(column, df)
    if lower is None:
        ax.set_ylabel(f"mean {what}", fontsize=9)
        title = f"{what} against ε n"
    else:
        ax.set_ylabel(f"mean {metric_name(df)} W1 of the whole data set\n"
                      "(certified pair: filled upper end, open lower end)", fontsize=9)
        title = f"certified {metric_name(df)} W1 of the whole data set against ε n"
    ax.set_title(f"{title}\n{_design(df)}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_STYLES = ("-", "--", "-.", (0, (5, 1, 1, 1, 1, 1)))
DODGE = 1.04
"""Horizontal offset factor between neighbouring groups of a rate plot (log axis)."""
CELL_TICKS = 8
"""Most distinct εn values a rate plot labels one by one on its axis (a log axis labels
only powers of ten, often none inside a sweep's range)."""


def _design(df: pd.DataFrame) -> str:
    """The sweep's ε values and seeds per cell, for a title."""
    eps = sorted(set(df["eps"].tolist()))
    seeds = df.groupby(["eps", "n"] + [c for c in ("mechanism", "data") if c in df]).size()
    count = f"{seeds.min()}" if seeds.min() == seeds.max() else f"{seeds.min()}–{seeds.max()}"
    return f"ε = {', '.join(f'{e:g}' for e in eps)}; {count} seeds per cell"


def _cell_means(g: pd.DataFrame, column: str):
    """Per-εn means of ``column`` and their 95 % intervals as error bars [2, C]
    (none for a single replicate)."""
    x, mean, err = [], [], []
    for en, cell in g.assign(en=g["eps"] * g["n"]).groupby("en"):
        values = cell[column].to_numpy(np.float64)
        m, low, high = mean_interval(values) if len(values) > 1 else (values.mean(),) * 3
        x.append(en)
        mean.append(float(m))
        err.append((max(0.0, float(m - low)), max(0.0, float(high - m))))
    return np.array(x), np.array(mean), np.array(err).T


def _group_theory(g: pd.DataFrame, s=None):
    """The group's theory, at the fit's intrinsic dimension ``s`` (stated or the table's)."""
    kind = g["kind"].iloc[0] if "kind" in g else g["mechanism"].iloc[0]
    if s is None or pd.isna(s):
        s = g["intrinsic_dim"].iloc[0] if "intrinsic_dim" in g else None
    return theory(kind, int(g["d"].iloc[0]), s) if "d" in g else None


_COMPARABLE = ("w1_exact_upper", "w1_sinkhorn", "w1_upper", "w1_tree_upper", "w1_tree")
"""W1 columns in order of preference for a depth sweep (comparable across depths first)."""


def depth_plot(df: pd.DataFrame, column: str | None = None, by="kind", path=None,
               **renamed) -> Figure:
    """W1, seconds and visited nodes against depth, one curve per group.

    The depth sweep of Zare Moayedi et al. (arXiv 2609.33363) Fig. 3.

    Args:
      df: a ``simulate`` table of a depth sweep (``jaxsynth.mechanisms.registry.depth_sweep``
        builds the mechanisms); columns ``depth``, ``column``, ``visited`` and
        ``release_seconds`` (or ``seconds``).
      column: the W1 column (``metric=``, its former name, is refused); default the
        first present of ``w1_exact_upper``,
        ``w1_sinkhorn``, ``w1_upper``,
        ``w1_tree_upper``, ``w1_tree``.  The tree metric itself changes with the depth
        (a shallow tree ignores distances inside its leaves), so ``w1_tree`` is not
        comparable across depths; Sinkhorn and the certified upper bounds are.
      by: columns defining one curve each (default the mechanism's name, so the
        per-depth labels of ``depth_sweep`` fall into one curve).
      path: where to save the figure, or ``None``.

    Returns:
      the ``Figure``: three panels of per-depth means (log scale for seconds and visited
      nodes).  Seconds include each configuration's compilation unless the sweep was run
      with ``simulate(..., warmup=True)``.

    Examples:
      >>> import jaxsynth as js
      >>> import pandas as pd
      >>> df = pd.DataFrame({"kind": "pmm", "depth": [4, 4, 6, 6],
      ...                    "w1_exact_upper": [0.09, 0.10, 0.05, 0.06],
      ...                    "visited": [31, 31, 127, 127],
      ...                    "release_seconds": [0.010, 0.011, 0.020, 0.021]})
      >>> fig = js.plots.depth_plot(df)
      >>> [ax.get_title() for ax in fig.axes][1:], fig.axes[0].get_xlabel()
      (['seconds per replicate', 'visited nodes'], 'depth r')
    """
    refuse_renamed("depth_plot", renamed, RENAMED)
    _check_df(df, [])
    if column is None:
        column = next((c for c in _COMPARABLE if c in df), _COMPARABLE[-1])
    check_str(column, "column")
    if path is not None:
        check_figure_path(path)
    seconds = "release_seconds" if "release_seconds" in df else "seconds"
    panels = [(column, f"mean {column}: {quantity(column, df)}", "linear"),
              (seconds, "seconds per replicate", "log"), ("visited", "visited nodes", "log")]
    _check_df(df, [c for c, _, _ in panels] + ["depth"])
    fig = _matplotlib("matplotlib.figure").Figure(figsize=(12, 3.8))
    axes = fig.subplots(1, 3)
    for _, label, g in _groups(df, by):
        means = g.groupby("depth")[[c for c, _, _ in panels]].mean()
        for ax, (column, _, _) in zip(axes, panels):
            ax.plot(means.index, means[column], "o-", ms=3, label=label)
    for ax, (_, title, scale) in zip(axes, panels):
        ax.set_xlabel("depth r")
        ax.set_title(title, fontsize=10)
        ax.set_yscale(scale)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)
