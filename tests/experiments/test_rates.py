"""Tests of rate estimation and plots (jaxsynth/experiments/rates.py and plots.py).

Truth: synthetic sweeps with a known law ``W1 = c·(εn)^{-a}·noise`` (noise i.i.d. with
mean 1, the same law in every cell, so ``log E W1`` is exactly linear with slope ``-a``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jaxsynth.experiments.plots import DODGE, depth_plot, quantity, rate_plot
from jaxsynth.experiments.rates import estimate_rate, theory
from jaxsynth.experiments.summary import mean_interval

EN = np.array([500.0, 1000.0, 2000.0, 4000.0, 8000.0])


def _sweep(rng, a=0.5, c=2.0, seeds=40, sigma=0.5, mechanism="m", extra=None):
    """A table with the columns ``simulate`` writes, W1 lognormal around c·(εn)^{-a}."""
    n = np.repeat(EN.astype(int), seeds)
    noise = rng.lognormal(-sigma**2 / 2, sigma, size=n.size)  # mean exactly 1
    df = pd.DataFrame({"mechanism": mechanism, "data": "x", "n": n, "eps": 1.0,
                       "seed": np.tile(np.arange(seeds), EN.size), "w1_exact_upper": c * n**-a * noise})
    return df.assign(**(extra or {}))


def test_exact_power_law_gives_exact_slope_and_degenerate_interval():
    df = _sweep(np.random.default_rng(0), a=0.37, sigma=1e-300)
    r = estimate_rate(df, n_boot=50)
    assert r.slope[0] == pytest.approx(-0.37, abs=1e-12)
    assert r.ci_low[0] == pytest.approx(-0.37, abs=1e-12)
    assert r.ci_high[0] == pytest.approx(-0.37, abs=1e-12)
    assert (r.cells[0], r.seeds[0], r.eps_n_min[0], r.eps_n_max[0]) == (5, 40, 500.0, 8000.0)
    assert list(r.column) == ["w1_exact_upper"] and "metric" not in r  # the fitted column


def test_rates_name_the_fitted_column_and_group_by_the_ground_metric():
    rng = np.random.default_rng(4)
    df = pd.concat([_sweep(rng, sigma=0.01, extra={"metric": "linf"}),
                    _sweep(rng, a=0.3, sigma=0.01, extra={"metric": "l2"})])
    df["w1_upper"] = df.w1_exact_upper * 2
    r = estimate_rate(df, column="w1_upper", by=["mechanism", "metric"], n_boot=50)
    assert list(r.metric) == ["l2", "linf"] and list(r.column) == ["w1_upper"] * 2
    assert r.slope.tolist() == pytest.approx([-0.3, -0.5], abs=0.01)
    positional = estimate_rate(df, "w1_upper", ["mechanism", "metric"], n_boot=50)
    pd.testing.assert_frame_equal(r, positional)


def test_bootstrap_interval_covers_the_true_slope_at_nominal_rate():
    # 200 synthetic sweeps; coverage of the 95% interval.  Binomial sd at p = 0.95 is
    # sqrt(.95·.05/200) = 0.0154; the percentile bootstrap of a mean of 40 draws is
    # slightly narrow (by sqrt(39/40)), so we accept 0.95 ± 0.05 (about 3.3 sd).
    rng = np.random.default_rng(2024)
    covered, slopes = 0, []
    for rep in range(200):
        r = estimate_rate(_sweep(rng), n_boot=400, key=rep)
        covered += r.ci_low[0] <= -0.5 <= r.ci_high[0]
        slopes.append(r.slope[0])
    assert abs(covered / 200 - 0.95) <= 0.05
    # unbiased: the mean of 200 slopes lies within 4 standard errors of -0.5
    assert abs(np.mean(slopes) + 0.5) <= 4 * np.std(slopes) / np.sqrt(200)


def test_groups_are_fitted_separately_and_reproducibly():
    rng = np.random.default_rng(5)
    df = pd.concat([_sweep(rng, a=0.5, mechanism="A"), _sweep(rng, a=1.0, mechanism="B")])
    r = estimate_rate(df, key=3)
    assert list(r.mechanism) == ["A", "B"]
    assert r.slope[0] == pytest.approx(-0.5, abs=0.1) and r.slope[1] == pytest.approx(-1.0, abs=0.1)
    # a group's interval does not depend on the other groups
    alone = estimate_rate(df[df.mechanism == "B"], key=3)
    assert (alone.ci_low[0], alone.ci_high[0]) == (r.ci_low[1], r.ci_high[1])


def test_theory_exponents_and_bound_functions():
    x = np.array([10.0, 1000.0])
    assert theory("pmm", 2).exponent == -0.5
    assert theory("pruned-pmm", 3, 1).exponent == pytest.approx(-1 / 3)  # ambient depth: d
    assert theory("pmm", 1).label == "log^2(eps n)/(eps n)"
    assert theory("adaptive-pruned-pmm", 10, 3).exponent == pytest.approx(-1 / 3)
    np.testing.assert_allclose(theory("adaptive-pruned-pmm", 10, 1).bound(x), np.log(x) ** 2 / x)
    np.testing.assert_allclose(theory("privtree", 5, 4).bound(x), (np.log(x) / x) ** 0.25)
    assert theory("privtree-shift", 5, 1).exponent == -0.5  # s <= 2 saturates at 1/2
    assert theory("privtree", 2, 1).exponent == -0.5
    assert theory("privtree", 1, 1).exponent == -1.0
    assert theory("unknown", 2) is None


def test_theory_columns_beside_the_fit():
    rng = np.random.default_rng(7)
    depth = np.ceil(np.log2(EN)).astype(int)
    pmm = _sweep(rng, mechanism="pmm", extra={"kind": "pmm", "d": 2, "intrinsic_dim": 1})
    pmm["depth"] = np.repeat(depth, 40)
    ada = _sweep(rng, mechanism="ada", extra={"kind": "adaptive-pruned-pmm", "d": 2,
                                               "intrinsic_dim": 1})
    fixed = pmm.assign(mechanism="pmm r=9", depth=9)
    r = estimate_rate(pd.concat([pmm, ada, fixed]), n_boot=100).set_index("mechanism")
    assert r.loc["pmm", "theory_exponent"] == -0.5
    assert r.loc["pmm", "bound_slope"] == pytest.approx(-0.5)
    # log^2(x)/x over x in [500, 8000]: the slope of the least-squares line through the
    # five log-spaced points, weighted as the fit weights its cells (the inverse variance
    # of each cell's log mean), computed independently with NumPy
    lx = np.log(EN)
    cells = ada.groupby("n").w1_exact_upper
    weights = (cells.count() * cells.mean() ** 2 / cells.var()).to_numpy()
    expected = np.polyfit(lx, np.log(np.log(EN) ** 2 / EN), 1, w=np.sqrt(weights))[0]
    assert r.loc["ada", "bound_slope"] == pytest.approx(expected, rel=1e-12)
    assert -1 < expected < -0.6
    assert r.loc["ada", "theory"] == "log^2(eps n)/(eps n)"
    assert np.isnan(r.loc["pmm r=9", "theory_exponent"])
    assert r.loc["pmm r=9", "theory"].startswith("fixed depth")


def test_rate_input_checks_and_single_cell_groups():
    df = _sweep(np.random.default_rng(1))
    with pytest.raises(ValueError, match="w1_sinkhorn"):
        estimate_rate(df, column="w1_sinkhorn")
    with pytest.raises(ValueError, match="level"):
        estimate_rate(df, level=1.5)
    with pytest.raises(ValueError, match="positive"):
        estimate_rate(df.assign(w1_exact_upper=0.0))
    # no slope from a single eps·n value, no interval from a single seed: refused, named
    with pytest.raises(ValueError, match="mechanism='m'.*single eps·n value"):
        estimate_rate(df[df.n == 1000])
    with pytest.raises(ValueError, match="single replicate"):
        estimate_rate(df[df.seed == 0])
    with pytest.raises(ValueError, match="n must hold positive integers"):
        estimate_rate(df.assign(n=df.n.where(df.seed > 0, 0)))
    with pytest.raises(ValueError, match="w1_exact_upper must hold non-negative numbers"):
        estimate_rate(df.assign(w1_exact_upper=df.w1_exact_upper.where(df.seed > 0, -1.0)))


def test_plots_write_png(tmp_path):
    rng = np.random.default_rng(3)
    df = _sweep(rng, mechanism="pmm", extra={"kind": "pmm", "d": 2, "intrinsic_dim": 1})
    df["depth"] = np.repeat(np.ceil(np.log2(EN)).astype(int), 40)
    df["w1_exact_lower"] = df.w1_exact_upper / 4
    fig = rate_plot(df, path=tmp_path / "rate.png")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]  # outside the axes
    assert any("slope -0.5" in t for t in labels)
    assert any("theory (eps n)^(-1/2)" in t and "height arbitrary" in t for t in labels)
    # the figure names its quantity, and shows the pair's lower end beside the fit
    ylabel = fig.axes[0].get_ylabel()
    assert "ℓ∞ W1 of the whole data set" in ylabel and "w1_" not in ylabel  # words, not code
    assert "certified pair: filled upper end, open lower end" in ylabel
    title = fig.axes[0].get_title()
    assert "certified ℓ∞ W1 of the whole data set" in title
    assert "ε = 1; 40 seeds per cell" in title  # the design in the title
    assert fig.axes[0].get_xlabel() == "ε n (privacy budget × sample size)"
    assert any(t.endswith(": lower end") for t in labels)
    assert any(t.endswith(": mean, 95 % interval") for t in labels)
    # the error bars are the cells' intervals (summary.mean_interval), not ±2 se
    bars = [c for c in fig.axes[0].collections if c.get_segments()][0].get_segments()
    values = df[df.n == EN[0]].w1_exact_upper.to_numpy()
    _, low, high = mean_interval(values)
    assert (bars[0][0][1], bars[0][1][1]) == pytest.approx((low, high), rel=1e-12)
    # each cell's eps n is labelled on the axis (a log axis would label powers of ten only)
    ticks = fig.axes[0].get_xticks()
    np.testing.assert_allclose(ticks, np.unique(EN))
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [f"{v:g}" for v in ticks]
    # two groups with identical means: drawn side by side, with different markers
    twin = pd.concat([df, df.assign(mechanism="pmm-copy")])
    ax = rate_plot(twin, rates=None).axes[0]
    points = [line for line in ax.get_lines()
              if line.get_linestyle() == "None" and line.get_marker() not in ("_", "|")
              and line.get_markerfacecolor() != "none"][:2]  # the filled means
    assert points[0].get_marker() != points[1].get_marker()
    x0, x1 = (np.asarray(p.get_xdata(), float) for p in points)
    np.testing.assert_allclose(x1 / x0, DODGE)
    tree = rate_plot(df.assign(w1_tree=df.w1_exact_upper, metric="l2"), column="w1_tree")
    assert "(an ultrametric: not the ℓ2 W1)" in tree.axes[0].get_ylabel()
    assert tree.axes[0].get_title().startswith(
        f"{quantity('w1_tree', pd.DataFrame({'metric': ['l2']}))} against ε n")
    sweep = df.assign(visited=df.depth * 10, release_seconds=0.01 * df.depth)
    fig = depth_plot(sweep, path=tmp_path / "depth.png")
    assert [ax.get_title() for ax in fig.axes] == [
        ("mean w1_exact_upper: certified upper end of the ℓ∞ W1 of the whole data set "
         "(upper − lower ≤ rtol · upper)"),
        "seconds per replicate",
        "visited nodes"]
    for name in ("rate.png", "depth.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_read_every_registered_methods_columns(monkeypatch):
    """Labels and certified pairs come from the methods' ``columns``: a column added to a
    method is named in words by every figure, with no table kept in plots."""
    from jaxsynth.wasserstein.registry import GROUND, REGISTRY, certified_pairs

    l2 = pd.DataFrame({"metric": ["l2"]})
    for method in REGISTRY.values():
        for column, text in method.columns.items():
            assert quantity(column) == text.replace(GROUND, "the ℓ∞"), column
            assert quantity(column, l2) == text.replace(GROUND, "the ℓ2"), column
            assert "ground metric" not in quantity(column) and column not in quantity(column)
            if column.endswith("_upper") and column[:-5] + "lower" in method.columns:
                assert certified_pairs()[column] == column[:-5] + "lower"
    assert certified_pairs() == {"w1_exact_upper": "w1_exact_lower", "w1_upper": "w1_lower"}
    assert quantity("w1_unknown") == "w1_unknown"  # a column no method writes: its name
    # a new method's columns: labelled and paired with no other change
    new = type("New", (), {"columns": {"w1_new_lower": "lower end of the ground metric's W1",
                                       "w1_new_upper": "upper end of the ground metric's W1"}})
    monkeypatch.setitem(REGISTRY, "new", new())
    assert quantity("w1_new_upper", l2) == "upper end of the ℓ2 W1"
    assert certified_pairs()["w1_new_upper"] == "w1_new_lower"


def test_fit_weights_cells_by_precision_and_reports_the_cells():
    # cells of unequal seeds and spread: the slope is NumPy's weighted least squares on the
    # cell means, each weighted by seeds · mean² / variance (1 / variance of its log mean)
    rng = np.random.default_rng(8)
    df = _sweep(rng, seeds=60)
    df = df[(df.n != 500) | (df.seed < 6)]  # one cell of 6 seeds: it counts less
    r = estimate_rate(df, n_boot=100)
    cells = df.groupby("n").w1_exact_upper
    weights = (cells.count() * cells.mean() ** 2 / cells.var()).to_numpy()
    expected = np.polyfit(np.log(EN), np.log(cells.mean().to_numpy()), 1, w=np.sqrt(weights))[0]
    assert r.slope[0] == pytest.approx(expected, rel=1e-10)
    summary = pd.DataFrame(r.attrs["cells"])
    pd.concat([r, r])  # attrs hold records, which pandas compares when concatenating
    assert list(summary.seeds) == [6, 60, 60, 60, 60]
    assert summary["mean"].to_numpy() == pytest.approx(cells.mean().to_numpy())
    assert (summary.ci_low < summary["mean"]).all() and (summary["mean"] < summary.ci_high).all()


@pytest.mark.parametrize("column, values", [("d", [2, 3]), ("metric", ["linf", "l2"])])
def test_rate_refuses_groups_that_pool_different_cells(column, values):
    rng = np.random.default_rng(9)
    df = pd.concat([_sweep(rng, extra={column: v}) for v in values], ignore_index=True)
    with pytest.raises(ValueError, match=rf"^{column}: the rows of mechanism='m', data='x' hold 2"):
        estimate_rate(df, n_boot=20)
    by = ["mechanism", "data", column]  # told apart, each fitted on its own
    assert len(estimate_rate(df, by=by, n_boot=20)) == 2


def test_stated_intrinsic_dimension_sets_the_theory_exponent():
    rng = np.random.default_rng(10)
    df = _sweep(rng, mechanism="pt", extra={"kind": "privtree", "d": 6, "intrinsic_dim": 6})
    ambient = estimate_rate(df, n_boot=20)
    assert ambient.theory_exponent[0] == pytest.approx(-1 / 6)
    assert ambient.exponent_dimension[0].startswith("ambient d = 6 (intrinsic dimension not "
                                                    "stated")
    stated = estimate_rate(df, n_boot=20, intrinsic_dim=3)
    assert stated.theory_exponent[0] == pytest.approx(-1 / 3)  # He Thm 5.9: t = s
    assert stated.exponent_dimension[0] == "s = 3 (stated)"
    labels = [t.get_text() for t in rate_plot(df, rates=stated).legends[0].get_texts()]
    assert any(t.startswith("theory (log(eps n)/(eps n))^(1/3)") for t in labels)
    with pytest.raises(ValueError, match="intrinsic_dim: 7 exceeds"):
        estimate_rate(df, n_boot=20, intrinsic_dim=7)
    with pytest.raises(ValueError, match="intrinsic_dim"):
        estimate_rate(df, n_boot=20, intrinsic_dim=0)
