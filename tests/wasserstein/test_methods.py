"""The W1 methods as configured objects (jaxsynth/wasserstein/methods/, registry.py,
evaluate.py): frozen dataclasses whose fields are their options, checked when made.

Truth: a configured object and its name with the same options are one method, so the
numbers must be bitwise equal through ``js.w1`` and ``simulate``; every refusal must name
the option.  The exact method's edge options (issue: ``rtol`` as ``np.float32``, a huge
``clusters``, integer ``X``, a list of lists) are decided here against POT's exact
``emd2`` (n = 200: a dense LP in milliseconds).
"""

import dataclasses

import jax
import numpy as np
import ot
import pytest

import jaxsynth as js
from jaxsynth.wasserstein import Bracket, Exact, Exact1D, Sinkhorn, Tree, TreeUpper, w1
from jaxsynth.wasserstein.method import W1Method
from jaxsynth.wasserstein.registry import METHODS, REGISTRY

X = js.datasets.load("spiral", n=200, key=3)
MECH = js.PMM(depth=4)


@pytest.fixture(scope="module")
def out():
    return js.release_batch(2, MECH, X, eps=[1.0], seeds=4)


def test_the_public_namespace_holds_the_router_the_methods_and_the_prepared_data():
    assert sorted(js.wasserstein.__all__) == sorted(
        ["w1", "Exact", "Tree", "TreeUpper", "Bracket", "Exact1D", "Sinkhorn", "TreeData",
         "ExactData", "prepare_w1", "prepare_exact"])
    assert {kind.name for kind in REGISTRY.values()} == set(METHODS)
    assert all(issubclass(kind, W1Method) for kind in REGISTRY.values())
    for gone in ("bracket", "projection_lower", "tree_upper", "tree_w1", "w1_exact",
                 "w1_exact1d", "wasserstein_1d", "w1_sinkhorn", "w1_sinkhorn_batch"):
        assert not hasattr(js.wasserstein, gone), gone


def test_a_configured_object_is_its_name_with_options(out):
    pairs = [(Exact(rtol=0.002), "exact", {"rtol": 0.002}),
             (Tree(batch_size=1), "tree", {"batch_size": 1}),
             (TreeUpper(), "tree_upper", {}),
             (Bracket(n_directions=3, seed=4), "bracket", {"n_directions": 3, "seed": 4})]
    for method, name, options in pairs:
        assert method == REGISTRY[name](**options) and method.options == {
            **REGISTRY[name]().options, **options}
        got, want = w1(X, out, method), w1(X, out, name, **options)
        for a, b in zip(np.atleast_1d(got), np.atleast_1d(want)):
            np.testing.assert_array_equal(a, b)
    # in a sweep: a name, a (name, options) pair and a configured object, one table
    tables = [js.simulate(MECH, X, eps=[1.0], seeds=4, key=2, progress=False,
                          methods=[methods, "tree"])
              for methods in (("exact", {"rtol": 0.002}), Exact(rtol=0.002))]
    columns = ["w1_exact_lower", "w1_exact_upper", "w1_tree"]
    np.testing.assert_array_equal(tables[0][columns].to_numpy(), tables[1][columns].to_numpy())
    lower, upper = w1(X, out, Exact(rtol=0.002))
    np.testing.assert_array_equal(tables[1].sort_values("seed").w1_exact_upper, upper.ravel())


def test_methods_are_frozen_and_refuse_options_beside_an_object(out):
    with pytest.raises(dataclasses.FrozenInstanceError):
        Exact().rtol = 0.5
    with pytest.raises(ValueError, match="configured already"):
        w1(X, out, Exact(), rtol=0.5)
    with pytest.raises(ValueError, match="configured already"):
        js.simulate(MECH, X, seeds=2, methods=[(Exact(), {"rtol": 0.5})], progress=False)


def test_a_method_missing_part_of_the_protocol_cannot_be_built():
    @dataclasses.dataclass(frozen=True)
    class Partial(W1Method):
        name = "partial"
        columns = {"w1_partial": "nothing"}

        def prepare(self, X, metric):
            return X

    with pytest.raises(TypeError, match="bytes_per_replicate, evaluate"):
        Partial()


