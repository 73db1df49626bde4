"""The numba kernels' cache (``jaxsynth.numba_cache``) heals from every damage.

Truth: the pair (lower, upper) of the default exact W1 that a process with a clean cache
computes, bit for bit (the kernels are the same machine code, loaded or compiled), and
POT's ``emd2`` inside it.  Every run is a new Python process in its own temporary cache
directory, so that a damaged entry that crashed the loader would fail the test, not
pytest.  The default run damages one cheap kernel's entry per kind (each heal compiles
that kernel again); the slow run damages every entry at random places.
"""

import errno
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import llvmlite.binding
import numpy as np
import ot
import pytest

from jaxsynth import compilation, numba_cache

RUN = textwrap.dedent("""
    import errno, json, os, sys, tempfile
    import numpy as np
    refuse, cache = os.environ.get("REFUSE_WRITES"), os.environ["JAXSYNTH_CACHE_DIR"]
    if refuse == "ENOSPC":  # a full disk: files in the cache are made, writes fail
        opened = os.fdopen
        class Full:
            def __init__(self, file): self.file = file
            def __enter__(self): return self
            def __exit__(self, *exc): self.file.close()
            def write(self, data): raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        def fdopen(fd, *args, **kwargs):
            file = opened(fd, *args, **kwargs)
            return Full(file) if os.readlink(f"/proc/self/fd/{fd}").startswith(cache) else file
        os.fdopen = fdopen
    elif refuse == "EACCES":  # a read-only folder, as a process that is not root meets it
        made = tempfile.mkstemp
        def mkstemp(*args, dir=None, **kwargs):
            if str(dir).startswith(cache):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
            return made(*args, dir=dir, **kwargs)
        tempfile.mkstemp = mkstemp
    from jaxsynth.wasserstein.exact import prepare_exact, w1_exact
    rng = np.random.default_rng(0)
    X = rng.random((1500, 2))
    points, weights = rng.random((1, 40, 2)).astype(np.float32), rng.random((1, 40))
    lower, upper = w1_exact(prepare_exact(X), points, weights, workers=1)
    print(json.dumps({"pair": [float(lower[0]).hex(), float(upper[0]).hex()]}))
""")
KERNEL = "jaxsynth.wasserstein.exact.certificate._arc_sums"
"""The entry the default run damages: a kernel the run calls, and cheap to compile."""
OTHER = "jaxsynth.wasserstein.exact.simplex._hang_rows"
"""The entry swapped with it (another cheap kernel the run calls)."""


def run(cache: Path, refuse: str | None = None) -> tuple[list, str]:
    """The pair a new process computes with the numba cache in ``cache``, and its stderr."""
    env = {k: v for k, v in os.environ.items() if k != compilation.ENV_OFF}
    env.update(JAXSYNTH_CACHE_DIR=str(cache), JAX_PLATFORMS="cpu")
    if refuse:
        env["REFUSE_WRITES"] = refuse
    done = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]  # no crash, no error
    return json.loads(done.stdout.splitlines()[-1])["pair"], done.stderr


def entries(cache: Path) -> dict[str, Path]:
    """The cache's entries by kernel name."""
    return {p.name.rsplit("-", 1)[0]: p for p in (cache / "numba").glob("*/*.nbk")}


