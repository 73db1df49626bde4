# %% [markdown]
# # 6. The W1 the papers bound, and what subsamples measure instead
#
# Both papers bound the ℓ∞ Wasserstein-1 distance between the *whole* data set
# μ_X (weights 1/n) and the synthetic measure (He, Vershynin, Zhu, COLT 2023;
# Zare Moayedi et al., arXiv 2609.33363, Thm 5 and §7; Y. He, *Intrinsic-Dimensional
# Wasserstein Guarantees for Private Synthetic Measures*, Thm 5.7).  Their experiments
# measure W1 on random subsamples instead.  `js.w1(method="exact")` (the default of
# `js.simulate`) gives the full-data W1 as a certified pair `lower ≤ W1 ≤ upper` with
# `upper − lower ≤ 1% · upper`.
#
# This notebook measures, per mechanism and data set, the papers' subsample protocol
# (POT's exact `emd2` between a random subsample of the data, of size 10^3 to 10^4,
# and the synthetic measure) against the certified full-data W1 of the same releases:
# 1. the bias of the subsample estimate, per sample size;
# 2. the fitted slopes of log E W1 against log εn, exact against subsampled, next to
#    the theory's exponent;
# 3. reruns the conclusions of notebooks 2–4 (measured there by the bracket and by
#    Sinkhorn on subsamples) on the certified full-data W1.

# %%
# %matplotlib inline
import datetime, importlib.metadata, os, platform, time, warnings

import jax
import matplotlib.pyplot as plt
import numpy as np
import ot
import pandas as pd
from IPython.display import display

import jaxsynth as js

js.enable_compilation_cache()
warnings.filterwarnings("ignore", message="IProgress not found")  # text progress bars

# %% tags=["parameters"]
# Sizes: full by default; the test suite sets JAXSYNTH_NOTEBOOK_SIZE=ci (reduced sizes).
SIZE = os.environ.get("JAXSYNTH_NOTEBOOK_SIZE", "full")
FULL = SIZE == "full"
N = [3_000, 10_000, 30_000] if FULL else [400, 800]
SUBSAMPLES = [1_000, 3_000, 10_000] if FULL else [100, 200]
SEEDS = 6 if FULL else 2
EPS = 1.0
RERUN_N = 30_000 if FULL else 800        # section 5: the conclusions of notebooks 2-4
RERUN_SEEDS = 6 if FULL else 2
FIG2_D = [4, 8] if FULL else [3]
PRUNING_SHAPES = (["two_moons", "spiral", "annulus", "s_curve", "pinwheel", "figure_eight",
                   "four_blobs", "checkerboard", "cross"] if FULL else ["spiral"])
RATE_N = [1_000, 3_000, 10_000, 30_000] if FULL else [400, 800]
BALL_D = [2, 4, 6] if FULL else [2]
BALL_N = 1_000

# %%
print(f"run {datetime.datetime.now():%Y-%m-%d %H:%M} | {platform.platform()} | "
      f"{os.cpu_count()} CPUs | jax {jax.__version__} {jax.devices()} | "
      f"jaxsynth {importlib.metadata.version('jaxsynth')} | size {SIZE}")

# %% [markdown]
# ## 1. The sweep, measured exactly
#
# PMM at the ambient depth ⌈log2 εn⌉ and PrivTree, on the 2-D spiral and on a
# 2-dimensional coordinate subspace of [0,1]^3, ε = 1.  `simulate` measures every
# replicate's full-data ℓ∞ W1 (columns `w1_exact_lower`, `w1_exact_upper`).

# %%
mechanisms = {"PMM": js.PMM(), "PrivTree": js.PrivTree()}
data = {"spiral d=2": "spiral", "subspace k=2 d=3": ("subspace", {"d": 3, "k": 2})}
start = time.perf_counter()
df = js.simulate(mechanisms, data, n=N, eps=EPS, seeds=SEEDS, progress=False)
print(f"{len(df)} replicates in {time.perf_counter() - start:.0f} s; largest relative gap "
      f"{((df.w1_exact_upper - df.w1_exact_lower) / df.w1_exact_upper).max():.4f}")

