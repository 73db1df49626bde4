"""Tests of the cost estimate (jaxsynth/experiments/cost.py) and ``simulate(dry_run=True)``.

Truth: the estimate's arithmetic recomputed by hand from given timings; a dry run
computes no row and writes no file.  Whether the estimate is close to a sweep's time is
a benchmark (benchmarks/bench_cost.py), not a test.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import jaxsynth as js
from jaxsynth.experiments import cost
from jaxsynth.experiments.execute import MEASURE_BATCH
from jaxsynth.experiments.plan import Part
from jaxsynth.experiments.sweep import simulate


def test_estimate_is_chunks_of_release_plus_a_measurement_per_replicate():
    plan = types.SimpleNamespace(mechanisms=[("m", None)],
                                 data=[types.SimpleNamespace(label="x", n=100)])
    parts = [Part(0, 0, (1.0, 2.0), tuple(range(10)))]
    # two budgets released together; chunks of 8 replicates: 20 replicates fill 3 chunks of
    # 0.6 s each; compilation 1 s per budget
    estimate = cost.Estimate({("m", "x", 100, 1.0): cost.Timing(1.0, 0.6, 8, 2, 0.1),
                              ("m", "x", 100, 2.0): cost.Timing(1.0, 0.6, 8, 2, 0.3)})
    table = estimate.table(plan, parts, most=40)
    release = 3 * 0.6 / 20
    assert table.release_seconds.tolist() == pytest.approx([release, release])
    assert table.seconds.tolist() == pytest.approx([10 * (release + 0.1), 10 * (release + 0.3)])
    # at most 40 seeds: 80 replicates in 10 chunks
    assert table.seconds_at_most.tolist() == pytest.approx(
        [40 * (6 / 80 + 0.1), 40 * (6 / 80 + 0.3)])
    assert table.attrs["compile_seconds"] == 2.0
    text = cost.describe(table)
    assert text.startswith("ESTIMATE") and "not a measurement" in text
    assert "compilation (measured, apart): 2.0 s" in text
    assert cost.describe(estimate.table(plan, [])) == ""  # nothing to compute: no table


def test_dry_run_computes_nothing(tmp_path):
    X = js.datasets.load("spiral", n=300, key=3)
    out = tmp_path / "sweep.csv"
    table = simulate([js.PMM(depth=4)], X, eps=[1.0, 2.0], seeds=6, methods=["tree_upper"],
                     out=out, dry_run=True, progress=False)
    assert not out.exists()
    assert table[["eps", "replicates"]].values.tolist() == [[1.0, 6], [2.0, 6]]
    assert (table.measure_seconds > 0).all() and (table.release_seconds > 0).all()
    assert np.isfinite(table.attrs["compile_seconds"])


@pytest.mark.parametrize("seeds, warmup", [(6, True), (6, False), (40, True)])
def test_a_sweep_keeps_the_calibrations_rows(seeds, warmup, monkeypatch):
    # the calibration releases and measures the first seeds (at most MEASURE_BATCH) once;
    # they are the sweep's first rows, so every replicate is measured exactly once, and
    # the estimate printed before the work is of the rest.  The rows are bit for bit those
    # of release_batch and js.w1 on the same keys
    from jaxsynth.wasserstein.evaluate import Evaluation

    measured = []
    evaluate = Evaluation.evaluate_outputs
    monkeypatch.setattr(Evaluation, "evaluate_outputs", lambda self, block, s, eps: (
        measured.append(len(s)), evaluate(self, block, s, eps))[1])
    X = js.datasets.load("spiral", n=400, key=1)
    eps = [0.5, 2.0]
    table = simulate(js.PMM(), X, eps=eps, seeds=seeds, warmup=warmup, key=7, progress=False)
    assert sum(measured) == len(eps) * seeds
    left = sum(row["replicates"] for row in table.attrs["estimate"])
    assert left == len(eps) * max(0, seeds - MEASURE_BATCH)
    out = js.release_batch(7, js.PMM(), X, eps=eps, seeds=seeds)
    lower, upper = js.w1(X, out, method="exact")
    table = table.sort_values(["eps", "seed"])
    np.testing.assert_array_equal(table.w1_exact_lower, lower.ravel())
    np.testing.assert_array_equal(table.w1_exact_upper, upper.ravel())
