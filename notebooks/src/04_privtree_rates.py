# %% [markdown]
# # 4. He: PrivTree rates, the shifted partition, oracle partitions
#
# He bounds the expected W1 of PrivTree with Laplace leaf masses by
# (log(εn)/(εn))^(1/d) on ambient data (Thm 5.7) and by (log(εn)/(εn))^(1/s) on data
# of intrinsic dimension 2 < s ≤ d (Thm 5.9); its §6 shows that a randomly shifted
# partition avoids the 2^d occupied cells a grid-aligned cluster (a small central ball)
# costs the fixed partition; its oracle partitions (§4–§5) separate the resolution
# error of a partition from the privacy error of the noisy leaf masses.
#
# This notebook
# 1. fits the slope of log E W1 against log(εn) on ambient data (uniform, d = 2, 3) and on
#    a 3-dimensional subspace of [0,1]^8, beside −1/d and −1/s, with bootstrap intervals;
# 2. compares the shifted and the fixed partition on the central ball of radius 0.1;
# 3. splits the error of PrivTree into its resolution part (exact masses on the same
#    private tree, and on the noiseless soft-threshold tree) and the rest.
#
# Every main measurement is the quantity the theorems bound, the ℓ∞ W1 between the whole
# data set and each release (`js.w1(method="exact")`, `js.simulate`'s default: a
# certified pair at most 1% wide; the tables use its upper end): the rates for n up to
# `max(EXACT_RATE_N)`, the ball, and the oracle split.  Beyond that n a replicate's
# certified W1 costs minutes, so the rates' long range up to n = 10^6 is measured by the
# certified ℓ∞ bracket `lower ≤ W1 ≤ upper`, 3–7 times wide but cheap (its upper end is
# bounded by the theorems too), checked once against Sinkhorn on the full measures at
# n = `CHECK_N`.  The tree W1 alone is not a bound on ℓ∞ W1: on the ball it reads far
# below it (section 2).

# %%
# %matplotlib inline
import datetime, importlib.metadata, math, os, platform, time, warnings

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
EPS = 1.0
EXACT_RATE_N = [1_000, 3_000, 10_000, 30_000, 100_000] if FULL else [600, 1_000]
EXACT_SEEDS = 10 if FULL else 2          # the replicates' coefficient of variation is 1-4%
RATE_N = EXACT_RATE_N + [300_000, 1_000_000] if FULL else EXACT_RATE_N  # the bracket's range
RATE_SEEDS = 20 if FULL else 3
BALL_D = [2, 3, 4, 6, 8] if FULL else [2]
BALL_N = 1_000
BALL_SEEDS = 40 if FULL else 3
CHECK_N = 1_000                          # Sinkhorn check on the full measures at this n
CHECK_SEEDS = 3 if FULL else 1
ORACLE_N = EXACT_RATE_N[:4] if FULL else EXACT_RATE_N
ORACLE_SEEDS = 10 if FULL else 2

# %%
print(f"run {datetime.datetime.now():%Y-%m-%d %H:%M} | {platform.platform()} | "
      f"{os.cpu_count()} CPUs | jax {jax.__version__} {jax.devices()} | "
      f"jaxsynth {importlib.metadata.version('jaxsynth')} | size {SIZE}")

# %% [markdown]
# ## 1. Rates on ambient and on intrinsically 3-dimensional data
#
# The subspace data set has s = 3 uniform coordinates and five constant ones (at 0.5) in
# d = 8.  Theory for PrivTree: slope −1/t with t = min(d, max(s, 2)), i.e. −1/2, −1/3 on
# the uniform squares and cubes and −1/3 (not −1/8) on the subspace; `bound_slope` is the
# slope of (log(εn)/(εn))^(1/t) itself over the same εn, log factor included.  The fit is
# to the full-data W1 (certified to 1%), `EXACT_SEEDS` releases per size.

# %%
rate_data = {"uniform d=2": ("uniform", {"d": 2}), "uniform d=3": ("uniform", {"d": 3}),
             "subspace s=3 d=8": ("subspace", {"d": 8, "k": 3})}