@pytest.mark.parametrize("make, name", [
    (lambda: Exact(rtol=0), "rtol"), (lambda: Exact(rtol=1), "rtol"),
    (lambda: Exact(rtol=True), "rtol"), (lambda: Exact(rtol="0.01"), "rtol"),
    (lambda: Exact(rtol=np.float32(2)), "rtol"), (lambda: Exact(rtol=np.nan), "rtol"),
    (lambda: Exact(clusters=0), "clusters"), (lambda: Exact(clusters=2.5), "clusters"),
    (lambda: Exact(clusters=True), "clusters"), (lambda: Exact(clusters="8"), "clusters"),
    (lambda: Exact(stacked=1), "stacked"),
    (lambda: Tree(batch_size=0), "batch_size"), (lambda: TreeUpper(batch_size=1.5), "batch_size"),
    (lambda: Bracket(n_directions=0), "n_directions"), (lambda: Bracket(seed=-1), "seed"),
    (lambda: Sinkhorn(rtol=2), "rtol"), (lambda: Sinkhorn(max_iterations=10), "max_iterations"),
    (lambda: Sinkhorn(key="x"), "key"), (lambda: Sinkhorn(group=0), "group"),
    (lambda: Sinkhorn(online="yes"), "online"), (lambda: Sinkhorn(subsample=0), "subsample"),
])
def test_options_are_checked_when_a_method_is_made(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def _pot(points, weights):
    """POT's exact ℓ∞ W1 per replicate of a flat batch (float64)."""
    mu = np.full(len(X), 1 / len(X))
    return np.array([ot.emd2(mu, w[w > 0] / w[w > 0].sum(),
                             ot.dist(X, p[w > 0], metric="chebyshev"))
                     for p, w in zip(points, weights)])


def test_exact_edge_options_are_valid_and_mean_what_the_docstring_says(out):
    points = np.asarray(out.points, np.float64).reshape(4, -1, 2)
    weights = np.asarray(out.weights, np.float64).reshape(4, -1)
    truth = _pot(points, weights)
    # rtol as a NumPy float32: accepted, its value taken as a float
    method = Exact(rtol=np.float32(0.02))
    assert type(method.rtol) is float and method.rtol == float(np.float32(0.02))
    lower, upper = w1(X, out, method)
    np.testing.assert_array_equal(upper, w1(X, out, "exact", rtol=float(np.float32(0.02)))[1])
    assert np.all(lower.ravel() <= truth + 1e-12) and np.all(truth <= upper.ravel() + 1e-12)
    # a huge clusters: the points are the only level (one LP), as clusters = n
    huge = w1(X, out, "exact", clusters=10**30)
    np.testing.assert_array_equal(huge[1], w1(X, out, "exact", clusters=len(X))[1])
    assert js.wasserstein.prepare_exact(X, 10**30).levels[0].size == len(X)
    # integer data (points of the cube's corners) and a list of lists: the same data
    corners = np.random.default_rng(0).integers(0, 2, (40, 2))
    grid = js.release_batch(0, MECH, corners.astype(float), eps=[1.0], seeds=2)
    np.testing.assert_array_equal(w1(corners, grid)[1], w1(corners.astype(float), grid)[1])
    np.testing.assert_array_equal(w1(X.tolist(), out)[1], w1(X, out)[1])


@pytest.mark.parametrize("data, name", [
    (np.full((40, 2), 2), "X"),                       # integers outside the cube
    ([[0.1, 0.2], [0.3]], "X"),                       # a ragged list of lists
    ([["a", "b"], ["c", "d"]], "X"),                  # not numbers
    (np.array([[True, False]] * 4), "X"),             # booleans are not coordinates
])
def test_exact_refuses_bad_data_naming_x(out, data, name):
    with pytest.raises(ValueError, match=name):
        w1(data, out)


def test_exact1d_and_sinkhorn_objects_run_through_the_router():
    x = np.random.default_rng(1).random((60, 1))
    line = js.release_batch(0, js.PMM(depth=3), x, eps=[1.0], seeds=2)
    np.testing.assert_array_equal(w1(x, line, Exact1D()), w1(x, line, "exact1d"))
    key = jax.random.key(3)
    np.testing.assert_array_equal(w1(x, line, Sinkhorn(subsample=30, key=key, rtol=0.05)),
                                  w1(x, line, "sinkhorn", subsample=30, key=key, rtol=0.05))
