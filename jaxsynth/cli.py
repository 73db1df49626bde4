"""The ``jaxsynth`` command line: ``demo``, ``simulate``, ``rate`` (SPEC §10).

Wrong arguments print one line ``jaxsynth: error: ...`` on stderr and exit with status 2
(argument errors and ``ValueError`` from the library alike); no traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

DEMO_MECHANISMS = ("pmm", "pruned-pmm")
DEMO_DATA = "spiral"
DEMO_N = (1000, 3000, 10000)
DEMO_SEEDS = 32


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (and exit status 2)."""

    def error(self, message):
        raise _UsageError(f"{message} (see '{self.prog} --help')")


class _UsageError(Exception):
    pass


def _floats(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers; got {text!r}") from None


def _ints(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers; got {text!r}") from None


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _parser() -> _Parser:
    parser = _Parser(prog="jaxsynth", description="Private synthetic data on dyadic partitions: "
                     "Monte Carlo sweeps with W1, rate fits, a demo.")
    parser.add_argument("--no-cache", action="store_true",
                        help="do not use the persistent compilation cache (~/.cache/jaxsynth/xla; "
                        "also JAXSYNTH_NO_CACHE=1; directory: JAXSYNTH_CACHE_DIR)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = sub.add_parser("demo", help="run the built-in example sweep (about a minute on a CPU)")
    demo.add_argument("--out-dir", default=".", metavar="DIR",
                      help="where jaxsynth-demo.csv and jaxsynth-demo.png go (default .)")
    demo.add_argument("--seeds", type=int, default=DEMO_SEEDS, metavar="S",
                      help=f"replicates (default {DEMO_SEEDS})")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")

    sim = sub.add_parser("simulate", help="run a sweep and write one row per replicate")
    arg = sim.add_argument
    arg("--mechanism", type=_names, required=True, metavar="NAME[,NAME]",
        help="pmm, pruned-pmm, adaptive-pruned-pmm, privtree, privtree-shift")
    arg("--data", type=_names, required=True, metavar="SHAPE_OR_FILE[,...]",
        help="built-in data set names (jaxsynth.datasets.names()) or .npy/.npz/.csv files")
    arg("--n", type=_ints, metavar="N[,N]", help="sizes of built-in data sets (default 10000)")
    arg("--d", type=int, metavar="D", help="ambient dimension of built-in data sets")
    arg("--k", type=int, metavar="K", help="subspace dimension (subspace, cubes)")
    arg("--eps", type=_floats, required=True, metavar="LIST", help="privacy budgets, e.g. 0.5,1,2")
    arg("--seeds", type=int, required=True, metavar="S",
        help="replicates per (mechanism, data, n, eps)")
    arg("--depth", type=int, metavar="R",
        help="tree depth (PMM family; default ceil(log2(eps n))) or depth cap (PrivTree)")
    arg("--metric", type=_names, default=["tree"], metavar="LIST",
        help="W1 methods: tree, tree_upper, bracket, exact1d, sinkhorn (default tree)")
    arg("--ground", choices=("linf", "l2"), default="linf", help="ground metric (default linf)")
    arg("--key", type=int, default=0, metavar="KEY", help="sweep key (default 0)")
    arg("--data-key", type=int, default=0, metavar="KEY", help="data generator key (default 0)")
    arg("--memory-mb", type=float, metavar="MB", help="memory budget of one chunk (default 2048)")
    arg("--out", required=True, metavar="FILE.csv", help="output table; a rerun resumes it")
    arg("--warmup", action="store_true",
        help="compile before timing, so that 'seconds' exclude compilation")
    arg("--quiet", action="store_true", help="no progress bar")

    rate = sub.add_parser("rate", help="fit log E W1 against log(eps n) from sweep files")
    arg = rate.add_argument
    arg("files", nargs="+", metavar="FILE.csv", help="simulate output files (concatenated)")
    arg("--metric", default="w1_tree", metavar="COLUMN", help="column to fit (default w1_tree)")
    arg("--by", type=_names, default=["mechanism", "data"], metavar="COLS",
        help="grouping columns (default mechanism,data)")
    arg("--n-boot", type=int, default=1000, metavar="B", help="bootstrap resamples (default 1000)")
    arg("--level", type=float, default=0.95, metavar="L", help="confidence level (default 0.95)")
    arg("--plot", metavar="PNG", help="also write a W1 against eps n figure")
    return parser


def _read_tables(files) -> pd.DataFrame:
    """Concatenate sweep files (e.g. the per-host parts of one sweep); units must not repeat."""
    from jaxsynth.experiments.store import KEY_COLUMNS, readable

    df = pd.concat([readable(name) for name in files], ignore_index=True)
    keys = [c for c in KEY_COLUMNS if c in df]
    if len(keys) == len(KEY_COLUMNS) and df.duplicated(keys).any():
        raise ValueError(f"the files repeat {int(df.duplicated(keys).sum())} replicate(s) "
                         f"(same {', '.join(keys)}); pass each sweep once")
    return df


def _means(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    cols = ["mechanism", "data", "n", "eps"]
    return df.groupby(cols)[metric].agg(["mean", "std", "count"]).reset_index()


def _report(df: pd.DataFrame, metric: str, by, n_boot: int, level: float, plot) -> None:
    from jaxsynth.experiments.rates import estimate_rate

    with pd.option_context("display.width", 160, "display.max_columns", 30):
        print(f"mean {metric} per cell:")
        print(_means(df, metric).to_string(index=False))
        rates = estimate_rate(df, metric=metric, by=by, n_boot=n_boot, level=level)
        shown = [*by, "slope", "ci_low", "ci_high", "cells", "seeds", "theory",
                 "theory_exponent", "bound_slope"]
        print(f"\nslope of log E {metric} against log(eps n) ({level:.0%} bootstrap interval):")
        print(rates[shown].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if plot:
        from jaxsynth.experiments.plots import rate_plot

        rate_plot(df, metric=metric, by=by, rates=rates, path=plot)
        print(f"\nwrote {plot}")


def _demo(args) -> None:
    from jaxsynth.experiments.sweep import simulate

    out_dir = Path(args.out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out-dir {out_dir} is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    csv, png = out_dir / "jaxsynth-demo.csv", out_dir / "jaxsynth-demo.png"
    print(f"jaxsynth demo: {', '.join(DEMO_MECHANISMS)} on {DEMO_DATA}, n = "
          f"{', '.join(map(str, DEMO_N))}, eps = 1, {args.seeds} seeds, tree W1 (linf)")
    start = time.perf_counter()
    df = simulate(list(DEMO_MECHANISMS), DEMO_DATA, eps=[1.0], seeds=args.seeds,
                  n=list(DEMO_N), metrics=["tree"], out=csv, progress=not args.quiet)
    print(f"wrote {csv} ({len(df)} rows, {time.perf_counter() - start:.0f} s)\n")
    _report(df, "w1_tree", ["mechanism", "data"], 1000, 0.95, png)


def _simulate(args) -> None:
    from jaxsynth.experiments.sweep import simulate
    from jaxsynth.mechanisms.registry import mechanism

    mechs = [mechanism(name, depth=args.depth) for name in args.mechanism]
    options = {k: v for k, v in (("d", args.d), ("k", args.k)) if v is not None}
    data = [(name, options) if options else name for name in args.data]
    memory = None if args.memory_mb is None else int(args.memory_mb * 2**20)
    df = simulate(mechs, data, eps=args.eps, seeds=args.seeds, metrics=args.metric,
                  key=args.key, n=args.n, out=args.out, memory_bytes=memory,
                  progress=not args.quiet, ground=args.ground, data_key=args.data_key,
                  warmup=args.warmup)
    metric = [c for c in df.columns if c.startswith("w1_")][0]
    print(f"wrote {args.out} ({len(df)} rows)")
    with pd.option_context("display.width", 160):
        print(_means(df, metric).to_string(index=False))


def _rate(args) -> None:
    _report(_read_tables(args.files), args.metric, args.by, args.n_boot, args.level, args.plot)


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0, or 2 for wrong arguments)."""
    try:
        args = _parser().parse_args(argv)
        if not args.no_cache:
            from jaxsynth.compilation import enable_compilation_cache

            enable_compilation_cache()
        {"demo": _demo, "simulate": _simulate, "rate": _rate}[args.command](args)
    except (_UsageError, ValueError) as exc:
        message = " ".join(str(exc).split())
        print(f"jaxsynth: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("jaxsynth: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    return 0
