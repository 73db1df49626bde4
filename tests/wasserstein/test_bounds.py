"""Certified bracket (``Bracket``) and the ``js.w1`` router.

Truth is POT's exact ``ot.emd2`` on the ℓ∞ (``chebyshev``) or ℓ2 (``euclidean``) cost
matrix in float64, and ``scipy.stats.wasserstein_distance`` in 1-D.  The bracket must
contain the truth on every instance (no tolerance: its margins are part of the claim).
Fixtures and shapes come from ``test_tree`` so compilations are shared.
"""

import jax
import numpy as np
import ot
import pytest
import scipy.stats

import jaxsynth as js
from jaxsynth.wasserstein import Bracket, prepare_w1, w1
from jaxsynth.wasserstein.bounds import directions
from tests.wasserstein.test_tree import (
    DEPTH,
    N_DATA,
    balanced_replicate,
    make_data,
    make_measure,
    stack,
    unbalanced_replicate,
)


def exact_w1(X, out, metric):
    """POT exact W1 per replicate of a flat batch, float64."""
    ground = "chebyshev" if metric == "linf" else "euclidean"
    P, w = np.asarray(out.points, np.float64), np.asarray(out.weights, np.float64)
    mu = np.full(len(X), 1 / len(X))
    return np.array(
        [ot.emd2(mu, wb / wb.sum(), ot.dist(X, pb, metric=ground)) for pb, wb in zip(P, w)]
    )


def random_instances(rng, d):
    """Six replicates: balanced at two depths, unbalanced, one far-off atom set."""
    reps = [balanced_replicate(rng, d, r, m) for r, m in ((DEPTH, 20), (4, 8), (2, 3))]
    reps += [unbalanced_replicate(rng, d, k) for k in (6, 15)]
    far = balanced_replicate(rng, d, DEPTH, 10)
    reps.append((np.clip(far[0] * 0.2 + 0.8, 0, 1).astype(np.float32), far[1], far[2] * 0))
    return make_measure(*stack(reps))


@pytest.mark.parametrize("d, metric", [(1, "linf"), (2, "linf"), (2, "l2"), (3, "l2")])
def test_bracket_contains_exact_w1(d, metric):
    """lower ≤ exact W1 ≤ upper on random instances (several seeds per case)."""
    for seed in range(2):
        rng = np.random.default_rng(100 * d + seed)
        X = make_data(rng, d)
        out = random_instances(rng, d)
        lower, upper = w1(prepare_w1(X, DEPTH, size=N_DATA), out, "bracket", metric)
        exact = exact_w1(X, out, metric)
        assert lower.shape == upper.shape == (6,)
        assert np.all(lower <= exact), (lower, exact)
        assert np.all(exact <= upper), (exact, upper)
        assert np.all(lower > 0)
        if d == 1:  # the coordinate marginal is the measure itself: lower is exact W1
            np.testing.assert_allclose(lower, exact, rtol=1e-4)


