"""The host kernel of the pass over all atoms (``hostpass.host_pass``) against the jitted
dense pass (``ctransform._dense_pass``, the same arithmetic) and brute force in float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsynth.wasserstein import ctransform, hostpass
from jaxsynth.wasserstein.exact import levels
from jaxsynth.wasserstein.hostpass import host_pass


def inputs(d, m, size, scale, seed, n=2500):
    """Points in chunks, ``m`` atoms padded to ``size``, centred potentials like transport
    duals (Lipschitz in the atom, slope ``scale``) plus noise; padding atoms never best.
    Points (uneven density) and atoms in Morton order, as the pruned pass needs them."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, d)) ** 2
    chunks = ctransform.point_chunks(X[levels.morton_order(X)])
    atoms = rng.random((size, d))
    atoms[:m] = atoms[levels.morton_order(atoms[:m])]
    v = -scale * np.abs(atoms - 0.3).max(axis=1) - 0.002 * rng.random(size)
    v[m:] = -4 * d - 1
    v -= v[:m].max()
    return chunks, atoms.astype(np.float32), v.astype(np.float32)


def brute_force(chunks, y, v, metric):
    """Reduced costs [P, S] in float64 of the float32 inputs."""
    diff = np.abs(chunks.reshape(-1, 1, y.shape[1]).astype(np.float64) - y[None].astype(np.float64))
    cost = diff.max(-1) if metric == "linf" else np.sqrt((diff**2).sum(-1))
    return cost - v.astype(np.float64)


@pytest.mark.parametrize("d, metric", [
    (2, "linf"), (3, "linf"), (7, "linf"), (2, "l2"),
    *(pytest.param(d, metric, marks=pytest.mark.slow)
      for d, metric in [(1, "linf"), (1, "l2"), (3, "l2"), (7, "l2")])])
def test_host_pass_is_the_jitted_pass(d, metric):
    # the same float32 operations in the same order, and the same picks of best atoms:
    # the ℓ∞ c-transform and best atoms bit for bit; ℓ2 up to the contraction of a
    # multiply-add that XLA may make (a float32 rounding), the best atoms' reduced costs
    # alike, and both sets the true best (brute force) up to near-ties
    for m, size, scale, seed in ((700, 768, 0.2, d), (3000, 3072, 2.0, d + 10)):
        chunks, y, v = inputs(d, m, size, scale, seed)
        every = brute_force(chunks, y, v, metric)
        for k in (0, 1, 4, 8):
            f_jit, b_jit = jax.device_get(ctransform._dense_pass(metric, k)(
                jnp.asarray(chunks), jnp.asarray(y), jnp.asarray(v)))
            f_host, b_host = host_pass(chunks.reshape(-1, d), y, v, metric, k)
            assert f_host.dtype == np.float32 and b_host.shape == (len(f_jit), k)
            assert b_host.max(initial=0) < m
            # the c-transform: float32 rounding of the float64 minimum (4 operations)
            np.testing.assert_allclose(f_host, every.min(axis=1), rtol=2.0**-21, atol=2.0**-22)
            if metric == "linf":
                np.testing.assert_array_equal(f_host, f_jit)
                np.testing.assert_array_equal(b_host, b_jit)
            else:
                np.testing.assert_allclose(f_host, f_jit, rtol=2.0**-22, atol=0)
            if k:
                chosen = np.sort(np.take_along_axis(every, b_host, axis=1), axis=1)
                truth = np.sort(np.partition(every, k - 1, axis=1)[:, :k], axis=1)
                np.testing.assert_allclose(chosen, truth, rtol=2.0**-14, atol=1e-6)
                assert all(len(set(row)) == k for row in b_host[:50])  # k distinct atoms


@pytest.mark.parametrize("d, metric", [(1, "l2"), (2, "linf"), (2, "l2"), (3, "l2"), (7, "linf"),
                                       (7, "l2")])
def test_the_c_transform_until_the_kernel_is_ready_is_the_kernels(d, metric, monkeypatch):
    # a pass with no best atoms runs on the NumPy stand-in until the kernel is loaded or
    # compiled (numba_cache.ready): the kernel's float32 operations in its order, so its
    # c-transform bit for bit, also where the steep potentials make far atoms win; a pass
    # that picks best atoms, or one past the stand-in's work bound, waits for the kernel
    for scale in (0.2, 2.0):
        chunks, y, v = inputs(d, 700, 768, scale, d)
        x = chunks.reshape(-1, d)
        kernel, _ = hostpass._pass(x, y, v, metric == "linf", 0, len(x), np.inf)
        np.testing.assert_array_equal(hostpass._c_transform(x, y, v, metric == "linf"), kernel)
    monkeypatch.setattr(hostpass, "ready", lambda *args: False)
    monkeypatch.setattr(hostpass, "_c_transform", lambda *args: (kernel + 1))
    for box in (None, ctransform.BOX):
        fmin, best = host_pass(x, y, v, metric, 0, box)
        np.testing.assert_array_equal(fmin, kernel + 1)
        assert best.shape == (len(x), 0) and best.dtype == np.int32
    assert host_pass(x, y, v, metric, 4, ctransform.BOX)[1].shape == (len(x), 4)
    monkeypatch.setattr(hostpass, "STAND_IN_PAIRS", len(x) * len(y) - 1)  # a larger pass
    np.testing.assert_array_equal(host_pass(x, y, v, metric, 0)[0], kernel)  # waits


