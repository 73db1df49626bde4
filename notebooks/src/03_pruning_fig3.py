# %% [markdown]
# # 3. Zare Moayedi et al., pruning: Pruned-PMM against full PMM (Fig. 2 right, Fig. 3)
#
# Zare Moayedi et al. (§7) compare full PMM, which materialises the complete binary tree of
# depth r, with Pruned-PMM, which expands only children with positive corrected counts,
# on nine 2-D shapes at n = 30000, ε = 1, r = ⌈log2(εn)⌉ = 15, 10 runs per shape.
# Claimed: the W1 ratio Pruned / full stays close to 1 while runtime and visited nodes
# favour pruning (Fig. 2 right); in a depth sweep the W1 curves stay comparable while
# runtime and visited nodes separate rapidly (Fig. 3).
#
# This notebook measures the three ratios per shape, then sweeps the depth past the
# ambient 15 to see how far pruning pays.  At the ambient depth W1 is the quantity the
# paper bounds, the ℓ∞ W1 between the whole data set and each release
# (`js.w1(method="exact")`: a certified pair at most 1% wide, `js.simulate`'s default),
# here and across the whole depth sweep, beside the cheap certified bracket, 3–7 times
# wide, which is checked once against Sinkhorn on subsamples; runtimes are the release alone
# (compilation excluded: `warmup=True`), per replicate of a vmapped batch, on this
# notebook's machine.
#
# Pruned-PMM runs on its sparse engine (`engine="sparse"`), the pruned traversal whose
# cost follows the visited nodes.  (By default, `engine="auto"`, jaxsynth runs Pruned-PMM
# on the complete-tree engine while 2^r ≤ 2n, i.e. up to r = 15 at n = 30000, because a
# complete-tree node is cheaper; both engines release the same measure for the same key,
# so only the runtimes would change.)

# %%
# %matplotlib inline
import datetime, importlib.metadata, math, os, platform, time, warnings

import jax
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import jaxsynth as js
from jaxsynth.mechanisms.registry import depth_sweep

js.enable_compilation_cache()
warnings.filterwarnings("ignore", message="IProgress not found")  # text progress bars

# %% tags=["parameters"]
# Sizes: full by default; the test suite sets JAXSYNTH_NOTEBOOK_SIZE=ci (reduced sizes).
SIZE = os.environ.get("JAXSYNTH_NOTEBOOK_SIZE", "full")
FULL = SIZE == "full"
N = 30_000 if FULL else 2_000
EPS = 1.0
SHAPES = (["two_moons", "spiral", "annulus", "s_curve", "pinwheel", "figure_eight", "four_blobs",
           "checkerboard", "cross"] if FULL else ["spiral", "annulus"])
SEEDS = 10 if FULL else 2
DEPTHS = [8, 10, 12, 14, 15, 16, 18, 20] if FULL else [8, 11]         # both mechanisms
PRUNED_ONLY_DEPTHS = [24, 28, 32, 40, 48] if FULL else [16]           # beyond full PMM's reach
SINKHORN_SEEDS = 1
SUBSAMPLE = 1_000 if FULL else 200

# %%
print(f"run {datetime.datetime.now():%Y-%m-%d %H:%M} | {platform.platform()} | "
      f"{os.cpu_count()} CPUs | jax {jax.__version__} {jax.devices()} | "
      f"jaxsynth {importlib.metadata.version('jaxsynth')} | size {SIZE}")
DEPTH = math.ceil(math.log2(EPS * N))
print("shapes:", SHAPES, "| ambient depth r =", DEPTH)

# %% [markdown]
# ## 1. Fig. 2 right: the three ratios at the ambient depth
#
# Both mechanisms run with the same replicate keys; a node's noise is drawn from a key
# derived along its path, so PMM and Pruned-PMM see the same noisy counts and differ
# only in the consistency step and in which nodes they visit.  Ratios are of the means
# over seeds; the spread column is the standard deviation of the per-seed (paired) ratio
# of the full-data ℓ∞ W1 (the upper end of its certified pair).

# %%
pair = {"PMM": js.PMM(depth=DEPTH), "Pruned-PMM": js.PrunedPMM(depth=DEPTH, engine="sparse")}
study = js.simulate(pair, SHAPES, n=N, eps=EPS, seeds=SEEDS, methods=["exact", "bracket"],
                    warmup=True, progress=False)
