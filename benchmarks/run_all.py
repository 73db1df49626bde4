"""The whole benchmark table of jaxsynth, against vectorized NumPy in the same run.

    python benchmarks/run_all.py [--quick] [--scale] [--w1] [--exact] [--write BENCHMARKS.md]

Per workload (n = 30000, ε = 1 unless ``--quick``): seconds per replicate of jaxsynth
(release + exact tree W1, warm, best of three runs of a batch) and of the NumPy
baseline (``benchmarks/numpy_baselines.py``: level by level, per-point labels,
``np.bincount``, NumPy's generator; best of three mean times), their ratio, jaxsynth's
compile time, ...  Adaptive Pruned-PMM's cost depends on the depth it selects (14 to
117 levels at d = 8; the deepest, drawn 7.5% of the time on the line, costs 30× the
shallowest), so a sample mean over a few hundred replicates varies by ±20% with the
number of deep draws; its row is the expected cost per replicate, ``Σ_a P(a)·cost(a)``,
with each candidate's cost timed alone (the selection forced to it) and the exact
selection probabilities ``P(a)`` of the plan, for both implementations.  Its
compile time, the nodes visited and random words drawn per second, and those rates as a
fraction of the machine's rough peak (``hash_peak``: Threefry-2x32 blocks per second in
one fused loop, the bound on random words for any kernel of this design).  Then
``jaxsynth demo`` in new directories, cold and with a warm compilation cache, the import
time of ``jaxsynth`` against ``jax``, peak memory, and with
``--scale`` the n = 10^7, d = 3 preparation and releases (PMM, Pruned-PMM, tree W1);
with ``--w1`` the W1 methods' timings and accuracy (``bench_w1.py --sinkhorn``); with
``--exact`` the certified full-data W1 against POT, full and on 2000-point subsamples
(``bench_exact.py --d10``).

Runs unchanged on a GPU: chunk sizes come from the device's memory
(``engine.device_memory``), and the device, jax version and date head the output.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy_baselines as nb  # noqa: E402

import jaxsynth as js  # noqa: E402
from jaxsynth import engine  # noqa: E402
from jaxsynth.core import keys as K  # noqa: E402
from jaxsynth.mechanisms import schedules  # noqa: E402
from jaxsynth.mechanisms.privtree import default_depth_cap  # noqa: E402

TARGETS = {"dense": 5.0, "sparse": 3.0, "adaptive": 3.0, "privtree": 3.0, "privtree-shift": 2.0}


def hash_peak(blocks: int = 1 << 22) -> float:
    """Threefry-2x32 blocks per second in one fused elementwise loop on this device."""
    @jax.jit
    def hashes(key, counter):
        x0, x1 = K.threefry2x32(key[0], key[1], counter, counter ^ jnp.uint32(0x9E3779B9))
        return jnp.sum(x0 ^ x1)

    key = jnp.array([1, 2], jnp.uint32)
    counter = jnp.arange(blocks, dtype=jnp.uint32)
    hashes(key, counter).block_until_ready()
    best = np.inf
    for _ in range(3):
        start = time.perf_counter()
        hashes(key, counter).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return blocks / best


def time_jaxsynth(mech, X, eps, replicates: int, words_per_node: float):
    """(s/replicate warm, compile s, mean visited, mean tree W1) of ``mech`` on ``X``."""
    tree = js.api.data_tree_for(mech, X, np.array([eps]))
    return time_plan(mech.plan(tree, [eps]), replicates, words_per_node)


def time_adaptive(mech, X, eps: float, prep, replicates: int, numpy_replicates: int):
    """Expected seconds per replicate ``Σ_a P(a) cost(a)`` of both implementations."""
    import dataclasses

    tree = js.api.data_tree_for(mech, X, np.array([eps]))
    plan = mech.plan(tree, [eps])
    probs = plan.diagnostics["probabilities"][0]
    cands = nb.adaptive_candidates(X.shape[0], X.shape[1], (1 - mech.eps_sel) * eps)
    ours = {"seconds": 0.0, "compile": 0.0, "visited": 0.0, "w1": 0.0, "words": 0.0}
    theirs = {"seconds": 0.0, "visited": 0.0, "w1": 0.0, "words": 0.0}
    for a, p in enumerate(probs):
        if p < 1e-4:
            continue
        forced = np.where(np.arange(len(probs)) == a, 0.0, np.inf)[None].astype(np.float32)
        mine = dataclasses.replace(plan, params={**plan.params, "gaps": forced})
        deep = int(plan.params["depths"][0, a]) > 60
        part = time_plan(mine, max(32, replicates // (4 if deep else 1)), 1.0)
        depth, sigmas = int(cands["depth"][a]), np.asarray(cands["sigmas"][a])
        base = time_numpy(lambda rng, s=sigmas[:depth]: nb.pruned_pmm_sparse(
            prep, s, 1 / ((1 - mech.eps_sel) * eps), rng), max(2, numpy_replicates // (8 if deep else 1)))
        for total, one in ((ours, part), (theirs, base)):
            for k in total:
                if k == "compile":
                    total[k] = max(total[k], one[k])
                else:
                    total[k] += p * one[k]
    return ours, theirs


def time_plan(plan, replicates: int, words_per_node: float):
    """(s/replicate warm, compile s, mean visited, mean tree W1) of an engine plan."""
    keys = K.replicate_keys(0, replicates)
    start = time.perf_counter()
    out = jax.block_until_ready(engine.run(plan, keys, atoms=False))
    first = time.perf_counter() - start
    best = np.inf
    for repeat in range(3):
        keys = K.replicate_keys(repeat + 1, replicates)
        start = time.perf_counter()
        out = jax.block_until_ready(engine.run(plan, keys, atoms=False))
        best = min(best, time.perf_counter() - start)
    return {"seconds": best / replicates, "compile": max(first - best, 0.0),
            "visited": float(np.mean(out["visited"])), "w1": float(np.mean(out["tree_linf"])),
            "words": words_per_node * float(np.mean(out["visited"]))}


def time_numpy(run, replicates: int):
    """(s/replicate best of three mean times, mean visited, mean tree W1, mean variates)."""
    rng = np.random.default_rng(0)
    run(rng)
    best, outs = np.inf, []
    for _ in range(3):
        start = time.perf_counter()
        outs = [run(rng) for _ in range(replicates)]
        best = min(best, (time.perf_counter() - start) / replicates)
    return {"seconds": best, "visited": float(np.mean([o["visited"] for o in outs])),
            "w1": float(np.mean([o["w1_linf"] for o in outs])),
            "words": float(np.mean([o["variates"] for o in outs]))}


def workloads(quick: bool):
    """(name, kind, mechanism, data, NumPy runner, jaxsynth replicates, NumPy replicates, words/node)."""
    n, eps = (3000 if quick else 30000), 1.0
    spiral = js.datasets.load("spiral", n=n, key=0)
    spiral10 = nb.embed(spiral, 10)
    scale = 0.25 if quick else 1.0
    out = []
    r = schedules.default_depth(eps, n)
    sig = 1.0 / schedules.packing_inverse_scales(eps, r, 2, 2)
    prep = nb.prepare_dense(spiral, r)
    out.append((f"dense PMM, d=2, r={r}", "dense", js.PMM(depth=r), spiral,
                lambda rng, p=prep, s=sig: nb.pmm_dense(p, s, 1 / eps, rng), 256, 20, 1.0))
    for r in (30, 60, 150):
        prep = nb.prepare_sparse(spiral10, r)
        sig = np.full(r, 2.0 * r / eps)
        mech = js.PrunedPMM(depth=r, schedule="uniform", engine="sparse")
        reps = {30: 64, 60: 32, 150: 8}[r]
        out.append((f"sparse Pruned-PMM, spiral in d=10, r={r}", "sparse", mech, spiral10,
                    lambda rng, p=prep, s=sig: nb.pruned_pmm_sparse(p, s, 1 / eps, rng),
                    reps, max(3, int(40 * 30 / r * scale)), 1.0))
    for k in (1, 2):
        X8 = js.datasets.load("subspace", n=n, d=8, k=k, key=0)
        prep = nb.prepare_adaptive(X8, eps)
        out.append((f"Adaptive Pruned-PMM, d=8, k={k} (expected cost)", "adaptive",
                    js.AdaptivePrunedPMM(), X8, prep, 128, int(24 * scale), 1.0))
    cap = default_depth_cap(n, 2, eps)
    prep = nb.prepare_privtree(spiral, cap)
    out.append(("PrivTree, d=2", "privtree", js.PrivTree(), spiral,
                lambda rng, p=prep: nb.privtree(p, eps, cap, rng), 256, int(40 * scale), 1.5))
    out.append(("shifted PrivTree, d=2", "privtree-shift", js.PrivTree(shift=True), spiral,
                lambda rng: nb.privtree_shifted(spiral, eps, cap, rng), 128, int(20 * scale), 1.5))
    return out


def demo_times() -> tuple[float, float]:
    """Wall seconds of ``jaxsynth demo`` as a new user meets it: run in a new, empty
    directory each time (nothing to resume), first with an empty compilation cache, then
    with the cache the first run filled."""
    times = []
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, JAXSYNTH_CACHE_DIR=cache)
        env.pop("JAXSYNTH_NO_CACHE", None)
        for _ in range(2):
            with tempfile.TemporaryDirectory() as fresh:
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "jaxsynth", "demo", "--quiet"],
                               check=True, env=env, capture_output=True, cwd=fresh)
                times.append(time.perf_counter() - start)
    return times[0], times[1]


def import_times(runs: int = 5) -> tuple[float, float]:
    """Median wall seconds of a new interpreter running ``import jax``, and
    ``import jaxsynth`` (interpreter start included in both)."""
    def median(module):
        seconds = []
        for _ in range(runs):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
            seconds.append(time.perf_counter() - start)
        return float(np.median(seconds))

    return median("jax"), median("jaxsynth")


def scale_run(n: int = 10**7, d: int = 3) -> list[str]:
    """Prepare, release (PMM, Pruned-PMM) and measure (tree W1) n points in d dimensions."""
    rows = []
    rng = np.random.default_rng(0)
    X = np.clip(0.5 + 0.15 * rng.standard_normal((n, d)), 0.0, 1.0)
    eps = 1.0
    r = schedules.default_depth(eps, n)
    start = time.perf_counter()
    tree = js.prepare(X, r)
    _ = tree.range_min_table, tree.occupancy
    rows.append(f"| prepare (sort, split levels, range-min table), depth {r} | "
                f"{time.perf_counter() - start:.1f} s | {peak_rss():.1f} GiB | "
                f"{int(tree.occupancy[r]):,} occupied leaves |")
    for mech in (js.PMM(depth=r), js.PrunedPMM(depth=r, engine="sparse")):
        plan = mech.plan(tree, [eps])
        start = time.perf_counter()
        out = jax.block_until_ready(engine.run(plan, K.replicate_keys(0, 2), atoms=False))
        rows.append(f"| {mech.name} release + tree W1, 2 replicates (incl. compile) | "
                    f"{time.perf_counter() - start:.1f} s | {peak_rss():.1f} GiB | "
                    f"W1 {float(np.mean(out['tree_linf'])):.5f}, m {int(out['size'][0, 0])} |")
    return rows


def peak_rss() -> float:
    """Peak resident memory of this process, GiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def device_line() -> str:
    dev = jax.devices()[0]
    kind = getattr(dev, "device_kind", "")
    kind = "" if kind.lower() == dev.platform.lower() else f" {kind}"
    return (f"{dev.platform.upper()}{kind} ({jax.device_count()} "
            f"device(s), {os.cpu_count()} host cores), jax {jax.__version__}, numpy "
            f"{np.__version__}, Python {platform.python_version()}, "
            f"{datetime.date.today().isoformat()}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 3000 and fewer replicates")
    parser.add_argument("--scale", action="store_true", help="also the n = 10^7, d = 3 run")
    parser.add_argument("--no-demo", action="store_true", help="skip the demo timings")
    parser.add_argument("--w1", action="store_true",
                        help="also run benchmarks/bench_w1.py --sinkhorn and append its output")
    parser.add_argument("--exact", action="store_true",
                        help="also run benchmarks/bench_exact.py --d10 and append its output")
    parser.add_argument("--write", metavar="FILE", help="also write the markdown to FILE")
    args = parser.parse_args(argv)
    flags = "".join(f" --{f}" for f in ("quick", "scale", "w1", "exact") if getattr(args, f))
    lines = ["# Benchmarks", "", f"`python benchmarks/run_all.py{flags}` "
             f"on {device_line()}.", ""]
    peak = hash_peak()
    lines += [f"Machine peak for random words (one fused Threefry loop): {2 * peak / 1e9:.2f} G "
              "words/s.", ""]
    lines += ["| workload | jaxsynth s/rep | NumPy s/rep | ratio | target | compile s | "
              "nodes/s | words/s | of peak | tree W1 (jaxsynth / NumPy) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    ok = True
    for name, kind, mech, X, run, jreps, nreps, words in workloads(args.quick):
        if kind == "adaptive":
            ours, theirs = time_adaptive(mech, X, 1.0, run, jreps, nreps)
        else:
            ours = time_jaxsynth(mech, X, 1.0, jreps, words)
            theirs = time_numpy(run, max(2, nreps))
        ratio = theirs["seconds"] / ours["seconds"]
        target = TARGETS[kind]
        ok &= ratio >= target
        lines.append(
            f"| {name} | {ours['seconds']:.2e} | {theirs['seconds']:.2e} | **{ratio:.2f}×** | "
            f"≥ {target:g}× | {ours['compile']:.1f} | {ours['visited'] / ours['seconds']:.2e} | "
            f"{ours['words'] / ours['seconds']:.2e} | "
            f"{ours['words'] / ours['seconds'] / (2 * peak):.0%} | "
            f"{ours['w1']:.4f} / {theirs['w1']:.4f} |")
        print(lines[-1], flush=True)
    lines.append("")
    jax_s, ours_s = import_times()
    lines += [f"`import jaxsynth`: {ours_s:.2f} s against `import jax` {jax_s:.2f} s in a new "
              f"interpreter (median of 5): **{ours_s / jax_s:.2f}×** (target ≤ 1.5×).", ""]
    print(lines[-2], flush=True)
    if not args.no_demo:
        cold, warm = demo_times()
        lines += [f"`jaxsynth demo` in a new directory: {cold:.1f} s with an empty compilation "
                  f"cache, {warm:.1f} s with a warm one (targets ≤ 30 s, ≤ 10 s).", ""]
        print(lines[-2], flush=True)
    lines += [f"Peak host memory of this benchmark: {peak_rss():.2f} GiB.", ""]
    if args.scale:
        lines += ["## n = 10^7, d = 3", "", "| step | time | peak host memory | result |",
                  "|---|---|---|---|"] + scale_run() + [""]
        print("\n".join(lines[-6:]), flush=True)
    if args.w1:
        w1_args = [sys.executable, str(ROOT / "benchmarks" / "bench_w1.py"), "--sinkhorn"]
        w1_args += ["--quick"] if args.quick else []
        report = subprocess.run(w1_args, check=True, capture_output=True, text=True).stdout
        lines += ["## W1 methods (`python benchmarks/bench_w1.py --sinkhorn`)", "", "```",
                  report.rstrip(), "```", ""]
    if args.exact:
        exact_args = [sys.executable, str(ROOT / "benchmarks" / "bench_exact.py")]
        exact_args += ["--quick"] if args.quick else ["--d10"]
        report = subprocess.run(exact_args, check=True, capture_output=True, text=True).stdout
        lines += ["## Full-data W1, certified (`python benchmarks/bench_exact.py --d10`)", "",
                  report.rstrip(), ""]
    text = "\n".join(lines)
    print(text)
    if args.write:
        Path(args.write).write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