def test_directions_are_unit_in_the_dual_norm():
    for metric, order in (("linf", 1), ("l2", 2)):
        dirs = directions(3, metric, 5, seed=1)
        assert dirs.shape == (8, 3)
        np.testing.assert_array_equal(dirs[:3], np.eye(3))
        np.testing.assert_allclose(np.linalg.norm(dirs, ord=order, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(directions(2, "l2", 4, 7), directions(2, "l2", 4, 7))


def test_random_directions_never_loosen_the_bound():
    """Adding directions can only raise the max; ℓ1-normalised ones are valid for ℓ∞."""
    rng = np.random.default_rng(3)
    X = make_data(rng, 2)
    out = random_instances(rng, 2)
    axes, _ = w1(X, out, "bracket", "linf")  # ℓ∞ default: the axes alone
    more, _ = w1(X, out, Bracket(n_directions=6), "linf")
    assert np.all(more >= axes)
    assert np.all(more <= exact_w1(X, out, "linf"))


def test_bracket_by_name_and_options_is_the_configured_object_and_refuses_unknown_ones():
    rng = np.random.default_rng(3)
    X = make_data(rng, 2)
    out = random_instances(rng, 2)
    lower, upper = w1(X, out, "bracket", "linf", n_directions=6, seed=2)
    configured = w1(X, out, Bracket(n_directions=6, seed=2), "linf")
    np.testing.assert_array_equal(lower, configured[0])
    np.testing.assert_array_equal(upper, configured[1])
    with pytest.raises(ValueError, match=r"\['n_direction'\].*accepted: \['batch_size', "
                                         r"'n_directions', 'seed'\]"):
        w1(X, out, "bracket", "linf", n_direction=6)
    with pytest.raises(ValueError, match="configured already"):
        w1(X, out, Bracket(), "linf", seed=2)


@pytest.mark.parametrize("d, metric", [(2, "linf"), (3, "linf"), (2, "l2"), (3, "l2")])
def test_bracket_lower_end_is_below_pot_and_is_the_best_projection(d, metric):
    """The bracket's lower end with random directions: below POT's exact W1 on every
    replicate, and equal (up to its documented margins, float32 rounding) to the largest
    scipy 1-D W1 of the data and atoms projected on ``directions`` (computed in float64)."""
    rng = np.random.default_rng(40 + d)
    X = make_data(rng, d)
    out = random_instances(rng, d)
    lower, _ = w1(X, out, Bracket(n_directions=4, seed=3), metric)
    exact = exact_w1(X, out, metric)
    assert lower.shape == (6,) and lower.dtype == np.float64
    assert np.all(lower <= exact), (lower, exact)
    dirs = directions(d, metric, 4, seed=3).astype(np.float64)
    P, w = np.asarray(out.points, np.float64), np.asarray(out.weights, np.float64)
    best = np.array([
        max(scipy.stats.wasserstein_distance(X @ u, p @ u, None, wb) for u in dirs)
        for p, wb in zip(P, w)
    ])
    assert np.all(lower <= best)
    np.testing.assert_allclose(lower, best, rtol=1e-4, atol=1e-6)


def test_dispatcher_methods_agree_with_modules_and_truth():
    """tree / tree_upper / bracket / exact1d through ``w1``, shapes and values."""
    rng = np.random.default_rng(4)
    X = make_data(rng, 1)
    out = random_instances(rng, 1)
    data = prepare_w1(X, DEPTH, size=N_DATA)
    exact = exact_w1(X, out, "linf")
    scipy_w1 = [
        scipy.stats.wasserstein_distance(X[:, 0], p[:, 0], None, w)
        for p, w in zip(np.asarray(out.points, np.float64), np.asarray(out.weights, np.float64))
    ]
    e1 = w1(X, out, method="exact1d")
    assert e1.dtype == np.float64 and e1.shape == (6,)
    np.testing.assert_allclose(e1, scipy_w1, rtol=1e-5)
    tree = w1(data, out, "tree")
    upper = w1(data, out, "tree_upper")
    lower, upper2 = w1(data, out, "bracket")  # ℓ∞ default: the axes alone
    np.testing.assert_array_equal(upper, upper2)
    assert np.all(lower <= exact) and np.all(exact <= upper) and np.all(tree <= upper)
    grid = make_measure(
        *(
            np.asarray(a).reshape((2, 3) + a.shape[1:])
            for a in (out.points, out.weights, out.leaf_depth)
        )
    )
    assert w1(data, grid, "tree").shape == (2, 3)


def _sinkhorn_case():
    rng = np.random.default_rng(5)
    X = make_data(rng, 2)
    reps = [balanced_replicate(rng, 2, 4, 8), balanced_replicate(rng, 2, 5, 12)]
    return X, make_measure(*stack(reps))


@pytest.mark.slow
def test_dispatcher_sinkhorn_loops_over_replicates():
    """Sinkhorn per replicate with forwarded ``rtol``: within its certified 1% of POT.

    (``w1_sinkhorn`` reports the midpoint of a bracket of relative half-width ≤ rtol, so
    2·rtol bounds its error; its own tests check the certificate.)"""
    X, out = _sinkhorn_case()
    values = w1(X, out, "sinkhorn", rtol=0.01)
    assert values.shape == (2,) and values.dtype == np.float64
    np.testing.assert_allclose(values, exact_w1(X, out, "linf"), rtol=0.02)


@pytest.mark.slow
def test_dispatcher_sinkhorn_keys_per_replicate():
    """``key`` is folded with the flat replicate index: reproducible, and replicate i
    equals a direct ``w1_sinkhorn`` call with ``fold_in(key, i)`` on the same measure (its
    atoms in the canonical order, as every W1 method reads them)."""
    from jaxsynth.core.measure import canonical_atoms
    from jaxsynth.wasserstein.sinkhorn import w1_sinkhorn

    X, out = _sinkhorn_case()
    key = jax.random.key(0)
    sub = w1(X, out, "sinkhorn", subsample=N_DATA // 2, key=key)
    np.testing.assert_array_equal(sub, w1(X, out, "sinkhorn", subsample=N_DATA // 2, key=key))
    points, weights, _ = canonical_atoms(out.points, out.weights)
    direct = w1_sinkhorn(
        X, points[1], weights[1], subsample=N_DATA // 2, key=jax.random.fold_in(key, 1)
    )
    assert sub[1] == pytest.approx(direct.value, rel=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "emd"}, "method"),
        ({"metric": "l1"}, "metric"),
        ({"method": "tree", "directions": 3}, "option"),
        ({"method": "bracket", "n_directions": -1}, "n_directions"),
        ({"method": "exact1d"}, "d = 1"),
    ],
)
def test_dispatcher_rejects_bad_arguments(kwargs, match):
    rng = np.random.default_rng(6)
    out = make_measure(*balanced_replicate(rng, 2, 4, 5))
    with pytest.raises(ValueError, match=match):
        w1(make_data(rng, 2), out, **kwargs)


def test_dispatcher_validates_data():
    rng = np.random.default_rng(7)
    out = make_measure(*balanced_replicate(rng, 2, 4, 5))
    X = make_data(rng, 2)
    for bad in (X[:, :1], X + 1.0, np.full_like(X, np.nan), X[:0], X[0]):
        with pytest.raises(ValueError, match="X"):
            w1(bad, out, "tree")


@pytest.mark.slow
def test_real_mechanism_outputs():
    """Released measures of Pruned-PMM (uniform placement) and shifted PrivTree:
    their padding and shift conventions give valid trees, tree W1 equals the brute-force
    tree-metric reference, and the bracket contains POT's exact W1."""
    import jaxsynth as js
    from tests.wasserstein import test_tree as TT

    X = js.datasets.load("spiral", n=200, key=1)
    for mech in (js.PrunedPMM(depth=5, placement="uniform"), js.PrivTree(shift=True)):
        out = js.release_batch(3, mech, X, eps=[0.5, 2.0], seeds=2)
        flat = make_measure(
            *(
                np.asarray(a).reshape((4,) + a.shape[2:])
                for a in (out.points, out.weights, out.leaf_depth)
            )
        )
        shift = out.info.get("shift")
        shift = None if shift is None else np.asarray(shift, np.float64).reshape(4, -1)
        tree = w1(X, out, "tree").reshape(4)
        lower, upper = (b.reshape(4) for b in w1(X, out, "bracket"))
        exact = exact_w1(X, flat, "linf")
        assert np.all(lower <= exact) and np.all(exact <= upper)
        depth = int(np.max(np.asarray(out.leaf_depth)))
        for b in range(4):
            args = (
                np.asarray(flat.points[b]),
                np.asarray(flat.weights[b]),
                np.asarray(flat.leaf_depth[b]),
            )
            u = None if shift is None else shift[b]
            expect, _, _ = TT.reference(X, *args, "linf", u, depth=depth)
            assert tree[b] == pytest.approx(expect, rel=1e-5)


@pytest.mark.parametrize("metric, diameter", [("linf", 1.0), ("l2", np.sqrt(2.0))])
def test_upper_ends_never_exceed_the_diameter(metric, diameter):
    # one data point in a corner: the widened tree bound would pass the cube's diameter
    X = np.zeros((1, 2))
    out = js.release_batch(0, js.PMM(depth=2), X, eps=[0.1], seeds=64)
    lower, upper = js.w1(X, out, method="bracket", metric=metric)
    assert upper.max() <= diameter and np.all(lower <= upper)
    assert js.w1(X, out, method="tree_upper", metric=metric).max() <= diameter
    df = js.simulate(js.PMM(depth=2), X, eps=[0.1], seeds=64, methods=["bracket", "tree_upper"],
                     metric=metric, progress=False)
    assert df.w1_upper.max() <= diameter and df.w1_tree_upper.max() <= diameter