# %% [markdown]
# ## 2. The same releases, measured on subsamples
#
# Replicate `s` of `simulate` is `js.release_batch(key, ...)`'s replicate `s`, so the
# releases are rebuilt and each is measured by POT's `emd2` (ℓ∞ cost) between a random
# subsample of the data (its own seeded draw per replicate and size) and the measure.

# %%
def subsample_w1(X, points, weights, size, seed):
    rng = np.random.default_rng(seed)
    sub = X[rng.choice(len(X), size, replace=False)]
    keep = weights > 0
    cost = ot.dist(sub, points[keep].astype(np.float64), metric="chebyshev")
    w = weights[keep].astype(np.float64)
    return ot.emd2(np.full(size, 1 / size), w / w.sum(), cost, numItermax=10**8)


rows = []
start = time.perf_counter()
for label, mech in mechanisms.items():
    for data_label, spec in data.items():
        for n in N:
            name, options = spec if isinstance(spec, tuple) else (spec, {})
            X = js.datasets.load(name, n=n, key=0, **options)
            out = js.release_batch(0, mech, X, eps=[EPS], seeds=SEEDS)
            points = np.asarray(out.points)[0]
            weights = np.asarray(out.weights)[0]
            for s in range(SEEDS):
                row = {"mechanism": label, "data": data_label, "n": n, "seed": s}
                for size in SUBSAMPLES:
                    if size <= n:
                        row[f"w1_sub_{size}"] = subsample_w1(X, points[s], weights[s], size, s)
                rows.append(row)
sub = pd.DataFrame(rows)
table = df.merge(sub, on=["mechanism", "data", "n", "seed"])
print(f"subsample estimates in {time.perf_counter() - start:.0f} s")

# %% [markdown]
# ## 3. Bias of the subsample protocol
#
# Mean subsample W1 over mean full-data W1 (upper end of the certified pair), minus 1.
# The subsample's own empirical measure is at W1 ~ size^(−1/2) to size^(−1/d) from μ_X,
# so it measures the distance of the release to a *noisier* data set.

# %%
columns = [f"w1_sub_{s}" for s in SUBSAMPLES]
means = table.groupby(["mechanism", "data", "n"])[["w1_exact_lower", "w1_exact_upper",
                                                     *columns]].mean()
bias = means[columns].div(means.w1_exact_upper, axis=0) - 1
bias.columns = [f"bias, subsample {s}" for s in SUBSAMPLES]
pd.concat([means[["w1_exact_lower", "w1_exact_upper"]].round(5),
           bias.map(lambda v: f"{v:+.0%}" if np.isfinite(v) else "")], axis=1)

# %% [markdown]
# ## 4. Fitted slopes: exact against subsampled
#
# The slope of log E W1 against log εn per mechanism and data set, with its 95% bootstrap
# interval, for the full-data W1 and for each subsample size (fitted over the sizes n
# where that subsample exists), next to the theory's exponent.

# %%
fits = []
for column in ["w1_exact_upper", *columns]:
    rows = table.dropna(subset=[column])
    if rows.n.nunique() >= 2:
        fits.append(js.estimate_rate(rows, column=column, n_boot=400))
fits = pd.concat(fits)
fits[["mechanism", "data", "column", "slope", "ci_low", "ci_high", "cells",
      "theory", "theory_exponent"]].round(3)

# %% [markdown]
# Means over the releases with ±2 standard errors; the band is the certified pair.

# %%
errors = 2 * table.groupby(["mechanism", "data", "n"])[["w1_exact_upper", *columns]].sem()
fig, axes = plt.subplots(1, len(data), figsize=(12, 4.5), squeeze=False)
for ax, data_label in zip(axes[0], data):
    for i, label in enumerate(mechanisms):
        g = means.xs((label, data_label), level=("mechanism", "data"))
        e = errors.xs((label, data_label), level=("mechanism", "data"))
        en = EPS * g.index.to_numpy(float)
        ax.fill_between(en, g.w1_exact_lower, g.w1_exact_upper, color=f"C{i}", alpha=0.3)
        ax.errorbar(en, g.w1_exact_upper, yerr=e.w1_exact_upper, fmt="o-", color=f"C{i}",
                    capsize=2, label=f"{label}: full-data W1 (certified pair)")
        for j, c in enumerate(columns):
            ax.errorbar(en * (1 + 0.03 * (j + 1)), g[c], yerr=e[c], capsize=2, mfc="none",
                        fmt=["s", "^", "v"][j % 3] + ":", color=f"C{i}",
                        label=f"{label}: subsample of {c.split('_')[-1]}")
    ax.set(xscale="log", yscale="log", xlabel="ε n (subsample markers offset to the right)",
           ylabel="mean ℓ∞ W1 (full data, or subsample estimate)",
           title=f"{data_label}, ε = {EPS}, {SEEDS} releases per point")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower left")
