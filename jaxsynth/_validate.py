"""Input checks shared by every public entry point (SPEC §0).

Bad input is refused with a ``ValueError`` that names the argument; nothing is ever
clipped or coerced silently.  ``jaxsynth.datasets.rescale_to_unit_cube`` is the explicit
way to bring arbitrary data into the cube.
"""

from __future__ import annotations

import numbers

import numpy as np


def check_data(X, name: str = "X") -> np.ndarray:
    """Return ``X`` as a float64 array [n, d] inside [0,1]^d, or raise ``ValueError``."""
    try:
        arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array of shape (n, d): {exc}") from None
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (n, d); got an array of rank {arr.ndim}")
    n, d = arr.shape
    if n == 0:
        raise ValueError(f"{name} is empty (n = 0); at least one point is needed")
    if d == 0:
        raise ValueError(f"{name} has d = 0 coordinates")
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
    """Return ``eps`` as a float64 array (any shape, at least one value), all finite and > 0."""
    try:
        arr = np.atleast_1d(np.asarray(eps, dtype=np.float64))
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number or a list of them; got {eps!r}") from None
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be finite and > 0; got {eps!r}")
    return arr


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    """Return ``value`` as an int ``>= minimum`` or raise ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return int(value)


def check_fraction(value, name: str) -> float:
    """Return ``value`` as a float strictly between 0 and 1."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0, 1); got {value!r}") from None
    if not (0.0 < v < 1.0):
        raise ValueError(f"{name} must lie strictly between 0 and 1; got {value!r}")
    return v
