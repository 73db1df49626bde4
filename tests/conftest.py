"""Test-session settings.

XLA's CPU backend spends most of a small test's time compiling; the suite compiles
dozens of kernels, so it asks LLVM for its cheapest optimisation level.  Set before any
computation (XLA reads the flag when the backend starts); a caller's own ``XLA_FLAGS``
are kept.  The library itself never changes XLA or JAX configuration.

``JAXSYNTH_FULL_TESTS=1`` runs the slow-marked tests at their full sizes (10^6 audit
releases, 10^7-point scale run); by default they run in the reduced form CI affords.

The command line enables JAX's persistent compilation cache.  Tests call it in this
process, and the suite crashed (a segmentation fault inside JAX's cache reads and writes,
in a later test's compilation) when the cache was on in the test process; so the test
process runs with ``JAXSYNTH_NO_CACHE=1``.  Subprocesses the tests start (the command
line, notebook kernels) choose their own caches.
"""

import os

os.environ["JAXSYNTH_NO_CACHE"] = "1"

_FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
os.environ["XLA_FLAGS"] = f"{_FAST_COMPILE} {os.environ.get('XLA_FLAGS', '')}".strip()

import collections  # noqa: E402
import contextlib  # noqa: E402
import logging  # noqa: E402
import re  # noqa: E402

import jax  # noqa: E402

FULL_TESTS = os.environ.get("JAXSYNTH_FULL_TESTS", "") not in ("", "0")
"""Run slow-marked tests at full size (see the module docstring)."""


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