def test_reduced_pass_routes_cpu_arrays_to_the_host_kernel(monkeypatch):
    # reduced_pass sends the dense pass of CPU arrays to the host kernel; the jitted
    # pass is what an accelerator's arrays get (its route here with on_host off)
    chunks, y, v = inputs(3, 1000, 1024, 0.5, 4)
    args = (jnp.asarray(chunks), jnp.asarray(y), jnp.asarray(v), "linf", 4)
    calls = []
    monkeypatch.setattr(ctransform, "host_pass",
                        lambda *a: calls.append(1) or host_pass(*a))
    host = ctransform.reduced_pass(*args)
    assert calls and ctransform.on_host(args[0]) and ctransform.on_host(chunks)
    monkeypatch.setattr(ctransform, "on_host", lambda chunks: False)
    jitted = ctransform.reduced_pass(*args)
    assert len(calls) == 1
    np.testing.assert_array_equal(host[0], jitted[0])
    np.testing.assert_array_equal(host[1], jitted[1])


@pytest.mark.parametrize("metric", ["linf", "l2"])
@pytest.mark.parametrize("d", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_pruned_host_pass_is_the_dense_pass(d, metric):
    # boxes of consecutive points against the atom groups that can hold their best atoms:
    # the dense pass's c-transform bit for bit and best atoms of the same reduced costs
    # (the true best, brute force), also under steep potentials (far atoms win); the
    # bounds must prune, else this proves nothing
    for scale, seed in ((0.2, d), (2.0, d + 10)):
        chunks, y, v = inputs(d, 3000, 3072, scale, seed, n=5000)
        every = brute_force(chunks, y, v, metric)
        for k in (0, 4, 8):
            f_dense, b_dense = host_pass(chunks.reshape(-1, d), y, v, metric, k)
            f_pruned, b_pruned = host_pass(chunks.reshape(-1, d), y, v, metric, k,
                                           box=ctransform.BOX)
            np.testing.assert_array_equal(f_pruned, f_dense)
            if k:
                assert b_pruned.max() < 3000
                chosen = np.sort(np.take_along_axis(every, b_pruned, axis=1), axis=1)
                truth = np.sort(np.partition(every, k - 1, axis=1)[:, :k], axis=1)
                np.testing.assert_allclose(chosen, truth, rtol=2.0**-14, atol=1e-6)
    keep = np.asarray(ctransform._candidate_groups(metric)(
        jnp.asarray(chunks), jnp.asarray(y), jnp.asarray(v), 0.0))
    assert keep.mean() < 0.8


@pytest.mark.parametrize("d, m, metric", [(1, 40, "l2"), (2, 100, "linf"), (3, 300, "l2"),
                                          (10, 370, "linf"), (10, 370, "l2")])
def test_the_c_transform_alone_by_boxes_is_the_dense_one(d, m, metric):
    # a pass with no best atoms prunes each box's atoms one by one (among the groups it
    # keeps) from HOST_PRUNE_ATOMS_ALONE atoms: the dense c-transform bit for bit, with
    # duplicated atoms and potentials (ties) and steep potentials (far atoms win)
    for scale, seed in ((0.2, d), (2.0, d + 10)):
        size = -(-m // 64) * 64
        chunks, y, v = inputs(d, m, size, scale, seed, n=3000)
        y[1:m:7], v[1:m:7] = y[0:m - 1:7], v[0:m - 1:7]  # ties
        x = chunks.reshape(-1, d)
        dense = host_pass(x, y, v, metric, 0)[0]
        np.testing.assert_allclose(dense, brute_force(chunks, y, v, metric).min(axis=1),
                                   rtol=2.0**-21, atol=2.0**-22)
        assert ctransform.HOST_PRUNE_ATOMS_ALONE <= size < ctransform.HOST_PRUNE_ATOMS
        np.testing.assert_array_equal(
            ctransform.reduced_pass(chunks, y, v, metric, 0)[0][:len(x)], dense)


def test_host_pass_refuses_potentials_that_are_not_centred():
    # the bit-pattern minima need nonnegative reduced costs: v ≤ 0, no NaN
    chunks, y, v = inputs(2, 200, 256, 0.5, 1)
    for bad in (0.1, np.nan):
        w = v.copy()
        w[3] = bad
        with pytest.raises(ValueError, match="v must be centred"):
            host_pass(chunks.reshape(-1, 2), y, w, "linf", 4)
