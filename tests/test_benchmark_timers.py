"""The benchmark table's timers run on the package as it is (``benchmarks/run_all.py``):
the tree W1 they report is the one ``js.w1`` gives the same replicates."""

import sys
from pathlib import Path

import numpy as np

import jaxsynth as js

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import run_all  # noqa: E402


def test_time_jaxsynth_reports_the_tree_w1_of_its_replicates():
    X = np.asarray(js.datasets.load("spiral", n=300, key=0), np.float64)
    mech = js.PMM(depth=6)
    row = run_all.time_jaxsynth(mech, X, 1.0, 4, 1.0)
    assert row["seconds"] > 0 and row["visited"] > 0
    # its last timed run releases replicate_keys(3, 4): release_batch's keys for key 3
    out = js.release_batch(3, mech, X, eps=[1.0], seeds=4)
    np.testing.assert_allclose(row["w1"], np.mean(js.w1(X, out, method="tree")), rtol=1e-6)