print("largest relative gap of the certified full-data pairs:",
      f"{((study.w1_exact_upper - study.w1_exact_lower) / study.w1_exact_upper).max():.4f}")
columns = {"w1_exact_upper": "ℓ∞ W1 (full data)", "w1_lower": "bracket lower",
           "w1_upper": "bracket upper", "release_seconds": "runtime", "visited": "visited nodes"}
means = study.groupby(["data", "mechanism"])[list(columns)].mean().unstack("mechanism")
ratios = pd.DataFrame({name: means[col, "Pruned-PMM"] / means[col, "PMM"]
                       for col, name in columns.items()})
paired = study.pivot_table(index=["data", "seed"], columns="mechanism", values="w1_exact_upper")
ratios["sd of paired W1 ratio"] = (paired["Pruned-PMM"] / paired["PMM"]).groupby("data").std()
ratios.round(4)

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 4))
x = np.arange(len(ratios))
for i, col in enumerate(["ℓ∞ W1 (full data)", "bracket lower", "bracket upper"]):
    axes[0].bar(x + 0.27 * (i - 1), ratios[col], 0.27, label=col)
axes[0].axhline(1, color="k", lw=0.8)
axes[0].set(ylabel="ℓ∞ W1 ratio Pruned / full", ylim=(0.9, 1.1))
axes[0].legend(fontsize=8)
for ax, col in zip(axes[1:], ["runtime", "visited nodes"]):
    ax.bar(x, ratios[col])
    ax.set(yscale="log", ylabel=f"{col} ratio Pruned / full")
for ax in axes:
    ax.set_xticks(x, ratios.index, rotation=45, ha="right")
    ax.grid(alpha=0.3, axis="y")
fig.suptitle(f"n = {N}, ε = {EPS}, r = {DEPTH}: ratios of means over {SEEDS} seeds per shape")
fig.tight_layout()

# %% [markdown]
# ## 2. Check of the bracket against Sinkhorn
#
# The first replicate of each shape again, with the certified Sinkhorn estimate between
# `SUBSAMPLE` data points and `SUBSAMPLE` draws from each release.  On a 2-D shape the
# coordinate lower bound is loose (the marginals see little of a 2-D transport) and the
# subsample estimate carries its own sampling error, of the order of W1 between two
# independent samples of `SUBSAMPLE` points; so this checks the bracket and the W1 ratio,
# not the level.

# %%
check = js.simulate(pair, SHAPES, n=N, eps=EPS, seeds=SINKHORN_SEEDS, progress=False,
                    methods=["bracket", ("sinkhorn", {"subsample": SUBSAMPLE, "key": 0})])
check = check.pivot_table(index="data", columns="mechanism",
                          values=["w1_lower", "w1_sinkhorn", "w1_upper"])
check[("w1_sinkhorn", "ratio")] = check["w1_sinkhorn", "Pruned-PMM"] / check["w1_sinkhorn", "PMM"]
check.round(4)

# %% [markdown]
# ## 3. Fig. 3: the depth sweep
#
# Every shape at every depth, `SEEDS` runs each; full PMM up to depth `max(DEPTHS)`
# (its complete tree has 2^(r+1) nodes), Pruned-PMM further.  PMM's packing schedule
# spreads ε over the r levels, so the noise per level grows with r.  W1 is the full-data
# ℓ∞ W1 (upper end of its certified pair, solid), beside both ends of the cheap bracket
# (dashed: upper, dotted: lower); the tree W1 alone is not comparable across depths.

# %%
sweep_mechs = {**depth_sweep(js.PMM(), DEPTHS),
               **depth_sweep(js.PrunedPMM(engine="sparse"), DEPTHS + PRUNED_ONLY_DEPTHS)}
start = time.perf_counter()
depths = js.simulate(sweep_mechs, SHAPES, n=N, eps=EPS, seeds=SEEDS, methods=["exact", "bracket"],
                     warmup=True, progress=False)
print(f"{len(depths)} replicates in {time.perf_counter() - start:.0f} s; largest relative gap "
      f"{((depths.w1_exact_upper - depths.w1_exact_lower) / depths.w1_exact_upper).max():.4f}")
