"""The one rounding rule, sizing rule and chunker (jaxsynth/core/batching.py) against
brute-force definitions: the grid of ``per_octave`` values per octave enumerated, the
largest fitting power of two searched, the chunks compared with one call on everything.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsynth.core.batching import capacity_bucket, chunk_rows, chunked, fitting_batch


def grid(per_octave: int, top: int) -> np.ndarray:
    """Every value of the grid up to ``top``: 1, 2, ... per_octave, then ``k·2^e`` with
    ``per_octave ≤ k < 2·per_octave`` (``per_octave`` values per octave)."""
    values = set(range(1, per_octave + 1))
    e = 0
    while per_octave << e <= top:
        values.update(k << e for k in range(per_octave, 2 * per_octave))
        e += 1
    return np.array(sorted(values))


@pytest.mark.parametrize("per_octave", [1, 2, 4, 8])
@pytest.mark.parametrize("minimum", [1, 8, 64])
def test_capacity_bucket_is_the_next_grid_value(per_octave, minimum):
    values = grid(per_octave, 1 << 14)
    sizes = np.arange(0, 5000)
    up = capacity_bucket(sizes, per_octave, minimum)
    down = capacity_bucket(sizes, per_octave, minimum, down=True)
    for size, u, dn in zip(sizes, up, down):
        floor = max(size, minimum)
        assert u == values[values >= floor][0]
        assert dn == values[values <= floor][-1]
        assert capacity_bucket(int(size), per_octave, minimum) == u  # scalars as arrays
        assert u - floor <= floor / per_octave  # at most 1/per_octave slack
    assert capacity_bucket(2**40 + 3, 1) == 2**41 and capacity_bucket(2**40 + 3, 1, down=True) == 2**40


def test_fitting_batch_is_the_largest_power_of_two_that_fits():
    for item in (1.0, 3.0, 1000.0, 1e9):
        for memory in (0.5, 7.0, 4096.0, 1e6):
            for most in (1, 5, 64):
                fits = [b for b in (1 << e for e in range(12))
                        if b <= most and b * item <= max(memory, item)]
                assert fitting_batch(item, memory, most) == max(fits), (item, memory, most)


def test_chunk_rows_cover_every_row_in_equal_chunks():
    for total, size in ((1, 4), (7, 3), (8, 4), (10, 10)):
        chunks = list(chunk_rows(total, size))
        assert all(len(c) == size for c in chunks)
        rows = np.concatenate(chunks)
        np.testing.assert_array_equal(np.unique(rows), np.arange(total))
        assert np.all(rows[total:] == total - 1)  # the padding repeats the last row


@pytest.mark.parametrize("library", [np, jnp])
def test_chunked_is_one_call_in_chunks_of_one_shape(library):
    rng = np.random.default_rng(0)
    a, b = library.asarray(rng.random((11, 3))), library.asarray(rng.random((11,)))
    shapes = []

    def fn(x, y):
        shapes.append(x.shape)
        return {"sum": x.sum(axis=1) + y, "twice": 2 * x}

    for size in (1, 4, 11, 50):
        shapes.clear()
        out = chunked(fn, (a, b), size)
        assert len(set(shapes)) == 1 and shapes[0][0] == min(size, 11)
        np.testing.assert_array_equal(out["sum"], a.sum(axis=1) + b)
        np.testing.assert_array_equal(out["twice"], 2 * a)
        assert isinstance(out["sum"], np.ndarray) == (library is np)  # stays where it was
    jitted = jax.jit(lambda x: x**2)
    np.testing.assert_allclose(chunked(jitted, (jnp.arange(9.0),), 4), jnp.arange(9.0)**2)
