"""The lower end raised by Jacobi steps of the atom duals on the points
(``solver._ascended``), which follow the plan-adapted level's LP.

Truth: POT's exact W1 (``ot.emd2`` on the full cost matrix) bounds every certified lower
end; a step written out in NumPy (each point's best atoms by a brute-force cost matrix,
``guide.balanced`` on those arcs, the c-transform's dual value over all atoms) gives the
step's lower end.  Tolerances: POT's round-off (1e-12); the float32 rounding of the
pass that the lower end subtracts (below 1e-5 on these data, which the brute force in
float64 does not).
"""

import warnings

import numpy as np
import ot
import pytest

import jaxsynth as js
from jaxsynth.wasserstein.ctransform import reduced_pass
from jaxsynth.wasserstein.exact import guide, levels, prepare_exact
from jaxsynth.wasserstein.exact import solver as exact_w1
from tests.wasserstein.test_exact import TOL, measure, truth

ROUNDING = 1e-5


def replicate(n=4000, m=40, seed=0):
    """Uniform points of the unit cube in d = 3 and ``m`` random atoms of random weights
    (a hundred points an atom, as PrivTree's releases at n = 10^6 have tens): the
    ``solver.Replicate`` and POT's W1."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    atoms, w = rng.random((m, 3)).astype(np.float32), rng.random(m) + 0.5
    rep = exact_w1._replicate_inputs(prepare_exact(X), atoms, w, "linf", 0.01, {},
                                     reduced_pass, 1)
    exact = ot.emd2(np.full(n, 1 / n), rep.w, ot.dist(X, rep.atoms, metric="chebyshev"))
    return rep, exact


def recorded_lower_ends(monkeypatch) -> list:
    """Every lower end ``solver._lower_end`` certifies, in order."""
    ends, lower_end = [], exact_w1._lower_end

    def recording(*args, **kwargs):
        end = lower_end(*args, **kwargs)
        ends.append(end[0])
        return end

    monkeypatch.setattr(exact_w1, "_lower_end", recording)
    return ends


def dual_value(rep, v):
    """The c-transform's dual value ``Σ w_j v_j + mean_i min_j (c(x_i, y_j) − v_j)``
    over all atoms, in float64."""
    level = rep.data.levels[-1]
    cost = ot.dist(level.centroids, rep.atoms, metric="chebyshev")
    return float(rep.w @ v + level.masses @ (cost - v).min(1))


def test_each_step_is_certified_and_raises_the_lower_end(monkeypatch):
    # three steps from the nearest atoms' duals (v = 0), the gap far above rtol (the
    # gate off): every lower end is at most POT's value, each step's is the brute-force
    # step's dual value, and they rise
    monkeypatch.setattr(exact_w1, "ASCENT_FROM", np.inf)
    monkeypatch.setattr(exact_w1, "ASCENT_STEPS", 3)
    rep, exact = replicate()
    level = rep.data.levels[-1]
    v = np.zeros(rep.m)
    start = exact_w1._lower_end(rep, v)[0]
    ends = recorded_lower_ends(monkeypatch)
    pair = exact_w1._ascended(rep, exact_w1.Pair(start, exact), v)
    assert len(ends) == 3 and pair.lower == max(ends)
    assert max(ends) <= exact + TOL
    assert start < ends[0] < ends[1] < ends[2]
    k = exact_w1.CANDIDATES
    for end in ends:  # the steps written out
        cost = ot.dist(level.centroids, rep.atoms, metric="chebyshev")
        best = np.argsort(cost - v, axis=1, kind="stable")[:, :k]
        v = guide.balanced(level.masses, rep.w, np.repeat(np.arange(level.size), k),
                           best.ravel(), np.take_along_axis(cost, best, 1).ravel(), v, 1)
        assert end == pytest.approx(dual_value(rep, v), abs=ROUNDING)


@pytest.mark.parametrize("gap", ["met", "too wide"])
def test_no_step_outside_the_gate(gap, monkeypatch):
    # a pair within rtol, or wider than ASCENT_FROM · rtol: returned as it is, no pass
    rep, exact = replicate(n=1000, m=10)
    lower = exact * (0.995 if gap == "met" else 1 - 1.01 * exact_w1.ASCENT_FROM * rep.rtol)
    passes = []
    monkeypatch.setattr(exact_w1, "_scan", lambda *args, **kwargs: passes.append(1))
    pair = exact_w1.Pair(lower, exact)
    assert exact_w1._ascended(rep, pair, np.zeros(rep.m)) == pair
    assert passes == []


def test_the_plan_adapted_level_steps_and_its_pair_holds_pots_value(monkeypatch):
    # the points by regions (levels of 64 and 512 blocks, regions of 256 points, blocks
    # of equal counts), at an rtol that no level meets, so the plan-adapted level's LPs
    # run, each followed by steps (the gate off): the pair still contains POT's value
    monkeypatch.setattr(exact_w1, "ASCENT_FROM", np.inf)
    monkeypatch.setattr(levels, "SNAP", 0.0)
    monkeypatch.setattr(levels, "MAX_LP_BLOCKS", 256)
    monkeypatch.setattr(exact_w1, "REGION", 256)
    monkeypatch.setattr(exact_w1, "DENSE_ARCS", 0)
    pairs, ascended = [], exact_w1._ascended
    monkeypatch.setattr(exact_w1, "_ascended",
                        lambda rep, pair, v: pairs.append(pair) or ascended(rep, pair, v))
    rng = np.random.default_rng(1)
    X = rng.random((1200, 2))
    out = measure(rng.random((2, 60, 2)), rng.random((2, 60)))
    with warnings.catch_warnings():  # wider than this rtol: a warning
        warnings.simplefilter("ignore")
        lower, upper = js.w1(prepare_exact(X, clusters=64), out, method="exact", rtol=1e-6)
    exact = truth(X, out.points, out.weights, "linf")
    assert len(pairs) >= 2 and not any(pair.met(1e-6) for pair in pairs)
    assert np.all(lower <= exact + TOL) and np.all(exact <= upper + TOL)
