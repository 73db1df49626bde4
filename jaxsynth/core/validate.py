"""Input checks shared by every public entry point.

Bad input is refused with a ``ValueError`` that names the argument, before any work;
nothing is clipped or coerced silently.  Booleans are booleans and numbers are numbers:
``True`` is not a budget and ``"False"`` is not a flag.
``jaxsynth.experiments.datasets.rescale_to_unit_cube`` is the explicit way to bring
arbitrary data into the cube.
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path

import numpy as np


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def check_real_array(X, name: str = "X") -> np.ndarray:
    """Return ``X`` as a float64 array if it holds real numbers (ints or floats), else raise.

    Booleans, complex numbers, strings and objects are refused (no silent cast).
    """
    if isinstance(X, (str, bytes)):
        raise ValueError(f"{name} must be a numeric array of shape (n, d); got a string")
    try:
        raw = np.asarray(X)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array of shape (n, d): {exc}") from None
    if raw.dtype == bool or not (np.issubdtype(raw.dtype, np.integer)
                                 or np.issubdtype(raw.dtype, np.floating)):
        raise ValueError(f"{name} must hold real numbers; got dtype {raw.dtype}")
    return raw.astype(np.float64)


MAX_DIMENSION = 1024
"""Most coordinates of a data set: the kernels and W1 methods are compiled for each d, and
their cost grows with it (with d directions of projection, say), without bound."""
WIDE_FROM = 16
"""Data with more coordinates than points, and more than this many, look transposed."""


def check_data(X, name: str = "X") -> np.ndarray:
    """Return ``X`` as a float64 array [n, d] inside [0,1]^d, or raise ``ValueError``.

    Refused besides: ``d > MAX_DIMENSION``, and data that look transposed (``d > n`` and
    ``d > WIDE_FROM``: three rows of 2000 values are more likely 2000 points in d = 3).
    No entry point takes such data as they stand: beyond ``WIDE_FROM`` coordinates,
    jaxsynth needs at least as many points as coordinates.  A choice, not a limit of the
    theory: such arrays are far more often files written transposed, and with the PMM
    family's default depth ⌈log2(εn)⌉ (one coordinate bisected per level) most of their
    coordinates would never be split at ε ≤ 1.
    """
    arr = check_real_array(X, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (n, d); got an array of rank {arr.ndim}")
    n, d = arr.shape
    if n == 0:
        raise ValueError(f"{name} is empty (n = 0); at least one point is needed")
    if d == 0:
        raise ValueError(f"{name} has d = 0 coordinates")
    if d > MAX_DIMENSION:
        raise ValueError(f"{name} has d = {d} coordinates; at most {MAX_DIMENSION} are "
                         "supported (kernels are compiled for each d); reduce the dimension")
    if d > n and d > WIDE_FROM:
        raise ValueError(f"{name} has more coordinates than points (n = {n}, d = {d}): data "
                         f"passed transposed? Pass its transpose (n = {d} points in d = {n}); "
                         f"beyond d = {WIDE_FROM}, at least d points are needed")
    if not np.all(np.isfinite(arr)):
        bad = int(np.sum(~np.isfinite(arr).all(axis=1)))
        raise ValueError(f"{name} contains NaN or inf in {bad} row(s)")
    if arr.min() < 0.0 or arr.max() > 1.0:
        bad = int(np.sum(((arr < 0.0) | (arr > 1.0)).any(axis=1)))
        raise ValueError(
            f"{name} has {bad} point(s) outside [0,1]^d (range [{arr.min():g}, {arr.max():g}]); "
            "use jaxsynth.datasets.rescale_to_unit_cube to map data into the cube explicitly"
        )
    return arr


def check_epsilon(eps, name: str = "eps") -> np.ndarray:
    """Return ``eps`` as a float64 array (a number or a list; at least one value), finite, > 0."""
    values = list(eps) if isinstance(eps, (list, tuple, np.ndarray)) else [eps]
    if isinstance(eps, np.ndarray) and eps.ndim == 0:
        values = [eps.item()]
    if not values:
        raise ValueError(f"{name} is empty")
    for v in values:
        if isinstance(v, np.generic):
            v = v.item()
        if not _is_real(v):
            raise ValueError(f"{name} must be a positive number or a list of them; got {eps!r}")
    arr = np.asarray([float(v) for v in values], np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be finite and > 0; got {eps!r}")
    return arr


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    """Return ``value`` as an int ``>= minimum`` or raise ``ValueError`` naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return int(value)