fig.tight_layout()

# %% [markdown]
# ## What this shows
#
# * The certified pairs are tight: every replicate's gap is below 1% of its upper end,
#   so the full-data curves are the W1 the papers bound, not a bound on it.
# * The subsample protocol is biased upward, by the subsample's own distance to the data,
#   and most where the release is closest to the data.  On the spiral at n = 30000 the
#   estimate from 1000 points is +77% (PMM) and +270% (PrivTree) above the full-data W1,
#   from 3000 points +30% and +134%, from 10000 points +6% and +35%.  On the 2-dimensional
#   subspace of [0,1]^3, where W1 is 3–7 times larger, the bias stays within 11%.
# * The bias flattens the fitted rates.  On the spiral, full-data slopes are −0.61 (PMM)
#   and −0.67 (PrivTree); from 1000-point subsamples −0.38 and −0.19, from 3000-point
#   ones −0.49 and −0.31.  On the subspace the slopes move less (PMM −0.42 against −0.38
#   from 1000 points).  The theory exponents are upper-bound rates; over εn = 3·10^3 to
#   3·10^4 the measured full-data slopes are at least as steep.
# * Where a subsample size equals n it is the whole data set and its bias is 0, as it
#   must be (a check of the pipeline, not a finding).  Six releases per point: the
#   intervals of the slopes are bootstrap intervals over those releases.


# %% [markdown]
# ## 5. The conclusions of notebooks 2–4, on the full-data W1
#
# Notebooks 2–4 measured by the certified bracket (3–7 times wide) and by Sinkhorn on
# subsamples.  Here their main comparisons are measured again by the full-data ℓ∞ W1
# (the upper end of the certified pair; every gap is below 1%), with fewer releases per
# point (`RERUN_SEEDS`), so the intervals are wider than there.
#
# **Fig. 2 (notebook 2).**  PMM at its default depth against Adaptive Pruned-PMM on a
# line (k = 1) in [0,1]^d, the constant coordinates at 0.5 (a cell boundary of every
# level) and at 1/3 (not dyadic).

# %%
def ci95(x):
    return 1.96 * x.std(ddof=1) / np.sqrt(len(x)) if len(x) > 1 else np.nan

start = time.perf_counter()
fig2_data = {f"d={d}, constants {name}": ("subspace", {"d": d, "k": 1, "value": value})
             for d in FIG2_D for name, value in (("0.5", 0.5), ("1/3", 1 / 3))}
fig2 = js.simulate({"PMM": js.PMM(), "Adaptive Pruned-PMM": js.AdaptivePrunedPMM()},
                   fig2_data, n=RERUN_N, eps=EPS, seeds=RERUN_SEEDS, progress=False)
print(f"{len(fig2)} replicates in {time.perf_counter() - start:.0f} s")
(fig2.groupby(["data", "mechanism"])
 .agg(depth=("depth", "mean"), w1=("w1_exact_upper", "mean"), ci=("w1_exact_upper", ci95))
 .round(4))

# %% [markdown]
# **Pruning (notebook 3).**  Pruned-PMM against full PMM at the same depth r = 15 on the
# shapes of Fig. 3: the ratio of mean full-data W1 and the share of the tree visited.

# %%
start = time.perf_counter()
pruning = js.simulate({"PMM": js.PMM(depth=15), "Pruned-PMM": js.PrunedPMM(depth=15)},
                      PRUNING_SHAPES, n=RERUN_N, eps=EPS, seeds=RERUN_SEEDS, progress=False)
