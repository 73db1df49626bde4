"""The ``jaxsynth`` command line: ``demo``, ``simulate``, ``launch``, ``rate``, ``audit``.

Wrong arguments print one line ``jaxsynth: error: ...`` on stderr and exit with status 2
(argument errors and ``ValueError`` from the library alike), before any work; no
traceback.  An operating-system error (a full disk, say) prints one line and exits 1.

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
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

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
COMPANION_CHARS = len(".0123456789abcdef.tmp")
"""The longest suffix of the files the result store writes beside ``--out``."""
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


def _listed(parse, what: str):
    """An argparse type: a non-empty comma-separated list of ``what``, each through ``parse``."""

    def values(text: str) -> list:
        try:
            out = [parse(v) for v in text.split(",") if v.strip()]
        except ValueError:
            out = []
        if not out:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}; got {text!r}")
        return out

    return values


_floats = _listed(float, "numbers")
_ints = _listed(int, "integers")
_names = _listed(str.strip, "names")


def _methods(text: str) -> list:
    """An argparse type: W1 methods; a ground metric here is told to use ``--metric``."""
    names = _names(text)
    metrics = [v for v in names if v in GROUND_METRICS]
    if metrics:
        raise argparse.ArgumentTypeError(
            f"{metrics[0]!r} is a ground metric, chosen with --metric {metrics[0]}; "
            f"--method takes W1 methods ({', '.join(W1_METHODS)})")
    return names


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


def _integer(minimum: int, maximum: int | None = None):
    """An argparse type: an integer of at least ``minimum`` (1: positive, 0: non-negative)
    and at most ``maximum`` (the allowed range is named when a value is outside it)."""
    what = {0: "a non-negative integer", 1: "a positive integer"}.get(
        minimum, f"an integer >= {minimum}")
    if maximum is not None:
        what = f"an integer in {minimum}..{_power(maximum)}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if not minimum <= value <= (value if maximum is None else maximum):
            raise argparse.ArgumentTypeError(f"expected {what}; got {_short(text)}")
        return value

    return parse


def _power(value: int) -> str:
    """``2^k`` or ``2^k - 1`` for such values (the limits of seeds and keys), else the number."""
    for offset, suffix in ((0, ""), (1, " - 1")):
        if value + offset >= 2**32 and (value + offset) & (value + offset - 1) == 0:
            return f"2^{(value + offset).bit_length() - 1}{suffix}"
    return str(value)


def _short(text: str) -> str:
    """``repr(text)``, cut in the middle when long (a 30-digit number, say)."""
    return repr(text) if len(text) <= 40 else repr(text[:18] + "..." + text[-18:])


_count, _index = _integer(1), _integer(0)
_seeds, _first_seed = _integer(1, MAX_SEED), _integer(0, MAX_SEED - 1)
_key = _integer(0, MAX_KEY)


def _positive(unit: str, maximum: float = float("inf")):
    """An argparse type: a positive, finite number of ``unit``, at most ``maximum``."""
    what = (f"a positive number of {unit}" if maximum == float("inf") else
            f"a number of {unit} in (0, {maximum:g}]")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (value > 0 and value < float("inf") and value <= maximum):
            raise argparse.ArgumentTypeError(f"expected {what}; got {_short(text)}")
        return value

    return parse


_seconds, _megabytes = _positive("seconds", MAX_CLUSTER_TIMEOUT_S), _positive("MiB")


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
    parser.add_argument("--platform", metavar="NAME",
                        help="JAX platform to compute on: cpu, cuda, rocm, tpu (default: JAX's "
                        "choice, an accelerator when one is installed; also JAX_PLATFORMS)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = sub.add_parser("demo", help="run the built-in example sweep (well under a minute on "
                          "a 2-core CPU): the linf W1 of the whole data set, certified to 1%%, "
                          "and its rate against eps n")
    demo.add_argument("--out-dir", default=DEMO_DIR, metavar="DIR",
                      help="the directory (created when missing) that receives the demo's "
                      f"files, jaxsynth-demo.csv (with its sidecar) and jaxsynth-demo.png "
                      f"(default {DEMO_DIR})")
    demo.add_argument("--seeds", type=_integer(2, MAX_SEED), default=DEMO_SEEDS, metavar="S",
                      help=f"replicates, at least 2 for the rate's interval (default "
                      f"{DEMO_SEEDS})")
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
    arg("--seeds", type=_seeds, metavar="S",
        help="replicates per (mechanism, data, n, eps): seeds FIRST..FIRST+S-1; with "
        "--precision, the first round's count (default 16)")
    arg("--precision", type=_positive("relative half-width"), metavar="P",
        help="run seeds in rounds, each cell on its own, until the 95%% interval of its mean "
        "has half-width <= P x mean (e.g. 0.02), or --max-seeds; resumable, and a finished "
        "run is tightened by asking again with a smaller P")
    arg("--max-seeds", type=_integer(2, MAX_SEED), metavar="N", help="most seeds of a cell (--precision)")
    arg("--precision-column", default="w1_exact_upper", metavar="COLUMN",
        help="the W1 column whose mean --precision is about (default w1_exact_upper)")
    arg("--first-seed", type=_first_seed, default=0, metavar="FIRST",
        help="first seed (default 0); parts of a large sweep use disjoint seed ranges and "
        "one file each")
    arg("--depth", type=int, metavar="R",
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
    arg("--quiet", action="store_true", help="no progress bar")
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
    launch.add_argument("--port", type=_integer(1, 65535), metavar="PORT",
                        help="coordinator port on 127.0.0.1 (default: a free one)")
    launch.add_argument("--one-device-per-process", action="store_true",
                        help="process I uses local accelerator I only (N GPUs, N processes)")
    launch.add_argument("simulate_command", nargs=argparse.REMAINDER, metavar="simulate ...",
                        help="the simulate command, as it would be run alone")

    rate = sub.add_parser("rate", help="fit log E W1 against log(eps n) from sweep files")
    arg = rate.add_argument
    arg("files", nargs="+", metavar="FILE.csv", help="simulate output files (concatenated)")
    arg("--column", default="w1_exact_upper", metavar="COLUMN",
        help="W1 column to fit (default w1_exact_upper, the W1 of the sweep's ground metric "
        "between the whole data set and each release, certified to 1%%; also "
        f"{', '.join(W1_COLUMNS[1:])})")
    arg("--metric", nargs="?", help=argparse.SUPPRESS,
        action=_renamed("--metric is now --column (the W1 column to fit, e.g. --column "
                        "w1_exact_upper)"))
    arg("--by", type=_names, default=["mechanism", "data"], metavar="COLS",
        help="grouping columns (default mechanism,data)")
    arg("--n-boot", type=_count, default=1000, metavar="B",
        help="bootstrap resamples (default 1000)")
    arg("--level", type=float, default=0.95, metavar="L", help="confidence level (default 0.95)")
    arg("--plot", metavar="PNG", help="also write a W1 against eps n figure (.png, .pdf, .svg)")
    arg("--intrinsic-dim", type=_count, metavar="S",
        help="the data's intrinsic dimension for the theory exponent (default: the table's "
        "intrinsic_dim column; without it the exponent is the ambient one)")

    from jaxsynth.audit import command as audit_command  # the privacy auditor

    audit_command.add_parser(sub, _names)
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
    from jaxsynth.experiments.summary import CELL_COLUMNS, summarize
    from jaxsynth.wasserstein.registry import certified_pairs

    cells = summarize(df, column, level, by=by) if cells is None else cells
    keys = [*CELL_COLUMNS, *(c for c in by if c not in CELL_COLUMNS)]
    shown = cells[keys + ["seeds", "mean", "ci_low", "ci_high"]].copy()
    shown["±"] = [f"{w:.1%}" for w in cells["rel_half_width"]]
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
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--out-dir {out_dir} cannot be created: {exc.strerror}") from None
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
    data = [(name, options) if options else name for name in args.data]
    memory = None if args.memory_mb is None else max(1, int(args.memory_mb * 2**20))
    if args.precision is None:
        if args.seeds is None:
            raise ValueError("--seeds: give the replicates per cell (or --precision)")
        if args.max_seeds is not None:
            raise ValueError("--max-seeds goes with --precision")
        seeds = range(args.first_seed, args.first_seed + args.seeds)
    else:
        if args.first_seed:
            raise ValueError("--first-seed: a sweep to a --precision starts at seed 0")
        if args.max_seeds is None:
            raise ValueError("--max-seeds: --precision needs a most seeds per cell")
        seeds = args.seeds
    precision = {} if args.precision is None else {
        "precision": args.precision, "max_seeds": args.max_seeds,
        "precision_column": args.precision_column}
    df = simulate(mechs, data, eps=args.eps, seeds=seeds, methods=args.method,
                  key=args.key, n=args.n, out=args.out, memory_bytes=memory,
                  progress=not (args.quiet or args.dry_run), metric=args.metric,
                  data_key=args.data_key, warmup=args.warmup, dry_run=args.dry_run,
                  **precision)
    if args.dry_run:
        from jaxsynth.experiments.cost import describe

        print(describe(df))
        return
    column = args.precision_column if args.precision is not None else next(
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
        print(f"mean {column} per cell, with its 95% interval (skewness-corrected t):")
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
    import jax

    try:
        jax.devices()
    except RuntimeError as exc:
        raise ValueError(f"--platform {name!r} is not available here ({exc})") from None


def _check_arguments(args) -> None:
    """Refuse what each option allows alone but not together (before JAX loads)."""
    if args.command == "simulate" and args.first_seed + (args.seeds or 0) > MAX_SEED:
        raise _UsageError(f"--first-seed {args.first_seed} + --seeds {args.seeds} passes the "
                          "last seed, 2^32 - 1")


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0, 2 for wrong arguments, 130 when
    interrupted).  Arguments are parsed and checked before JAX loads.  Run as a program
    (``argv`` None), a command that computes then ends at once on Ctrl-C
    (``jaxsynth.interrupts``)."""
    whole_process = argv is None
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
        if not args.no_cache:
            from jaxsynth.compilation import enable_compilation_cache

            enable_compilation_cache()
        {"demo": _demo, "simulate": _simulate, "rate": _rate, "audit": _audit}[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except (_UsageError, ValueError) as exc:
        print(f"jaxsynth: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
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
