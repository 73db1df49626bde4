"""Certified full-data W1 (``method="exact"``) against POT, same run: the targets' table.

Per workload (data set × mechanism × n, ε = 1, ℓ∞, rtol 1 %): seconds per replicate of

* ``exact``: jaxsynth's certified pair on a batch, as a user calls it
  (``js.w1(ExactData, out, method="exact")``: data prepared once, timed on a second
  call so that every shape is compiled, as in a warm sweep);
* ``POT full``: ``ot.emd2`` on the full ``n × M`` cost matrix (the truth), matrix
  construction included, on the first ``--pot`` replicates;
* ``POT 2000``: ``ot.emd2`` on a 2000-point random subsample (the papers' protocol),
  on every replicate of the batch (cheap, and its time varies from one replicate and one
  run to the next by a third);

the ratios POT / exact (above 1: exact is faster), the largest relative gap, whether every
pair contains POT's value, and the per-phase seconds of one replicate run alone
(``w1_exact_replicate(..., times=...)``: LPs, the blocks' passes over all atoms, the
points' c-transform, the couplings' costs, the rest).  Data sets: the spiral (d = 2), a
mixture of four Gaussian blobs in [0,1]^3 (PMM and PrivTree each), a closed curve in
d = 10 (Pruned-PMM).  Then ``js.simulate``'s replicates per second with its default W1
method on one cell (spiral, PMM, n = 3·10^4, 64 seeds), and the thread pool's scaling.

Sections on request (each recorded in the result file, as a table or a note; where a
target is missed, its note prints the ratio to it):

* ``--per-core``: every workload of n >= 3·10^4 again in a process pinned to one CPU:
  one replicate at a time on one thread against POT on a 2000-point subsample on the
  same core (column ``pot_2000_over_exact_1core``, target >= 2).
* ``--million [CASE ...]``: one replicate at n = 10^6 per case (``MILLION``: uniform
  d = 3, 3-D blobs, the 2-D spiral under PrivTree and PMM; a curve in d = 6 under
  Pruned-PMM), each in a process of its own (its peak memory its own): seconds per
  phase, LPs and pivots per level, peak memory (targets 30 s uniform, 60 s the others,
  4 GiB).
* ``--cold``: the first ``js.w1(X, out)`` at n = 5000 in a new process with empty numba
  and XLA caches, then warm, then with the numba cache alone empty (targets: 5 s beyond
  warm, numba's part 3 s), and the whole process's seconds (``process_s``: a kernel that
  compiles beside the call, ``numba_cache.ready``, is waited for at exit); a similar
  size (5300) after that, which compiles nothing new;
  warm first calls at n = 3000 and 10^4 against POT's first full ``emd2`` of a new
  process (target: faster), each side with what it imports (POT's import, 1 s or so, is
  in both jaxsynth's first call, whose small LPs are POT's, and POT's).
* ``--demo``: ``jaxsynth demo`` in a fresh clone (committed files) with empty caches,
  then again with warm ones.
* ``--simplex-baseline PATH``: this ``exact/simplex.py`` against a copy of an earlier
  one (kept outside the repository), on the same recorded LPs, in turn.

Writes ``benchmarks/results/<name>-<UTC time>.json`` (atomically; ``--name``, by default
``bench_exact``, gives another machine's runs their own section of BENCHMARKS.md);
``python benchmarks/report.py`` then writes BENCHMARKS.md.  The targets' run, on a quiet
machine (nothing else running; about an hour on 2 cores):

    python benchmarks/bench_exact.py --per-core --million --cold --demo
    python benchmarks/report.py
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if "--worker" in sys.argv:  # a section's process pins itself before any thread starts
    _task = json.loads(sys.argv[sys.argv.index("--worker") + 1])
    if "core" in _task:
        os.sched_setaffinity(0, {_task["core"]})

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jaxsynth as js  # noqa: E402
from jaxsynth.wasserstein.ctransform import reduced_pass  # noqa: E402
from jaxsynth.core.measure import canonical_atoms  # noqa: E402
from jaxsynth.wasserstein.exact import prepare_exact, w1_exact  # noqa: E402
from jaxsynth.wasserstein.exact import simplex, solver  # noqa: E402
from jaxsynth.wasserstein.exact.solver import w1_exact_replicate  # noqa: E402

NAME = "bench_exact"
PHASES = ("lp", "pass", "lower", "upper")


def blobs3(n: int) -> np.ndarray:
    """Four Gaussian blobs in [0,1]^3 (fixed centres and seed), clipped to the cube."""
    rng = np.random.default_rng(0)
    centres = np.array([[0.2, 0.2, 0.3], [0.75, 0.3, 0.6], [0.4, 0.8, 0.7], [0.7, 0.7, 0.2]])
    scales = np.array([0.05, 0.08, 0.06, 0.1])
    which = rng.integers(0, 4, n)
    return np.clip(centres[which] + scales[which, None] * rng.standard_normal((n, 3)), 0, 1)


def curve(n: int, d: int) -> np.ndarray:
    """A closed smooth curve in [0,1]^d (coordinate k: a sine of frequency k // 2 + 1),
    points uniform in its parameter with a little noise (fixed seed)."""
    rng = np.random.default_rng(1)
    t = rng.random(n)[:, None]
    k = np.arange(d)[None, :]
    x = 0.5 + 0.4 * np.sin(2 * np.pi * (k // 2 + 1) * t + k * np.pi / 2) / (1 + k // 2)
    return np.clip(x + 0.003 * rng.standard_normal((n, d)), 0, 1)


DATA = {
    "spiral": lambda n: js.datasets.load("spiral", n=n, key=0),
    "blobs3": blobs3,
    "uniform3": lambda n: js.datasets.load("uniform", n=n, d=3, key=0),
    "curve6": lambda n: curve(n, 6),
    "curve10": lambda n: curve(n, 10),
}
MECHANISMS = {"PMM": js.PMM, "PrivTree": js.PrivTree, "PrunedPMM": js.PrunedPMM}
WORKLOADS = {"spiral": ("PMM", "PrivTree"), "blobs3": ("PMM", "PrivTree"),
             "curve10": ("PrunedPMM",)}
"""The mechanisms each data set of the workloads is released by."""
MILLION = ("uniform3-PrivTree", "uniform3-PMM", "blobs3-PrivTree", "blobs3-PMM",
           "spiral-PrivTree", "spiral-PMM", "curve6-PrunedPMM")
"""The cases of ``--million`` (data-mechanism); uniform d = 3 has the 30 s target."""
PER_CORE_TARGET, MILLION_TARGET, UNIFORM_TARGET, MEMORY_TARGET = 2.0, 60.0, 30.0, 4.0
COLD_TARGET, NUMBA_TARGET = 5.0, 3.0


def released(data_name: str, mech_name: str, n: int, batch: int):
    """Data, and ``batch`` released measures as [B, M, d] points and [B, M] weights."""
    X = DATA[data_name](n)
    out = js.release_batch(0, MECHANISMS[mech_name](), X, eps=[1.0], seeds=batch)
    return (X, out, np.asarray(out.points).reshape(batch, -1, X.shape[1]),
            np.asarray(out.weights, np.float64).reshape(batch, -1))


def pot(X, p, w, size, rng):
    """Seconds and value of ``ot.emd2`` (ℓ∞ cost) on ``size`` points of X (all if None);
    the first call of a process also imports POT (``first_call`` times that, as a user
    meets it: no other section imports POT before its own timing starts)."""
    start = time.perf_counter()
    import ot

    sub = X if size is None or size >= len(X) else X[rng.choice(len(X), size, replace=False)]
    keep = w > 0
    cost = ot.dist(sub, p[keep].astype(np.float64), metric="chebyshev")
    value = ot.emd2(np.full(len(sub), 1 / len(sub)), w[keep] / w[keep].sum(), cost,
                    numItermax=10**9)
    return time.perf_counter() - start, value


def workload(data_name, X, mech_name, mech, batch, n_pot, rng) -> dict:
    out = js.release_batch(0, mech, X, eps=[1.0], seeds=batch)
    points = np.asarray(out.points).reshape(batch, -1, X.shape[1])
    weights = np.asarray(out.weights, np.float64).reshape(batch, -1)
    start = time.perf_counter()
    data = prepare_exact(X)
    prepare_s = time.perf_counter() - start
    js.w1(data, out, method="exact")  # warm: every shape of this batch compiled
    start = time.perf_counter()
    lower, upper = js.w1(data, out, method="exact")
    exact_s = (time.perf_counter() - start) / batch
    lower, upper = lower.ravel(), upper.ravel()
    times: dict = {}
    for b in range(min(2, batch)):  # the phases, one replicate at a time
        p, w = canonical_atoms(points[b], weights[b])
        w1_exact_replicate(data, p, w, "linf", 0.01, times=times)
    runs = min(2, batch)
    phases = {f"{k}_s": times.get(k, 0.0) / runs for k in PHASES}
    phases["other_s"] = times["total"] / runs - sum(phases.values())
    full = [pot(X, points[b], weights[b], None, rng) for b in range(n_pot)]
    sub = [pot(X, points[b], weights[b], 2000, rng) for b in range(batch)]
    full_s, sub_s = float(np.mean([s for s, _ in full])), float(np.mean([s for s, _ in sub]))
    truth = np.array([v for _, v in full])
    inside = bool(np.all((lower[:n_pot] <= truth + 1e-12) & (truth <= upper[:n_pot] + 1e-12)))
    row = {
        "data": data_name, "mechanism": mech_name, "n": len(X),
        "atoms": float((weights > 0).sum(axis=1).mean()), "batch": batch, "pot_replicates": n_pot,
        "exact_s": exact_s, "pot_full_s": full_s, "pot_2000_s": sub_s,
        "pot_full_over_exact": full_s / exact_s, "pot_2000_over_exact": sub_s / exact_s,
        "max_gap": float(np.max((upper - lower) / upper)), "contains_pot": inside,
        "prepare_s": prepare_s, **{f"phase_{k}": v for k, v in phases.items()},
    }
    print(" | ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in row.items()), flush=True)
    return row


def thread_scaling(batch: int) -> str:
    """Seconds per replicate of ``w1_exact`` on one batch (spiral, PMM, n = 3·10^4) with a
    pool of 1, 2 and the default number of threads, and, where JAX's backend is an
    accelerator, with the default threads and the passes stacked and not
    (``w1_exact(stacked=...)``; on the CPU every pass runs on the host kernel)."""
    X = js.datasets.load("spiral", n=30000, key=0)
    out = js.release_batch(0, js.PMM(), X, eps=[1.0], seeds=batch)
    points = np.asarray(out.points).reshape(batch, -1, 2)
    weights = np.asarray(out.weights, np.float64).reshape(batch, -1)
    data = prepare_exact(X)
    choices = (False, True) if jax.default_backend() != "cpu" else ()
    for stacked in choices or (False,):  # compile
        w1_exact(data, points, weights, stacked=stacked)
    seconds, passes = {}, {}
    for workers in (1, 2, None):
        start = time.perf_counter()
        w1_exact(data, points, weights, workers=workers)
        seconds[workers] = (time.perf_counter() - start) / batch
    for stacked in choices:
        start = time.perf_counter()
        w1_exact(data, points, weights, stacked=stacked)
        passes[stacked] = (time.perf_counter() - start) / batch
    return scaling_note(seconds, passes)


def scaling_note(seconds: dict, passes: dict) -> str:
    """The thread pool's note from its seconds per replicate by thread count and, if
    measured, with the passes stacked or not."""
    efficiency = seconds[1] / seconds[2] / 2
    cores = os.cpu_count() or 1
    stacking = (f"default threads with the passes stacked {passes[True]:.3f}, unstacked "
                f"{passes[False]:.3f} (unstacked over stacked: "
                f"{passes[False] / passes[True]:.2f})" if passes else
                "the passes on the host kernel of each replicate's thread (stacking applies "
                "to an accelerator's arrays)")
    return (f"thread pool ({cores} cores, JAX on {jax.default_backend()}), spiral PMM "
            "n = 30000, seconds per replicate: "
            + ", ".join(f"{'default' if k is None else k} thread(s) {v:.3f}"
                        for k, v in seconds.items())
            + f" (2 threads over 1: {seconds[1] / seconds[2]:.2f}, a parallel efficiency of "
            f"{efficiency:.2f}; default over 1: {seconds[1] / seconds[None]:.2f}); "
            f"{stacking}.  Replicates share nothing but the prepared data, and a replicate's "
            "LPs (the network simplex) and passes (on the CPU, the host kernel), both "
            "compiled to run without the GIL, run on its own thread, so a 16-core host "
            f"(the pool's default, {solver.THREADS_PER_CORE} threads per core) would have "
            f"at most about {16 * efficiency:.0f} times the one-thread throughput, about "
            f"{seconds[1] / (16 * efficiency):.3f} s per replicate, at this machine's "
            "efficiency: an upper estimate, as the NumPy glue between LPs holds the GIL "
            "(its share grows with the threads) and the passes share memory bandwidth.")


def simulate_rate(seeds: int) -> str:
    """Replicates per second of ``js.simulate`` with its default W1 method on one cell
    (spiral, PMM, n = 3·10^4, ε = 1): release, certified W1 and the table, compilation
    done by an untimed call on other seeds."""
    X = js.datasets.load("spiral", n=30000, key=0)
    js.simulate(js.PMM(), X, seeds=range(seeds, seeds + 2), progress=False)
    start = time.perf_counter()
    table = js.simulate(js.PMM(), X, seeds=seeds, progress=False)
    seconds = time.perf_counter() - start
    return (f"simulate, default method ({', '.join(c for c in table if c.startswith('w1_'))}),"
            f" spiral PMM n = 30000, {seeds} seeds: {seeds / seconds:.2f} replicates per "
            f"second ({seconds:.1f} s)")


def save(rows, notes, args, tables: dict) -> Path:
    """The run as ``benchmarks/results/<name>-<UTC>.json``, written atomically."""
    now = datetime.datetime.now(datetime.timezone.utc)
    folder = Path(__file__).resolve().parent / "results"
    folder.mkdir(exist_ok=True)
    path = folder / f"{args.name}-{now:%Y%m%dT%H%M%SZ}.json"
    result = {
        "benchmark": args.name,
        "date": now.isoformat(),
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count(), "platform": platform.platform(),
                    "jax_devices": [d.device_kind for d in jax.devices()]},
        "versions": {"python": platform.python_version(), "jax": jax.__version__,
                     "numpy": np.__version__, "POT": importlib.metadata.version("POT"),
                     "jaxsynth": js.__version__},
        "description": (
            "Seconds per replicate of the certified full-data W1 (exact, rtol 1%, a batch on "
            "the thread pool, all cores) against POT's emd2 (one replicate at a time, one "
            "core) on the full cost matrix (the first pot_replicates replicates) and on a "
            "2000-point subsample (every replicate of the batch), same run, eps = 1, linf; "
            "ratios pot_*_over_exact above 1 mean exact is faster. phase_* are the seconds "
            "of one replicate run alone, per phase (mean of up to 2); *_1core: one replicate "
            "at a time on one thread and POT, in a process pinned to one CPU (--per-core). "
            "Tables: one replicate at n = 10^6 per case (--million), the first exact W1 of "
            f"a new process (--cold). Arguments: {vars(args)}."),
        "rows": rows,
        "tables": tables,
        "notes": notes,
    }
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as f:
        json.dump(result, f, indent=1)
    os.replace(f.name, path)
    return path


def targets(rows) -> list[str]:
    """The issue's targets, met or missed, with the ratios."""
    notes = []
    for r in rows:
        label = f"{r['data']} {r['mechanism']} n = {r['n']}"
        if r["n"] >= 30000:
            ok = r["pot_full_over_exact"] >= 60
            notes.append(f"{label}: {'met' if ok else 'MISSED'} (POT full / exact "
                         f"{r['pot_full_over_exact']:.1f}, target >= 60; POT 2000 / exact, "
                         f"all cores {r['pot_2000_over_exact']:.2f})")
        else:
            ok = r["pot_full_over_exact"] > 1
            notes.append(f"{label}: {'met' if ok else 'MISSED'} (POT full / exact "
                         f"{r['pot_full_over_exact']:.2f}, target > 1)")
        if r.get("pot_2000_over_exact_1core") is not None:
            ratio = r["pot_2000_over_exact_1core"]
            notes[-1] += (f"; per core {'met' if ratio >= PER_CORE_TARGET else 'MISSED'} "
                          f"(POT 2000 / exact on one core {ratio:.2f}, target >= "
                          f"{PER_CORE_TARGET:.0f})")
        worst = max(PHASES + ("other",), key=lambda k: r[f"phase_{k}_s"])
        notes[-1] += f"; most time in phase {worst} ({r[f'phase_{worst}_s']:.2f} s)"
    return notes


def worker(task: dict, timeout: float = 3600, core: int | None = None,
           env: dict | None = None) -> dict:
    """``task`` run by this script in a new process (pinned to CPU ``core`` before it
    imports JAX; ``env``: its whole environment): the dict its ``--worker`` mode prints
    last."""
    task = task if core is None else {**task, "core": core}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(task)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env=os.environ if env is None else env)
    if done.returncode:
        raise RuntimeError(f"worker {task} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_core(task: dict) -> dict:
    """(worker, pinned to one CPU) Seconds per replicate of one replicate at a time on one
    thread (``w1_exact_replicate``, regions on one thread) and of POT on a 2000-point
    subsample, alternating, after one untimed replicate (compilation)."""
    X, _, points, weights = released(task["data"], task["mechanism"], task["n"],
                                     task["batch"] + 1)
    data, rng = prepare_exact(X), np.random.default_rng(0)
    w1_exact_replicate(data, *canonical_atoms(points[-1], weights[-1]), threads=1)
    exact, sub = [], []
    for b in range(task["batch"]):
        start = time.perf_counter()
        w1_exact_replicate(data, *canonical_atoms(points[b], weights[b]), threads=1)
        exact.append(time.perf_counter() - start)
        sub.append(pot(X, points[b], weights[b], 2000, rng)[0])
    return {"exact_1core_s": float(np.mean(exact)), "pot_2000_1core_s": float(np.mean(sub))}


def per_core(rows, batch: int) -> None:
    """Each row of n >= 3·10^4 gets its one-core seconds and ratio (``one_core``, on CPU 0);
    the others get ``None``."""
    for row in rows:
        measured = {"exact_1core_s": None, "pot_2000_1core_s": None}
        if row["n"] >= 30000:
            measured = worker({"section": "one_core", "data": row["data"],
                               "mechanism": row["mechanism"], "n": row["n"], "batch": batch},
                              core=0)
        row.update(measured)
        row["pot_2000_over_exact_1core"] = (measured["pot_2000_1core_s"]
                                            / measured["exact_1core_s"]
                                            if measured["exact_1core_s"] else None)
        print(f"one core: {row['data']} {row['mechanism']} n = {row['n']}: "
              f"{row['pot_2000_over_exact_1core']}", flush=True)


def million_case(task: dict) -> dict:
    """(worker) One replicate at n = 10^6: what ``js.w1`` does for it (prepare the data,
    solve on every core), per phase, with the LPs counted per level (rows) and the passes
    split into whole-data passes (the points' lower end) and the rest."""
    data_name, mech_name = task["case"].split("-")
    X, _, points, weights = released(data_name, mech_name, task.get("n", 10**6), 1)
    p, w = canonical_atoms(points[0], weights[0])
    threads = solver.region_threads(1)  # what w1_exact's pool gives one replicate
    lock, lps, passes = threading.Lock(), {}, {"whole": [0, 0.0], "rest": [0, 0.0]}
    solve = simplex.solve

    def counted_solve(*args, **kwargs):
        result = solve(*args, **kwargs)
        rows = "regions" if threading.current_thread() is not threading.main_thread() \
            else len(args[0])
        with lock:
            count = lps.setdefault(rows, [0, 0])
            count[0], count[1] = count[0] + 1, count[1] + result[6]
        return result

    def counted_pass(chunks, *args):
        start = time.perf_counter()
        result = reduced_pass(chunks, *args)
        kind = passes["whole" if len(chunks) * chunks.shape[1] >= len(X) else "rest"]
        with lock:
            kind[0], kind[1] = kind[0] + 1, kind[1] + time.perf_counter() - start
        return result

    simplex.solve = counted_solve
    start = time.perf_counter()
    data = prepare_exact(X)
    prepare_s = time.perf_counter() - start
    times: dict = {}
    lower, upper = w1_exact_replicate(data, p, w, times=times, passes=counted_pass,
                                      threads=threads)
    total = time.perf_counter() - start
    target = UNIFORM_TARGET if data_name.startswith("uniform") else MILLION_TARGET
    return {
        "case": task["case"], "d": X.shape[1], "atoms": len(w), "seconds": total,
        "target_s": target, "over_target": total / target, "gap": (upper - lower) / upper,
        "peak_GiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "prepare_s": prepare_s, **{f"{k}_s": times.get(k, 0.0) for k in PHASES},
        "whole_passes": passes["whole"][0], "whole_passes_s": passes["whole"][1],
        "other_passes": passes["rest"][0], "other_passes_s": passes["rest"][1],
        "levels": " ".join(str(level.size) for level in data.levels),
        "lps_by_rows": "; ".join(f"{k}: {c} LPs {p} pivots" for k, (c, p) in lps.items()),
        "threads": threads,
    }


def million(cases) -> tuple[list, list]:
    """The ``--million`` cases, each in its own process: (rows, notes)."""
    rows, notes = [], []
    for case in cases:
        row = worker({"section": "million_case", "case": case})
        rows.append(row)
        met = row["seconds"] <= row["target_s"] and row["peak_GiB"] <= MEMORY_TARGET
        notes.append(f"n = 10^6 {case}: {'met' if met else 'MISSED'} ({row['seconds']:.1f} s, "
                     f"{row['over_target']:.2f} times the {row['target_s']:.0f} s target; "
                     f"peak {row['peak_GiB']:.2f} GiB of {MEMORY_TARGET:.0f}; gap "
                     f"{row['gap']:.4f}); LPs {row['lp_s']:.1f} s, passes "
                     f"{row['pass_s'] + row['lower_s']:.1f} s (summed over "
                     f"{row['threads']} threads)")
        print(notes[-1], flush=True)
    return rows, notes


def first_call(task: dict) -> dict:
    """(worker, caches in ``JAXSYNTH_CACHE_DIR``) Seconds of the first and second call of
    a new process on one release (spiral, PMM) of ``task["side"]``: ``"jaxsynth"``,
    ``js.w1(X, out)`` (with what it imports: numba, and POT for a small LP solved
    densely); ``"POT"``, the full ``emd2`` (``pot``: the cost matrix, and POT's import on
    the first call).  The data and the release (jaxsynth's own compilation) untimed on
    both sides, as a user has them before measuring; POT not imported before."""
    js.enable_compilation_cache()
    X = js.datasets.load("spiral", n=task["n"], key=0)
    out = js.release_batch(0, js.PMM(), X, eps=[1.0], seeds=1)
    points, weights = np.asarray(out.points).reshape(-1, 2), np.asarray(out.weights).reshape(-1)
    assert "ot" not in sys.modules
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        if task["side"] == "jaxsynth":
            js.w1(X, out)
        else:
            pot(X, points, weights.astype(np.float64), None, None)
        seconds.append(time.perf_counter() - start)
    return {"n": task["n"], "first_s": seconds[0], "second_s": seconds[1]}


def first_calls(n: int, env: dict) -> dict:
    """``first_call`` of both sides in new processes: jaxsynth's first and second seconds
    and its whole process's (start to exit), and POT's first (its import included, as
    jaxsynth's first includes its imports) and second (``pot_full_s``, the solve
    alone)."""
    start = time.perf_counter()
    ours = worker({"section": "first_call", "n": n, "side": "jaxsynth"}, env=env)
    process = time.perf_counter() - start
    theirs = worker({"section": "first_call", "n": n, "side": "POT"}, env=env)
    return {**ours, "process_s": process, "pot_first_s": theirs["first_s"],
            "pot_full_s": theirs["second_s"]}


def cold(folder: Path) -> tuple[list, list]:
    """The first exact W1 of a new process as a user meets it (``first_call``): empty
    numba and XLA caches, warm ones, the numba cache alone empty, a similar size; then
    warm first calls at n = 3000 and 10^4 against POT's first full solve of a new process
    (``first_calls``).  (rows, notes)"""
    cache = folder / "cache"
    env = {k: v for k, v in os.environ.items() if k != "JAXSYNTH_NO_CACHE"}
    env["JAXSYNTH_CACHE_DIR"] = str(cache)
    runs = [("empty caches", 5000), ("warm caches", 5000)]
    rows = []
    for label, n in runs:
        rows.append({"run": label, **first_calls(n, env)})
    shutil.rmtree(cache / "numba")
    rows.append({"run": "numba cache empty", **first_calls(5000, env)})
    rows.append({"run": "similar size, warm caches", **first_calls(5300, env)})
    for n in (3000, 10000):
        first_calls(n, env)  # its shapes cached
        rows.append({"run": "warm caches", **first_calls(n, env)})
    empty, warm, no_numba, similar = (r["first_s"] for r in rows[:4])
    beyond, numba_part = empty - warm, no_numba - warm
    processes = [rows[i]["process_s"] for i in range(3)]
    notes = [
        f"first exact W1 of a new process, n = 5000 (spiral PMM): empty caches {empty:.1f} s, "
        f"warm {warm:.1f} s: {'met' if beyond <= COLD_TARGET else 'MISSED'} ({beyond:.1f} s "
        f"beyond warm, {beyond / COLD_TARGET:.2f} times the {COLD_TARGET:.0f} s target); "
        f"numba's part {numba_part:.1f} s: {'met' if numba_part <= NUMBA_TARGET else 'MISSED'} "
        f"({numba_part / NUMBA_TARGET:.2f} times the {NUMBA_TARGET:.0f} s target); a similar "
        f"size (n = 5300) after n = 5000: {similar:.2f} s (warm {warm:.2f} s); the whole "
        f"process (start to exit, data and release included, a background compile waited "
        f"for at exit): empty caches {processes[0]:.1f} s, warm {processes[1]:.1f} s, numba "
        f"cache empty {processes[2]:.1f} s"]
    for row in rows[4:]:
        ratio = row["pot_first_s"] / row["first_s"]
        notes.append(f"first exact W1 of a new process with warm caches, n = {row['n']}: "
                     f"{row['first_s']:.2f} s against POT's first full emd2 of a new process "
                     f"{row['pot_first_s']:.2f} s (its import included, as jaxsynth's first "
                     f"call includes its imports): {'met' if ratio >= 1 else 'MISSED'} (POT / "
                     f"first call {ratio:.2f}, target >= 1); the solves alone, second calls: "
                     f"jaxsynth {row['second_s']:.2f} s, POT {row['pot_full_s']:.2f} s")
    for note in notes:
        print(note, flush=True)
    return rows, notes


def demo(folder: Path) -> str:
    """``jaxsynth demo`` in a fresh clone of this repository's committed files, with empty
    caches, then again with warm ones (seconds of the whole command)."""
    root = Path(__file__).resolve().parents[1]
    clone = folder / "clone"
    subprocess.run(["git", "clone", "--quiet", "--local", str(root), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "JAXSYNTH_NO_CACHE"}
    env.update(PYTHONPATH=str(clone), JAXSYNTH_CACHE_DIR=str(folder / "cache"))
    seconds = []
    for run in range(2):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "jaxsynth", "demo", "--quiet", "--out-dir",
                        str(folder / f"out{run}")], cwd=clone, env=env, check=True,
                       capture_output=True)
        seconds.append(time.perf_counter() - start)
    note = (f"jaxsynth demo in a fresh clone: empty caches {seconds[0]:.1f} s, warm caches "
            f"{seconds[1]:.1f} s (the command's whole run)")
    print(note, flush=True)
    return note