start = time.perf_counter()
exact_rates = js.simulate({"PrivTree": js.PrivTree()}, rate_data, n=EXACT_RATE_N, eps=EPS,
                          seeds=EXACT_SEEDS, progress=False)
pair_gap = (exact_rates.w1_exact_upper - exact_rates.w1_exact_lower) / exact_rates.w1_exact_upper
cell_cv = exact_rates.groupby(["data", "n"]).w1_exact_upper.agg(lambda w: w.std() / w.mean())
print(f"{len(exact_rates)} replicates in {time.perf_counter() - start:.0f} s; largest relative "
      f"gap of a certified pair {pair_gap.max():.4f}; largest coefficient of variation of a "
      f"cell {cell_cv.max():.3f}")
fits = js.estimate_rate(exact_rates, column="w1_exact_upper")
fits["-1/d"], fits["-1/s"] = -1 / fits.d, -1 / fits.intrinsic_dim
fits[["data", "slope", "ci_low", "ci_high", "-1/d", "-1/s", "theory", "bound_slope"]].round(3)

# %%
js.plots.rate_plot(exact_rates, rates=fits)

# %% [markdown]
# Local slopes between neighbouring sizes: a single line over the range is only an
# estimate of the asymptotic exponent if these settle.

# %%
def local_slopes(df, column):
    means = df.groupby(["data", "n"])[column].mean().unstack("data")
    return np.log(means).diff().div(np.log(means.index.to_series()).diff(), axis=0).iloc[1:]

local_slopes(exact_rates, "w1_exact_upper").round(3)

# %% [markdown]
# ### The long range on the bracket
#
# The same data for n up to 10^6, `RATE_SEEDS` releases per size, measured by the
# certified bracket: the fits to its two ends, and its local slopes (upper end).

# %%
rates_df = js.simulate({"PrivTree": js.PrivTree()}, rate_data, n=RATE_N, eps=EPS,
                       seeds=RATE_SEEDS, methods=["bracket"], progress=False)
bracket_fits = pd.concat([js.estimate_rate(rates_df, column=m) for m in ("w1_upper", "w1_lower")])
bracket_fits[["data", "column", "slope", "ci_low", "ci_high", "theory", "bound_slope"]].round(3)

# %%
js.plots.rate_plot(rates_df, column="w1_upper",
                   rates=bracket_fits[bracket_fits["column"] == "w1_upper"])

# %%
local_slopes(rates_df, "w1_upper").round(3)

# %% [markdown]
# ## 2. The central ball: shifted against fixed partition
#
# n = `BALL_N` points uniform in the Euclidean ball of radius 0.1 at the centre of the
# cube.  The fixed partition's first d cuts all pass through the ball's centre, so it
# needs 2^d cells before it resolves anything; the public random shift of He §6
# moves the grid so that the ball mostly falls inside few cells.

# %%
ball = {f"ball d={d}": ("ball", {"d": d, "radius": 0.1}) for d in BALL_D}
shift_mechs = {"PrivTree, fixed": js.PrivTree(), "PrivTree, shifted": js.PrivTree(shift=True)}
ball_df = js.simulate(shift_mechs, ball, n=BALL_N, eps=EPS, seeds=BALL_SEEDS,
                      methods=["tree", "bracket", "exact"], progress=False)
ball_table = ball_df.groupby(["d", "mechanism"])[["leaves", "depth", "w1_tree", "w1_lower",
                                                  "w1_exact_upper", "w1_upper"]].mean()
