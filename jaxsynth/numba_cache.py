"""numba kernels whose machine code the project keeps, checked before it is run.

``kernel`` is ``numba.njit(nogil=True)`` with a cache of jaxsynth's own in place of
numba's ``cache=True`` (which writes next to the package, in its ``__pycache__``, and
fails, or crashes, on every run after an entry is damaged, until someone deletes it):

* **where**: the user's cache directory beside the XLA cache (``cache_dir``: the same
  ``JAXSYNTH_CACHE_DIR`` and ``XDG_CACHE_HOME`` rules as ``compilation.default_cache_dir``),
  in a folder per jaxsynth version and CPU (name and features); never in the package.
  On by default, like numba's cache it replaces; ``JAXSYNTH_NO_CACHE=1`` turns it off.
* **what**: one file per kernel and signature, named by a digest of its key (the
  kernel's module and name, a SHA-256 of its source file, the signature, the CPU and
  target, numba's and Python's versions); the file holds a header line, the key, a
  SHA-256 of the payload, then the payload (numba's reduced compile result).
* **healing**: an entry that cannot be read, names another key (two files swapped or
  copied over each other), fails its digest (a flipped bit anywhere: damaged machine
  code never reaches the loader), or does not load is dropped with a one-line warning
  (``logging``, logger ``"jaxsynth"``) and the kernel is compiled again, then written
  afresh.  A directory that cannot be written (read-only, a full disk) leaves the
  kernels compiled in memory, with one warning per process.
* **not waiting**: ``ready`` loads or compiles a kernel on a background thread while its
  caller runs a NumPy stand-in (``docs/guide/compile-cache.md``).

numba has no public hook for this: the internals used are ``NUMBA_INTERNALS`` (tested).
A kernel's callees must live in its module (its source digest covers them).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import inspect
import logging
import os
import pickle
import sys
import tempfile
import threading
from pathlib import Path

import numba
from numba.core import caching, compiler, serialize

from jaxsynth.compilation import ENV_DIR, ENV_OFF, default_cache_dir

__all__ = ["cache_dir", "helper", "kernel", "ready"]

FOLDER = "numba"
"""The cache's folder beside the XLA cache (inside ``$JAXSYNTH_CACHE_DIR``)."""
SUFFIX = ".nbk"
MAGIC = b"jaxsynth numba kernel 1\n"
"""First line of an entry; the second is its key, then the SHA-256 of the payload."""
DIGEST_BYTES = 32
NUMBA_INTERNALS = {
    "numba.core.caching._Cache": "the interface a dispatcher's cache implements",
    "numba.core.dispatcher.Dispatcher._cache": "the dispatcher's cache slot (an instance "
                                               "attribute, set by njit)",
    "numba.core.compiler.CompileResult._reduce": "a compile result as picklable parts",
    "numba.core.compiler.CompileResult._rebuild": "a compile result from those parts",
    "numba.core.serialize.dumps": "numba's pickler of those parts",
    "numba.core.dispatcher.Dispatcher.typeof_pyval": "an argument's numba type (``ready``)",
    "numba.core.dispatcher.Dispatcher.overloads": "the compiled signatures (an instance "
                                                  "attribute)",
    "numba.core.dispatcher.Dispatcher.targetctx": "the target of a compile (an instance "
                                                  "attribute)",
}
"""numba's non-public names this module relies on, and what for."""

log = logging.getLogger("jaxsynth")
_unwritable = threading.Event()
"""Set once a write failed: this process then compiles in memory without trying again."""
_compiles: dict = {}
"""Background compiles started by ``ready``: ``(dispatcher, signature)`` to its thread."""
_compiles_lock = threading.Lock()


def cache_dir() -> Path | None:
    """``$JAXSYNTH_CACHE_DIR/numba``, else ``$XDG_CACHE_HOME/jaxsynth/numba``, else
    ``~/.cache/jaxsynth/numba`` (beside ``compilation.default_cache_dir()``, the XLA
    cache); ``None`` when ``JAXSYNTH_NO_CACHE`` is set."""
    if os.environ.get(ENV_OFF, "") not in ("", "0"):
        return None
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR]).expanduser() / FOLDER
    return default_cache_dir().parent / FOLDER


def kernel(fn):
    """``numba.njit(nogil=True)`` of ``fn``, its compiled code kept in ``cache_dir()``
    (compiled once per environment, version and CPU; checked on every load)."""
    dispatcher = numba.njit(nogil=True)(fn)
    dispatcher._cache = KernelCache(fn)
    return dispatcher


def helper(fn):
    """``numba.njit(nogil=True)`` of a function that only kernels call: compiled without
    the wrappers that let Python call it (a fifth of the simplex's cold compile), and into
    each kernel that calls it (the kernel's cache entry holds it; none of its own)."""
    return numba.njit(nogil=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)(fn)


