"""The one 1-D code (``exact1d.w1_against_sorted``: equal-weight sorted data against
weighted atoms) against scipy.stats.wasserstein_distance in float64, in its two array
libraries (JAX float32, the ``exact1d`` method and the bracket's projections; NumPy
float64, ``line_w1``, the exact method's d = 1 route), and the ``exact1d`` method through
``js.w1``.

Tolerance: the reference is scipy in float64 on the *same* float32 inputs, so input
rounding is not counted; what is left is float32 arithmetic inside the JAX code, measured
at <= 1.5e-7 relative (see the module docstring).  ``RTOL = 1e-6`` leaves a 6x margin; a
plain float32 cumsum of the CDF difference fails it (measured 1.3e-5 at n = m = 2000).
The NumPy route is float64: ``RTOL64 = 1e-12``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

import jaxsynth as js
from jaxsynth.wasserstein.exact1d import line_w1, w1_against_sorted
from tests.wasserstein.test_tree import make_measure

RTOL = 1e-6
RTOL64 = 1e-12
CASES = 16


def _scipy(u, uw, v, vw):
    return scipy.stats.wasserstein_distance(
        np.float64(u), np.float64(v), np.float64(uw), np.float64(vw)
    )


def _random_case(rng, n, m, kind):
    """Float32 supports/weights of one test case; ``kind`` selects the regime."""
    if kind == "ties":  # supports on a coarse grid: many ties within and across measures
        u = rng.integers(0, 8, n) / 8.0
        v = rng.integers(0, 8, m) / 8.0
    elif kind == "close":  # v is a jittered resample of u: W1 small relative to the range
        u = rng.random(n)
        v = np.clip(rng.choice(u, m) + 1e-3 * rng.standard_normal(m), 0.0, 1.0)
    else:
        u = rng.random(n)
        v = rng.random(m) ** 1.5
    uw = rng.random(n)
    vw = rng.random(m)
    if kind == "zeros":  # zero weights (padding) in both measures, one positive kept
        uw[rng.random(n) < 0.4] = 0.0
        vw[rng.random(m) < 0.4] = 0.0
        uw[0] = vw[-1] = 0.5
    return [np.float32(a) for a in (u, uw, v, vw)]


@pytest.mark.parametrize(
    "n,m,kind",
    [
        (1, 1, "plain"),
        (1, 9, "ties"),
        (9, 1, "zeros"),
        (17, 23, "ties"),
        (64, 64, "zeros"),
        (300, 200, "close"),
        (2000, 500, "ties"),
        (2000, 2000, "plain"),
    ],
)
def test_against_sorted_matches_scipy(n, m, kind):
    """``w1_against_sorted`` (equal-weight sorted data, atoms merged by binary search)
    equals scipy on the same float32 inputs: ties inside and across the two measures,
    zero weights, several sizes; in float64 (NumPy) to ``RTOL64``."""
    rng = np.random.default_rng(n * 31 + m)
    cases = [_random_case(rng, n, m, kind) for _ in range(CASES)]
    x = np.stack([np.sort(c[0]) for c in cases])
    v, vw = np.stack([c[2] for c in cases]), np.stack([c[3] for c in cases])
    if kind != "plain":  # every third atom exactly on a data point; a signed zero
        v[:, ::3] = np.take_along_axis(x, rng.integers(0, n, v[:, ::3].shape), axis=1)
        v[0, 0] = -0.0
    got = np.asarray(jax.jit(jax.vmap(w1_against_sorted))(x, v, vw))
    assert got.dtype == np.float32
    ones = np.full(n, 1.0, np.float32)
    ref = np.array([_scipy(xi, ones, vi, wi) for xi, vi, wi in zip(x, v, vw)])
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=1e-9)
    host = [w1_against_sorted(xi, vi, wi, xp=np) for xi, vi, wi in zip(x, v, vw)]
    assert all(isinstance(h, np.float64) for h in host)
    np.testing.assert_allclose(host, ref, rtol=RTOL64, atol=1e-15)
    # line_w1 sorts its data itself (the exact method's route)
    shuffled = x[0][np.random.default_rng(0).permutation(n)]
    assert line_w1(shuffled, v[0], vw[0]) == pytest.approx(ref[0], rel=RTOL64, abs=1e-15)


def test_against_sorted_heavy_atom_ties():
    """20000 atoms on 16 values (as axis projections of cell centres tie): the tied atoms'
    weights are merged exactly, and the values stay within ``RTOL`` of scipy."""
    rng = np.random.default_rng(5)
    n, m = 2000, 20000
    x = np.sort(np.float32(rng.random((8, n))), axis=1)
    v = np.float32(rng.integers(0, 16, (8, m)) / 16)
    w = np.float32(rng.random((8, m)))
    ones = np.ones(n, np.float32)
    ref = np.array([_scipy(xi, ones, vi, wi) for xi, vi, wi in zip(x, v, w)])
    got = np.asarray(jax.jit(jax.vmap(w1_against_sorted))(x, v, w))
    np.testing.assert_allclose(got, ref, rtol=RTOL)
    host = [w1_against_sorted(xi, vi, wi, xp=np) for xi, vi, wi in zip(x, v, w)]
    np.testing.assert_allclose(host, ref, rtol=RTOL64)


def test_single_atoms_and_identity():
    w1 = jax.jit(w1_against_sorted)
    assert float(w1(np.array([0.25], np.float32), np.array([0.875], np.float32),
                    np.ones(1, np.float32))) == 0.625
    rng = np.random.default_rng(0)
    u = np.sort(rng.integers(0, 8, 50) / 8.0).astype(np.float32)
    uw = np.full(50, 1 / 50, np.float32)
    assert abs(float(w1(u, u, uw))) < 1e-7
    # zero-weight padding appended to the atoms changes nothing
    padded = w1(u, np.r_[u, 0.0, 1.0].astype(np.float32), np.r_[uw, 0.0, 0.0].astype(np.float32))
    assert abs(float(padded)) < 1e-7
    assert abs(line_w1(u[::-1], u, uw)) < 1e-12  # float32 weights: 0.02 is not 1/50


def test_exact1d_method_batched_matches_scipy():
    rng = np.random.default_rng(1)
    x = rng.random((500, 1))
    batch = (3, 4)
    points = np.float32(rng.random(batch + (40, 1)))
    weights = rng.random(batch + (40,))
    weights[..., 30:] = 0.0  # padding
    weights = np.float32(weights / weights.sum(-1, keepdims=True))
    out = make_measure(points, weights, np.full(batch + (40,), 8))
    got = js.w1(x, out, "exact1d")
    assert got.shape == batch and got.dtype == np.float64
    x32 = np.float32(x[:, 0])
    ref = np.array(
        [
            _scipy(x32, np.full(500, 1.0 / 500), points[i, j, :, 0], weights[i, j])
            for i in range(batch[0])
            for j in range(batch[1])
        ]
    ).reshape(batch)
    np.testing.assert_allclose(got, ref, rtol=RTOL)
    # an unbatched measure: the same value
    one = js.w1(x, out[1, 2], js.wasserstein.Exact1D())
    assert one.shape == ()
    assert float(one) == got[1, 2]


def test_composes_with_outer_jit_and_vmap():
    # the pure function composes with an outer jit over a leading batch of data sets
    rng = np.random.default_rng(2)
    u = jnp.sort(jnp.asarray(rng.random((2, 30)), jnp.float32), axis=1)
    w = jnp.full((2, 30), 1 / 30, jnp.float32)
    out = jax.jit(jax.vmap(w1_against_sorted))(u, u[::-1], w)
    np.testing.assert_allclose(out[0], out[1], rtol=1e-6)


@pytest.mark.parametrize("x, name", [  # (d = 2 data: test_bounds, with a 2-D measure)
    (np.full((5, 1), 1.5), "X"),
    (np.full((5, 1), np.nan), "X"),
])
def test_bad_input_names_argument(x, name):
    out = make_measure(np.zeros((3, 1)), np.ones(3) / 3, np.full(3, 2))
    with pytest.raises(ValueError, match=name):
        js.w1(x, out, "exact1d")
    with pytest.raises(ValueError, match="points"):
        js.w1(np.zeros((5, 1)), make_measure(np.full((3, 1), np.nan), np.ones(3) / 3,
                                              np.full(3, 2)), "exact1d")