def warnings_in(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "numba kernel cache" in line]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A cache written by a first run, and that run's pair (POT's value inside it)."""
    cache = tmp_path_factory.mktemp("numba-cache")
    pair, stderr = run(cache)
    assert not warnings_in(stderr)
    rng = np.random.default_rng(0)
    X = rng.random((1500, 2))
    points, weights = rng.random((40, 2)).astype(np.float32), rng.random(40)
    truth = ot.emd2(np.full(1500, 1 / 1500), weights / weights.sum(),
                    ot.dist(X, points.astype(np.float64), metric="chebyshev"))
    lower, upper = (float.fromhex(x) for x in pair)
    assert lower <= truth + 1e-12 and truth <= upper + 1e-12
    assert {KERNEL, OTHER} <= set(entries(cache))
    return cache, pair


def copy(cache: Path, tmp_path: Path) -> Path:
    target = tmp_path / "cache"
    subprocess.run(["cp", "-a", str(cache), str(target)], check=True)
    return target


def damage(kind: str, paths: list[Path], rng: np.random.Generator) -> None:
    """Damage the entries ``paths`` (at random places from ``rng``; ``"swap"``: each
    gets the next one's bytes)."""
    if kind == "swap":
        data = [path.read_bytes() for path in paths]
        for path, other in zip(paths, data[1:] + data[:1]):
            path.write_bytes(other)
        return
    for path in paths:
        data = path.read_bytes()
        if kind == "truncate":
            path.write_bytes(data[: int(rng.integers(0, len(data)))])
        elif kind == "flip":  # a few bits anywhere, the machine code included
            damaged = bytearray(data)
            for at in rng.choice(len(data), size=int(rng.integers(1, 4)), replace=False):
                damaged[at] ^= 1 << int(rng.integers(8))
            path.write_bytes(bytes(damaged))
        elif kind == "random":
            path.write_bytes(rng.bytes(len(data)))


@pytest.mark.parametrize("kind", ["truncate", "flip", *(pytest.param(kind, marks=pytest.mark.slow)
                                                        for kind in ("random", "swap"))])
def test_a_damaged_entry_is_dropped_and_compiled_again(kind, clean, tmp_path):
    cache, pair = clean
    cache = copy(cache, tmp_path)
    before = entries(cache)
    damaged = [KERNEL, OTHER] if kind == "swap" else [KERNEL]
    damage(kind, [before[name] for name in damaged], np.random.default_rng(len(kind)))
    healed, stderr = run(cache)
    assert healed == pair
    lines = warnings_in(stderr)  # one line per entry dropped, naming it
    assert len(lines) == len(damaged)
    for name, line in zip(sorted(damaged), sorted(lines)):
        assert before[name].name in line and "dropped" in line
        after = entries(cache)[name]  # written afresh: it verifies
        key = after.read_bytes()[len(numba_cache.MAGIC):].split(b"\n", 1)[0].decode()
        assert numba_cache._verified(after.read_bytes(), key) is not None


@pytest.mark.parametrize("refuse", ["ENOSPC", "EACCES"])
def test_a_cache_that_cannot_be_written_compiles_in_memory(refuse, clean, tmp_path):
    # a full disk (every write fails) or a read-only folder (no file can be made; as
    # root, chmod does not stop writes, so the refusal is simulated as well): the
    # damaged kernel is compiled in memory, with one warning, and nothing is left behind
    cache, pair = clean
    cache = copy(cache, tmp_path)
    damage("truncate", [entries(cache)[KERNEL]], np.random.default_rng(0))
    folder = next((cache / "numba").iterdir())
    if refuse == "EACCES":
        folder.chmod(0o555)
    try:
        healed, stderr = run(cache, refuse)
    finally:
        folder.chmod(0o755)
    assert healed == pair
    (line,) = [w for w in warnings_in(stderr) if "cannot write" in w]
    assert os.strerror(getattr(errno, refuse)) in line
    assert not list(folder.glob(".tmp-*"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["truncate", "flip", "random", "swap"])
def test_every_entry_damaged(kind, clean, tmp_path):
    # every entry of the cache damaged alike (every kernel compiled again), then a later
    # process reads every entry back without a warning
    cache, pair = clean
    cache = copy(cache, tmp_path)
    paths = sorted(entries(cache).values())
    damage(kind, paths, np.random.default_rng(7))
    for trial in range(2):
        healed, stderr = run(cache)
        assert healed == pair
        assert bool(warnings_in(stderr)) == (trial == 0)


READY = textwrap.dedent("""
    import json
    import numpy as np
    from jaxsynth import numba_cache
    from jaxsynth.wasserstein.exact import certificate
    rng = np.random.default_rng(0)
    args = (rng.random((50, 2)), rng.permutation(50), np.array([0, 20, 50]),
            np.array([0, 1, 1]), np.array([0, 0, 1]), rng.random((2, 2)), True)
    first = numba_cache.ready(certificate._arc_sums, *args)
    threads = list(numba_cache._compiles.values())
    compiled = certificate._arc_sums.signatures
    for thread in threads:
        thread.join()
    print(json.dumps({"first": first, "threads": len(threads), "compiled": len(compiled),
                      "after": numba_cache.ready(certificate._arc_sums, *args),
                      "loaded": sum(certificate._arc_sums.stats.cache_hits.values()),
                      "sums": certificate._arc_sums(*args).tolist(),
                      "stand_in": certificate._arc_sums_numpy(*args).tolist()}))
""")


@pytest.mark.parametrize("off", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_kernel_loads_or_compiles_beside_its_caller(off, tmp_path):
    # ready: False at once, the kernel compiled on a background thread (the caller runs
    # its stand-in), True once that has ended, the entry written; the next process loads
    # it on a background thread alike; with the cache off every process compiles
    env = {k: v for k, v in os.environ.items() if k != compilation.ENV_OFF}
    env.update(JAXSYNTH_CACHE_DIR=str(tmp_path), JAX_PLATFORMS="cpu")
    if off:
        env[compilation.ENV_OFF] = "1"
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", READY], env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    for run_ in runs:
        assert run_["after"] and run_["sums"] == run_["stand_in"]
    for run_, loaded in zip(runs, (0, 0 if off else 1)):
        assert {k: run_[k] for k in ("first", "threads", "compiled", "loaded")} == {
            "first": False, "threads": 1, "compiled": 0, "loaded": loaded}
    assert bool(entries(tmp_path)) == (not off)


def test_the_cache_lives_beside_the_xla_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(compilation.ENV_OFF, raising=False)
    monkeypatch.delenv(compilation.ENV_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compilation.default_cache_dir() == tmp_path / "jaxsynth" / "xla"
    assert numba_cache.cache_dir() == tmp_path / "jaxsynth" / "numba"
    monkeypatch.setenv(compilation.ENV_DIR, str(tmp_path / "mine"))
    assert numba_cache.cache_dir() == tmp_path / "mine" / "numba"
    monkeypatch.setenv(compilation.ENV_OFF, "1")
    assert numba_cache.cache_dir() is None
    package = Path(numba_cache.__file__).parent
    assert package not in (tmp_path / "jaxsynth" / "numba").parents


def test_entries_are_keyed_by_version_and_cpu(clean):
    cache, _ = clean
    (folder,) = (cache / "numba").iterdir()
    # version-cpu-features hash; a CPU's name may hold hyphens ("icelake-server")
    prefix = f"{numba_cache._version()}-{llvmlite.binding.get_host_cpu_name()}-"
    assert folder.name.startswith(prefix), (folder.name, prefix)
    assert re.fullmatch("[0-9a-f]{8}", folder.name[len(prefix):])


def test_the_numba_internals_it_uses_exist():
    # numba has no public hook for a cache; a release that moves one of these fails here
    import importlib

    from jaxsynth.wasserstein.exact import certificate

    for name in numba_cache.NUMBA_INTERNALS:
        module, _, attribute = name.rpartition(".")
        try:
            owner = importlib.import_module(module)
        except ImportError:
            parent, _, cls = module.rpartition(".")
            owner = getattr(importlib.import_module(parent), cls)
        if attribute == "_cache":  # an instance attribute: njit sets it
            assert isinstance(certificate._arc_sums._cache, numba_cache.KernelCache)
        elif not hasattr(owner, attribute):  # another instance attribute
            assert hasattr(certificate._arc_sums, attribute), name
        else:
            assert callable(getattr(owner, attribute)), name
    assert issubclass(numba_cache.KernelCache, numba_cache.caching._Cache)
