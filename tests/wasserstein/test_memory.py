"""Each W1 method's one memory model against measured peak memory, within ``FACTOR``.

The models (``W1Method.bytes_per_replicate`` and the functions behind them) size every
batch: the sweep's chunks, the tree W1's vmapped chunks, the exact solver's threads.
Measured here: XLA's compiled memory analysis (temporaries and outputs, per replicate of
a block) of the jitted computations (the tree W1's kernel, plain and shifted; the
bracket's projections; the exact1d blocks; a Sinkhorn round and its certificate); the
process's peak resident memory, its high-water mark reset before one replicate is
solved, for the exact solver (numba and NumPy), in a fresh process.  A model must be
within ``FACTOR`` of the measure, either way: above it by design (a conservative model
costs speed, not memory), never far below.  (The tree W1 of balanced trees,
``complete_tree``, needs no model: its memory is one replicate's grid of cells per
thread, bounded by ``complete_tree.MAX_DEPTH``.)
"""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsynth._compat import ott_batching
from jaxsynth.wasserstein import bounds, sinkhorn as sk
from jaxsynth.wasserstein import tree as T
from jaxsynth.wasserstein.methods.exact1d import _block as exact1d_block
from jaxsynth.wasserstein.methods.sinkhorn import Sinkhorn, sinkhorn_memory

FACTOR = 3.0
f32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)  # noqa: E731
i32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.int32)  # noqa: E731


def within(measured: float, model: float) -> bool:
    return model / FACTOR <= measured <= model * FACTOR


def per_replicate(compiled, block: int) -> float:
    analysis = compiled.memory_analysis()
    return (analysis.temp_size_in_bytes + analysis.output_size_in_bytes) / block


@pytest.mark.parametrize("n, depth, atoms", [(3000, 20, 512), (30000, 32, 4096)])
@pytest.mark.parametrize("shifted", [False, True])
def test_tree_kernel(n, depth, atoms, shifted):
    data = T.prepare(np.random.default_rng(0).random((n, 2)), depth)
    tables, block, size = T.metric_tables(depth, 2, "l2"), 8, len(data.counts)
    if shifted:
        args = (jax.ShapeDtypeStruct((block, size, data.words.shape[1]), jnp.uint32),
                i32(block, size), f32(block, atoms, 2), f32(block, atoms), i32(block, atoms),
                f32(block, 2))
    else:
        args = (data.words, data.counts, data.cells, f32(block, atoms, 2), f32(block, atoms),
                i32(block, atoms))
    kernel = T._chunk_kernel(depth, shifted).lower(tables.levels, tables.count, *args).compile()
    assert within(per_replicate(kernel, block), T._replicate_bytes(data, atoms, shifted))


@pytest.mark.parametrize("n, directions, atoms", [(2000, 200, 64), (30000, 2, 4096),
                                                  (5000, 8, 1024)])
def test_bracket_projections(n, directions, atoms):
    compiled = bounds.projected_w1.lower(f32(directions, n), f32(directions, 2),
                                         f32(16, atoms, 2), f32(16, atoms)).compile()
    assert within(per_replicate(compiled, 16), bounds.projection_bytes(n, directions, atoms))


@pytest.mark.parametrize("n, atoms", [(2000, 64), (30000, 4096)])
def test_exact1d_blocks(n, atoms):
    compiled = exact1d_block.lower(f32(n), f32(16, atoms, 1), f32(16, atoms)).compile()
    assert within(per_replicate(compiled, 16), bounds.projection_bytes(n, 1, atoms))


@pytest.mark.parametrize("n, atoms, online", [(2000, 384, False), (8000, 1024, False),
                                              (8000, 1024, True)])
def test_sinkhorn_solve(n, atoms, online):
    points, data = f32(atoms, 2), f32(n, 2)
    vectors = (f32(n), f32(atoms), f32(n), f32(atoms))
    with ott_batching(), jax.default_matmul_precision("highest"):
        round_ = sk._sinkhorn_round.lower(
            data, points, *vectors, 0.01, 0.001, metric="linf", momentum=True,
            batch_size=1024 if online else None, max_iterations=500).compile()
        certificate = sk._certificate.lower(
            data, points, *vectors, 0.01, metric="linf",
            chunk=max(1, min(n, sk._CHUNK_ELEMENTS // atoms))).compile()
    measured = max(per_replicate(round_, 1), per_replicate(certificate, 1))
    assert within(measured, sinkhorn_memory(n, atoms, Sinkhorn(online=online)))


EXACT = textwrap.dedent("""
    import numpy as np
    import jaxsynth as js
    from jaxsynth.wasserstein.exact import prepare_exact, w1_exact
    from jaxsynth.wasserstein.methods.exact import exact_memory

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024

    X = js.datasets.load("spiral", n={n}, key=0)
    out = js.release_batch(0, js.PMM(), X, eps=[1.0], seeds=2)
    points = np.asarray(out.points).reshape(2, -1, 2)
    weights = np.asarray(out.weights).reshape(2, -1)
    data = prepare_exact(X)
    w1_exact(data, points, weights, workers=1)  # compiles numba and XLA for both shapes
    before = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark
    w1_exact(data, points[1:], weights[1:], workers=1)
    m = int((weights[1] > 0).sum())
    model = exact_memory(data.n, m, data.levels_for(m)[0].size)
    print(status("VmHWM") - before, model)
""")


@pytest.mark.parametrize("n", [pytest.param(3000, id="dense coarsest level"),
                               pytest.param(30000, marks=pytest.mark.slow)])
def test_exact_solver(n):
    proc = subprocess.run([sys.executable, "-c", EXACT.format(n=n)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured, model = map(float, proc.stdout.split()[-2:])
    assert within(measured, model), (measured, model)
