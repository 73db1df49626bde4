"""Seconds per solve and accuracy of ``w1_sinkhorn`` (defaults) against POT's exact W1.

Two-moons data in [0,1]^2 against three synthetic measures with perturbed weights (the
test cases of tests/test_w1_sinkhorn.py): ``far`` (another law, W1 ≈ 0.2), ``sample``
(a fresh sample, W1 ≈ 0.02) and ``close`` (a jittered copy, W1 ≈ 0.01); ground metrics
ℓ∞ and ℓ2.  Times are warm (one untimed solve per metric compiles first).

    python benchmarks/bench_w1_sinkhorn.py [--n 2000] [--seed 10]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import ot

from jaxsynth.w1.sinkhorn import w1_sinkhorn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_w1_sinkhorn import POT_METRIC, _case


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=10)
    args = parser.parse_args()
    print(f"n = m = {args.n}, float32, defaults (rtol = 0.01)")
    print("case    metric  exact    value err  lower err  upper err  conv  iters  s/solve  POT s")
    cases = {kind: _case(kind, args.n, args.seed) for kind in ("far", "sample", "close")}
    for metric in ("linf", "l2"):
        w1_sinkhorn(*cases["far"], metric=metric)  # compile (all cases share the shapes)
        for kind, (X, Y, w) in cases.items():
            t0 = time.perf_counter()
            cost = ot.dist(X, Y, metric=POT_METRIC[metric])
            exact = ot.emd2(ot.unif(args.n), w, cost, numItermax=10**7)
            t_pot = time.perf_counter() - t0
            t0 = time.perf_counter()
            res = w1_sinkhorn(X, Y, w, metric=metric)
            t_solve = time.perf_counter() - t0
            print(
                f"{kind:7s} {metric:6s}  {exact:.5f}  {res.value / exact - 1:+9.3%}  "
                f"{res.lower / exact - 1:+9.3%}  {res.upper / exact - 1:+9.3%}  "
                f"{res.converged!s:5s} {res.iterations:6d}  {t_solve:7.2f}  {t_pot:5.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
