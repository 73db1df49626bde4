"""The composable path against the sweep: ``release_batch`` + ``js.w1(method="tree")``
versus ``simulate``'s per-replicate cost for the same numbers.

PMM at depth r = 15 on the spiral (n = 30000, d = 2), ε = 1, 256 seeds, ℓ∞ tree W1.
Rows, each timed warm (compilation done by an untimed first call), best of ``--repeat``:

* ``simulate``: ``js.simulate(..., methods=["tree"])`` (release and W1 in one sweep);
* ``release_batch + w1(levels=)``: ``release_batch(..., diagnostics=True)`` then
  ``js.w1(X, out, "tree", levels=diag)`` (the kernel's level statistics; the numbers are
  checked equal to the sweep's, bit for bit);
* ``release_batch + w1(atoms)``: the same release, then ``js.w1`` on the atoms against
  data prepared once (``prepare_w1``), the route without the diagnostics;
* ``release_batch alone``: the release with its diagnostics and no W1, which splits the
  composable path's cost between releasing the atoms and measuring them.

Writes ``benchmarks/results/bench_w1_paths-<UTC time>.json`` (atomically) and prints it.
Run:  python benchmarks/bench_w1_paths.py [--quick] [--repeat K]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
import ot

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jaxsynth as js  # noqa: E402
from jaxsynth.wasserstein import prepare_w1  # noqa: E402

NAME = "bench_w1_paths"
TARGET = 1.5
"""Issue target: the composable path within 1.5× of the sweep per replicate."""


def best_of(fns: dict, repeat: int) -> dict:
    """{name: (best warm seconds, last result)}: one untimed call each, then ``repeat``
    rounds taking every function in turn (so load changes hit them alike)."""
    results = {name: fn() for name, fn in fns.items()}
    best = dict.fromkeys(fns, np.inf)
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            results[name] = fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: (best[name], results[name]) for name in fns}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_atomically(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="n = 3000, 64 seeds (smoke run)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    n, seeds, depth = (3000, 64, 12) if args.quick else (30000, 256, 15)
    X = js.datasets.load("spiral", n=n, key=0)
    mech = js.PMM(depth=depth)

    def sweep():
        return js.simulate(mech, X, eps=[1.0], seeds=seeds, methods=["tree"], key=0,
                           progress=False).sort_values("seed")["w1_tree"].to_numpy()

    def with_levels():
        out, diag = js.release_batch(0, mech, X, eps=[1.0], seeds=seeds, diagnostics=True)
        return js.w1(X, out, "tree", levels=diag)[0]

    data = prepare_w1(X, depth)

    def with_atoms():
        out = js.release_batch(0, mech, X, eps=[1.0], seeds=seeds)
        return js.w1(data, out, "tree")[0]

    def release_only():
        return js.release_batch(0, mech, X, eps=[1.0], seeds=seeds,
                                diagnostics=True)[0].weights.block_until_ready()

    timed = best_of({"sweep": sweep, "release": release_only, "levels": with_levels,
                     "atoms": with_atoms}, args.repeat)
    (t_sweep, v_sweep), (t_release, _) = timed["sweep"], timed["release"]
    (t_levels, v_levels), (t_atoms, v_atoms) = timed["levels"], timed["atoms"]
    identical = bool(np.array_equal(v_sweep, v_levels))
    rel = float(np.max(np.abs(v_atoms - v_sweep) / v_sweep))
    rows = [
        {"path": "simulate", "seconds": t_sweep, "ms_per_replicate": 1e3 * t_sweep / seeds,
         "ratio_to_simulate": 1.0, "max_rel_diff_to_simulate": 0.0},
        {"path": "release_batch + w1(levels=)", "seconds": t_levels,
         "ms_per_replicate": 1e3 * t_levels / seeds, "ratio_to_simulate": t_levels / t_sweep,
         "max_rel_diff_to_simulate": float(np.max(np.abs(v_levels - v_sweep) / v_sweep))},
        {"path": "release_batch + w1(atoms)", "seconds": t_atoms,
         "ms_per_replicate": 1e3 * t_atoms / seeds, "ratio_to_simulate": t_atoms / t_sweep,
         "max_rel_diff_to_simulate": rel},
        {"path": "release_batch alone", "seconds": t_release,
         "ms_per_replicate": 1e3 * t_release / seeds, "ratio_to_simulate": t_release / t_sweep,
         "max_rel_diff_to_simulate": None},
    ]
    ratio = rows[1]["ratio_to_simulate"]
    record = {
        "benchmark": NAME,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "platform": platform.platform()},
        "versions": {"python": platform.python_version(), "jax": jax.__version__,
                     "numpy": np.__version__, "POT": ot.__version__,
                     "jaxsynth": getattr(js, "__version__", "dev"),
                     "device": jax.devices()[0].platform},
        "description": (
            f"{'QUICK (smoke) run: ' if args.quick else ''}PMM depth {depth}, spiral n = {n}, d = 2, eps = 1, {seeds} seeds, linf tree W1. "
            "Each row: warm wall seconds for all seeds (best of "
            f"{args.repeat} rounds, the paths timed in turn), ms per replicate, and the ratio to simulate's in the same run. "
            "'w1(levels=)' reads the kernel's level statistics from release_batch(..., "
            "diagnostics=True); 'w1(atoms)' measures the released atoms against data "
            "prepared once."),
        "rows": rows,
        "notes": (
            f"Target: composable path within {TARGET}x of simulate: "
            f"{'met' if ratio <= TARGET else 'missed'} ({ratio:.2f}x). Numbers identical to "
            f"the sweep's bit for bit: {identical}. Reading the tree W1 from the level "
            f"statistics adds {1e3 * (t_levels - t_release) / seeds:.2f} ms per replicate to "
            "the release alone (validating the measure once, a dot product); the rest is the "
            "release itself, which materialises every replicate's atoms (the sweep's "
            "tree-only run never computes them: its kernel stops at the level statistics). "
            "The atom route adds the host transfer of the atoms and a Morton sort/merge per "
            "replicate."),
    }
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = Path(__file__).resolve().parent / "results" / f"{NAME}-{stamp}.json"
    write_atomically(path, record)
    print(json.dumps(record, indent=2))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
