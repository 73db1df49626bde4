# %% [markdown]
# # 5. Monte Carlo at scale: the sweeps of notebooks 2–4 on whatever devices JAX sees
#
# One cell of each earlier study, with many more replicates per cell: 10^4–10^5 on an
# accelerator (`REPLICATES` below), a few hundred on a CPU.  `js.simulate` shards each
# chunk of replicates over all local devices and sizes the chunks to the device's
# memory (`memory_bytes`, default a share of the accelerator's free memory, 2 GiB on a
# CPU); replicate `s` always uses the key `fold_in(key, s)`, so a GPU run reproduces the
# CPU's replicates.  The notebook prints the devices, the compile time and the
# replicates per second of every sweep, with a progress bar while it runs.
#
# The sweeps (ε = 1, ℓ∞ ground metric, every replicate measured by the certified bracket
# `lower ≤ W1 ≤ upper`, cheap and 3–7 times wide; notebooks 2–4 check it against Sinkhorn
# and measure their comparisons on the full-data W1):
# 1. Zare Moayedi et al. Fig. 2, one cell: PMM at the ambient depth against Adaptive Pruned-PMM on a
#    line (k = 1) in d = 8, n = 30000; and the selection frequencies against their exact
#    probabilities;
# 2. Zare Moayedi et al. Fig. 2 right, one shape: Pruned-PMM / full PMM on the spiral, r = 15;
# 3. He: the PrivTree rate on the uniform cube, d = 3;
# 4. cells 1 and 2 again on the quantity the papers bound, the ℓ∞ W1 between the whole
#    data set and each release (`js.w1(method="exact")`, certified to 1%), with the
#    replicates that costs: its transport LPs run on the host CPU whatever the device.

# %%
# %matplotlib inline
import datetime, importlib.metadata, math, os, platform, time, warnings

import jax
import numpy as np
import pandas as pd
from IPython.display import display

import jaxsynth as js

js.enable_compilation_cache()
warnings.filterwarnings("ignore", message="IProgress not found")  # text progress bars

# %% tags=["parameters"]
# Sizes: full by default; the test suite sets JAXSYNTH_NOTEBOOK_SIZE=ci (reduced sizes).
# The replicate counts follow the device: 10^4–10^5 per cell on an accelerator.
SIZE = os.environ.get("JAXSYNTH_NOTEBOOK_SIZE", "full")
FULL = SIZE == "full"
ACCELERATOR = jax.default_backend() != "cpu"
EPS = 1.0
if not FULL:
    REPLICATES = {"fig2": 4, "pruning": 4, "rates": 4}
elif ACCELERATOR:
    REPLICATES = {"fig2": 10_000, "pruning": 100_000, "rates": 20_000}
else:
    REPLICATES = {"fig2": 1_000, "pruning": 2_000, "rates": 1_000}
FIG2 = {"n": 30_000, "d": 8} if FULL else {"n": 2_000, "d": 3}
PRUNING_N = 30_000 if FULL else 2_000
RATE_N = [1_000, 10_000, 100_000] if FULL else [300, 1_000]
EXACT_REPLICATES = 200 if FULL else 2     # section 4: full-data W1, per cell and mechanism
MEMORY_BYTES = None                      # per chunk; None: the library's default for the device

# %%
print(f"run {datetime.datetime.now():%Y-%m-%d %H:%M} | {platform.platform()} | "
      f"{os.cpu_count()} CPUs | jax {jax.__version__} | "
      f"jaxsynth {importlib.metadata.version('jaxsynth')} | size {SIZE}")
for device in jax.devices():
    stats = device.memory_stats() or {}
    memory = f"{stats['bytes_limit'] / 2**30:.1f} GiB" if "bytes_limit" in stats else "host memory"
    print(f"device {device.id}: {device.platform} {device.device_kind}, {memory}")
print("replicates per cell:", REPLICATES)

# %% [markdown]
# Compile time is what JAX itself reports (tracing, lowering and XLA compilation, through
# `jax.monitoring`); replicates per second exclude it.  With the persistent compilation
# cache (`js.enable_compilation_cache()`) a second run compiles little.