ball_table.unstack("mechanism").round(3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
for i, mech in enumerate(shift_mechs):
    g = ball_table.xs(mech, level="mechanism")
    axes[0].plot(g.index, g.w1_exact_upper, "o-", color=f"C{i}", label=f"{mech}: ℓ∞ W1 (full data)")
    axes[0].plot(g.index, g.w1_upper, "^--", color=f"C{i}", label=f"{mech}: bracket upper")
    axes[0].plot(g.index, g.w1_lower, "s--", color=f"C{i}", label=f"{mech}: bracket lower")
    axes[0].plot(g.index, g.w1_tree, ":", color=f"C{i}", label=f"{mech}: tree W1 (no bound)")
    axes[1].plot(g.index, g.leaves, "o-", color=f"C{i}", label=mech)
axes[0].set(xlabel="d", ylabel="mean W1: ℓ∞ (certified), bracket ends, tree W1", yscale="log",
            title=f"ball of radius 0.1, n = {BALL_N}, ε = {EPS}")
axes[1].set(xlabel="d", ylabel="mean number of leaves", yscale="log")
for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
fig.tight_layout()

# %% [markdown]
# ## 3. Check of the bracket against Sinkhorn
#
# The first `CHECK_SEEDS` replicates of the ball and of the rate data sets at
# n = `CHECK_N`, measured again by the certified Sinkhorn estimate on the *full* measures
# (no subsampling: at this n it is W1 within 1%).

# %%
check = pd.concat([
    js.simulate(shift_mechs, ball, n=BALL_N, eps=EPS, seeds=CHECK_SEEDS, progress=False,
                methods=["tree", "bracket", "sinkhorn"]),
    js.simulate({"PrivTree": js.PrivTree()}, rate_data, n=CHECK_N, eps=EPS, seeds=CHECK_SEEDS,
                progress=False, methods=["tree", "bracket", "sinkhorn"]),
])
inside = (check.w1_lower <= 1.01 * check.w1_sinkhorn) & (check.w1_sinkhorn <= 1.01 * check.w1_upper)
print(f"Sinkhorn inside the bracket (1% tolerance): {inside.mean():.0%} of {len(check)}")
check.groupby(["data", "mechanism"])[["w1_tree", "w1_lower", "w1_sinkhorn", "w1_upper"]].mean().round(3)

# %% [markdown]
# ## 4. Resolution error against privacy error (oracle partitions, not private)
#
# For each PrivTree release: the *oracle measure* `js.oracle.oracle_measure(X, out)` puts
# the exact data mass on the leaves of the same private tree, so its W1 is the resolution
# error of the private partition; the *soft-threshold oracle* is the partition PrivTree
# would build without noise (split while μ(Q) > k·δ, δ = (6/(εn))·ln 2), its W1 the
# resolution error of the ideal partition.  The difference between the release and its
# oracle measure is what the noisy leaf masses cost.  Also shown: He's resolution
# functional R_T = Σ μ(Q) 2^(−depth(Q)/d), with Lemma 2.5's bound 2d·R_T.  Data: uniform
# d = 3.  Each measure's W1 is the full-data ℓ∞ W1 (certified to 1%, upper end).

# %%
IDEAL = "oracle: noiseless soft-threshold tree"
rows = []
for n in ORACLE_N:
    X = js.datasets.load("uniform", n=n, d=3, key=0)
    out = js.release_batch(0, js.PrivTree(), X, eps=EPS, seeds=ORACLE_SEEDS)
    ideal = js.oracle.soft_threshold(X, 0.0, 6 / (EPS * n) * math.log(2))
    measures = {"PrivTree release": out, "oracle: exact masses on the private tree":
                js.oracle.oracle_measure(X, out), IDEAL: ideal}
    for name, measure in measures.items():
        _, upper = js.w1(X, measure)
        rows += [{"quantity": name, "n": n, "eps": EPS, "seed": seed, "w1_or_bound": u}
                 for seed, u in enumerate(np.ravel(upper))]
    rows += [{"quantity": "2d·R_T of the private tree (Lemma 2.5)", "n": n, "eps": EPS,
              "seed": seed, "w1_or_bound": 2 * 3 * r}
             for seed, r in enumerate(np.ravel(js.oracle.resolution_functional(X, out)))]
oracle_df = pd.DataFrame(rows)  # the noiseless tree is deterministic: one value per n
oracle_rates = js.estimate_rate(oracle_df[oracle_df.quantity != IDEAL], column="w1_or_bound",
                                by="quantity").set_index("quantity")
noiseless = oracle_df[oracle_df.quantity == IDEAL]
oracle_rates.loc[IDEAL, "slope"] = np.polyfit(np.log(EPS * noiseless.n),
                                              np.log(noiseless.w1_or_bound), 1)[0]
oracle_df.groupby(["n", "quantity"]).w1_or_bound.mean().unstack("quantity").round(4)

# %%
fig, ax = plt.subplots(figsize=(7, 4.5))
for i, (name, g) in enumerate(oracle_df.groupby("quantity", sort=False)):
    m = g.groupby("n").w1_or_bound.mean()
    fit = oracle_rates.loc[name]
    ci = f" [{fit.ci_low:.2f}, {fit.ci_high:.2f}]" if np.isfinite(fit.ci_low) else ""
    ax.plot(m.index * EPS, m, "o-", color=f"C{i}", label=f"{name}: slope {fit.slope:.2f}{ci}")
ax.set(xscale="log", yscale="log", xlabel="ε n", title="uniform d = 3, PrivTree and its oracles",
       ylabel="mean ℓ∞ W1, full data (2d·R_T: a bound)")
ax.grid(alpha=0.3, which="both")
ax.legend(fontsize=7);

# %% [markdown]
# ## Conclusion
#
# Full-size run: the full-data W1 (certified to 1%) at εn = 10^3 … 10^5 with 10 seeds per
# size (the largest coefficient of variation of a cell is 3.1%, so every mean is known to
# about ±2%); the bracket at εn = 10^3 … 10^6 with 20 seeds; the ball with 40 seeds per
# d; the oracles at εn = 10^3 … 3·10^4 with 10 seeds.
#
# * **Rates: as the theorems say, including the adaptation to the intrinsic dimension.**
#   On the full-data ℓ∞ W1 the slopes are −0.445 on the uniform square, −0.307 on the
#   uniform cube and −0.286 on the 3-dimensional subspace of [0,1]^8 (bootstrap
#   intervals ±0.003); the theorems' bound functions have slopes −0.449, −0.299 and
#   −0.297 over the same εn (−1/2, −1/3, −1/3 before their log factor), and the subspace
#   is nowhere near the ambient −1/8.  The bootstrap intervals only reflect seed noise:
#   the local slopes between neighbouring sizes vary more (−0.39 to −0.47 on the square,
#   −0.22 to −0.35 on the cube), and on the subspace they alternate between about −0.01
#   and −0.53, a staircase set by its five constant coordinates at 0.5, whose distance to
#   the nearest cell centre halves each time the leaves gain one bisection per
#   coordinate.  So the subspace's slope depends on where the range ends; the exponent is
#   what the staircase averages to.
# * **The long range on the bracket** (up to εn = 10^6): its upper end decays with slope
#   −0.428, −0.300 and −0.356, its lower end with −0.394, −0.342 and −0.386 (bound
#   functions −0.454, −0.305, −0.304 over this range).  The two ends, 3–7 times apart,
#   differ in slope by 0.03–0.04, and the subspace's staircase goes on to 10^6 (local
#   slopes −0.04 and −0.55 in turn): the same picture as the full-data W1, measured more
#   loosely.
# * **Shifted against fixed partition on the central ball: the shift wins from d = 4 on.**
#   On the full-data ℓ∞ W1 (certified to 1%): 0.071 against 0.056 at d = 4, 0.244 against
#   0.096 at d = 6 (−61%), 0.245 against 0.128 at d = 8 (the bracket: 0.225–0.98 against
#   0.105–0.38), about half from d = 6.  The fixed
#   partition's first d cuts all pass through the ball's centre: they leave 2^d cells of
#   about n/2^d points, too few for PrivTree to split under its noise, so its tree stops
#   at depth ≈ 10.  At d ≤ 3 the two are equal within 0.002 (0.015 against 0.017 at d = 2,
#   0.036 against 0.037 at d = 3).  The tree W1 reads 0.008 for the fixed
#   partition at d = 8 (ℓ∞ W1 0.245) and would rank the two the wrong way round.
# * **Resolution against privacy error: resolution dominates**, now on the full-data W1.
#   On the uniform cube the release is only 0.8–6% above the exact masses on the same
#   private tree (0.0979 against 0.0926 at n = 10^3, 0.0394 against 0.0391 at 3·10^4: the
#   noisy masses' share shrinks with n), and the private tree is as fine as the noiseless
#   soft-threshold tree (0.0391 against 0.0420 at n = 3·10^4); all decay with slopes
#   −0.25 to −0.28.  Lemma 2.5's bound 2d·R_T lies 14–15 times above the W1.
