"""The ``jaxsynth`` command line: ``demo``, ``simulate``, ``launch``, ``rate``, ``audit``.

Wrong arguments print one line ``jaxsynth: error: ...`` on stderr and exit with status 2
(argument errors and ``ValueError`` from the library alike), before any work; no
traceback.  Numbers, lists and names are parsed one way (``jaxsynth.arguments``).  An
operating-system error (a full disk, say) prints one line and exits 1; a closed or broken
stdout, nothing (status 0).

The default quantity is the ℓ∞ W1 between the whole data set and each release, the
quantity the papers' rates bound, certified to 1% (``w1_exact_lower``,
``w1_exact_upper``): ``simulate`` and ``demo`` measure it, ``rate`` fits
``w1_exact_upper`` unless ``--column`` names another column.

Words: ``--method`` chooses how W1 is measured (exact, bracket, tree, ...), ``--metric``
the ground metric (linf, l2), ``--column`` the result column ``rate`` fits.  The former
flags ``simulate --ground`` and ``rate --metric`` are refused, naming the new ones.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from jaxsynth.arguments import integer, listed, names, nonempty, real
from jaxsynth.interrupts import INTERRUPTED, end_on_interrupt

if TYPE_CHECKING:
    import pandas as pd

DEMO_MECHANISMS = ("pmm", "pruned-pmm")
DEMO_DATA = "spiral"
DEMO_N = (1000, 2000, 4000)
DEMO_SEEDS = 16
GROUND_METRICS = ("linf", "l2")
W1_METHODS = ("exact", "tree", "tree_upper", "bracket", "exact1d", "sinkhorn")
W1_COLUMNS = ("w1_exact_upper", "w1_exact_lower", "w1_upper", "w1_lower", "w1_tree_upper",
              "w1_tree", "w1_exact1d", "w1_sinkhorn")
"""``jaxsynth.core.partition.GROUND_METRICS``, ``jaxsynth.wasserstein.registry.METHODS`` and
the methods' columns (``registry.column_descriptions``), named here so that parsing loads
neither JAX nor NumPy (a test keeps them equal)."""
MAX_SEED = 2**32
"""Seeds lie in [0, 2^32): ``--first-seed`` + ``--seeds`` is at most this."""
MAX_KEY = 2**63 - 1
"""Largest ``--key`` and ``--data-key``."""
MAX_CLUSTER_TIMEOUT_S = 86400.0
"""Longest ``--cluster-timeout``: ``jaxsynth.experiments.cluster.MAX_TIMEOUT_S``."""
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
"""The JAX platforms ``--platform`` names in its help (JAX decides which it has)."""
COMPANION_CHARS = len(".jaxsynth-timing.json.0123456789abcdef.tmp")
"""The longest suffix of the files a sweep writes beside ``--out``: the temporary copy of
its calibrations (``experiments.cost.CalibrationFile``; the sidecar's is shorter)."""
DEMO_DIR = "jaxsynth-demo"


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (and exit status 2)."""

    def error(self, message):
        raise _UsageError(f"{message} (see '{self.prog} --help')")


class _UsageError(Exception):
    pass


def _renamed(message: str):
    """An argparse action for a former flag: refuses it with ``message`` (the new flag)."""

    class Renamed(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            raise _UsageError(message)

    return Renamed


_floats = listed(real("a number"), "numbers")
_ints = listed(integer(), "integers")


def _methods(text: str) -> list:
    """An argparse type: W1 methods; a ground metric here is told to use ``--metric``."""
    methods = names(text)
    metrics = [v for v in methods if v in GROUND_METRICS]
    if metrics:
        raise argparse.ArgumentTypeError(
            f"{metrics[0]!r} is a ground metric, chosen with --metric {metrics[0]}; "
            f"--method takes W1 methods ({', '.join(W1_METHODS)})")
    return methods


def _ground_metric(text: str) -> str:
    """An argparse type: a ground metric; W1 methods here are told to use ``--method``."""
    if text in GROUND_METRICS:
        return text
    if any(v.strip() in W1_METHODS for v in text.split(",")):
        raise argparse.ArgumentTypeError(
            f"--metric is the ground metric ({' or '.join(GROUND_METRICS)}); got {text!r}: "
            f"W1 methods are chosen with --method (--method {text})")
    raise argparse.ArgumentTypeError(
        f"expected a ground metric, {' or '.join(GROUND_METRICS)}; got {text!r}")


_count, _index = integer(1), integer(0)
_seeds, _first_seed = integer(1, MAX_SEED), integer(0, MAX_SEED - 1)
_key = integer(0, MAX_KEY)
_seconds = real(f"a number of seconds in (0, {MAX_CLUSTER_TIMEOUT_S:g}]", 0.0,
                MAX_CLUSTER_TIMEOUT_S)
_megabytes = real("a positive number of MiB", 0.0)
_precision = real("a relative half-width in (0, 1), e.g. 0.02 for ±2%", 0.0, 1.0,
                  closed_high=False)


def _platform(text: str) -> str:
    """An argparse type: JAX platform names (``JAX_PLATFORMS``' syntax), none empty; whether
    JAX has them is checked when it starts (``_check_platform``)."""
    return ",".join(listed(nonempty, f"JAX platform names ({', '.join(PLATFORMS)})")(text))


def _directory(text: str) -> str:
    """An argparse type: a directory path, not empty (``''`` would be the current one)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a directory; got {text!r}")
    return text


def _out_file(text: str) -> str:
    """An argparse type: a result path whose name leaves room for the store's companion
    files (the sidecar, temporary copies) within the file system's limit on a name."""
    path = Path(text)
    try:
        limit = os.pathconf(path.parent if str(path.parent) else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    room = limit - COMPANION_CHARS
    if len(path.name.encode()) > room:
        raise argparse.ArgumentTypeError(
            f"the file name is {len(path.name.encode())} bytes long; the store writes files "
            f"named after it (FILE.csv.jaxsynth.json, temporary copies), so it may be at "
            f"most {room} bytes here")
    return text


def _parser() -> _Parser:
    metrics = " or ".join(GROUND_METRICS)
    parser = _Parser(prog="jaxsynth", description="Private synthetic data on dyadic partitions: "
                     "Monte Carlo sweeps with W1, rate fits, a demo.")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print jaxsynth's version and exit")
    parser.add_argument("--no-cache", action="store_true",
                        help="do not use the persistent compilation cache (~/.cache/jaxsynth/xla; "
                        "also JAXSYNTH_NO_CACHE=1; directory: JAXSYNTH_CACHE_DIR)")
    parser.add_argument("--platform", type=_platform, metavar="NAME",
                        help=f"JAX platform to compute on: {', '.join(PLATFORMS)} (default: "
                        "JAX's choice, an accelerator when one is installed; also "
                        "JAX_PLATFORMS)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = sub.add_parser("demo", help="run the built-in example sweep (well under a minute on "
                          "a 2-core CPU): the linf W1 of the whole data set, certified to 1%%, "
                          "and its rate against eps n")
    demo.add_argument("--out-dir", type=_directory, default=DEMO_DIR, metavar="DIR",
                      help="the directory (created when missing) that receives the demo's "
                      f"files, jaxsynth-demo.csv (with its sidecar) and jaxsynth-demo.png "
                      f"(default {DEMO_DIR})")
    demo.add_argument("--seeds", type=integer(2, MAX_SEED), default=DEMO_SEEDS, metavar="S",
                      help=f"replicates, at least 2 for the rate's interval (default "
                      f"{DEMO_SEEDS})")
    demo.add_argument("--quiet", action="store_true", help="no estimate and no progress line")

    sim = sub.add_parser("simulate", help="run a sweep and write one row per replicate")
    arg = sim.add_argument
    arg("--mechanism", type=names, required=True, metavar="NAME[,NAME]",
        help="pmm, pruned-pmm, adaptive-pruned-pmm, privtree, privtree-shift")
    arg("--data", type=names, required=True, metavar="SHAPE_OR_FILE[,...]",
        help="built-in data set names (jaxsynth.datasets.names()) or .npy/.npz/.csv files")
    arg("--data-array", type=nonempty, metavar="NAME",
        help="the array to read from each .npz file of --data (needed when a file holds "
        "several)")
    arg("--n", type=_ints, metavar="N[,N]", help="sizes of built-in data sets (default 10000)")
    arg("--d", type=integer(), metavar="D", help="ambient dimension of built-in data sets")
    arg("--k", type=integer(), metavar="K", help="subspace dimension (subspace, cubes)")
    arg("--eps", type=_floats, required=True, metavar="LIST", help="privacy budgets, e.g. 0.5,1,2")
    arg("--seeds", type=_seeds, metavar="S",
        help="replicates per (mechanism, data, n, eps): seeds FIRST..FIRST+S-1; with "
        "--precision, the first round's count (default 16)")
    arg("--precision", type=_precision, metavar="P",
        help="run seeds in rounds, each cell on its own, until the 95%% interval of its mean "
        "has half-width <= P x mean (e.g. 0.02), or --max-seeds; resumable, and a finished "
        "run is tightened by asking again with a smaller P")
    arg("--max-seeds", type=integer(2, MAX_SEED), metavar="N",
        help="most seeds of a cell (--precision)")
    arg("--precision-column", type=nonempty, metavar="COLUMN",
        help="the W1 column whose mean --precision is about (default w1_exact_upper)")
    arg("--precision-control", type=nonempty, metavar="COLUMN",
        help="a cheap column that predicts --precision-column (e.g. w1_tree_upper): the "
        "stopping rule's control variate, measured on more seeds than the expensive column")
    arg("--first-seed", type=_first_seed, default=0, metavar="FIRST",
        help="first seed (default 0); parts of a large sweep use disjoint seed ranges and "
        "one file each")
    arg("--depth", type=integer(), metavar="R",
        help="tree depth (PMM family; default ceil(log2(eps n))) or depth cap (PrivTree)")
    arg("--method", type=_methods, default=["exact"], metavar="LIST",
        help="W1 methods: exact (default: the ground-metric W1 of the whole data set, "
        "certified to 1%%: w1_exact_lower <= W1 <= w1_exact_upper), bracket (a cheap, loose "
        "certified bracket w1_lower, w1_upper), tree_upper, tree (the ultrametric tree W1, "
        "a different quantity), exact1d (d = 1), sinkhorn")
    arg("--metric", type=_ground_metric, default=GROUND_METRICS[0],
        metavar="|".join(GROUND_METRICS), help=f"ground metric of W1 (default {GROUND_METRICS[0]})")
    arg("--ground", nargs="?", help=argparse.SUPPRESS,
        action=_renamed(f"--ground is now --metric (the ground metric: {metrics})"))
    arg("--key", type=_key, default=0, metavar="KEY", help="sweep key (default 0)")
    arg("--data-key", type=_key, default=0, metavar="KEY", help="data generator key (default 0)")
    arg("--memory-mb", type=_megabytes, metavar="MB",
        help="memory budget of one chunk (default 2048 on a CPU)")
    arg("--out", type=_out_file, required=True, metavar="FILE.csv",
        help="output table (with FILE.csv.jaxsynth.json beside it); a rerun resumes it, a "
        "sweep with more eps, seeds, sizes, data or mechanisms extends it, any other change "
        "is refused; existing files jaxsynth did not write are refused and left untouched")
    arg("--warmup", action="store_true",
        help="run each kernel's first chunk once untimed (compilation is kept out of the "
        "timing columns in any case)")
    arg("--dry-run", action="store_true",
        help="print only the cost estimate (from a short calibration: per cell and in all, "
        "compilation apart) and compute nothing else; every sweep prints it before work "
        "unless --quiet")
    arg("--quiet", action="store_true", help="no estimate and no progress line")
    group = sim.add_argument_group(
        "several processes (one sweep, one --out file written by process 0; see also "
        "'jaxsynth launch')")
    group.add_argument("--coordinator", metavar="HOST:PORT",
                       help="join a jax.distributed cluster whose process 0 listens here")
    group.add_argument("--num-processes", type=_count, metavar="N", help="processes in the cluster")
    group.add_argument("--process-id", type=_index, metavar="I", help="this process, 0..N-1")
    group.add_argument("--distributed", action="store_true",
                       help="join the cluster JAX detects (SLURM, Open MPI, ...) instead")
    group.add_argument("--cluster-timeout", type=_seconds, default=None, metavar="S",
                       help="seconds for the processes to find each other (default 60, at "
                       f"most {MAX_CLUSTER_TIMEOUT_S:g})")
    group.add_argument("--local-device-ids", type=_ints, metavar="LIST",
                       help="this process's accelerators, e.g. 0 (default: all local ones)")

    launch = sub.add_parser("launch", help="run 'simulate ...' as N local processes of one "
                            "cluster (several GPUs or many cores)")
    launch.add_argument("--local", type=_count, required=True, metavar="N",
                        help="number of processes")
    launch.add_argument("--port", type=integer(1, 65535), metavar="PORT",
                        help="coordinator port on 127.0.0.1 (default: a free one)")
    launch.add_argument("--one-device-per-process", action="store_true",
                        help="process I uses local accelerator I only (N GPUs, N processes)")
    launch.add_argument("simulate_command", nargs=argparse.REMAINDER, metavar="simulate ...",
                        help="the simulate command, as it would be run alone")

    rate = sub.add_parser("rate", help="fit log E W1 against log(eps n) from sweep files")
    arg = rate.add_argument
    arg("files", nargs="+", metavar="FILE.csv", help="simulate output files (concatenated)")
    arg("--column", type=nonempty, default="w1_exact_upper", metavar="COLUMN",
        help="W1 column to fit (default w1_exact_upper, the W1 of the sweep's ground metric "
        "between the whole data set and each release, certified to 1%%; also "
        f"{', '.join(W1_COLUMNS[1:])})")
    arg("--metric", nargs="?", help=argparse.SUPPRESS,
        action=_renamed("--metric is now --column (the W1 column to fit, e.g. --column "
                        "w1_exact_upper)"))
    arg("--by", type=names, default=["mechanism", "data"], metavar="COLS",
        help="grouping columns (default mechanism,data)")
    arg("--n-boot", type=_count, default=1000, metavar="B",
        help="bootstrap resamples (default 1000)")
    arg("--level", type=real("a number"), default=0.95, metavar="L",
        help="confidence level (default 0.95)")
    arg("--plot", metavar="PNG", help="also write a W1 against eps n figure (.png, .pdf, .svg)")
    arg("--intrinsic-dim", type=_count, metavar="S",
        help="the data's intrinsic dimension for the theory exponent (default: the table's "
        "intrinsic_dim column; without it the exponent is the ambient one)")

    from jaxsynth.audit import command as audit_command  # the privacy auditor

    audit_command.add_parser(sub)
    return parser


class _Version(argparse.Action):
    """``--version``: jaxsynth's version from the installed package's metadata, read only
    when asked (neither the library nor the metadata loads for other commands)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"jaxsynth {version('jaxsynth')}")
        except PackageNotFoundError:
            print("jaxsynth (not installed: no package metadata)")
        parser.exit()


def _read_tables(files, column: str) -> pd.DataFrame:
    """Concatenate sweep files (e.g. the per-host parts of one sweep); units must not repeat."""
    import pandas as pd

    from jaxsynth.experiments.store import KEY_COLUMNS, readable

    df = pd.concat([readable(name, [column]) for name in files], ignore_index=True)
    if df.duplicated(list(KEY_COLUMNS)).any():
        raise ValueError(f"the files repeat {int(df.duplicated(list(KEY_COLUMNS)).sum())} "
                         f"replicate(s) (same {', '.join(KEY_COLUMNS)}); pass each sweep once")
    return df


def _cells(df: pd.DataFrame, column: str, level: float = 0.95, by=(), cells=None) -> str:
    """Per-cell means of ``column`` with their intervals, as printed text (and the mean
    of the other end of a certified pair, when the table has it)."""
    import numpy as np

    from jaxsynth.experiments.summary import CELL_COLUMNS, summarize
    from jaxsynth.wasserstein.registry import certified_pairs

    control = df.attrs.get("precision_control")
    if cells is None:
        cells = summarize(df, column, level, by=by, control=control)
    keys = [*CELL_COLUMNS, *(c for c in by if c not in CELL_COLUMNS)]
    if control is not None and "cv_mean" in cells:  # the control-variate estimate
        cells = cells.assign(mean=cells.cv_mean, ci_low=cells.cv_low, ci_high=cells.cv_high,
                             rel_half_width=cells.cv_rel_half_width)
    counts = ["seeds", "control_seeds"] if "control_seeds" in cells else ["seeds"]
    shown = cells[keys + counts + ["mean", "ci_low", "ci_high"]].copy()
    for count in {"n", *counts} & set(shown):  # counts print as integers, never as 2e+04
        shown[count] = shown[count].astype("int64")
    # rounded up: a half-width short of the target never reads as met
    shown["±"] = [f"{math.ceil(w * 1000) / 10:.1f}%" if np.isfinite(w) else "nan"
                  for w in cells["rel_half_width"]]
    if "target_met" in cells:
        shown["target_met"] = cells["target_met"]
    lower_ends = certified_pairs()
    pairs = {**lower_ends, **{low: up for up, low in lower_ends.items()}}
    other = pairs.get(column)
    if other in df:
        shown[f"mean {other}"] = df.groupby(keys, sort=True)[other].mean().to_numpy()
    return shown.to_string(index=False, float_format=lambda v: f"{v:.4g}")


def _report(df: pd.DataFrame, column: str, by, n_boot: int, level: float, plot,
            intrinsic_dim=None) -> None:
    import pandas as pd

    from jaxsynth.experiments.plots import quantity
    from jaxsynth.experiments.rates import estimate_rate

    what = quantity(column, df)
    rates = estimate_rate(df, column=column, by=by, n_boot=n_boot, level=level,
                          intrinsic_dim=intrinsic_dim)  # may refuse
    with pd.option_context("display.width", 160, "display.max_columns", 30):
        print(f"mean {column} per cell ({what}), with its {level:.0%} interval "
              "(skewness-corrected t):")
        print(_cells(df, column, level, by, pd.DataFrame(rates.attrs["cells"])
                     if "cells" in rates.attrs else None))
        columns = [*by, "slope", "ci_low", "ci_high", "cells", "seeds", "theory",
                   "theory_exponent", "bound_slope"]
        print(f"\nslope of log E {column} ({what}) against log(eps n), cells weighted by "
              f"their precision ({level:.0%} bootstrap interval):")
        print(rates[columns].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        notes = sorted(set(rates["exponent_dimension"]) - {""})
        if notes:
            print("theory exponent's dimension: " + "; ".join(notes))
    if plot:
        from jaxsynth.experiments.plots import rate_plot

        rate_plot(df, column=column, by=by, rates=rates, path=plot)
        print(f"\nwrote {plot}")


def _demo(args) -> None:
    from jaxsynth.experiments.sweep import simulate

    out_dir = Path(args.out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out-dir {out_dir} is not a directory")
    if not out_dir.exists():
        try:
            out_dir.mkdir(parents=True)
        except OSError as exc:
            raise ValueError(f"--out-dir {out_dir} cannot be created: {exc.strerror}") from None
        print(f"jaxsynth demo: created the directory {out_dir}")
    csv, png = out_dir / "jaxsynth-demo.csv", out_dir / "jaxsynth-demo.png"
    from jaxsynth.experiments.plots import check_figure_path

    check_figure_path(png, "--out-dir")
    print(f"jaxsynth demo: {', '.join(DEMO_MECHANISMS)} on {DEMO_DATA}, n = "
          f"{', '.join(map(str, DEMO_N))}, eps = 1, {args.seeds} seeds; the linf W1 of the "
          "whole data set, certified to 1%: w1_exact_lower <= W1 <= w1_exact_upper")
    start = time.perf_counter()
    df = simulate(list(DEMO_MECHANISMS), DEMO_DATA, eps=[1.0], seeds=args.seeds,
                  n=list(DEMO_N), methods=["exact"], out=csv, progress=not args.quiet)
    new = df.attrs["new_rows"]
    done = f"{new} rows computed now" if new else "nothing to compute: every row was there"
    print(f"{csv}: {df.attrs['file_rows']} rows ({done}, {time.perf_counter() - start:.0f} s)\n")
    _report(df, "w1_exact_upper", ["mechanism", "data"], 1000, 0.95, png)


def _simulate(args) -> None:
    import pandas as pd

    from jaxsynth.experiments.sweep import simulate
    from jaxsynth.mechanisms.registry import mechanism

    mechs = [mechanism(name, depth=args.depth) for name in args.mechanism]
    options = {k: v for k, v in (("d", args.d), ("k", args.k)) if v is not None}
    archives = [name for name in args.data if name.lower().endswith(".npz")]
    if args.data_array is not None and not archives:
        raise ValueError(f"--data-array {args.data_array} names an array of an .npz file; "
                         f"--data {','.join(args.data)} has none")
    array = {} if args.data_array is None else {"array": args.data_array}
    data = [(name, {**options, **(array if name in archives else {})}) for name in args.data]
    data = [(name, opts) if opts else name for name, opts in data]
    memory = None if args.memory_mb is None else max(1, int(args.memory_mb * 2**20))
    if args.precision is None:
        if args.seeds is None:
            raise ValueError("--seeds: give the replicates per cell (or --precision)")
        for flag, value in (("--max-seeds", args.max_seeds),
                            ("--precision-column", args.precision_column),
                            ("--precision-control", args.precision_control)):
            if value is not None:
                raise ValueError(f"{flag} needs --precision (a sweep to a stated precision); "
                                 "a fixed sweep's count is --seeds")
        seeds = range(args.first_seed, args.first_seed + args.seeds)
    else:
        if args.first_seed:
            raise ValueError("--first-seed: a sweep to a --precision starts at seed 0")
        if args.max_seeds is None:
            raise ValueError("--max-seeds: --precision needs the most seeds a cell may get "
                             "(e.g. --max-seeds 1024)")
        seeds = args.seeds
    precision = {} if args.precision is None else {
        "precision": args.precision, "max_seeds": args.max_seeds,
        "precision_column": args.precision_column,
        "precision_control": args.precision_control}
    df = simulate(mechs, data, eps=args.eps, seeds=seeds, methods=args.method,
                  key=args.key, n=args.n, out=args.out, memory_bytes=memory,
                  progress=not (args.quiet or args.dry_run), metric=args.metric,
                  data_key=args.data_key, warmup=args.warmup, dry_run=args.dry_run,
                  **precision)
    if args.dry_run:
        from jaxsynth.experiments.cost import describe

        print(describe(df))
        return
    column = df.attrs["precision_column"] if args.precision is not None else next(
        c for c in df.columns if c.startswith("w1_") and "lower" not in c)
    if args.coordinator or args.distributed:
        import jax

        who = f"process {jax.process_index()} of {jax.process_count()}"
        if jax.process_index() != 0:
            print(f"{who}: computed {df.attrs['computed']} rows, sent to process 0, which "
                  f"writes {args.out}")
            return
    new, held = df.attrs["new_rows"], df.attrs["file_rows"]
    print(f"wrote {args.out}: this sweep's {len(df)} rows ({new} computed now, "
          f"{len(df) - new} already there); the file holds {held} rows")
    if args.coordinator or args.distributed:
        print(f"{who} computed {df.attrs['computed']} of them")
    with pd.option_context("display.width", 160, "display.max_columns", 30):
        control = df.attrs.get("precision_control")
        print(f"mean {column} per cell, with its 95% interval (skewness-corrected t)" + (
            f"; the control-variate estimate with the control {control}:" if control else ":"))
        print(_cells(df, column) if df.groupby(["mechanism", "data", "n", "eps"]).size().min()
              > 1 else "(one seed per cell: no interval)")
    short = df.attrs.get("short", [])
    if short:
        print(f"{len(short)} cell(s) stopped at --max-seeds {args.max_seeds} short of "
              f"±{args.precision:g} (target_met False above)")


def _rate(args) -> None:
    from jaxsynth.core.validate import check_names
    from jaxsynth.experiments.plots import check_figure_path

    if args.plot is not None:
        check_figure_path(args.plot, "--plot")
    by = check_names(args.by, "--by")
    if not args.column.startswith("w1_"):
        raise ValueError(f"--column must be a W1 column (w1_exact_upper, w1_upper, w1_tree, "
                         f"...); got {args.column!r}")
    df = _read_tables(args.files, args.column)
    missing = [c for c in by if c not in df]
    if missing:
        raise ValueError(f"--by: the table has no column(s) {missing}")
    _report(df, args.column, by, args.n_boot, args.level, args.plot, args.intrinsic_dim)


def _audit(args) -> None:
    from jaxsynth.audit.command import run

    run(args)


def _launch(args, argv) -> int:
    from jaxsynth.launcher import launch_local

    global_flags = argv[: argv.index("launch")]  # --platform, --no-cache: for every process
    return launch_local(args.local, args.simulate_command, global_flags, args.one_device_per_process,
                        args.port)


def _join_cluster(args) -> None:
    """``simulate --coordinator ... | --distributed``: join the cluster before JAX starts."""
    from jaxsynth.experiments.cluster import DEFAULT_TIMEOUT_S, join

    local = {"coordinator": args.coordinator, "num_processes": args.num_processes,
             "process_id": args.process_id}
    flags = {"coordinator": "--coordinator", "num_processes": "--num-processes",
             "process_id": "--process-id"}
    given = [flags[k] for k, v in local.items() if v is not None]
    if args.distributed and given:
        raise _UsageError(f"--distributed detects the cluster; leave out {', '.join(given)}")
    if given and len(given) < 3:
        missing = [f for k, f in flags.items() if local[k] is None]
        raise _UsageError(f"{', '.join(given)} also need {', '.join(missing)}")
    if not (given or args.distributed):
        if args.cluster_timeout is not None or args.local_device_ids is not None:
            raise _UsageError("--cluster-timeout and --local-device-ids go with --coordinator "
                              "or --distributed")
        return
    join(**({} if args.distributed else local), auto=args.distributed,
         timeout=args.cluster_timeout or DEFAULT_TIMEOUT_S, local_device_ids=args.local_device_ids)


def _use_platform(name: str) -> None:
    """Compute on the JAX platform ``name`` (set before a cluster is joined, checked after)."""
    import jax

    jax.config.update("jax_platforms", name)


def _check_platform(name: str) -> None:
    """Refuse a ``--platform`` JAX cannot start here, with the GPU page's advice.

    JAX raises ``RuntimeError`` for a platform it knows but cannot start, and (JAX 0.10)
    a bare ``AssertionError`` for one none of its installed plugins provides (``cuda``
    without JAX's CUDA wheels)."""
    import jax

    try:
        jax.devices()
    except (RuntimeError, AssertionError) as exc:
        reason = str(exc) or "no installed JAX plugin provides it"
        gpu = ("; an NVIDIA GPU needs JAX with CUDA (pip install -e '.[cuda]') and a driver "
               ">= 525.60.13: see the documentation's GPU page"
               if {"cuda", "gpu"} & set(name.split(",")) else "")
        raise ValueError(f"--platform {name!r} is not available here ({reason}); python -c "
                         f"\"import jax; print(jax.devices())\" shows what JAX sees{gpu}") from None


def _check_memory(args) -> None:
    """Refuse a ``--memory-mb`` beyond the whole memory of the device JAX computes on
    (known once JAX is up)."""
    import jax

    from jaxsynth.engine import result_memory

    device = jax.devices()[0]
    total = result_memory(device)
    if args.memory_mb * 2**20 > total:
        raise ValueError(f"--memory-mb {args.memory_mb:g}: more than the whole memory of "
                         f"this {device.platform} device, {total / 2**20:.0f} MiB; a chunk's "
                         "working memory must fit in it")


def _streams_to_devnull() -> None:
    """A closed stdout or stderr (``jaxsynth ... >&-``: Python sets ``sys.stdout`` to
    None) becomes /dev/null, as a broken pipe does (``main``): the command runs, writes
    its files and exits 0 without a word, and no file it opens takes the free descriptor."""
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, stream) is None:
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, stream, open(fd, "w", closefd=False))


def _check_arguments(args) -> None:
    """Refuse what each option allows alone but not together (before JAX loads)."""
    if args.command == "simulate" and args.first_seed + (args.seeds or 0) > MAX_SEED:
        raise _UsageError(f"--first-seed {args.first_seed} + --seeds {args.seeds} passes the "
                          "last seed, 2^32 - 1")


@contextlib.contextmanager
def _one_line_messages():
    """The package's log messages and warnings as ``jaxsynth: warning: ...`` lines on
    stderr, never a Python warning with a source path."""
    import logging
    import warnings

    class Line(logging.Handler):
        def emit(self, record):
            text = " ".join(record.getMessage().split())
            print(f"jaxsynth: {record.levelname.lower()}: {text}", file=sys.stderr, flush=True)

    logger, handler = logging.getLogger("jaxsynth"), Line(logging.WARNING)
    shown, propagates = warnings.showwarning, logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    warnings.showwarning = lambda message, *_, **__: handler.emit(logging.LogRecord(
        "jaxsynth", logging.WARNING, "", 0, str(message), None, None))
    try:
        yield
    finally:
        warnings.showwarning, logger.propagate = shown, propagates
        logger.removeHandler(handler)


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0, 2 for wrong arguments, 130 when
    interrupted).  Arguments are parsed and checked before JAX loads.  Run as a program
    (``argv`` None), a command that computes then ends at once on Ctrl-C
    (``jaxsynth.interrupts``)."""
    whole_process = argv is None
    _streams_to_devnull()
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        args = _parser().parse_args(argv)
        _check_arguments(args)
        if args.command == "launch":
            return _launch(args, argv)
        if whole_process:
            resume = "; rerun the same command to resume" if args.command in (
                "simulate", "demo") else ""
            end_on_interrupt(f"jaxsynth: interrupted{resume}")
        if args.platform is not None:
            _use_platform(args.platform)
        if args.command == "simulate":
            _join_cluster(args)
        if args.platform is not None:
            _check_platform(args.platform)
        if getattr(args, "memory_mb", None) is not None:
            _check_memory(args)
        if not args.no_cache:
            from jaxsynth.compilation import enable_compilation_cache

            enable_compilation_cache()
        with _one_line_messages():
            {"demo": _demo, "simulate": _simulate, "rate": _rate,
             "audit": _audit}[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except (_UsageError, ValueError) as exc:
        print(f"jaxsynth: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except ImportError as exc:  # an optional dependency missing: the message names its extra
        if exc.name != "matplotlib":
            raise
        print(f"jaxsynth: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # stdout closed early (``| head``): the results are on disk
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a full disk, say
        print(f"jaxsynth: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # while parsing, or in launch (which stops its processes)
        print("jaxsynth: interrupted; rerun the same command to resume", file=sys.stderr)
        return INTERRUPTED
    return 0
