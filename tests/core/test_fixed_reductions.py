"""``frontier.fixed_reduce`` and ``fixed_sum`` against NumPy's reductions, and the fixed
order's promise: a row's result is the same bits whatever the other rows of its batch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsynth.core.frontier import fixed_reduce, fixed_sum


@pytest.mark.parametrize("axis, length", [(0, 7), (1, 1), (1, 7), (1, 1000), (-1, 64)])
def test_reductions_are_numpys(axis, length):
    # the reduced axis: the first (3 rows), the middle of every length (one, odd, long
    # and not a power of two), the last (five)
    rng = np.random.default_rng(length)
    ints = rng.integers(-50, 50, (3, length, 5)).astype(np.int32)
    flags = rng.random((3, length, 5)) < 0.9
    for op, fill, truth in ((jnp.maximum, np.iinfo(np.int32).min, np.max),
                            (jnp.minimum, np.iinfo(np.int32).max, np.min),
                            (jnp.bitwise_or, 0, np.bitwise_or.reduce)):
        np.testing.assert_array_equal(fixed_reduce(ints, op, fill, axis), truth(ints, axis=axis))
    np.testing.assert_array_equal(fixed_reduce(flags, jnp.logical_and, True, axis),
                                  np.all(flags, axis=axis))
    np.testing.assert_array_equal(fixed_sum(ints, axis), np.sum(ints, axis=axis))
    x = rng.random((3, length, 5)).astype(np.float32)
    np.testing.assert_allclose(fixed_sum(x, axis), np.sum(x.astype(np.float64), axis=axis),
                               rtol=1e-6)  # pairwise float32: far below 1e-6 here


def test_a_rows_sum_does_not_depend_on_its_batch():
    x = np.random.default_rng(0).random((64, 4097)).astype(np.float32)
    whole = np.asarray(jax.jit(fixed_sum)(x))
    for rows in (1, 5, 17):
        part = np.asarray(jax.jit(fixed_sum)(x[:rows]))
        np.testing.assert_array_equal(part, whole[:rows])
