"""One sweep run by 1, 2, 4 local processes (``jaxsynth launch --local N``), same run.

    python benchmarks/bench_cluster.py [--processes 1,2,4] [--seeds 256] [--method bracket,tree]

Each command runs in a new, empty directory (nothing to resume) with a compilation cache
that an untimed first run filled, as a user's second sweep meets it; wall seconds of the
whole command (start-up, every process, the one result file), median of ``--runs``.
The tables are checked equal (timing columns apart), so the figures time the same work.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def sweep_args(seeds: int, method: str) -> list[str]:
    return ["simulate", "--mechanism", "pmm,privtree", "--data", "spiral", "--n", "3000",
            "--eps", "0.5,1,2", "--seeds", str(seeds), "--method", method, "--quiet"]


def run(processes: int, args: list[str], env: dict) -> tuple[float, bytes]:
    """Wall seconds of the sweep in a new directory, and its table without timings."""
    from jaxsynth.experiments.store import read_table

    command = args if processes == 1 else ["launch", "--local", str(processes), *args]
    with tempfile.TemporaryDirectory() as fresh:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "jaxsynth", *command, "--out", "x.csv"],
                       check=True, env=env, cwd=fresh, capture_output=True)
        seconds = time.perf_counter() - start
        table = read_table(Path(fresh) / "x.csv").drop(
            columns=["seconds", "release_seconds", "measure_seconds"])
    return seconds, table.to_csv(index=False).encode()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--seeds", type=int, default=256)
    parser.add_argument("--method", default="bracket,tree")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    counts = [int(v) for v in args.processes.split(",")]
    sweep = sweep_args(args.seeds, args.method)
    rows = 2 * 3 * args.seeds
    print(f"# jaxsynth processes benchmark  {os.cpu_count()} cores; PMM and PrivTree on "
          f"spiral n = 3000, eps 0.5, 1, 2, {args.seeds} seeds ({rows} rows), W1 {args.method}")
    print("| processes | wall s (median) | min | max | rows/s | vs 1 process |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, JAXSYNTH_CACHE_DIR=cache)
        env.pop("JAXSYNTH_NO_CACHE", None)
        reference, base = None, None
        for count in counts:
            run(count, sweep, env)  # fills the cache for this process count's shapes
            times = []
            for _ in range(args.runs):
                seconds, table = run(count, sweep, env)
                times.append(seconds)
                reference = reference or table
                if table != reference:
                    raise SystemExit(f"{count} processes wrote a different table")
            median = float(np.median(times))
            base = base or median
            print(f"| {count} | {median:.1f} | {min(times):.1f} | {max(times):.1f} | "
                  f"{rows / median:.0f} | {base / median:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
