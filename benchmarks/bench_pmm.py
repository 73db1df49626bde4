"""Core-engine benchmark (issue: core engine).  Prints, on this machine:

1. replicates/s of PMM and Pruned-PMM at n = 30000, d = 2 (spiral), ε = 1, r = 15,
   batch 256, next to the slow NumPy reference (tests/reference_pmm.py) in the same run;
2. sparse Pruned-PMM seconds per replicate at r = 30, 60, 120, 150 (d = 10, n = 30000,
   uniform schedule; the packing schedule's top-level scales overflow at these depths);
3. data-tree build time and peak memory for n = 10^6, d = 10, depth 200.

Run:  python benchmarks/bench_pmm.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jaxsynth as js  # noqa: E402
from jaxsynth import schedules  # noqa: E402
from tests import reference_pmm as ref  # noqa: E402


def timed(fn, repeat=1):
    """Seconds of the fastest of ``repeat`` warm calls (after one compile call)."""
    jax.block_until_ready(fn().weights)
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        jax.block_until_ready(fn().weights)
        best = min(best, time.perf_counter() - t)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    args = parser.parse_args()
    n, batch, ref_reps = (3000, 32, 1) if args.quick else (30000, 256, 2)

    X = js.datasets.load("spiral", n=n, key=0)
    tree = js.prepare(X, 15)
    print(f"# jaxsynth core benchmark  jax {jax.__version__}  {jax.devices()[0].platform}")
    print(f"## PMM family, spiral n={n}, d=2, eps=1, r=15, batch {batch}")
    sig = np.asarray(schedules.packing_scales(1.0, 15, 2, 2), np.float64)
    rng = np.random.default_rng(0)
    for label, mech, rule, pruned in [
        ("pmm", js.PMM(depth=15), ref.proportional, False),
        ("pruned-pmm", js.PrunedPMM(depth=15), ref.zero_respecting, True),
    ]:
        seconds = timed(lambda: js.release_batch(1, mech, tree, 1.0, seeds=batch), repeat=3)
        t = time.perf_counter()
        for _ in range(ref_reps):
            ref.release(rng, X, 15, sig, 1.0, rule, pruned)
        ref_seconds = (time.perf_counter() - t) / ref_reps
        rate = batch / seconds
        print(f"{label:12s} jaxsynth {rate:9.1f} rep/s   numpy reference {1 / ref_seconds:7.3f} rep/s"
              f"   ratio {rate * ref_seconds:8.0f}x")

    print("## sparse Pruned-PMM depth sweep, d=10, n=%d, eps=1, uniform schedule, batch 4" % n)
    Y = js.datasets.load("subspace", n=n, d=10, k=2, key=0)
    deep = js.prepare(Y, 150)
    previous = None
    for r in (30, 60, 120, 150):
        mech = js.PrunedPMM(depth=r, engine="sparse", schedule="uniform")
        seconds = timed(lambda: js.release_batch(2, mech, deep, 1.0, seeds=4)) / 4
        growth = "" if previous is None else f"   time/r relative to previous {seconds / r / previous:5.2f}"
        print(f"r={r:4d}  {seconds:8.3f} s/replicate{growth}")
        previous = seconds / r

    big_n = 100_000 if args.quick else 1_000_000
    Z = np.random.default_rng(0).random((big_n, 10))
    tracemalloc.start()
    t = time.perf_counter()
    big = js.prepare(Z, 200)
    _ = big.occupancy, big.range_min_table
    seconds = time.perf_counter() - t
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"## data tree n={big_n}, d=10, depth 200: {seconds:.1f} s, "
          f"peak NumPy memory {peak / 2**30:.2f} GiB (input {Z.nbytes / 2**30:.2f} GiB)")


if __name__ == "__main__":
    main()
