"""Test-session settings.

XLA's CPU backend spends most of a small test's time compiling; the suite compiles
dozens of kernels, so it asks LLVM for its cheapest optimisation level.  Set before any
computation (XLA reads the flag when the backend starts); a caller's own ``XLA_FLAGS``
are kept.  The library itself never changes XLA or JAX configuration.
"""

import os

_FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
os.environ["XLA_FLAGS"] = f"{_FAST_COMPILE} {os.environ.get('XLA_FLAGS', '')}".strip()