# %%
COMPILE_EVENTS = ("jaxpr_trace_duration", "jaxpr_to_mlir_module_duration", "backend_compile_duration")
compile_seconds = [0.0]

def on_event(name, seconds, **_):
    if name.rsplit("/", 1)[-1] in COMPILE_EVENTS:
        compile_seconds[0] += seconds

jax.monitoring.register_event_duration_secs_listener(on_event)
throughput = []

def sweep(label, mechanisms, data, seeds, methods=("bracket",), **options):
    """``js.simulate`` (by default with the bracket) and a progress bar; records its
    throughput."""
    compiled, start = compile_seconds[0], time.perf_counter()
    df = js.simulate(mechanisms, data, eps=EPS, seeds=seeds, methods=list(methods),
                     memory_bytes=MEMORY_BYTES, progress=True, **options)
    wall, compiled = time.perf_counter() - start, compile_seconds[0] - compiled
    throughput.append({"sweep": label, "replicates": len(df), "wall s": wall,
                       "compile s": compiled, "replicates / s": len(df) / max(wall - compiled, 1e-9)})
    print(f"{label}: {len(df)} replicates in {wall:.1f} s, of which compile {compiled:.1f} s "
          f"-> {throughput[-1]['replicates / s']:.1f} replicates/s")
    return df

def mean_ci(x):
    return pd.Series({"mean": x.mean(), "95% CI ±": 1.96 * x.std(ddof=1) / np.sqrt(len(x))})

# %% [markdown]
# ## 1. Zare Moayedi et al. Fig. 2, one cell

# %%
X = js.datasets.load("subspace", n=FIG2["n"], d=FIG2["d"], k=1, key=0)
fig2 = sweep("Fig. 2 cell", {"PMM": js.PMM(), "Adaptive Pruned-PMM": js.AdaptivePrunedPMM()},
             X, REPLICATES["fig2"])
fig2.groupby("mechanism")[["w1_lower", "w1_upper"]].apply(
    lambda g: pd.concat({c: mean_ci(g[c]) for c in g})).round(4)

# %% [markdown]
# The empirical frequency of every candidate against the exponential mechanism's exact
# probability: with R replicates they agree to about ±2·sqrt(P(1−P)/R).

# %%
table = js.AdaptivePrunedPMM().candidate_table(*X.shape, EPS, data=X)
freq = fig2[fig2.kind == "adaptive-pruned-pmm"].selected.value_counts(normalize=True)
table["frequency"] = freq.reindex(table.index, fill_value=0.0)
table["2 s.e."] = 2 * np.sqrt(table.probability * (1 - table.probability) / REPLICATES["fig2"])
table[["s", "depth", "probability", "frequency", "2 s.e."]].round(4)

# %% [markdown]
# ## 2. Zare Moayedi et al. Fig. 2 right, one shape: the W1 ratio of Pruned-PMM to full PMM

# %%
r = math.ceil(math.log2(EPS * PRUNING_N))
pruning = sweep("pruning ratio", {"PMM": js.PMM(depth=r), "Pruned-PMM": js.PrunedPMM(depth=r)},
                ("spiral", {}), REPLICATES["pruning"], n=PRUNING_N)
paired = pruning.pivot_table(index="seed", columns="mechanism", values=["w1_lower", "w1_upper"])
pd.DataFrame({f"{c} ratio Pruned / full (paired)": mean_ci(paired[c, "Pruned-PMM"] / paired[c, "PMM"])
              for c in ("w1_lower", "w1_upper")}).round(5)

# %% [markdown]
# ## 3. He: the PrivTree rate on the uniform cube, d = 3

# %%
rates = sweep("PrivTree rate", {"PrivTree": js.PrivTree()}, ("uniform", {"d": 3}),
              REPLICATES["rates"], n=RATE_N)
