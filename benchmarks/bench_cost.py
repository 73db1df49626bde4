"""The cost estimate a sweep prints before work, against the sweep's own time.

    python benchmarks/bench_cost.py [--seeds 16] [--n 3000]

Each sweep runs in a fresh process with the compilation cache off (as a first sweep
meets it): ``simulate`` calibrates (compiles every kernel, times one warm chunk and one
measurement batch per ε), prints its estimate, then runs the work.  A row compares the
estimate of the work with the work's wall time, and the estimate plus the measured
compilation with the whole call's wall time.  The target: within a factor 2.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

SWEEPS = {
    # the new user's sweep of the report, reduced: a 3-D data set and a 1-D one in d = 6,
    # three mechanisms, three eps, the default (exact) W1
    "cubes d=3 + line d=6, exact": dict(
        mechanisms=["pmm", "privtree", "adaptive-pruned-pmm"],
        data={"cubes d=3": ("cubes", {"d": 3, "k": 2}), "line d=6": ("subspace", {"d": 6, "k": 1})},
        eps=[0.5, 1.0, 2.0], methods=["exact"]),
    "spiral, bracket": dict(mechanisms=["pmm", "privtree"], data="spiral", eps=[0.5, 1.0, 2.0],
                            methods=["bracket"]),
}

CHILD = """
import json, sys, time
import jaxsynth as js
spec = json.loads(sys.argv[1])
data = spec["data"] if isinstance(spec["data"], str) else {
    label: tuple(v) for label, v in spec["data"].items()}
start = time.perf_counter()
df = js.simulate(spec["mechanisms"], data, eps=spec["eps"], seeds=spec["seeds"],
                 n=spec["n"], methods=spec["methods"], progress=False)
total = time.perf_counter() - start
print(json.dumps({"total": total, "work": df.attrs["work_seconds"],
                  "calibration": df.attrs["calibration_seconds"],
                  "estimate": sum(r["seconds"] for r in df.attrs["estimate"]),
                  "compile": sum(df.attrs["compile_seconds"].values()), "rows": len(df)}))
"""


def _versions() -> dict:
    import jax
    import numpy
    import ot

    import jaxsynth
    from importlib.metadata import version

    return {"python": platform.python_version(), "jax": jax.__version__,
            "numpy": numpy.__version__, "POT": ot.__version__,
            "jaxsynth": getattr(jaxsynth, "__version__", version("jaxsynth"))}


def _write(result: dict) -> Path:
    folder = Path(__file__).parent / "results"
    folder.mkdir(exist_ok=True)
    path = folder / f"{result['benchmark']}-{result['date'].replace('-', '').replace(':', '')}.json"
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as f:
        json.dump(result, f, indent=1)
    os.replace(f.name, path)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--n", type=int, default=3000)
    args = parser.parse_args(argv)
    rows = []
    for name, sweep in SWEEPS.items():
        data = sweep["data"]
        spec = dict(sweep, data=data if isinstance(data, str) else {
            label: list(v) for label, v in data.items()}, seeds=args.seeds, n=[args.n])
        env = dict(os.environ, JAXSYNTH_NO_CACHE="1")
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], env=env,
                             capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"{name}: {out.stderr[-2000:]}")
        got = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append({"sweep": name, "replicates": got["rows"],
                     "estimated_work_s": round(got["estimate"], 2),
                     "work_s": round(got["work"], 2),
                     "work_over_estimate": round(got["work"] / got["estimate"], 3),
                     "compile_s": round(got["compile"], 2),
                     "calibration_s": round(got["calibration"], 2),
                     "estimated_total_s": round(got["estimate"] + got["compile"], 2),
                     "total_s": round(got["total"], 2),
                     "total_over_estimate": round(got["total"] / (got["estimate"]
                                                                  + got["compile"]), 3)})
        print(rows[-1], flush=True)
    within = all(0.5 <= r["work_over_estimate"] <= 2 for r in rows)
    result = {
        "benchmark": "cost-estimate",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count(), "platform": platform.platform()},
        "versions": _versions(),
        "description": (
            "One row per sweep, run in a fresh process with the compilation cache off, n = "
            f"{args.n}, {args.seeds} seeds per cell.  estimated_work_s: the estimate simulate "
            "prints before work (from its calibration); work_s: the wall time of the work "
            "after the calibration; estimated_total_s adds the compilation the calibration "
            "measured; total_s: the whole simulate call (loading, calibration, work)."),
        "rows": rows,
        "notes": (f"Target: work within a factor 2 of its estimate: {'met' if within else 'missed'}"
                  " on every row.  The calibration measures one batch per eps, so a cell whose "
                  "measurement time varies widely between replicates is estimated from few of "
                  "them; later chunks may also compile at a fitted capacity (engine), which the "
                  "estimate does not foresee."),
    }
    print(_write(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
