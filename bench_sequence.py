"""Paired timing of a dumped column-generation LP sequence: POT's sparse network simplex
(started from the dumped potentials, as ``lp.solve_arcs`` does) against
``exact.simplex`` (each level's first LP cold, guided by the dumped column potentials
where there are some, later rounds restarted from the previous round's basis), with
POT's optimal cost as the check.  Then both cold on the last level's first LP.

Usage: python bench_sequence.py [case ...]  (default: both dumped cases)
"""

import glob
import sys
import time

import numpy as np
from ot.lp.emd_wrap import emd_c_sparse

from jaxsynth.wasserstein.exact import simplex

DUMP = "/work/lpdump"
REPEATS = 3


def load(case):
    return [dict(np.load(f)) for f in sorted(glob.glob(f"{DUMP}/{case}_[0-9][0-9].npz"))]


def pot(lp):
    args = (lp["a"], lp["b"], lp["rows"].astype(np.uint64), lp["cols"].astype(np.uint64),
            lp["costs"], 10**9)
    if len(lp["u0"]):
        args += (lp["u0"], lp["v0"])
    t = time.perf_counter()
    cost, status = emd_c_sparse(*args)[3::3]
    return time.perf_counter() - t, cost, status


def ours(lp, start, guide=None):
    t = time.perf_counter()
    rows, cols, mass, u, v, basis, pivots = simplex.solve(lp["a"], lp["b"], lp["rows"],
                                                          lp["cols"], lp["costs"], start, guide)
    elapsed = time.perf_counter() - t
    m = len(lp["b"])
    cost = mass @ lp["costs"][np.searchsorted(lp["rows"] * m + lp["cols"], rows * m + cols)]
    rc = lp["costs"] - u[lp["rows"]] - v[lp["cols"]]
    return elapsed, cost, basis, pivots, rc.min()


def run(case):
    lps = load(case)
    small = lps[0]
    simplex.solve(small["a"], small["b"], small["rows"], small["cols"], small["costs"])  # jit
    times = np.zeros((REPEATS, len(lps), 2))
    pivots = np.zeros(len(lps), int)
    for rep in range(REPEATS):
        basis = None
        for k, lp in enumerate(lps):
            start = basis if k and len(lp["a"]) == len(lps[k - 1]["a"]) else None
            t_pot, c_pot, status = pot(lp)
            guide = lp["v0"] if start is None and len(lp["v0"]) else None
            t_our, c_our, basis, pivots[k], rc_min = ours(lp, start, guide)
            times[rep, k] = t_pot, t_our
            assert status == 1
            if abs(c_our - c_pot) > 1e-10 * abs(c_pot) or rc_min < -1e-12:
                print(f"  MISMATCH {case} {k}: {c_our!r} vs POT {c_pot!r}, min rc {rc_min:.2e}")
    best = times.min(axis=0)
    print(f"{case}: per LP (best of {REPEATS}), seconds")
    print("   k      Q   arcs   start      POT     ours  pivots")
    for k, lp in enumerate(lps):
        start = ("basis" if k and len(lp["a"]) == len(lps[k - 1]["a"])
                 else "guide" if len(lp["v0"]) else "cold")
        print(f"  {k:2d} {len(lp['a']):6d} {len(lp['rows']):6d}   {start:5s} "
              f"{best[k, 0]:8.4f} {best[k, 1]:8.4f} {pivots[k]:7d}")
    for q in sorted({len(lp["a"]) for lp in lps}):
        idx = [k for k, lp in enumerate(lps) if len(lp["a"]) == q]
        print(f"  level Q={q}: POT {best[idx, 0].sum():.3f} s, ours {best[idx, 1].sum():.3f} s")
    totals = times.sum(axis=1)
    print(f"  total per repeat: POT {np.round(totals[:, 0], 3)}, ours {np.round(totals[:, 1], 3)}")
    first = max(k for k, lp in enumerate(lps) if k == 0 or len(lp["a"]) != len(lps[k - 1]["a"]))
    big = lps[first]
    cold_pot = min(pot({**big, "u0": np.empty(0)})[0] for _ in range(REPEATS))
    cold_our = min(ours(big, None)[0] for _ in range(REPEATS))
    print(f"  cold vs cold, LP {first}: POT {cold_pot:.4f} s, ours {cold_our:.4f} s "
          f"({ours(big, None)[3]} pivots)")


if __name__ == "__main__":
    for case in sys.argv[1:] or ["spiral_PMM_30000", "blobs3_PrivTree_30000"]:
        run(case)
