"""Batched Sinkhorn (``w1_sinkhorn_batch``): one replicate per jitted round against vmapped
groups, same run.

Eight PMM releases (spiral, n = 30000, ε = 1), each measured by ``sinkhorn`` on a
2000-point subsample (the papers' protocol), solved with ``group`` = 1 (the CPU default),
4 and 8; prints seconds per replicate (compiled before), a few values (the same whatever
the group, up to float32 rounding) and the total iterations.

Run:  python benchmarks/bench_sinkhorn_batch.py [--groups 1 4 8] [--replicates 8]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jaxsynth as js  # noqa: E402
from jaxsynth.wasserstein.sinkhorn import w1_sinkhorn_batch  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--replicates", type=int, default=8)
    args = parser.parse_args()
    reps = args.replicates
    X = js.datasets.load("spiral", n=30000, key=0)
    out = js.release_batch(0, js.PMM(), X, eps=[1.0], seeds=reps)
    points = np.asarray(out.points).reshape(reps, -1, 2)
    weights = np.asarray(out.weights, np.float64).reshape(reps, -1)
    keys = [jax.random.key(i) for i in range(reps)]
    print(f"# batched Sinkhorn  jax {jax.__version__}  {jax.devices()[0].platform}, "
          f"PMM spiral n = 30000, subsample 2000, {reps} replicates")
    print("| group | s/rep | first values | iterations |")
    print("|---|---|---|---|")
    for group in args.groups:
        w1_sinkhorn_batch(X, points[:2], weights[:2], keys=keys[:2], subsample=2000,
                          group=group)  # compile
        t = time.perf_counter()
        results = w1_sinkhorn_batch(X, points, weights, keys=keys, subsample=2000, group=group)
        seconds = (time.perf_counter() - t) / reps
        values = ", ".join(f"{r.value:.5f}" for r in results[:3])
        print(f"| {group} | {seconds:.2f} | {values} | {sum(r.iterations for r in results)} |",
              flush=True)


if __name__ == "__main__":
    main()
