# %% [markdown]
# # 1. Quickstart: release, look, measure, sweep
#
# One data set (the 2-D spiral) released once by each mechanism of `jaxsynth`; the
# synthetic atoms drawn beside the data (marker area proportional to the atom's weight);
# W1 between data and release by every method of `js.w1`; then one small Monte Carlo
# sweep over n and its fitted rate.
#
# **Which W1.** The papers bound W1 for the ℓ∞ (or ℓ2) ground metric.  `js.w1` offers
# the *tree* W1 (in the partition's ultrametric: cheap, but not a bound on ℓ∞ W1 — it
# ignores distances inside a leaf), the certified *bracket* `lower ≤ ℓ∞ W1 ≤ upper`
# (largest exact 1-D W1 over the coordinates; tree W1 plus the within-leaf term), and a
# certified *Sinkhorn* estimate on subsamples.  Every figure and table says which one
# it shows.

# %%
# %matplotlib inline
import datetime, importlib.metadata, os, platform, warnings

import jax
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import jaxsynth as js

js.enable_compilation_cache()
warnings.filterwarnings("ignore", message="IProgress not found")  # text progress bars

# %% tags=["parameters"]
# Sizes: full by default; the test suite sets JAXSYNTH_NOTEBOOK_SIZE=ci (reduced sizes).
SIZE = os.environ.get("JAXSYNTH_NOTEBOOK_SIZE", "full")
FULL = SIZE == "full"
SHAPE = "spiral"
N = 10_000 if FULL else 1_000            # points of the data set released below
EPS = 1.0
SUBSAMPLE = 2_000 if FULL else 200       # Sinkhorn: data points and synthetic draws
SWEEP_N = [1_000, 3_000, 10_000, 30_000] if FULL else [500, 1_000]
SWEEP_SEEDS = 50 if FULL else 3

# %%
print(f"run {datetime.datetime.now():%Y-%m-%d %H:%M} | {platform.platform()} | "
      f"{os.cpu_count()} CPUs | jax {jax.__version__} {jax.devices()} | "
      f"jaxsynth {importlib.metadata.version('jaxsynth')} | size {SIZE}")

# %% [markdown]
# ## Data and one release per mechanism
#
# `js.release(key, mechanism, X, eps)` returns one `SyntheticMeasure`: atoms `points`
# with `weights` summing to 1, plus its size, depth, visited nodes and privacy
# accounting.  Every mechanism runs at its default configuration.

# %%
X = js.datasets.load(SHAPE, n=N, key=0)
print(SHAPE, X.shape, "-", js.datasets.describe(SHAPE))

mechanisms = {
    "PMM": js.PMM(),
    "Pruned-PMM": js.PrunedPMM(),
    "Adaptive Pruned-PMM": js.AdaptivePrunedPMM(),
    "PrivTree": js.PrivTree(),
    "PrivTree, shifted": js.PrivTree(shift=True),
}
releases = {name: js.release(0, mech, X, eps=EPS) for name, mech in mechanisms.items()}
pd.DataFrame({
    name: {"atoms with mass": int(np.sum(np.asarray(out.weights) > 0)), "depth": int(out.depth),
           "visited nodes": int(out.visited), **out.accounting}
    for name, out in releases.items()
}).T

# %%
fig, axes = plt.subplots(2, 3, figsize=(12, 8), sharex=True, sharey=True)
axes[0, 0].scatter(*X.T, s=1, c="k", alpha=0.3)
axes[0, 0].set_title(f"data, n = {N}")
for ax, (name, out) in zip(axes.flat[1:], releases.items()):
    w = np.asarray(out.weights)
    keep = w > 0
    ax.scatter(*np.asarray(out.points)[keep].T, s=3 * w[keep] / w[keep].mean(), alpha=0.6)
    ax.set_title(f"{name}: {keep.sum()} atoms, depth {int(out.depth)}")
for ax in axes.flat:
    ax.set_aspect("equal")
fig.suptitle(f"Synthetic atoms at ε = {EPS} (marker area ∝ weight)")
fig.tight_layout()