fit = js.estimate_rate(rates, column="w1_upper")
display(fit[["data", "slope", "ci_low", "ci_high", "theory", "bound_slope"]].round(4))
js.plots.rate_plot(rates, column="w1_upper", rates=fit)

# %% [markdown]
# ## 4. Cells 1 and 2 on the full-data W1
#
# The first `EXACT_REPLICATES` replicates of the Fig. 2 cell and of the spiral (the same
# keys, so the same releases as above), measured by the certified full-data ℓ∞ W1.

# %%
fig2_exact = sweep("Fig. 2 cell, full-data W1", {"PMM": js.PMM(), "Adaptive Pruned-PMM": js.AdaptivePrunedPMM()},
                   X, EXACT_REPLICATES, methods=["exact"])
pruning_exact = sweep("pruning ratio, full-data W1",
                      {"PMM": js.PMM(depth=r), "Pruned-PMM": js.PrunedPMM(depth=r)},
                      ("spiral", {}), EXACT_REPLICATES, methods=["exact"], n=PRUNING_N)
exact_means = (pd.concat({"Fig. 2 cell": fig2_exact, "spiral, r = 15": pruning_exact}, names=["cell"])
               .groupby(["cell", "mechanism"]).w1_exact_upper.apply(mean_ci).unstack())
display(exact_means.round(4))
paired_exact = pruning_exact.pivot_table(index="seed", columns="mechanism", values="w1_exact_upper")
pd.DataFrame({"full-data W1 ratio Pruned / full (paired)":
              mean_ci(paired_exact["Pruned-PMM"] / paired_exact["PMM"])}).round(5)

# %%
pd.DataFrame(throughput).round(2)

# %% [markdown]
# ## Conclusion
#
# This run had no accelerator: it is the CPU form (1000–2000 replicates per cell, the
# machine printed above).  On a GPU the parameter cell switches to 10^4–10^5 replicates
# per cell; nothing else changes, and replicate `s` is the same release on every device.
#
# * Throughput on this 2-core CPU: 8.6 replicates/s for the Fig. 2 cell (n = 30000,
#   d = 8), 56/s for PMM and Pruned-PMM on the spiral at r = 15, 75/s for PrivTree up to
#   n = 10^5, each with its certified bracket (21, 68 and 91/s in the run of 2026-12-02,
#   on another machine of this kind); compilation took 2–31 s per sweep.  The certified
#   full-data W1 (section 4) runs at 1.5 and 1.6 replicates/s on the same cells: 6–35
#   times fewer.
# * Fig. 2 cell: the lower bound is 0.144 ± 0.004 for Adaptive Pruned-PMM against 0.250
#   for PMM, as in notebook 2.  The selection frequencies agree with the exact
#   exponential-mechanism probabilities within two standard errors: nearly uniform
#   (0.09 for s = 1, 0.12–0.14 for each other s), the selection does not single out k = 1.
# * Pruning on the spiral: the W1 ratio Pruned / full is 1.0010 ± 0.0001 on the upper
#   bound and 1.0085 ± 0.0016 on the lower bound.  With 2000 paired replicates the cost
#   of the zero-respecting consistency rule becomes visible, and it is below 1%.
# * PrivTree on the uniform cube, n = 10^3 … 10^5: slope −0.272 ± 0.0004 against −0.299 for
#   the bound (log(εn)/(εn))^(1/3) over the same range.  Seed noise no longer limits the
#   fit; what is left is the curvature of the pre-asymptotic range (notebook 4).
# * **On the full-data W1** (section 4, the first 200 replicates of cells 1 and 2): the
#   Fig. 2 cell is 0.159 ± 0.009 for Adaptive Pruned-PMM against 0.256 ± 0.0004 for PMM,
#   the order and about the size the bracket's lower end gave (0.144, 0.250); on the
#   spiral the paired ratio Pruned / full is 1.010 ± 0.002, where the bracket's upper end
#   said 1.0010 ± 0.0001 from 2000 pairs and its lower end 1.0085 ± 0.0016: pruning costs
#   this shape 1% of the W1 the paper bounds, which the upper end hid.
