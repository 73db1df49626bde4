"""The engine's assembly of chunk outputs into the [E, S] grid: on a CPU by NumPy into an
aligned buffer (``engine._assemble_on_host``), elsewhere by XLA (``engine._assemble``).
The two must give the same arrays bit for bit: chunks in grid order (the last one
padded past the grid), reordered by a cost order (``source``), and per-atom fields cut
to a width."""

import jax
import numpy as np
import pytest

from jaxsynth import engine


def chunk_outputs(rng, chunks, rows, atoms, d):
    return tuple({
        "points": jax.device_put(rng.random((rows, atoms, d), dtype=np.float32)),
        "weights": jax.device_put(rng.random((rows, atoms), dtype=np.float32)),
        "leaf_depth": jax.device_put(rng.integers(0, 9, (rows, atoms), dtype=np.int32)),
        "size": jax.device_put(rng.integers(1, 99, rows, dtype=np.int32)),
    } for _ in range(chunks))


@pytest.mark.parametrize("ordered, cut", [(False, None), (True, None), (False, 5), (True, 3)])
def test_host_assembly_is_the_xla_assembly(ordered, cut):
    rng = np.random.default_rng(0)
    grid = (2, 5)
    parts = chunk_outputs(rng, chunks=3, rows=4, atoms=7, d=3)  # 12 rows for 10 replicates
    source = rng.permutation(12)[:10].astype(np.int32) if ordered else None
    cut = None if cut is None else (("points", "weights", "leaf_depth"), cut)
    host = engine._assemble_on_host(parts, source, grid=grid, cut=cut)
    xla = engine._assemble(parts, source, grid=grid, cut=cut)
    assert host.keys() == xla.keys()
    for name in xla:
        assert isinstance(host[name], jax.Array)
        assert host[name].dtype == xla[name].dtype
        np.testing.assert_array_equal(np.asarray(host[name]), np.asarray(xla[name]))
    assert host["points"].shape == grid + (cut[1] if cut else 7, 3)


def test_aligned_buffers_start_at_the_alignment():
    for shape, dtype in (((3, 5), np.float32), ((1,), np.int32), ((7, 4, 3), np.float64)):
        a = engine._aligned_empty(shape, dtype)
        assert a.shape == shape and a.dtype == dtype
        assert a.ctypes.data % engine.XLA_ALIGNMENT == 0
