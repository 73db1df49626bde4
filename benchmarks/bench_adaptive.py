"""Adaptive Pruned-PMM benchmark (seed 001 §4.2, Fig. 2 setting).  Prints, on this machine:

1. the candidate set, scores, sensitivity Δ and selection probabilities at d = 8,
   n = 30000, ε = 1 for uniform data in [0,1]^8 and a k = 1 coordinate line in [0,1]^8,
   at the default split and at other splits (see the module docstring of
   ``jaxsynth.adaptive`` for why they come out as they do);
2. seconds per replicate of the full mechanism (selection + sparse Pruned-PMM, scan over
   the largest candidate depth L) on the k = 1 line, and the selected depths;
3. if ``jaxsynth.w1.w1`` exists: mean tree W1 (ℓ∞) of Adaptive Pruned-PMM and of PMM at
   the ambient depth ⌈log2 εn⌉ on a k = 1 line in d = 4 and d = 8, and the mean bracket
   (lower, upper) of the true ℓ∞ W1.  The tree value leaves out within-leaf distances,
   which dominate PMM's error on this data (see ``jaxsynth.adaptive``'s docstring).

Run:  python benchmarks/bench_adaptive.py [--quick] [--seeds S]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jaxsynth import PMM, datasets, prepare, release_batch  # noqa: E402
from jaxsynth.adaptive import AdaptivePrunedPMM  # noqa: E402


def selection_report(n: int, d: int, eps: float) -> None:
    mech = AdaptivePrunedPMM()
    for name, X in [
        ("uniform", datasets.load("uniform", n=n, d=d, key=0)),
        ("line k=1", datasets.load("subspace", n=n, d=d, k=1, key=0)),
    ]:
        table = mech.candidate_table(n, d, eps, X)
        a = table.attrs
        print(f"\n### {name}: eps_sel={a['eps_sel']:.3g} eps_main={a['eps_main']:.3g} "
              f"L={a['L']} Delta={a['sensitivity']:.4g}")
        print(table[["s", "depth", "public_bound", "sensitivity_term", "score", "probability"]]
              .to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        best = np.sort(table.score.values)[:2]
        gap = best[1] - best[0]
        print(f"best-two score gap {gap:.3g} = {gap / a['sensitivity']:.3g} Delta; one score "
              f"unit = eps_sel/(2 Delta) = {a['eps_sel'] / (2 * a['sensitivity']):.3g} nats")
        rows = {}
        for frac in (0.02, 0.05, 0.1, 0.2, 0.3, 0.5):
            t = AdaptivePrunedPMM(eps_sel=frac).candidate_table(n, d, eps, X)
            rows[frac] = {"Delta": t.attrs["sensitivity"],
                          "E[score]": float(t.probability @ t.score),
                          "min score": t.score.min(),
                          "P(s)": " ".join(f"{p:.3f}" for p in t.probability)}
        print("by split (eps_sel/eps):")
        print(pd.DataFrame(rows).T.to_string(float_format=lambda v: f"{v:.4g}"))


def timing_report(n: int, d: int, eps: float, seeds: int) -> None:
    X = datasets.load("subspace", n=n, d=d, k=1, key=0)
    mech = AdaptivePrunedPMM()
    tree = prepare(X, mech.data_depth(n, d, eps))
    start = time.perf_counter()
    jax.block_until_ready(release_batch(0, mech, tree, eps, seeds=seeds).weights)
    first = time.perf_counter() - start
    start = time.perf_counter()
    out = release_batch(1, mech, tree, eps, seeds=seeds)
    jax.block_until_ready(out.weights)
    warm = time.perf_counter() - start
    print(f"\n## timing: line k=1, n={n}, d={d}, eps={eps}, {seeds} seeds, "
          f"scan length L={tree.depth}, capacity {out.weights.shape[-1]}")
    print(f"first call (compile + run) {first:.2f} s; warm {warm / seeds:.3f} s/replicate")
    print(f"selected depths {np.asarray(out.depth[0]).tolist()}, "
          f"visited {np.asarray(out.visited[0]).tolist()}")


def w1_report(n: int, eps: float, seeds: int) -> None:
    try:
        from jaxsynth.w1 import w1
    except ImportError:
        print("\n## W1: jaxsynth.w1.w1 not available; skipped")
        return
    print(f"\n## mean W1 (linf), line k=1, n={n}, eps={eps}, {seeds} seeds")
    for d in (4, 8):
        X = datasets.load("subspace", n=n, d=d, k=1, key=0)
        for mech in (AdaptivePrunedPMM(), PMM()):
            out = release_batch(0, mech, X, eps, seeds=seeds)
            tree = np.asarray(w1(X, out, method="tree", metric="linf"))
            lower, upper = (np.asarray(v) for v in w1(X, out, method="bracket", metric="linf"))
            print(f"d={d} {mech.name:22s} tree W1 {tree.mean():.4g} (sd {tree.std(ddof=1):.2g}); "
                  f"true linf W1 in [{lower.mean():.4g}, {upper.mean():.4g}]; "
                  f"depths {np.asarray(out.depth).ravel().tolist()}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="n = 3000 (smoke run)")
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    n = 3000 if args.quick else 30000
    print(f"# jaxsynth Adaptive Pruned-PMM benchmark  jax {jax.__version__}  "
          f"{jax.devices()[0].platform}")
    print(f"## selection at d=8, n={n}, eps=1 (seed 001 Fig. 2 setting)")
    selection_report(n, 8, 1.0)
    timing_report(n, 8, 1.0, args.seeds)
    w1_report(n, 1.0, args.seeds)


if __name__ == "__main__":
    main()