fig = js.plots.depth_plot(depths, column="w1_exact_upper")
ax = fig.axes[0]
for i, (kind, g) in enumerate(depths.groupby("kind")):
    bracket = g.groupby("depth")[["w1_upper", "w1_lower"]].mean()
    ax.plot(bracket.index, bracket.w1_upper, "--", lw=0.8, color=f"C{i}", label=f"{kind}: bracket upper")
    ax.plot(bracket.index, bracket.w1_lower, ":", lw=0.8, color=f"C{i}", label=f"{kind}: bracket lower")
ax.set(title="ℓ∞ W1: full data (solid), bracket ends (dashed, dotted)", ylabel="mean ℓ∞ W1",
       yscale="log")
ax.axvline(DEPTH, color="k", lw=0.8, ls=":")
ax.legend(fontsize=7)
fig.axes[1].set_title("release seconds per replicate (batched, compiled)", fontsize=10)
fig.suptitle(f"Mean over {len(SHAPES)} shapes × {SEEDS} runs; dotted line: ambient depth {DEPTH}")
fig.tight_layout()
fig

# %%
per_depth = depths.pivot_table(index="depth", columns="kind",
                               values=["w1_exact_upper", "w1_lower", "w1_upper", "release_seconds",
                                       "visited"])
per_depth[("speed-up", "full / pruned")] = (per_depth["release_seconds", "pmm"]
                                            / per_depth["release_seconds", "pruned-pmm"])
per_depth[("visited", "full / pruned")] = per_depth["visited", "pmm"] / per_depth["visited", "pruned-pmm"]
per_depth.round(4)

# %% [markdown]
# ## Conclusion
#
# Full-size run: nine shapes, n = 30000, ε = 1, 10 runs per shape and depth.
#
# * **W1: the claim holds, to within 5%.**  On the full-data ℓ∞ W1 (certified to 1%) the
#   ratio of means Pruned / full is 0.99–1.05 over the nine shapes: 1.04–1.05 on the
#   annulus, the four blobs and the checkerboard, 0.99–1.01 on the others; the paired
#   per-seed ratios spread by 0.013–0.043 (standard deviation over ten seeds), so the
#   excess on those three shapes is several standard errors: with the same noisy counts,
#   the pruned consistency step costs them 4–5%.  They are the shapes where pruning
#   visits most of the tree (19–23%).  The bracket's ends (ratios 0.98–1.03 and
#   1.000–1.016) did not show it; the depth curves coincide.  The Sinkhorn check on
#   1000-point subsamples scatters more (single replicates, ratio 0.76–1.20): its
#   subsampling error is of the size of W1 itself here.
# * **Visited nodes: the claim holds.**  At r = 15 the pruned traversal visits 5–23% of
#   the complete tree's 65535 nodes (cross 5%, checkerboard 23%), and the counts separate
#   rapidly with depth (84× fewer at r = 20).
# * **Runtime: not at the ambient depth.**  On this CPU the pruned (sparse) engine is
#   1.8–3.3× *slower* than the complete-tree kernel at r = 15: a vectorised complete-tree
#   node is cheaper than a frontier slot, and the frontier's cost follows its ~n slots per
#   level rather than the visited nodes.  (That is why jaxsynth runs Pruned-PMM on the
#   complete-tree engine by default while 2^r ≤ 2n.)  Pruning pays from r ≈ 17 on: 3.5× at
#   r = 18, 7.4× at r = 20, and full PMM cannot go much deeper (2^(r+1) nodes).
# * **How far past the ambient depth pruning pays: computationally, arbitrarily far
#   (r = 48 costs about 4× r = 15); in accuracy, not at all.**  On the full-data ℓ∞ W1
#   (the whole depth sweep, 1890 certified pairs; means over the nine shapes) W1 is
#   smallest at r = 12 (0.0096), 0.0113 at the ambient r = 15, and grows past it: 0.022
#   at r = 20, 0.040 at 24, 0.071 at 28, 0.125 at 32, 0.31 at 48, because the packing
#   schedule divides ε over more levels.  At every depth both mechanisms reach it, Pruned /
#   full 1.00–1.03.  The bracket's upper end tells the same shape 2.5–3.6 times too high
#   (0.040 at r = 15, 0.79 at 48).  Nine of the 1890 pairs stopped wider than 1% (the
#   warnings above; the widest 51%): their upper ends, which the curve averages,
#   overstate those few W1 values, not the shape.  Pruning makes deep trees cheap, not better, for these 2-D shapes.
