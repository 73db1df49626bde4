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
from jaxsynth.experiments.sweep import simulate


def test_estimate_is_chunks_of_release_plus_a_measurement_per_replicate():
    ds = types.SimpleNamespace(label="x", n=100)
    work = [(ds, [("m", None, list(range(10)))])]
    # two budgets; chunks of 8 replicates: 20 replicates fill 3 chunks of 0.6 s each
    timings = {("m", "x", 100): [cost.Timing(2.0, 0.6, 8, (1.0, 2.0), (0.1, 0.3))]}
    table = cost.estimate(work, timings, [1.0, 2.0], most=40)
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
def test_a_sweep_keeps_the_calibrations_warm_run(seeds, warmup, monkeypatch):
    # the calibration measures one batch of the first write cold, then warm; where the
    # warm run measured the whole first write (at most MEASURE_BATCH seeds) it is the
    # first write; else the calibration's batch is measured again by the sweep.
    # The rows are bit for bit those of release_batch and js.w1 on the same keys
    from jaxsynth.experiments import sweep
    from jaxsynth.wasserstein.evaluate import Evaluation

    measured = []
    evaluate = Evaluation.evaluate_outputs
    monkeypatch.setattr(Evaluation, "evaluate_outputs", lambda self, block, s: (
        measured.append(len(s)), evaluate(self, block, s))[1])
    X = js.datasets.load("spiral", n=400, key=1)
    eps = [0.5, 2.0]
    table = simulate(js.PMM(), X, eps=eps, seeds=seeds, warmup=warmup, key=7, progress=False)
    batch = sweep.MEASURE_BATCH
    calibrated = 0 if seeds <= batch else batch
    assert sum(measured) == len(eps) * (min(seeds, batch) + seeds + calibrated)
    # the estimate printed before the work is of what the calibration left
    left = sum(row["replicates"] for row in table.attrs["estimate"])
    assert left == (len(eps) * seeds if calibrated else 0)
    out = js.release_batch(7, js.PMM(), X, eps=eps, seeds=seeds)
    lower, upper = js.w1(X, out, method="exact")
    table = table.sort_values(["eps", "seed"])
    np.testing.assert_array_equal(table.w1_exact_lower, lower.ravel())
    np.testing.assert_array_equal(table.w1_exact_upper, upper.ravel())