def ready(dispatcher, *args) -> bool:
    """Whether the ``kernel`` ``dispatcher`` has machine code in memory for ``args``.  If
    not, a background thread loads it from the cache (checked and healed as
    ``KernelCache`` does) or compiles it, once, and this is ``False`` until that has
    ended: the caller runs a stand-in meanwhile.  A compile that failed ends too: the
    caller's own call of the kernel then raises its error."""
    signature = tuple(dispatcher.typeof_pyval(a) for a in args)
    if signature in dispatcher.overloads:
        return True
    with _compiles_lock:
        thread = _compiles.get((dispatcher, signature))
        if thread is None:
            thread = threading.Thread(target=_compile_quietly, args=(dispatcher, signature),
                                      name=f"numba compile {dispatcher.py_func.__name__}")
            _compiles[dispatcher, signature] = thread
            thread.start()
    return not thread.is_alive()


def _compile_quietly(dispatcher, signature) -> None:
    """``ready``'s background compile; an error is raised where the kernel is next called
    (numba compiles it again there), not on this thread."""
    with contextlib.suppress(Exception):
        dispatcher.compile(signature)


class KernelCache(caching._Cache):
    """A dispatcher's cache: one checked file per signature (the module docstring)."""

    def __init__(self, py_func):
        self._name = f"{py_func.__module__}.{py_func.__qualname__}"
        self._source = inspect.getsourcefile(py_func)
        self._enabled = True

    @property
    def cache_path(self):
        directory = cache_dir()
        return None if directory is None else str(directory)

    def enable(self):
        self._enabled = True

    def disable(self):
        self._enabled = False

    def flush(self):
        """Remove this kernel's entries (numba calls it before recompiling)."""
        directory = cache_dir()
        if directory is not None and directory.is_dir():
            for folder in directory.iterdir():
                for path in folder.glob(f"{self._name}-*{SUFFIX}"):
                    _drop(path)

    def load_overload(self, sig, target_context):
        """The compile result stored for ``sig``, or ``None`` (then numba compiles)."""
        target_context.refresh()
        path, key = self._entry(sig, target_context.codegen())
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):  # not cached (yet)
            return None
        except OSError as error:
            log.warning("numba kernel cache: cannot read %s (%s); compiling it in memory",
                        path, error.strerror or error)
            return None
        payload = _verified(data, key)
        if payload is None:
            _heal(path, "it failed its check (damaged, or another kernel's entry)")
            return None
        try:
            return compiler.CompileResult._rebuild(target_context, *pickle.loads(payload))
        except Exception as error:  # noqa: BLE001 - a verified entry numba cannot load
            _heal(path, f"numba could not load it ({type(error).__name__})")
            return None

    def save_overload(self, sig, cres):
        """Write the compile result of ``sig`` (atomically; never an error)."""
        if _unwritable.is_set() or cres.lifted or cres.library.has_dynamic_globals:
            return
        path, key = self._entry(sig, cres.codegen)
        if path is None:
            return
        payload = serialize.dumps(cres._reduce())
        try:
            _write_atomically(path, MAGIC + key.encode() + b"\n"
                              + hashlib.sha256(payload).digest() + payload)
        except OSError as error:
            if not _unwritable.is_set():
                _unwritable.set()
                log.warning("numba kernel cache: cannot write to %s (%s); the kernels are "
                            "compiled in memory in this process", path.parent,
                            error.strerror or error)

    def _entry(self, sig, codegen) -> tuple[Path | None, str]:
        """The entry's path (``None``: the cache is off or this kernel is not cachable)
        and its key."""
        directory = cache_dir()
        if directory is None or not self._enabled or self._source is None:
            return None, ""
        triple, cpu, features = codegen.magic_tuple()
        text = repr((MAGIC, self._name, _source_digest(self._source), str(sig), triple, cpu,
                     features, numba.__version__, sys.version, _version()))
        key = hashlib.sha256(text.encode()).hexdigest()
        machine = hashlib.sha256(f"{triple} {features}".encode()).hexdigest()[:8]
        folder = directory / f"{_version()}-{cpu}-{machine}"
        return folder / f"{self._name}-{key[:24]}{SUFFIX}", key


def _verified(data: bytes, key: str) -> bytes | None:
    """The payload of an entry that names ``key`` and matches its digest, else ``None``."""
    header = MAGIC + key.encode() + b"\n"
    digest, payload = data[len(header):len(header) + DIGEST_BYTES], data[len(header)
                                                                         + DIGEST_BYTES:]
    if not data.startswith(header) or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def _heal(path: Path, reason: str) -> None:
    """Drop a failed entry, saying so in one line (the kernel is compiled again)."""
    _drop(path)
    log.warning("numba kernel cache: dropped %s: %s; compiling the kernel again", path.name,
                reason)


def _drop(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _write_atomically(path: Path, data: bytes) -> None:
    """``data`` to ``path`` through a temporary file in its folder (no reader ever sees
    part of an entry)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@functools.cache
def _source_digest(path: str) -> str:
    """SHA-256 of a kernel's source file (read once per process)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@functools.cache
def _version() -> str:
    try:
        return importlib.metadata.version("jaxsynth")
    except importlib.metadata.PackageNotFoundError:  # a source tree on the path
        return "0+unknown"
