"""``check_measure``'s checks on both routes: NumPy for small measures (a one-off call's
first check traces nothing), jitted for large batches.  Truth: the verdict written out
for each damage; both routes must give it, and the same totals."""

import dataclasses

import numpy as np
import pytest

import jaxsynth as js
from jaxsynth.core import measure
from jaxsynth.core.measure import check_measure


def damaged(kind: str):
    """A batch of 3 replicates of 40 atoms in d = 2, weights summing to 1, with one damage
    in replicate 1; the verdict (points, weights, depths) it should get."""
    rng = np.random.default_rng(0)
    points = rng.random((3, 40, 2)).astype(np.float32)
    weights = rng.random((3, 40)).astype(np.float32)
    weights /= weights.sum(axis=1, keepdims=True)
    depth = np.full((3, 40), 4, np.int32)
    verdict = [True, True, True]
    if kind in ("nan point", "point above 1", "point below 0", "inf point"):
        points[1, 7, 1] = {"nan point": np.nan, "point above 1": 1.0001,
                           "point below 0": -1e-7, "inf point": np.inf}[kind]
        verdict[0] = False
    elif kind in ("negative weight", "nan weight", "inf weight"):
        weights[1, 3] = {"negative weight": -1e-9, "nan weight": np.nan,
                         "inf weight": np.inf}[kind]
        verdict[1] = False
    elif kind == "negative depth":
        depth[1, 0] = -1
        verdict[2] = False
    return points, weights, depth, verdict


KINDS = ["none", "nan point", "point above 1", "point below 0", "inf point",
         "negative weight", "nan weight", "inf weight", "negative depth"]


@pytest.mark.parametrize("kind", KINDS)
def test_both_routes_give_the_verdict(kind, monkeypatch):
    points, weights, depth, verdict = damaged(kind)
    results = []
    for small in (10**9, 0):  # NumPy, then the jitted checks
        monkeypatch.setattr(measure, "SMALL_MEASURE", small)
        results.append(measure._measure_checks(points, weights, depth))
    for checks in results:
        assert [bool(ok) for ok in checks[:3]] == verdict
        assert checks[3].shape == (3,)
    if kind == "none":
        for checks in results:  # float32 sums of 40 weights: a few roundings of 1
            np.testing.assert_allclose(checks[3], 1.0, rtol=0, atol=1e-6)


def test_a_large_batch_is_checked_jitted_and_refused_alike(monkeypatch):
    # above SMALL_MEASURE the jitted route runs, and check_measure refuses as it does
    # for a small measure
    X = np.random.default_rng(1).random((300, 2))
    out = js.release_batch(0, js.PMM(depth=3), X, eps=[1.0], seeds=2)
    out = dataclasses.replace(out, points=out.points.at[0, 1, 5, 0].set(1.0001))
    calls = []
    jitted = measure._jitted_checks
    monkeypatch.setattr(measure, "_jitted_checks", lambda *a: calls.append(1) or jitted(*a))
    for small in (10**9, 0):
        monkeypatch.setattr(measure, "SMALL_MEASURE", small)
        with pytest.raises(ValueError, match="out.points must be finite and inside"):
            check_measure(out, 2)
    assert len(calls) == 1
