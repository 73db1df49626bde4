"""Tests of the sweep's plan, calibration, progress and data (jaxsynth/experiments/plan.py,
prepare.py, cost.py, progress.py, clock.py, rounds.py, grid.py).

Truth: counts of what ran (data sets prepared, calibrations, rows), the bytes a sweep
prints on stderr, the fingerprint of the points (SHA-256 recomputed here), the nested
subsample property, and JAX's own compilation log.  Every refusal names its argument.
"""

from __future__ import annotations

import hashlib
import json

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import jaxsynth as js
from jaxsynth.cli import main
from jaxsynth.experiments import cost, datasets, prepare
from jaxsynth.experiments.clock import Clock
from jaxsynth.experiments.progress import NoProgress, TextProgress
from jaxsynth.experiments.sweep import simulate

MECHS = {"pmm": js.PMM(depth=4), "privtree": js.PrivTree()}
SMALL = dict(eps=[1.0, 2.0], methods=["tree_upper"], key=2, progress=False)
PRECISE = dict(SMALL, seeds=4, max_seeds=64, precision=0.05, precision_column="w1_tree_upper")


@pytest.fixture(scope="module")
def X():
    return js.datasets.load("spiral", n=300, key=3)


# ------------------------------------------------------------------------ refusals


@pytest.mark.parametrize("args, names", [
    ({"precision": 1.5}, ["precision", "0.02"]),
    ({"precision": 2}, ["precision", "0.02"]),
    ({"precision": 100}, ["precision", "0.02"]),
    ({"precision": None, "max_seeds": 64}, ["max_seeds", "precision="]),
    ({"precision": None, "max_seeds": None}, ["precision_column", "precision="]),
    ({"precision": None, "max_seeds": None, "precision_column": None,
      "precision_control": "w1_tree"}, ["precision_control", "precision="]),
    ({"precision_control": "w1_exact_upper"}, ["precision_control", "w1_exact_upper"]),
    ({"precision_control": "w1_tree_upper"}, ["precision_control", "precision_column"]),
    ({"precision_control": "w1_tree", "seeds": 3}, ["seeds", "precision_control"]),
])
def test_precision_options_are_refused_naming_them(X, args, names):
    with pytest.raises(ValueError) as info:
        simulate(MECHS, X, **{**PRECISE, **args})
    assert all(name in str(info.value) for name in names), str(info.value)


@pytest.mark.parametrize("flags, names", [
    (["--precision", "1.5", "--max-seeds", "8"], ["precision", "0.02"]),
    (["--seeds", "4", "--precision-column", "w1_tree"], ["--precision-column", "--precision"]),
    (["--seeds", "4", "--precision-control", "w1_tree"], ["--precision-control", "--precision"]),
    (["--seeds", "4", "--max-seeds", "8"], ["--max-seeds", "--precision"]),
])
def test_the_command_line_refuses_precision_options_naming_them(flags, names, tmp_path, capsys):
    args = ["simulate", "--mechanism", "pmm", "--data", "spiral", "--n", "300", "--eps", "1",
            "--method", "tree", "--quiet", "--out", str(tmp_path / "x.csv"), *flags]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxsynth: error:") and err.count("\n") == 1
    assert all(name in err for name in names), err


def test_empty_labels_are_refused(X):
    with pytest.raises(ValueError, match="mechanisms: a label is empty"):
        simulate({"": js.PMM(depth=4)}, X, **SMALL, seeds=2)
    with pytest.raises(ValueError, match="data: a label is empty"):
        simulate(MECHS, {" ": X}, **SMALL, seeds=2)


# ------------------------------------------------------------------ once per sweep


