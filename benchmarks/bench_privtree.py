"""PrivTree benchmark (issue: PrivTree).  Prints, on this machine, for the 2-D spiral
(n = 30000, ε = 1) and PrivTree without and with the random shift:

* seconds per replicate of a batched release on CPU (warm: compile excluded, reported apart),
* leaf statistics (leaves, positive-mass atoms, deepest leaf, cap hits, frontier capacity),
* mean exact tree-metric W1 (ℓ∞) over the seeds, with its standard error,
* the resolution functional ``R_T`` of the released trees (oracle, not private).

Run:  python benchmarks/bench_privtree.py [--quick] [--seeds S]
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
from jaxsynth import oracle  # noqa: E402
from jaxsynth.privtree import PrivTree  # noqa: E402
from jaxsynth.w1 import w1  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="n = 3000, 8 seeds (smoke run)")
    parser.add_argument("--seeds", type=int, default=32)
    args = parser.parse_args()
    n, seeds = (3000, 8) if args.quick else (30000, args.seeds)
    X = js.datasets.load("spiral", n=n, key=0)
    print(f"# PrivTree benchmark  jax {jax.__version__}  {jax.devices()[0].platform}  "
          f"spiral n={n} d=2 eps=1 seeds={seeds}")
    for mech in (PrivTree(), PrivTree(shift=True)):
        tree = js.prepare(X, mech.data_depth(n, 2, 1.0))
        t = time.perf_counter()
        js.release_batch(0, mech, tree, 1.0, seeds=seeds)  # compile + run
        first = time.perf_counter() - t
        t = time.perf_counter()
        out = js.release_batch(1, mech, tree, 1.0, seeds=seeds)
        jax.block_until_ready(out.weights)
        warm = time.perf_counter() - t
        t = time.perf_counter()
        values = w1(X, out, method="tree", metric="linf")[0]
        w1_seconds = time.perf_counter() - t
        leaves = np.asarray(out.leaves)[0]
        print(f"## {mech.name}: depth_cap {int(out.info['depth_cap'][0, 0])}, "
              f"capacity {int(np.max(out.info['capacity']))}")
        print(f"  release: {warm / seeds * 1e3:.1f} ms/replicate warm "
              f"(first call with compile {first:.1f} s)")
        print(f"  leaves {leaves.mean():.0f} ± {leaves.std():.0f}, positive atoms "
              f"{np.asarray(out.size).mean():.0f}, deepest leaf {int(np.max(out.depth))}, "
              f"cap hits {int(np.sum(out.info['cap_hits']))}, visited "
              f"{np.asarray(out.visited).mean():.0f}")
        se = values.std(ddof=1) / np.sqrt(seeds)
        print(f"  tree W1 (linf): mean {values.mean():.5f} ± {se:.5f}"
              f"  ({w1_seconds / seeds * 1e3:.0f} ms/replicate)")
        r_t = oracle.resolution_functional(X, out[0, : min(seeds, 4)])
        print(f"  resolution functional R_T (oracle, first seeds): {np.round(r_t, 5)}")


if __name__ == "__main__":
    main()
