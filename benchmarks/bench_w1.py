"""W1 benchmark of every ``js.w1`` method.  Prints, on this machine:

1. tree W1 (ℓ∞ and ℓ2) of Pruned-PMM releases, spiral n = 30000, d = 2, depth 15,
   batch 64: compile + first call, then warm seconds (best of 3) and ms per replicate;
2. the certified bracket on the same batch (projection lower bound + tree upper bound)
   and the bracket width;
3. deep codes: Pruned-PMM at depth 150 on a 2-dimensional subspace of [0,1]^10
   (5 Morton words per code), batch 8;
4. unbalanced trees: PrivTree and shifted PrivTree, batch 16;
5. (``--sinkhorn``) one replicate's certified Sinkhorn on a 2000-point subsample, for scale;
6. accuracy of every method against POT's exact ``emd2``: PMM (ambient depth) on a
   2000-point subsample of the spiral, one replicate, ℓ∞ and ℓ2.

Run:  python benchmarks/bench_w1.py [--quick] [--sinkhorn]
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
from jaxsynth.core.partition import GROUND_METRICS  # noqa: E402
from jaxsynth.wasserstein import prepare_w1, w1  # noqa: E402
from jaxsynth.wasserstein.sinkhorn import w1_sinkhorn  # noqa: E402


def timed(fn, repeat=3):
    """(first call seconds incl. compilation, best warm seconds, result)."""
    t = time.perf_counter()
    result = fn()
    first = time.perf_counter() - t
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return first, best, result


def report(label, batch, first, best):
    print(
        f"{label:34s} first {first:7.2f} s   warm {best:7.3f} s   {1e3 * best / batch:8.2f} ms/replicate"
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    parser.add_argument("--sinkhorn", action="store_true", help="also time one Sinkhorn solve")
    args = parser.parse_args()
    n, batch = (3000, 8) if args.quick else (30000, 64)
    print(f"# jaxsynth W1 benchmark  jax {jax.__version__}  {jax.devices()[0].platform}")

    X = js.datasets.load("spiral", n=n, key=0)
    out = js.release_batch(0, js.PrunedPMM(depth=15), X, eps=1.0, seeds=batch)
    data = prepare_w1(X, 15)
    print(
        f"## Pruned-PMM spiral n={n}, d=2, depth 15, batch {batch}: M={out.weights.shape[-1]} atoms, "
        f"{len(data.counts)} distinct data cells"
    )
    values = {}
    for metric in GROUND_METRICS:
        first, best, values[metric] = timed(lambda metric=metric: w1(data, out, "tree", metric))
        report(f"tree W1 {metric}", batch, first, best)
    t = time.perf_counter()
    prepare_w1(X, 15)
    print(f"{'prepare (host, once per data set)':34s} {time.perf_counter() - t:7.3f} s")
    for metric in GROUND_METRICS:
        first, best, (lower, upper) = timed(
            lambda metric=metric: w1(data, out, "bracket", metric), repeat=1
        )
        report(f"bracket {metric}", batch, first, best)
        print(
            f"{'':34s} mean tree W1 {values[metric].mean():.5f}  lower {lower.mean():.5f}  "
            f"upper {upper.mean():.5f}  upper/lower {np.mean(upper / lower):.2f}"
        )

    Y = js.datasets.load("subspace", n=n, d=10, k=2, key=0)
    deep = js.prepare(Y, 150)
    out = js.release_batch(
        1, js.PrunedPMM(depth=150, engine="sparse", schedule="uniform"), deep, 1.0, seeds=8
    )
    first, best, _ = timed(lambda: w1(deep, out, "tree"))
    report("tree W1 linf, d=10, depth 150", 8, first, best)

    for shift in (False, True):
        out = js.release_batch(2, js.PrivTree(shift=shift), X, eps=1.0, seeds=16)
        depth = int(np.max(np.asarray(out.leaf_depth)))
        data = prepare_w1(X, depth)
        first, best, v = timed(lambda data=data, out=out: w1(data, out, "tree"))
        report(f"tree W1 linf, PrivTree shift={shift}", 16, first, best)
        print(f"{'':34s} depth {depth}, M={out.weights.shape[-1]}, mean {v.mean():.5f}")

    if args.sinkhorn:
        out = js.release_batch(0, js.PrunedPMM(depth=15), X, eps=1.0, seeds=1)
        first, best, v = timed(
            lambda: w1(X, out, "sinkhorn", subsample=2000, key=jax.random.key(0)), repeat=1
        )
        report("sinkhorn linf, subsample 2000", 1, first, best)

    accuracy_against_pot(X, 500 if args.quick else 2000)


def accuracy_against_pot(X, size):
    """Each method's value next to POT's exact W1 on one small PMM release."""
    import ot

    Xs = X[np.random.default_rng(0).choice(len(X), size, replace=False)]
    out = js.release(0, js.PMM(), Xs, 1.0)
    keep = np.asarray(out.weights) > 0
    atoms = np.asarray(out.points, np.float64)[keep]
    weights = np.asarray(out.weights, np.float64)[keep]
    print(f"## accuracy vs POT emd2: PMM, spiral subsample n={size}, depth {int(out.depth)}, "
          f"{keep.sum()} atoms")
    for metric, pot_metric in (("linf", "chebyshev"), ("l2", "euclidean")):
        cost = ot.dist(Xs, atoms, metric=pot_metric)
        exact = ot.emd2(np.full(size, 1 / size), weights / weights.sum(), cost)
        lower, upper = w1(Xs, out, "bracket", metric)
        t = time.perf_counter()
        sink = w1_sinkhorn(Xs, atoms, weights, metric=metric)
        seconds = time.perf_counter() - t
        tree_upper = float(w1(Xs, out, "tree_upper", metric))
        print(
            f"{metric:4s} exact {exact:.5f}  tree {float(w1(Xs, out, 'tree', metric)):.5f}  "
            f"tree_upper {tree_upper:.5f} (x{tree_upper / exact:.2f})  "
            f"bracket [{float(lower):.5f}, {float(upper):.5f}]  "
            f"sinkhorn {sink.value:.5f} ({100 * (sink.value / exact - 1):+.2f}%, "
            f"[{sink.lower:.5f}, {sink.upper:.5f}], {seconds:.1f} s)"
        )


if __name__ == "__main__":
    main()