print(f"{len(pruning)} replicates in {time.perf_counter() - start:.0f} s")
pruned = pruning.groupby(["data", "mechanism"])[["w1_exact_upper", "visited"]].mean().unstack()
pd.DataFrame({"W1 ratio Pruned / full": pruned.w1_exact_upper["Pruned-PMM"]
              / pruned.w1_exact_upper["PMM"],
              "visited share": pruned.visited["Pruned-PMM"] / pruned.visited["PMM"]}).round(3)

# %% [markdown]
# **Rates and the shift (notebook 4).**  PrivTree's slope of log E W1 against log εn on
# uniform data in d = 2 and 3 (He's exponent −1/d), and the randomly shifted partition
# against the fixed one on the central ball of radius 0.1.

# %%
start = time.perf_counter()
rates_df = js.simulate({"PrivTree": js.PrivTree()},
                       {"uniform d=2": ("uniform", {"d": 2}), "uniform d=3": ("uniform", {"d": 3})},
                       n=RATE_N, eps=EPS, seeds=RERUN_SEEDS, progress=False)
ball_df = js.simulate({"fixed": js.PrivTree(), "shifted": js.PrivTree(shift=True)},
                      {f"ball d={d}": ("ball", {"d": d, "radius": 0.1}) for d in BALL_D},
                      n=BALL_N, eps=EPS, seeds=RERUN_SEEDS, progress=False)
print(f"{len(rates_df) + len(ball_df)} replicates in {time.perf_counter() - start:.0f} s")
rerun_rates = js.estimate_rate(rates_df, column="w1_exact_upper", n_boot=400)
display(rerun_rates[["data", "slope", "ci_low", "ci_high", "theory_exponent"]].round(3))
(ball_df.groupby(["d", "mechanism"])
 .agg(w1=("w1_exact_upper", "mean"), ci=("w1_exact_upper", ci95)).unstack().round(4))

# %% [markdown]
# ## 6. What the rerun shows
#
# Full-size run (n = 30000, six releases per point; the rates over n = 1000 … 30000):
#
# * **Fig. 2 ordering holds on the full-data W1, and not only because of the dyadic
#   constants.**  With the constant coordinates at 0.5, Adaptive Pruned-PMM against PMM:
#   0.055 against 0.078 (d = 4) and 0.155 against 0.257 (d = 8), as the bracket's upper
#   end said in notebook 2.  With the constants at 1/3, where notebook 2's bracket saw the
#   gap shrink to within its width, the full-data W1 still orders them: 0.027 against
#   0.037 (d = 4) and 0.074 against 0.110 (d = 8): ratios 0.73 and 0.67, against 0.70 and
#   0.60 at 0.5.
#   Adaptive's larger spread (its ±1.96 s.e. 0.007–0.047) comes from its random depth.
# * **Pruning costs no accuracy.**  The ratio of mean full-data W1, Pruned-PMM over full
#   PMM at r = 15, is 0.98–1.05 over the nine shapes (notebook 3's bracket: 0.98–1.03),
#   while Pruned-PMM visits 5–23% of the nodes; with six releases per shape the ratio's
#   own noise is a few percent.
# * **PrivTree's rates** on uniform data are −0.44 (d = 2, 95% interval −0.45 … −0.44)
#   and −0.28 (d = 3, −0.28 … −0.27) on the full-data W1 over εn = 10^3 … 3·10^4, next to
#   notebook 4's −0.43 and −0.285 from the bracket's upper end (over 10^3 … 10^6) and He's
#   exponents −1/2 and −1/3 (upper-bound rates, with a logarithmic factor).
# * **The shift** changes nothing at d = 2 (0.0156 against 0.0161), lowers W1 by a fifth
#   at d = 4 (0.072 → 0.056) and by 59% at d = 6 (0.244 → 0.101): notebook 4's "the
#   random shift halves W1 on the central ball from d = 6" holds on the full-data W1.
# * Notebook 5's conclusions (Monte Carlo precision with thousands of replicates per
#   cell) are about the bracket's cost; the certified W1 costs about a second per
#   replicate at n = 30000 on this CPU, so they were not rerun at that scale.
