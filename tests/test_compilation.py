"""Traced programs kept across runs (``jaxsynth.compilation.exported_jit``).

Truth: a program read back from disk is the program a plain ``jax.jit`` call traces, so
its results are bit for bit the plain call's, and reading it back traces nothing (the
traced function's Python body, which runs only while tracing, is not entered).  A new
process is simulated by a new wrapper (its in-process table of programs is empty).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsynth as js
from jaxsynth import compilation


def _scale(x, y):
    return x * y


def _shift(x, y):
    return x + y


TRACES = []
"""One entry per trace of ``combine``."""


def combine(op, power, data, token):
    TRACES.append(1)  # runs only while JAX traces
    values = op(data["x"], data["y"]) ** power
    return {"sum": jnp.sum(values), "values": jnp.where(token, values, -values)}


@pytest.fixture
def exported_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(compilation, "_exported_dir", tmp_path / "exported")
    return tmp_path / "exported"


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=n).astype(np.float32), "y": rng.normal(size=n).astype(np.float32)}


def test_a_program_read_back_is_not_traced_and_gives_the_plain_results(exported_dir):
    traces, fun = TRACES, combine
    traces.clear()
    plain = jax.jit(fun, static_argnames=("op", "power"))(_scale, 3, _data(5), jnp.bool_(True))
    first = compilation.exported_jit(fun, static_argnames=("op", "power"))
    out = first(_scale, 3, _data(5), token=jnp.bool_(True))
    assert len(traces) == 2 and len(list(exported_dir.glob("*.bin"))) == 1
    again = compilation.exported_jit(fun, static_argnames=("op", "power"))  # a new process
    for call in (again, again):
        read = call(_scale, 3, _data(5), jnp.bool_(True))
        assert len(traces) == 2  # nothing traced: the program came from disk
        for result in (out, read):
            assert result.keys() == plain.keys()
            for k in plain:
                np.testing.assert_array_equal(np.asarray(result[k]), np.asarray(plain[k]))
    other = again(_scale, 3, _data(5, seed=1), jnp.bool_(False))  # new values, same program
    np.testing.assert_allclose(other["values"], -(_data(5, 1)["x"] * _data(5, 1)["y"]) ** 3,
                               rtol=1e-6)
    assert len(traces) == 2


def test_a_different_static_shape_or_source_is_traced_afresh(exported_dir, monkeypatch):
    traces, fun = TRACES, combine
    traces.clear()

    def new_wrapper():
        return compilation.exported_jit(fun, static_argnames=("op", "power"))

    new_wrapper()(_scale, 2, _data(4), jnp.bool_(True))
    count = len(traces)
    for args in [(_shift, 2, _data(4)), (_scale, 3, _data(4)), (_scale, 2, _data(6))]:
        out = new_wrapper()(*args, jnp.bool_(True))
        assert len(traces) > count, args
        count = len(traces)
        op, power, data = args
        np.testing.assert_allclose(out["values"], op(data["x"], data["y"]) ** power, rtol=1e-6)
    new_wrapper()(_shift, 2, _data(4), jnp.bool_(True))
    assert len(traces) == count  # each of them is on disk now
    monkeypatch.setattr(compilation, "_source_hash", lambda: "another version of jaxsynth")
    new_wrapper()(_shift, 2, _data(4), jnp.bool_(True))
    assert len(traces) > count


def test_an_unreadable_program_is_exported_again(exported_dir):
    traces, fun = TRACES, combine
    traces.clear()
    compilation.exported_jit(fun, static_argnames=("op", "power"))(_scale, 2, _data(3), True)
    (path,) = exported_dir.glob("*.bin")
    path.write_bytes(b"not a program")
    out = compilation.exported_jit(fun, static_argnames=("op", "power"))(
        _scale, 2, _data(3), jnp.bool_(True))
    np.testing.assert_allclose(out["sum"], np.sum((_data(3)["x"] * _data(3)["y"]) ** 2), rtol=1e-6)
    assert path.read_bytes() != b"not a program"


def test_unnameable_statics_and_no_cache_run_as_plain_jit(exported_dir, monkeypatch):
    traces, fun = TRACES, combine
    traces.clear()
    call = compilation.exported_jit(fun, static_argnames=("op", "power"))
    out = call(lambda x, y: x - y, 2, _data(3), jnp.bool_(True))  # a lambda's name is not unique
    np.testing.assert_allclose(out["values"], (_data(3)["x"] - _data(3)["y"]) ** 2, rtol=1e-6)
    local = compilation.exported_jit(lambda op, power, data, token: combine(op, power, data, token),
                                     static_argnames=("op", "power"))
    local(_scale, 2, _data(3), jnp.bool_(True))
    monkeypatch.setattr(compilation, "_exported_dir", None)
    call(_scale, 2, _data(3), jnp.bool_(True))
    assert not exported_dir.exists()


@pytest.mark.parametrize("mechanism", [
    pytest.param(js.PMM(), id="pmm"),
    pytest.param(js.AdaptivePrunedPMM(), id="adaptive-pruned-pmm", marks=pytest.mark.slow),
    pytest.param(js.PrivTree(shift=True), id="privtree-shift", marks=pytest.mark.slow)])
def test_releases_from_exported_kernels_equal_plain_releases(mechanism, exported_dir,
                                                             monkeypatch):
    X = js.datasets.load("spiral", n=700, key=0)
    key = jax.random.key(3)
    cached = js.release_batch(key, mechanism, X, [0.5, 2.0], seeds=3)
    assert list(exported_dir.glob("*.bin"))  # the engine's kernel went through the cache
    monkeypatch.setattr(compilation, "_exported_dir", None)
    plain = js.release_batch(key, mechanism, X, [0.5, 2.0], seeds=3)
    for field in ("points", "weights", "size", "depth"):
        np.testing.assert_array_equal(np.asarray(getattr(cached, field)),
                                      np.asarray(getattr(plain, field)))


def _corrupt(kind: str, paths: list, rng: np.random.Generator) -> None:
    """Damage the stored programs ``paths`` as ``kind`` says (random places, from ``rng``)."""
    path = paths[int(rng.integers(len(paths)))]
    data = path.read_bytes()
    if kind == "truncate":
        path.write_bytes(data[: int(rng.integers(1, len(data)))])
    elif kind == "flip":  # a few bytes anywhere: header, digest or program
        damaged = bytearray(data)
        for at in rng.choice(len(data), size=int(rng.integers(1, 4)), replace=False):
            damaged[at] ^= int(rng.integers(1, 256))
        path.write_bytes(bytes(damaged))
    elif kind == "swap":  # two programs, each under the other's name
        first, second = paths[:2]
        a, b = first.read_bytes(), second.read_bytes()
        first.write_bytes(b)
        second.write_bytes(a)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "permissions":
        path.chmod(0)


CORRUPTIONS = ("truncate", "flip", "swap", "empty", "permissions")


@pytest.mark.parametrize("trial", range(3))
@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_a_damaged_cache_heals_and_gives_the_plain_results(kind, trial, exported_dir):
    """Truth: the plain ``jax.jit`` results, bit for bit, after any damage; and the damaged
    entries are written again (a later process reads every program back, tracing nothing)."""
    rng = np.random.default_rng([CORRUPTIONS.index(kind), trial])
    calls = [(_scale, 2, _data(5, seed=trial)), (_shift, 3, _data(7, seed=trial))]
    plain = [jax.jit(combine, static_argnames=("op", "power"))(*c, jnp.bool_(True)) for c in calls]
    first = compilation.exported_jit(combine, static_argnames=("op", "power"))
    for c in calls:
        first(*c, jnp.bool_(True))
    paths = sorted(exported_dir.glob("*.bin"))
    assert len(paths) == 2
    _corrupt(kind, paths, rng)
    for _ in range(2):  # the healing process, then a later one reading what it rewrote
        TRACES.clear()
        call = compilation.exported_jit(combine, static_argnames=("op", "power"))
        for c, want in zip(calls, plain):
            got = call(*c, jnp.bool_(True))
            for k in want:
                np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]))
    assert not TRACES  # the later process traced nothing: every entry was healed
    for path in exported_dir.glob("*.bin"):
        path.chmod(0o644)


def test_a_program_that_fails_when_called_is_dropped_and_rewritten(exported_dir, monkeypatch):
    call = compilation.exported_jit(combine, static_argnames=("op", "power"))
    want = call(_scale, 2, _data(4), jnp.bool_(True))
    (path,) = exported_dir.glob("*.bin")
    read, store, stored = compilation._read, compilation._store, []
    monkeypatch.setattr(compilation, "_store", lambda *a: stored.append(a[1]) or store(*a))

    class Failing:
        def call(self, *leaves):
            raise RuntimeError("a program that verifies but cannot run")

    monkeypatch.setattr(compilation, "_read", lambda *a: Failing())
    got = compilation.exported_jit(combine, static_argnames=("op", "power"))(
        _scale, 2, _data(4), jnp.bool_(True))
    for k in want:
        np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]))
    assert stored == [path.stem] and path.exists()  # dropped and written again
    monkeypatch.setattr(compilation, "_read", read)
    TRACES.clear()
    compilation.exported_jit(combine, static_argnames=("op", "power"))(
        _scale, 2, _data(4), jnp.bool_(True))
    assert not TRACES  # the rewritten entry verifies


def test_release_kernels_heal_from_damage(exported_dir, monkeypatch):
    """The engine's kernels through a cache whose every entry has a flipped byte."""
    X = js.datasets.load("spiral", n=500, key=0)
    key = jax.random.key(5)
    js.release_batch(key, js.PMM(), X, [1.0], seeds=2)
    rng = np.random.default_rng(0)
    for path in exported_dir.glob("*.bin"):
        data = bytearray(path.read_bytes())
        data[int(rng.integers(len(data)))] ^= 0x55
        path.write_bytes(bytes(data))
    healed = js.release_batch(key, js.PMM(), X, [1.0], seeds=2)
    monkeypatch.setattr(compilation, "_exported_dir", None)
    plain = js.release_batch(key, js.PMM(), X, [1.0], seeds=2)
    for field in ("points", "weights", "size", "depth"):
        np.testing.assert_array_equal(np.asarray(getattr(healed, field)),
                                      np.asarray(getattr(plain, field)))