def test_a_precision_sweep_prepares_and_calibrates_once(X, tmp_path, monkeypatch):
    # every (mechanism, data set, size) is calibrated once for all rounds and parts, each
    # data set prepared once; a tightened run on the same file calibrates nothing (the
    # timings beside the file) and prepares only what it computes on
    prepared, calibrated = [], []
    build = prepare.PreparedSets._prepare
    timings = cost._timings
    monkeypatch.setattr(prepare.PreparedSets, "_prepare",
                        lambda self, i: prepared.append(i) or build(self, i))
    monkeypatch.setattr(cost, "_timings", lambda chunk, sized, seeds: calibrated.append(
        tuple(sized.plan.eps)) or timings(chunk, sized, seeds))
    data = {"a": X, "b": js.datasets.load("two_moons", n=200, key=1)}
    out = tmp_path / "sweep.csv"
    df = simulate(MECHS, data, out=out, **PRECISE)
    assert sorted(prepared) == [0, 1]
    assert len(calibrated) == len(MECHS) * len(data)  # one plan each, both ε in it
    assert df.groupby(["mechanism", "data"]).seed.max().max() >= 8  # several rounds ran
    assert json.loads((tmp_path / "sweep.csv.jaxsynth-timing.json").read_text())["entries"]
    prepared.clear()
    calibrated.clear()
    tightened = simulate(MECHS, data, out=out, **{**PRECISE, "precision": 0.03})
    assert calibrated == [] and tightened.attrs["calibration_seconds"] < 1.0
    assert len(tightened) >= len(df)


def test_a_dry_run_calibrates_once_and_keeps_nothing(X, tmp_path, monkeypatch):
    from jaxsynth.wasserstein.evaluate import Evaluation

    measured = []
    evaluate = Evaluation.evaluate_outputs
    monkeypatch.setattr(Evaluation, "evaluate_outputs", lambda self, block, s, eps: (
        measured.append(len(s)), evaluate(self, block, s, eps))[1])
    out = tmp_path / "dry.csv"
    table = simulate(MECHS, X, out=out, dry_run=True, **PRECISE)
    # one batch of each ε per mechanism: the first round's 4 seeds
    assert sum(measured) == len(MECHS) * 2 * 4
    assert not out.exists() and not (tmp_path / "dry.csv.jaxsynth-timing.json").exists()
    assert (table.seconds_at_most > table.seconds).all()


def test_a_foreign_timing_file_is_left_untouched(X, tmp_path):
    out = tmp_path / "s.csv"
    foreign = tmp_path / "s.csv.jaxsynth-timing.json"
    foreign.write_bytes(b"not ours")
    simulate(MECHS, X, out=out, **SMALL, seeds=2)
    assert foreign.read_bytes() == b"not ours"


# ------------------------------------------------------------------ what a user sees


def test_a_precision_sweep_prints_one_estimate_and_one_progress_line(X, tmp_path, capsys):
    simulate(MECHS, X, out=tmp_path / "p.csv",
             **{**PRECISE, "progress": TextProgress(delay=0.0, interval=0.0)})
    err = capsys.readouterr().err
    lines = [line for line in err.split("\n") if line.strip()]
    assert err.count("ESTIMATE") == 1
    assert sum("simulate: " in line for line in lines) == 1  # one line, rewritten with \r
    progress = next(line for line in lines if "simulate: " in line)
    assert "round 2" in progress and err.endswith("\n")
    last = progress.split("\r")[-1]
    done, total = last.split(" replicates")[0].split("· ")[-1].split("/")
    assert done == total


def test_a_progress_meter_object_is_told_the_plan_and_every_replicate(X):
    class Meter(NoProgress):
        def __init__(self):
            self.plans, self.done = [], 0

        def plan(self, total, done, round=None):
            self.plans.append((total, done, round))

        def advance(self, count):
            self.done += count

    meter = Meter()
    df = simulate(MECHS, X, **{**SMALL, "seeds": 3, "progress": meter})
    assert meter.plans == [(len(df), 0, None)] and meter.done == len(df)


