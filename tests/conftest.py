"""Test-session settings.

XLA's CPU backend spends most of a small test's time compiling; the suite compiles
dozens of kernels, so it asks LLVM for its cheapest optimisation level.  Set before any
computation (XLA reads the flag when the backend starts); a caller's own ``XLA_FLAGS``
are kept.  The library itself never changes XLA or JAX configuration.

``JAXSYNTH_FULL_TESTS=1`` runs the slow-marked tests at their full sizes (10^6 audit
releases, 10^7-point scale run); by default they run in the reduced form CI affords.

Memory maps.  Every executable XLA compiles on the CPU keeps about 18 memory mappings
while it lives, and JAX keeps every executable of a live function.  The suite compiles
thousands of kernels in one process, and past the kernel's ``vm.max_map_count`` (65530 by
default) LLVM's next allocation fails: the run died in a compilation, with a segmentation
fault or an abort, at a different test each time.  After any test that leaves the process
above ``MAP_BUDGET`` mappings, the compilation caches are cleared
(``jax.clear_caches``), which frees the executables; later tests recompile what they need.

The test process runs with ``JAXSYNTH_NO_CACHE=1`` (the command line's ``main``, called
in process, would otherwise turn JAX's persistent compilation cache on for every later
test).  Subprocesses the tests start (the command line, notebook kernels) choose their
own caches.

Workers.  The suite runs on ``pytest-xdist`` workers, one per core up to four (``addopts``
in ``pyproject.toml``): most of a test's time is one thread tracing and compiling, so
two workers on two cores take little more than half as long.  Work is handed out a file
at a time (``--dist loadfile``: a module's fixtures are computed once, in one worker).
``pytest -n 0`` runs everything in this process.
"""

import os
from pathlib import Path

os.environ["JAXSYNTH_NO_CACHE"] = "1"

_FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
os.environ["XLA_FLAGS"] = f"{_FAST_COMPILE} {os.environ.get('XLA_FLAGS', '')}".strip()

import collections  # noqa: E402
import contextlib  # noqa: E402
import gc  # noqa: E402
import logging  # noqa: E402
import re  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

FULL_TESTS = os.environ.get("JAXSYNTH_FULL_TESTS", "") not in ("", "0")
"""Run slow-marked tests at full size (see the module docstring)."""


def _max_map_count() -> int:
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return 65530


MAP_BUDGET = _max_map_count() // 3
"""Memory mappings above which the compilation caches are cleared (see the docstring)."""


def _mappings() -> int:
    try:
        with open("/proc/self/maps", "rb") as maps:
            return sum(1 for _ in maps)
    except OSError:  # not Linux: nothing to watch
        return 0


def pytest_runtest_teardown(item, nextitem):
    if _mappings() > MAP_BUDGET:
        jax.clear_caches()
        gc.collect()


@contextlib.contextmanager
def count_compiles():
    """Count XLA compilations inside the block, by function name (``jax_log_compiles``).

    Yields a ``collections.Counter`` of the names JAX logs as ``Compiling jit(NAME)``.
    """
    counter = collections.Counter()

    class Handler(logging.Handler):
        def emit(self, record):
            match = re.match(r"Compiling jit\(([^)]*)\)", record.getMessage())
            if match:
                counter[match.group(1)] += 1

    handler = Handler(level=logging.DEBUG)
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    previous = jax.config.jax_log_compiles
    jax.config.update("jax_log_compiles", True)
    try:
        yield counter
    finally:
        jax.config.update("jax_log_compiles", previous)
        logger.removeHandler(handler)


@pytest.fixture(scope="session")
def cli_env(tmp_path_factory) -> dict:
    """Environment of ``jaxsynth`` subprocesses: on the CPU, sharing one compilation cache
    (so a kernel compiled by one subprocess is loaded by the next)."""
    cache = tmp_path_factory.getbasetemp() / "jax-compilation-cache"
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PLATFORMS="cpu",
               JAXSYNTH_CACHE_DIR=str(cache))
    env.pop("JAXSYNTH_NO_CACHE", None)
    return env
