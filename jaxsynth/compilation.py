"""Work kept between runs: a second run neither compiles nor traces the engine's kernels.

Two caches, both in one directory and both opt-in (the library never changes JAX's
configuration by itself): the ``jaxsynth`` command line calls
``enable_compilation_cache()`` before it computes anything (``--no-cache`` or
``JAXSYNTH_NO_CACHE=1`` opt out), and the notebooks call it in their first cell.

* **compiled executables**: JAX's persistent compilation cache (XLA is skipped);
* **traced programs**: ``exported_jit`` functions keep the StableHLO of each traced call
  on disk (``jax.export``), in ``<directory>/exported``: tracing is most of a warm run's
  start-up, and a program read back is only lowered and fetched from JAX's cache.  A
  program is found again only under the same key: the function, its static arguments,
  the shapes and dtypes of its arrays, the platform, the JAX version and trace-changing
  configuration, and a hash of jaxsynth's source files.

The cache heals itself: each stored program carries the key it was stored under and a
digest of its bytes, both checked before use.  An entry that cannot be read, fails a
check, does not deserialize or fails when called is dropped, the call runs as plain
``jax.jit`` (the same results, bit for bit) and the entry is written again.  Whatever
cannot be exported runs as plain ``jax.jit``, as does a call on arrays spread over
several devices.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import platform
import tempfile
import warnings
from pathlib import Path

import jax
import numpy as np

ENV_DIR = "JAXSYNTH_CACHE_DIR"
ENV_OFF = "JAXSYNTH_NO_CACHE"
EXPORTED = "exported"
"""Subdirectory of the cache directory that holds the traced programs."""
SUFFIX = ".bin"
MAGIC = b"jaxsynth exported program 1\n"
"""First line of a stored program; the second is its key, then the digest of the rest."""
DIGEST_BYTES = 32
TRACE_CONFIG = ("jax_enable_x64", "jax_default_prng_impl", "jax_threefry_partitionable",
                "jax_numpy_rank_promotion", "jax_default_matmul_precision")
"""JAX options that change what a trace produces (part of a program's key)."""

_exported_dir: Path | None = None
"""Where ``exported_jit`` keeps programs: set by ``enable_compilation_cache``."""


def default_cache_dir() -> Path:
    """``$JAXSYNTH_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxsynth/xla``, else ``~/.cache/jaxsynth/xla``."""
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaxsynth" / "xla"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else ``platform``): what a stored timing
    or a benchmark's figure was measured on."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def enable_compilation_cache(path=None) -> Path | None:
    """Store compiled kernels in ``path`` (default ``default_cache_dir()``) and reuse them.

    Every compilation is cached, however short (JAX's default skips those under 1 s,
    which are most of jaxsynth's).  Returns the directory, or ``None`` when
    ``JAXSYNTH_NO_CACHE`` is set, or when the directory cannot be created or written (a
    read-only file system, a file in the way): then it warns once and the run goes on
    without the cache.

    Examples:
      Once per process, before the first computation (the command line does it unless
      ``--no-cache``):

          js.enable_compilation_cache()          # ~/.cache/jaxsynth/xla

      ``JAXSYNTH_NO_CACHE=1`` turns it off, whoever calls it:

      >>> import jaxsynth as js
      >>> import os
      >>> from unittest import mock
      >>> with mock.patch.dict(os.environ, {"JAXSYNTH_NO_CACHE": "1"}):
      ...     print(js.enable_compilation_cache())
      None
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
    global _exported_dir
    _exported_dir = directory / EXPORTED
    return directory


def exported_jit(fun=None, *, static_argnames: tuple = ()):
    """``jax.jit(fun, static_argnames=...)`` whose traced programs persist across runs.

    While the cache is on (``enable_compilation_cache``), a call's program is read from
    ``<cache>/exported`` when it is there and exported there when it is not; calls
    without the cache, with arrays on several devices, or with a static argument that
    has no reproducible name (a lambda, a local function, a ``repr`` with an object
    address) are plain ``jax.jit`` calls; so is a ``fun`` that is not a module-level
    function.  The arguments other than ``static_argnames`` are pytrees of arrays; the
    results are the same arrays a plain call gives (the same program, compiled by the
    same XLA).
    """
    if fun is None:
        return functools.partial(exported_jit, static_argnames=tuple(static_argnames))
    jitted = jax.jit(fun, static_argnames=static_argnames)
    signature = inspect.signature(fun)
    programs: dict[str, object] = {}

    @functools.wraps(fun)
    def call(*args, **kwargs):
        directory = _exported_dir
        if directory is None:
            return jitted(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        static = {k: v for k, v in bound.arguments.items() if k in static_argnames}
        dynamic = {k: v for k, v in bound.arguments.items() if k not in static_argnames}
        leaves, treedef = jax.tree_util.tree_flatten(dynamic)
        key = _program_key(fun, static, treedef, leaves)
        if key is None:
            return jitted(*args, **kwargs)
        if key not in programs:
            programs[key] = _program(directory, key, fun, static, treedef, leaves) or jitted
        program = programs[key]
        if program is jitted:
            return jitted(*args, **kwargs)
        try:
            return program(*leaves)
        except Exception:  # noqa: BLE001 - a program that verified but fails: drop, rewrite
            programs[key] = jitted
            _drop(directory / f"{key}{SUFFIX}")
            out = jitted(*args, **kwargs)  # a genuine error of the call is raised here
            _store(directory, key, fun, static, treedef, leaves)
            return out

    return call


def _program_key(fun, static: dict, treedef, leaves) -> str | None:
    """The hex digest naming a call's program, or ``None`` when it cannot be named."""
    shapes = []
    for leaf in leaves:
        sharding = getattr(leaf, "sharding", None)
        if sharding is not None and len(sharding.device_set) > 1:
            return None
        shapes.append(str(_spec(leaf)))
    platform = _platform(leaves)
    names = [_static_name(fun)] + [_static_name(v) for _, v in sorted(static.items())]
    if None in names:
        return None
    config = tuple(str(getattr(jax.config, option, None)) for option in TRACE_CONFIG)
    text = repr((names, sorted(static), str(treedef), shapes, config, jax.__version__,
                 platform, _source_hash()))
    return hashlib.sha256(text.encode()).hexdigest()


def _spec(leaf) -> jax.ShapeDtypeStruct:
    """The shape and dtype a jitted call sees for ``leaf`` (64-bit types as JAX narrows them)."""
    return jax.ShapeDtypeStruct(np.shape(leaf), jax.dtypes.canonicalize_dtype(np.result_type(leaf)))


def _platform(leaves) -> str:
    """Where a call runs: the platform of its arrays already on a device, else JAX's default."""
    platforms = {device.platform for leaf in leaves if isinstance(leaf, jax.Array)
                 for device in leaf.sharding.device_set}
    return platforms.pop() if len(platforms) == 1 else jax.default_backend()


def _static_name(value) -> str | None:
    """A text that names a static argument in every run, or ``None``: a function by its
    module and name (not a lambda or a local function, whose names are not unique), any
    other value by a ``repr`` without an object address."""
    if inspect.isfunction(value):
        name = f"{value.__module__}.{value.__qualname__}"
        return None if "<" in name else name
    text = repr(value)
    return None if " at 0x" in text else text


@functools.cache
def _source_hash() -> str:
    """A digest of every jaxsynth source file: programs traced from other code never match."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _program(directory: Path, key: str, fun, static: dict, treedef, leaves):
    """The jitted call of the exported program ``key``: read and verified, or (when it is
    missing or fails any check, then dropped) exported afresh and written; ``None`` when
    it can be neither."""
    path = directory / f"{key}{SUFFIX}"
    exported = _read(path, key, leaves)
    if exported is None:
        _drop(path)
        exported = _store(directory, key, fun, static, treedef, leaves)
        if exported is None:
            return None
    return jax.jit(exported.call)


def _read(path: Path, key: str, leaves):
    """The program stored in ``path`` under ``key``, or ``None`` unless the file reads,
    names ``key``, matches its digest, deserializes and takes arrays shaped as ``leaves``."""
    try:
        data = path.read_bytes()
    except OSError:  # missing, or unreadable (permissions)
        return None
    header = MAGIC + key.encode() + b"\n"
    payload = data[len(header) + DIGEST_BYTES:]
    if (not data.startswith(header) or not payload
            or data[len(header): len(header) + DIGEST_BYTES] != hashlib.sha256(payload).digest()):
        return None
    try:
        exported = jax.export.deserialize(bytearray(payload))
        if [(a.shape, a.dtype) for a in exported.in_avals] != [
                (s.shape, s.dtype) for s in map(_spec, leaves)]:
            return None
    except Exception:  # noqa: BLE001 - any error of a garbled program
        return None
    return exported


def _store(directory: Path, key: str, fun, static: dict, treedef, leaves):
    """Export the call's program and write it under ``key`` (header, digest, program);
    returns it, or ``None`` when it cannot be exported."""
    exported = _export(fun, static, treedef, leaves)
    if exported is not None:
        with contextlib.suppress(ImportError):  # no flatbuffers: this process only
            payload = bytes(exported.serialize())
            _write_atomically(directory / f"{key}{SUFFIX}",
                              MAGIC + key.encode() + b"\n" + hashlib.sha256(payload).digest()
                              + payload)
    return exported


def _drop(path: Path) -> None:
    """Remove a stored program that failed a check (a directory that cannot be written
    keeps it; it is then checked, and refused, on every read)."""
    with contextlib.suppress(OSError):
        path.unlink()


def _export(fun, static: dict, treedef, leaves):
    def flat(*flat_leaves):
        return fun(**jax.tree_util.tree_unflatten(treedef, flat_leaves), **static)

    try:
        return jax.export.export(jax.jit(flat), platforms=(_platform(leaves),))(
            *map(_spec, leaves))
    except Exception:  # noqa: BLE001 - a program export cannot serialise runs as plain jit
        return None


def _write_atomically(path: Path, data) -> None:
    """Write ``data`` to ``path`` through a temporary file in its directory (no reader
    ever sees a partial program); a directory that cannot be written is left alone."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    except OSError:
        return
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(bytes(data))
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
