"""Certified full-data W1 (``js.w1(method="exact")``) against POT, same run.

Per workload (spiral, ε = 1, one batch of releases): seconds per replicate of

* ``exact``: jaxsynth's certified pair (rtol 1%), the batch as a user calls it
  (``js.w1(ExactData, out, method="exact")``, data prepared once, compiled once before);
* ``POT full``: ``ot.emd2`` on the full ``n × M`` ℓ∞ cost matrix (the truth), on the
  first ``--pot`` replicates, matrix construction included;
* ``POT 2000``: ``ot.emd2`` on a 2000-point random subsample (the papers' protocol),
  on the same replicates;

with the ratios POT / exact, the relative gap of the pair, and whether it contains
POT's value.  Also (``--d10``) Pruned-PMM at r = 30 and 60 on the spiral embedded in
d = 10, where POT's full solve is too slow to repeat (exact only).

With ``--million``: one PrivTree replicate on 10^6 uniform points of [0,1]^3 (exact only:
time, and the process's peak memory).

Run:  python benchmarks/bench_exact.py [--quick] [--d10] [--million] [--batch 16] [--pot 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np
import ot

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jaxsynth as js  # noqa: E402
from jaxsynth.wasserstein.exact import prepare_exact  # noqa: E402


def pot(X, p, w, size, rng):
    """Seconds and value of ``ot.emd2`` (ℓ∞ cost) on ``size`` points of X (all if None)."""
    t = time.perf_counter()
    sub = X if size is None else X[rng.choice(len(X), size, replace=False)]
    keep = w > 0
    cost = ot.dist(sub, p[keep].astype(np.float64), metric="chebyshev")
    value = ot.emd2(np.full(len(sub), 1 / len(sub)), w[keep] / w[keep].sum(), cost,
                    numItermax=10**8)
    return time.perf_counter() - t, value


def workload(label, X, mech, batch, n_pot, rng):
    out = js.release_batch(0, mech, X, eps=[1.0], seeds=batch)
    points = np.asarray(out.points).reshape(batch, -1, X.shape[1])
    weights = np.asarray(out.weights, np.float64).reshape(batch, -1)
    t = time.perf_counter()
    data = prepare_exact(X)
    prep = time.perf_counter() - t
    js.w1(data, js.release_batch(1, mech, X, eps=[1.0], seeds=1), method="exact")  # compile
    t = time.perf_counter()
    lower, upper = js.w1(data, out, method="exact")
    exact_s = (time.perf_counter() - t) / batch
    lower, upper = lower.ravel(), upper.ravel()
    full = [pot(X, points[b], weights[b], None, rng) for b in range(n_pot)]
    sub = [pot(X, points[b], weights[b], 2000, rng) for b in range(n_pot)]
    full_s, sub_s = np.mean([s for s, _ in full]), np.mean([s for s, _ in sub])
    truth = np.array([v for _, v in full])
    inside = bool(np.all((lower[:n_pot] <= truth + 1e-12) & (truth <= upper[:n_pot] + 1e-12)))
    bias = np.mean([v for _, v in sub]) / truth.mean() - 1
    gap = np.max((upper - lower) / upper)
    atoms = int((weights > 0).sum(axis=1).mean())
    print(f"| {label} | {len(X)} | {atoms} | {exact_s:.2f} | {full_s:.2f} | {sub_s:.2f} | "
          f"{full_s / exact_s:.1f}x | {sub_s / exact_s:.2f}x | {gap:.4f} | {inside} | "
          f"{bias:+.0%} | {prep:.2f} |", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="n = 5000, batch 4 (smoke run)")
    parser.add_argument("--d10", action="store_true", help="also the d = 10 Pruned-PMM runs")
    parser.add_argument("--million", action="store_true",
                        help="also one PrivTree replicate at n = 10^6, d = 3 (time, peak memory)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--pot", type=int, default=2, help="replicates solved by POT")
    args = parser.parse_args()
    n, batch = (5000, 4) if args.quick else (30000, args.batch)
    rng = np.random.default_rng(0)
    print(f"# exact W1 benchmark  jax {jax.__version__}  POT {ot.__version__}  "
          f"{jax.devices()[0].platform}, spiral n = {n}, eps = 1, batch {batch}, linf")
    print("| workload | n | atoms | exact s/rep | POT full s/rep | POT 2000 s/rep | "
          "full / exact | 2000 / exact | max gap | contains POT | 2000-subsample bias | "
          "prepare s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    X = js.datasets.load("spiral", n=n, key=0)
    workload("PMM (r = ceil(log2 eps n))", X, js.PMM(), batch, args.pot, rng)
    workload("PrivTree", X, js.PrivTree(), batch, args.pot, rng)
    if args.d10:
        X10 = np.concatenate([X, np.full((n, 8), 0.5)], axis=1)
        for r in (30, 60):
            mech = js.PrunedPMM(depth=r)
            out = js.release_batch(0, mech, X10, eps=[1.0], seeds=2)
            data = prepare_exact(X10)
            t = time.perf_counter()
            lower, upper = js.w1(data, out, method="exact")
            atoms = int((np.asarray(out.weights) > 0).sum(axis=-1).mean())
            print(f"\nd = 10, Pruned-PMM r = {r}, {atoms} atoms: exact "
                  f"{(time.perf_counter() - t) / 2:.2f} s/rep (2 replicates, incl. compile), "
                  f"max gap {np.max((upper - lower) / upper):.4f}")
    if args.million:
        import resource

        X6 = js.datasets.load("uniform", n=10**6, d=3, key=0)
        out = js.release_batch(0, js.PrivTree(), X6, eps=[1.0], seeds=1)
        t = time.perf_counter()
        lower, upper = js.w1(X6, out, method="exact")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        atoms = int((np.asarray(out.weights) > 0).sum())
        print(f"\nn = 10^6, d = 3, PrivTree, {atoms} atoms: exact {time.perf_counter() - t:.1f} s "
              f"(preparation and compilation included), gap "
              f"{float(((upper - lower) / upper).max()):.4f}, peak memory {peak:.2f} GiB")


if __name__ == "__main__":
    main()