def test_the_short_cells_warning_is_one_line_on_the_command_line(tmp_path, capsys):
    args = ["simulate", "--mechanism", "pmm", "--data", "spiral", "--n", "300", "--depth", "4",
            "--eps", "0.25", "--method", "tree_upper", "--precision", "0.001",
            "--max-seeds", "4", "--seeds", "4", "--precision-column", "w1_tree_upper",
            "--quiet", "--out", str(tmp_path / "w.csv")]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert err.startswith("jaxsynth: warning: precision: 1 cell(s) stopped at max_seeds = 4")
    assert "UserWarning" not in err and ".py:" not in err and err.count("\n") == 1


def test_the_clock_keeps_compilation_apart():
    x = jnp.arange(64.0)
    f = jax.jit(lambda v: jnp.sort(jnp.sin(v) * 3))
    with Clock() as cold:
        f(x).block_until_ready()
    with Clock() as warm:
        f(x).block_until_ready()
    assert 0 < cold.compile <= cold.seconds and cold.work == cold.seconds - cold.compile
    assert warm.compile == 0 and warm.work == warm.seconds


# ------------------------------------------------------------------ data sets and n


def test_subsamples_are_nested_and_follow_their_key():
    X = np.random.default_rng(0).random((500, 3))
    small, large = datasets.subsample(X, 100, key=4), datasets.subsample(X, 300, key=4)
    assert {r.tobytes() for r in small} <= {r.tobytes() for r in large}
    rows = [int(np.flatnonzero((X == r).all(axis=1))[0]) for r in large]
    assert rows == sorted(rows)  # in their order in X
    assert not np.array_equal(datasets.subsample(X, 100, key=5), small)
    with pytest.raises(ValueError, match="n = 600 exceeds the 500 points"):
        datasets.subsample(X, 600)


def test_a_file_at_several_sizes_is_one_label_of_nested_subsamples(tmp_path):
    X = js.datasets.load("spiral", n=400, key=9)
    path = tmp_path / "mine.npy"
    np.save(path, X)
    df = simulate("pmm", str(path), n=[100, 400], data_key=6, **SMALL, seeds=2)
    assert set(df["data"]) == {str(path)} and sorted(set(df["n"])) == [100, 400]
    prints = df.groupby("n")["fingerprint"].first()
    X100 = datasets.subsample(X, 100, key=6)
    assert prints[100] == "sha256:" + hashlib.sha256(
        repr(X100.shape).encode() + X100.tobytes()).hexdigest()
    rates = js.estimate_rate(df, column="w1_tree_upper")  # one label: one fit over n
    assert len(rates) == 1


def test_a_store_refuses_rows_of_a_changed_generator(tmp_path, monkeypatch):
    out = tmp_path / "spiral.csv"
    first = simulate("pmm", "spiral", n=300, out=out, **SMALL, seeds=2)
    recorded = json.loads((tmp_path / "spiral.csv.jaxsynth.json").read_text())
    assert recorded["spec"]["data"]["spiral | n=300"] == first["fingerprint"].iloc[0]
    resumed = simulate("pmm", "spiral", n=300, out=out, **SMALL, seeds=3)  # survives a resume
    assert resumed["fingerprint"].nunique() == 1 and resumed.attrs["new_rows"] == 2
    load = datasets.load
    monkeypatch.setattr(datasets, "load", lambda *a, **k: np.sqrt(load(*a, **k)))
    with pytest.raises(ValueError) as info:
        simulate("pmm", "spiral", n=300, out=out, **SMALL, seeds=4)
    message = str(info.value)
    assert "spiral | n=300" in message and first["fingerprint"].iloc[0] in message
    assert message.count("sha256:") == 2


def test_summaries_and_fits_refuse_two_point_sets_under_one_label():
    rows = pd.DataFrame({"mechanism": "m", "data": "x", "n": 10, "eps": [1.0, 1.0, 2.0, 2.0],
                         "seed": [0, 1, 0, 1], "w1_exact_upper": [0.1, 0.2, 0.1, 0.3],
                         "fingerprint": ["sha256:a", "sha256:b", "sha256:a", "sha256:a"]})
    for call in (lambda: js.summarize(rows), lambda: js.estimate_rate(rows)):
        with pytest.raises(ValueError, match="data='x', n=10 were measured on 2 different"):
            call()