def record_lps(X, mech, batch: int = 1) -> list:
    """The arguments of every ``simplex.solve`` call of ``batch`` replicates of ``mech`` on
    ``X`` (one thread: the order of the calls is the replicates')."""
    out = js.release_batch(0, mech, X, eps=[1.0], seeds=batch)
    points = np.asarray(out.points).reshape(batch, -1, X.shape[1])
    weights = np.asarray(out.weights, np.float64).reshape(batch, -1)
    calls, solve = [], simplex.solve

    def recording(*args, **kwargs):
        calls.append((args, kwargs))
        return solve(*args, **kwargs)

    simplex.solve = recording
    try:
        w1_exact(prepare_exact(X), points, weights, workers=1)
    finally:
        simplex.solve = solve
    return calls


def simplex_against(baseline: Path, repeats: int = 5) -> str:
    """This ``exact/simplex.py`` against ``baseline`` (a copy of an earlier one, kept
    outside the repository): the LPs of one replicate each of spiral PMM and blobs3
    PrivTree at n = 3·10^4, recorded once and replayed by both modules in turn
    ``repeats`` times (same process, alternating, so load affects both alike); the two
    must give the same plans, duals, bases and pivots, bit for bit."""
    spec = importlib.util.spec_from_file_location("simplex_baseline", baseline)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    calls = (record_lps(js.datasets.load("spiral", n=30000, key=0), js.PMM())
             + record_lps(blobs3(30000), js.PrivTree()))

    def replay(module):
        start, results = time.perf_counter(), []
        for args, kwargs in calls:
            results.append(module.solve(*args, **kwargs))
        return time.perf_counter() - start, results

    _, new_results = replay(simplex)  # compile both
    _, old_results = replay(old)
    same = all(len(x) == len(y) and all(np.array_equal(np.asarray(a), np.asarray(b))
                                        for a, b in zip(x[:5] + tuple(x[5]) + x[6:],
                                                        y[:5] + tuple(y[5]) + y[6:]))
               for x, y in zip(new_results, old_results))
    seconds = {"this": [], "baseline": []}
    for _ in range(repeats):
        seconds["this"].append(replay(simplex)[0])
        seconds["baseline"].append(replay(old)[0])
    best = {k: min(v) for k, v in seconds.items()}
    pivots = sum(r[6] for r in new_results)
    return (f"network simplex against {baseline.name} ({len(calls)} LPs of spiral PMM and "
            f"blobs3 PrivTree at n = 30000, {pivots} pivots, replayed {repeats} times in "
            f"turn): this {best['this']:.3f} s, baseline {best['baseline']:.3f} s (best of "
            f"{repeats}; medians {np.median(seconds['this']):.3f} and "
            f"{np.median(seconds['baseline']):.3f} s), this over baseline "
            f"{best['this'] / best['baseline']:.3f}; results bit for bit equal: "
            f"{'yes' if same else 'NO'}")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__[__doc__.index("Sections on request"):],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--pot", type=int, default=2, help="replicates solved by POT")
    parser.add_argument("--sizes", type=int, nargs="+", default=[3000, 10000, 30000])
    parser.add_argument("--data", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--simulate-seeds", type=int, default=64,
                        help="seeds of the simulate cell (spiral, PMM, n = 3·10^4); 0 skips it")
    parser.add_argument("--name", default=NAME,
                        help="the benchmark's name in its result file (another machine's runs "
                             "get their own section of BENCHMARKS.md)")
    parser.add_argument("--per-core", action="store_true",
                        help="also the workloads of n >= 3·10^4 on one pinned CPU: one thread "
                             "against POT 2000 on the same core")
    parser.add_argument("--million", nargs="*", metavar="CASE", choices=MILLION,
                        help=f"also one replicate at n = 10^6 per case (default: all of "
                             f"{', '.join(MILLION)})")
    parser.add_argument("--cold", action="store_true",
                        help="also the first exact W1 of a new process, empty caches and warm")
    parser.add_argument("--demo", action="store_true",
                        help="also jaxsynth demo in a fresh clone, empty caches and warm")
    parser.add_argument("--simplex-baseline", type=Path, metavar="PATH",
                        help="also time exact/simplex.py against a copy of an earlier one at "
                             "PATH (kept outside the repository) on the same recorded LPs")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:  # a section's process (``worker``)
        task = json.loads(args.worker)
        print(json.dumps(globals()[task["section"]](task)))
        return
    tables, notes = {}, []
    if args.million is not None:  # first: nothing else runs beside them
        tables["n = 10^6, one replicate per case"], notes = million(args.million or MILLION)
    rng = np.random.default_rng(0)
    rows = []
    for n in args.sizes:
        for data_name in args.data:
            X = DATA[data_name](n)
            for mech_name in WORKLOADS[data_name]:
                rows.append(workload(data_name, X, mech_name, MECHANISMS[mech_name](),
                                     args.batch, args.pot, rng))
    if args.per_core:
        per_core(rows, args.batch)
    notes = targets(rows) + notes
    notes.append(thread_scaling(args.batch))
    if args.simulate_seeds:
        notes.append(simulate_rate(args.simulate_seeds))
    with tempfile.TemporaryDirectory() as folder:
        if args.cold:
            tables["first exact W1 of a new process"], more = cold(Path(folder) / "cold")
            notes += more
        if args.demo:
            notes.append(demo(Path(folder) / "demo"))
    if args.simplex_baseline:
        notes.append(simplex_against(args.simplex_baseline))
    for line in notes:
        print(line)
    print("written:", save(rows, notes, args, tables))


if __name__ == "__main__":
    main()