def check_positive_number(value, name: str) -> float:
    """Return ``value`` as a finite float ``> 0`` or raise ``ValueError`` naming ``name``."""
    if not _is_real(value) or not (np.isfinite(float(value)) and float(value) > 0):
        raise ValueError(f"{name} must be a positive finite number; got {value!r}")
    return float(value)


def check_fraction(value, name: str) -> float:
    """Return ``value`` as a float strictly between 0 and 1."""
    if not _is_real(value) or not (0.0 < float(value) < 1.0):
        raise ValueError(f"{name} must be a number strictly between 0 and 1; got {value!r}")
    return float(value)


def check_choice(value, name: str, choices) -> str:
    """Return ``value`` if it is one of the strings ``choices``, else raise ``ValueError``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}; got {value!r}")
    return value


def is_pair(item) -> bool:
    """Whether ``item`` is a ``(name, options dict)`` pair (as in ``data=``, ``methods=``)."""
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], dict)


def refuse_renamed(function: str, given: dict, renamed: dict) -> None:
    """Refuse the keyword arguments a function caught with ``**given``.

    A renamed argument (a key of ``renamed``) gets a ``ValueError`` with its message
    (which names the new argument), never silently accepted; any other the ``TypeError``
    Python raises for an unknown keyword argument.
    """
    for name in given:
        if name in renamed:
            raise ValueError(renamed[name])
    if given:
        raise TypeError(f"{function}() got an unexpected keyword argument {next(iter(given))!r}")


def check_bool(value, name: str) -> bool:
    """Return ``value`` if it is a bool (``True``/``False``), else raise ``ValueError``."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False; got {value!r}")
    return bool(value)


def check_real(value, name: str, low=-np.inf, high=np.inf, closed_low: bool = True,
               closed_high: bool = True) -> float:
    """Return ``value`` as a float in the interval ``low .. high`` (not a bool or a string)."""
    interval = f"{'[' if closed_low else '('}{low:g}, {high:g}{']' if closed_high else ')'}"
    if not _is_real(value):
        raise ValueError(f"{name} must be a number in {interval}; got {value!r}")
    v = float(value)
    ok = (v >= low if closed_low else v > low) and (v <= high if closed_high else v < high)
    if np.isnan(v) or not ok:
        raise ValueError(f"{name} must lie in {interval}; got {value!r}")
    return v


def check_str(value, name: str, allow_empty: bool = False) -> str:
    """Return ``value`` if it is a string (non-empty unless ``allow_empty``)."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string; got {value!r}")
    if not allow_empty and not value.strip():
        raise ValueError(f"{name} is empty")
    return value


def check_names(value, name: str) -> list[str]:
    """A string or a list of non-empty strings as a list (``ValueError`` naming ``name``)."""
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"{name} must be a string or a non-empty list of strings; got {value!r}")
    for v in values:
        check_str(v, name)
    return list(values)


def check_output_path(path, name: str, suffixes=None) -> Path:
    """Validate a file path to be written, before any work: type, suffix, directory.

    Refuses a path that is a directory (or ends with a separator), whose directory does
    not exist or is not writable, an existing file that is not writable, and (with
    ``suffixes``) a suffix not in that list.
    """
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"{name} must be a file path; got {path!r}")
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{name} must be a file path; got {path!r}")
    p = Path(text)
    if text.endswith(("/", os.sep)) or p.is_dir():
        raise ValueError(f"{name} {text!r} is a directory; give a file path")
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise ValueError(f"{name} must end in {', '.join(suffixes)}; got {text!r}")
    parent = p.parent
    if not parent.is_dir():
        raise ValueError(f"{name} {text!r}: the directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{name} {text!r}: the directory {str(parent)!r} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise ValueError(f"{name} {text!r} exists and is not writable")
    return p


HOST_MEMORY_SHARE = 0.25
"""Share of the host's memory one input-sized array may take (``memory_limit``): making
and checking an array holds a few copies of it (float64 casts, masks, sorts)."""


def host_memory() -> int:
    """Bytes of memory of this host: physical RAM (``os.sysconf``), or a smaller cgroup limit."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except (OSError, ValueError):
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return total


