"""How fast the command line answers before any work: ``--help``, ``--version``, an error.

    python benchmarks/cli_startup.py [--runs 7]

Each command runs as a new process (``python -m jaxsynth ...``), as a user types it;
wall seconds, median of ``--runs``.  Beside them, in the same run: a bare interpreter
(``python -c pass``, the floor) and ``python -c "import jax"`` (what every command paid
when the command line loaded JAX before parsing).  Target: ``--help`` under 1 s.
Writes ``benchmarks/results/cli-startup-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results  # noqa: E402

TARGET_S = 1.0
"""``jaxsynth --help`` must answer within this many seconds."""
COMMANDS = {
    "jaxsynth --help": ["-m", "jaxsynth", "--help"],
    "jaxsynth --version": ["-m", "jaxsynth", "--version"],
    "jaxsynth simulate --help": ["-m", "jaxsynth", "simulate", "--help"],
    "jaxsynth simulate --seeds 10^30 (refused)": [
        "-m", "jaxsynth", "simulate", "--mechanism", "pmm", "--data", "spiral", "--eps", "1",
        "--seeds", "9" * 30, "--out", "x.csv"],
    "python -c pass (floor)": ["-c", "pass"],
    "python -c 'import jax' (former start-up)": ["-c", "import jax"],
}


def seconds(args: list[str], runs: int) -> tuple[float, int]:
    """Median wall seconds of ``python args`` and its exit status."""
    times, code = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        code = subprocess.run([sys.executable, *args], capture_output=True).returncode
        times.append(time.perf_counter() - start)
    return statistics.median(times), code


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    measured = {name: seconds(command, args.runs) for name, command in COMMANDS.items()}
    former = measured["python -c 'import jax' (former start-up)"][0]
    rows = [{"command": name, "seconds": round(s, 4), "exit_status": code, "runs": args.runs,
             "vs_import_jax": round(s / former, 3)} for name, (s, code) in measured.items()]
    help_s = measured["jaxsynth --help"][0]
    out = results.write(
        "cli-startup",
        "Wall seconds (median of runs) of a new process answering before any work; "
        "vs_import_jax: the ratio to 'python -c \"import jax\"', which every command paid "
        "while the command line loaded JAX before parsing.",
        rows,
        f"target: jaxsynth --help under {TARGET_S:g} s: "
        f"{'met' if help_s < TARGET_S else 'MISSED'} ({help_s:.2f} s). Parsing loads "
        "neither JAX, NumPy nor pandas; what is left is the interpreter's start-up and "
        "argparse.")
    for row in rows:
        print(f"{row['seconds']:8.3f} s  {row['vs_import_jax']:6.3f}  {row['command']}")
    print(f"wrote {out}")
    return 0 if help_s < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