# %% [markdown]
# ## W1 by each method
#
# `js.w1(X, out)` measures what the papers bound, the ℓ∞ W1 between the whole data set
# and the release, as a certified pair `lower ≤ W1 ≤ upper` at most 1% apart (`exact`,
# the default).  The tree W1 is exact in each release's own tree metric, another
# quantity; the bracket certifies where the ℓ∞ W1 lies, cheaply but loosely; Sinkhorn
# (between `SUBSAMPLE` data points and `SUBSAMPLE` draws from the release) estimates it
# with a subsampling error of its own.

# %%
rows = {}
for name, out in releases.items():
    lower, upper = js.w1(X, out, method="bracket")
    exact_lower, exact_upper = js.w1(X, out)
    rows[name] = {
        "tree W1 (not an ℓ∞ bound)": js.w1(X, out, method="tree"),
        "bracket lower": lower,
        "ℓ∞ W1, certified lower": exact_lower,
        "ℓ∞ W1, certified upper": exact_upper,
        f"ℓ∞ Sinkhorn, {SUBSAMPLE} subsample": js.w1(X, out, method="sinkhorn",
                                                    subsample=SUBSAMPLE, key=0),
        "bracket upper": upper,
    }
w1_table = pd.DataFrame(rows).T.astype(float)
w1_table.round(4)

# %% [markdown]
# ## A small sweep and its rate
#
# `js.simulate` releases every mechanism × n × seed (replicate `s` uses the key
# `fold_in(key, s)`) and measures each replicate; `js.estimate_rate` fits the slope of
# log mean W1 against log(εn) with a bootstrap interval that resamples seeds.  The fit
# uses the full-data ℓ∞ W1 (`w1_exact_upper`, the upper end of its certified pair), the
# quantity the theorems bound, and for comparison the bracket's ends; PMM's theory line
# is (εn)^(−1/d) at the ambient depth (Zare Moayedi et al., §3; He, Vershynin, Zhu).

# %%
sweep = js.simulate({"PMM": js.PMM(), "Pruned-PMM": js.PrunedPMM()}, SHAPE, n=SWEEP_N,
                    eps=EPS, seeds=SWEEP_SEEDS, methods=["exact", "bracket"], progress=False)
rates = pd.concat([js.estimate_rate(sweep, column=m)
                   for m in ("w1_exact_upper", "w1_upper", "w1_lower")])
rates[["mechanism", "column", "slope", "ci_low", "ci_high", "theory", "theory_exponent",
       "bound_slope"]].round(3)

# %%
js.plots.rate_plot(sweep, column="w1_exact_upper",
                   rates=rates[rates["column"] == "w1_exact_upper"])

# %% [markdown]
# ## Conclusion
#
# Full-size run (n = 10000 for the releases; sweep n = 1000 … 30000, 50 seeds each):
#
# * PMM and Pruned-PMM at the ambient depth ⌈log2(εn)⌉ = 14 follow the spiral with
#   scattered noise atoms; Pruned-PMM visits 4861 of PMM's 32767 nodes.  Adaptive
#   Pruned-PMM selected depth 11 here, a coarser grid; PrivTree's leaves follow the curve
#   with about 500 atoms.
# * The full-data ℓ∞ W1, certified to 1%, is 0.024 for PMM and Pruned-PMM, 0.019 for
#   Adaptive Pruned-PMM and 0.011 for PrivTree (shifted or not).  The tree W1 is another
#   quantity: here it lies 1.3–2.8 times above it (in high dimension it can lie far
#   below).  The bracket contains it but is wide on a 2-D curve (upper / lower ≈ 5–8:
#   the coordinate marginals see little of a 2-D transport).  Sinkhorn between 2000-point
#   subsamples overstates it by +1% (Pruned-PMM) to +110% (PrivTree): the subsample's own
#   distance to the data, largest where the release is closest to it.
# * In the sweep the full-data W1 decays with slope −0.55 (PMM, 95% interval
#   −0.57 … −0.54) and −0.56 (Pruned-PMM, −0.58 … −0.55), a little steeper than the
#   (εn)^(−1/2) of d = 2 at the ambient depth (an upper-bound rate); the bracket's upper
#   end gives −0.53.  The two mechanisms are indistinguishable.