def memory_limit() -> int:
    """Largest array (bytes) an input may ask for: ``HOST_MEMORY_SHARE`` of ``host_memory()``."""
    return int(HOST_MEMORY_SHARE * host_memory())


def check_fits(nbytes: float, name: str, what: str, limit: int | None = None,
               hint: str = "ask for less", where: str | None = None) -> None:
    """Refuse, before any work, a request whose arrays would take more than ``limit`` bytes.

    ``limit`` defaults to ``memory_limit()`` (``where`` then says so; else ``where``
    describes ``limit``).  The message names ``name`` (the argument), ``what`` (the array,
    with its shape), both sizes and ``hint``.
    """
    if limit is None:
        limit = memory_limit()
        where = (f"{HOST_MEMORY_SHARE:.0%} of this machine's {_size(host_memory())} of "
                 "memory")
    if nbytes > limit:
        where = f" ({where})" if where else ""
        need, allowed = sizes(nbytes, limit)
        raise ValueError(f"{name}: {what} would take {need}, more than the "
                         f"{allowed} allowed{where}; {hint}")


def _size(nbytes: float, digits: int = 1) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:.{digits}f} {unit}"
    return f"{int(nbytes)} bytes"


def sizes(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` bytes in words (a number and TiB, GiB, MiB or bytes), with as many
    decimals as tell two different sizes apart (exact bytes at worst)."""
    for digits in range(1, 10):
        words = _size(a, digits), _size(b, digits)
        if words[0] != words[1] or a == b:
            return words
    return f"{int(a)} bytes", f"{int(b)} bytes"


def check_measurable(mech, n: int, d: int, eps) -> int:
    """The data depth ``mech`` needs at every ε, refused if ``js.w1`` could not measure it.

    The tree W1 handles codes of at most ``MAX_BITS_PER_COORDINATE`` digits per coordinate
    (depth ``r`` in dimension ``d`` uses ``r // d + 1``); a release deeper than that is
    refused here, before any work, rather than released and then refused by ``js.w1``.
    """
    from jaxsynth.core.measure import MAX_BITS_PER_COORDINATE

    need = int(mech.data_depth(n, d, eps))
    if need // d + 1 > MAX_BITS_PER_COORDINATE:
        raise ValueError(
            f"mech: {mech!r} needs depth {need} in d = {d} ({need // d + 1} digits per "
            f"coordinate) but W1 is measured on trees of at most {MAX_BITS_PER_COORDINATE} "
            f"digits per coordinate (depth <= {MAX_BITS_PER_COORDINATE * d - 1}); lower the depth "
            "(a default depth grows with log2(eps n): lower eps)"
        )
    return need


def seed_count(seeds) -> int:
    """The number of seeds ``seeds`` (a count or a list) stands for, without listing them."""
    if isinstance(seeds, range):
        if len(seeds) == 0:
            raise ValueError("seeds is empty")
        if seeds.start < 0 or seeds[-1] < 0 or max(seeds[0], seeds[-1]) >= 2**32:
            raise ValueError(f"seeds must lie in [0, 2^32); got {seeds!r}")
        return len(seeds)
    if isinstance(seeds, (list, tuple, np.ndarray)):
        if isinstance(seeds, np.ndarray) and seeds.ndim != 1:
            raise ValueError(f"seeds must be a count or a 1-D list of ints; got an array of "
                             f"shape {seeds.shape}")
        return len(seeds)
    count = check_positive_int(seeds, "seeds")
    if count > 2**32:
        raise ValueError(f"seeds must be at most 2^32; got {count}")
    return count


def seed_indices(seeds) -> np.ndarray:
    """Seed indices [S] from a count, a ``range`` or a list of distinct non-negative ints."""
    if isinstance(seeds, range):
        seed_count(seeds)
        return np.arange(seeds.start, seeds.stop, seeds.step, dtype=np.int64)
    if isinstance(seeds, (list, tuple, np.ndarray)):
        seed_count(seeds)
        values = list(seeds)
        if not values:
            raise ValueError("seeds is empty")
        for v in values:
            check_positive_int(v.item() if isinstance(v, np.generic) else v, "seeds", minimum=0)
        if len(set(values)) != len(values):
            raise ValueError("seeds has duplicate values")
        if max(values) >= 2**32:
            raise ValueError("seeds must be below 2^32")
        return np.asarray(values, np.int64)
    return np.arange(seed_count(seeds), dtype=np.int64)
