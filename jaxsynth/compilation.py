"""The persistent compilation cache: a second run skips XLA compilation.

The library never changes JAX's configuration by itself; applications opt in.  The
``jaxsynth`` command line calls ``enable_compilation_cache()`` before it computes
anything (``--no-cache`` or ``JAXSYNTH_NO_CACHE=1`` opt out), and the notebooks call it in
their first cell.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import jax

ENV_DIR = "JAXSYNTH_CACHE_DIR"
ENV_OFF = "JAXSYNTH_NO_CACHE"


def default_cache_dir() -> Path:
    """``$JAXSYNTH_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxsynth/xla``, else ``~/.cache/jaxsynth/xla``."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaxsynth" / "xla"


def enable_compilation_cache(path=None) -> Path | None:
    """Store compiled kernels in ``path`` (default ``default_cache_dir()``) and reuse them.

    Every compilation is cached, however short (JAX's default skips those under 1 s,
    which are most of jaxsynth's).  Returns the directory, or ``None`` when
    ``JAXSYNTH_NO_CACHE`` is set, or when the directory cannot be created or written (a
    read-only file system, a file in the way): then it warns once and the run goes on
    without the cache.
    """
    if os.environ.get(ENV_OFF, "") not in ("", "0"):
        return None
    directory = Path(path).expanduser() if path is not None else default_cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        usable = os.access(directory, os.W_OK | os.X_OK)
    except OSError:
        usable = False
    if not usable:
        warnings.warn(f"the compilation cache directory {str(directory)!r} cannot be created "
                      "or written; running without the cache", RuntimeWarning, stacklevel=2)
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return directory
