"""Data sets on [0,1]^d: seeded generators, user files, explicit rescaling.

Built-in generators (``names()``, ``describe(name)``): the nine 2-D shapes of [ZAYA26] §7
(``two_moons``, ``spiral``, ``annulus``, ``s_curve``, ``pinwheel``, ``figure_eight``,
``four_blobs``, ``checkerboard``, ``cross``), ``subspace`` and ``cubes`` ([ZAYA26] Fig. 2,
Prop. 1), ``ball`` ([He] §6) and ``uniform``.  Every shape stays inside the cube by
construction (truncated jitter and a fixed affine map), never by clipping.

Randomness: ``key`` is a non-negative int or a JAX PRNG key; it seeds a NumPy
``Generator`` (PCG64) through a ``SeedSequence`` (an int ``s`` through
``default_rng(s)``, a JAX key through its raw key data words), so the same key always
gives the same points.  Generation is host-side float64 NumPy, once per data set.

User files (``.npy``, ``.npz``, ``.csv``) are loaded and validated, never rescaled;
``rescale_to_unit_cube`` maps arbitrary data into the cube explicitly.  The geometry of
each shape: the documentation's data sets page.  Keys: ``docs/references.md``.
"""

from __future__ import annotations

import dataclasses
import inspect
import numbers
import os
import re
import zipfile
from pathlib import Path
from typing import Callable

import jax
import numpy as np

from jaxsynth.core.validate import (
    WIDE_FROM,
    check_data,
    check_fits,
    check_positive_int,
    check_real,
    check_real_array,
    check_str,
)

__all__ = [
    "DEFAULT_N",
    "describe",
    "intrinsic_dimension",
    "load",
    "names",
    "rescale_to_unit_cube",
    "subsample",
]

DEFAULT_N = 10_000
"""Sample size used by ``load`` when ``n`` is not given."""

DEFAULT_D = 2
"""Ambient dimension used by ``subspace``, ``cubes``, ``ball``, ``uniform`` without ``d``."""

DEFAULT_K = 1
"""Subspace / cube dimension used by ``subspace`` and ``cubes`` without ``k``."""

FILE_SUFFIXES = (".npy", ".npz", ".csv")

_TRUNCATION = 3.0
"""Gaussian draws (jitter, blobs) are truncated at this many standard deviations."""

_ARC_GRID = 4096
"""Segments of the table used to invert arc length when sampling a curve."""


# --------------------------------------------------------------------------- randomness


def _rng(key) -> np.random.Generator:
    """NumPy generator seeded by an int or a JAX PRNG key (see the module docstring)."""
    if isinstance(key, (bool, np.bool_)):
        raise ValueError(f"key must be a non-negative int or a JAX PRNG key; got {key!r}")
    if isinstance(key, numbers.Integral):
        if key < 0:
            raise ValueError(f"key must be a non-negative int or a JAX PRNG key; got {key}")
        return np.random.default_rng(int(key))
    if jax.dtypes.issubdtype(getattr(key, "dtype", None), jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    words = np.asarray(key)
    if words.size == 0 or words.dtype.kind not in "iu" or np.any(words < 0):
        raise ValueError(f"key must be a non-negative int or a JAX PRNG key; got {key!r}")
    return np.random.default_rng(np.random.SeedSequence(words.astype(np.uint64).ravel().tolist()))


def _truncated_normal(rng: np.random.Generator, shape) -> np.ndarray:
    """Standard normal draws truncated to [-3, 3]: draws beyond are redrawn (rejection)."""
    z = rng.standard_normal(shape)
    bad = np.abs(z) > _TRUNCATION
    while bad.any():  # each round redraws only the ~0.27% rejected entries
        z[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(z) > _TRUNCATION
    return z


# --------------------------------------------------------------------------- 2-D shapes


def _sample_curves(rng: np.random.Generator, n: int, pieces) -> np.ndarray:
    """``n`` points uniform in arc length on a union of parametric curves, [n, 2].

    Each piece is a vectorised map ``t -> [len(t), 2]`` on ``t ∈ [0, 1]``.  Pieces get
    multinomial counts proportional to their lengths; inside a piece, arc length is
    inverted by linear interpolation on a table of ``_ARC_GRID`` segments, so points lie
    exactly on the curve and their density is uniform up to that discretisation.
    """
    t = np.linspace(0.0, 1.0, _ARC_GRID + 1)
    tables = []
    for gamma in pieces:  # a handful of pieces, never a loop over points
        seg = np.linalg.norm(np.diff(gamma(t), axis=0), axis=1)
        tables.append(np.concatenate([[0.0], np.cumsum(seg)]))
    lengths = np.array([c[-1] for c in tables])
    counts = rng.multinomial(n, lengths / lengths.sum())
    parts = [
        gamma(np.interp(rng.uniform(0.0, c[-1], m), c, t))
        for gamma, c, m in zip(pieces, tables, counts)
    ]
    return rng.permutation(np.concatenate(parts))


def _polar(r, phi) -> np.ndarray:
    return np.stack([r * np.cos(phi), r * np.sin(phi)], axis=-1)


def _to_unit_square(rng, points, lo, hi, noise, margin) -> np.ndarray:
    """Add truncated jitter, then map the box ``[lo, hi]`` (grown by 3·noise) into the cube.

    The map is fixed by the shape's box, not by the sample: common scale
    ``(1 - 2·margin) / max side``, box centered at 0.5, so the result lies in
    ``[margin, 1 - margin]^2`` by construction.
    """
    noise = check_real(noise, "noise", 0.0, np.inf, closed_high=False)
    margin = check_real(margin, "margin", 0.0, 0.5, closed_high=False)
    lo = np.asarray(lo, np.float64) - _TRUNCATION * noise
    hi = np.asarray(hi, np.float64) + _TRUNCATION * noise
    if noise > 0:
        points = points + noise * _truncated_normal(rng, points.shape)
    scale = (1.0 - 2.0 * margin) / np.max(hi - lo)
    return 0.5 + scale * (points - 0.5 * (lo + hi))


def _two_moons(rng, n, *, noise=0.0, margin=0.05):
    """Two interleaved half circles (a 1-D curve), Zare Moayedi et al. §7.

    Upper arc ``(cos θ, sin θ)`` and lower arc ``(1 - cos θ, 1/2 - sin θ)``, ``θ ∈ [0, π]``
    (the geometry of scikit-learn's ``make_moons``), uniform in arc length; box
    ``[-1, 2] × [-1/2, 1]``.
    """
    pieces = [
        lambda t: _polar(1.0, np.pi * t),
        lambda t: np.array([1.0, 0.5]) - _polar(1.0, np.pi * t),
    ]
    return _to_unit_square(rng, _sample_curves(rng, n, pieces), [-1, -0.5], [2, 1], noise, margin)


def _spiral(rng, n, *, turns=3.0, noise=0.0, margin=0.05):
    """One Archimedean spiral arm ``r = t``, ``φ = 2π·turns·t``, ``t ∈ [0.1, 1]`` (a curve).

    Uniform in arc length; consecutive turns are ``1/turns`` apart; box ``[-1, 1]^2``.
    """
    turns = check_real(turns, "turns", 0.0, np.inf, closed_low=False, closed_high=False)

    def arm(t):
        r = 0.1 + 0.9 * t
        return _polar(r, 2.0 * np.pi * turns * r)

    return _to_unit_square(rng, _sample_curves(rng, n, [arm]), [-1, -1], [1, 1], noise, margin)


def _annulus(rng, n, *, inner=0.6, noise=0.0, margin=0.05):
    """The planar ring ``inner ≤ |x| ≤ 1``, uniform in area (a 2-D region of positive area).

    Radius ``sqrt(U[inner², 1])``, angle uniform; box ``[-1, 1]^2``.
    """
    inner = check_real(inner, "inner", 0.0, 1.0, closed_high=False)
    r = np.sqrt(rng.uniform(inner**2, 1.0, n))
    pts = _polar(r, rng.uniform(0.0, 2.0 * np.pi, n))
    return _to_unit_square(rng, pts, [-1, -1], [1, 1], noise, margin)


def _s_curve(rng, n, *, noise=0.0, margin=0.05):
    """The S curve ``(sin t, sign(t)(cos t - 1))``, ``t ∈ [-3π/2, 3π/2]`` (a curve).

    The ``(x, z)`` projection of scikit-learn's ``make_s_curve``, uniform in arc length;
    box ``[-1, 1] × [-2, 2]``.
    """

    def curve(t):
        s = 3.0 * np.pi * (t - 0.5)
        return np.stack([np.sin(s), np.sign(s) * (np.cos(s) - 1.0)], axis=-1)

    return _to_unit_square(rng, _sample_curves(rng, n, [curve]), [-1, -2], [1, 2], noise, margin)


def _pinwheel(rng, n, *, arms=5, twist=2.0, noise=0.0, margin=0.05):
    """``arms`` curved arms ``φ = 2πc/arms + twist·r``, ``r ∈ [1/4, 1]`` (a union of curves).

    The arms are disjoint (at each radius they are ``2π/arms`` apart); uniform in arc
    length over the union; box ``[-1, 1]^2``.  (The classic pinwheel of Gaussian clusters
    is 2-D; here the arms are curves, so the shape has intrinsic dimension 1.)
    """
    arms = check_positive_int(arms, "arms")
    twist = check_real(twist, "twist", -np.inf, np.inf, closed_low=False, closed_high=False)

    def arm(c):
        return lambda t: _polar(0.25 + 0.75 * t, 2.0 * np.pi * c / arms + twist * (0.25 + 0.75 * t))

    pieces = [arm(c) for c in range(arms)]
    return _to_unit_square(rng, _sample_curves(rng, n, pieces), [-1, -1], [1, 1], noise, margin)


def _figure_eight(rng, n, *, noise=0.0, margin=0.05):
    """The lemniscate of Gerono ``(sin t cos t, sin t)``, ``t ∈ [0, 2π]`` (a curve).

    Uniform in arc length; box ``[-1/2, 1/2] × [-1, 1]``.
    """
    curve = lambda t: np.stack(  # noqa: E731
        [np.sin(2 * np.pi * t) * np.cos(2 * np.pi * t), np.sin(2 * np.pi * t)], axis=-1
    )
    pts = _sample_curves(rng, n, [curve])
    return _to_unit_square(rng, pts, [-0.5, -1], [0.5, 1], noise, margin)


def _four_blobs(rng, n, *, std=0.3, noise=0.0, margin=0.05):
    """Equal mixture of four Gaussian blobs at ``(±1, ±1)`` with ``std`` (2-D).

    Each blob is truncated at 3·std per coordinate; box ``[-1 - 3std, 1 + 3std]^2``.
    """
    std = check_real(std, "std", 0.0, np.inf, closed_low=False, closed_high=False)
    centers = np.array([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])
    pts = centers[rng.integers(4, size=n)] + std * _truncated_normal(rng, (n, 2))
    half = 1.0 + _TRUNCATION * std
    return _to_unit_square(rng, pts, [-half, -half], [half, half], noise, margin)


def _checkerboard(rng, n, *, squares=4, noise=0.0, margin=0.05):
    """Uniform on the dark squares (``i + j`` even) of a ``squares × squares`` board (2-D).

    Box ``[0, squares]^2``.
    """
    squares = check_positive_int(squares, "squares")
    i, j = np.nonzero((np.add.outer(np.arange(squares), np.arange(squares)) % 2) == 0)
    dark = np.stack([i, j], axis=1).astype(np.float64)
    pts = dark[rng.integers(len(dark), size=n)] + rng.random((n, 2))
    return _to_unit_square(rng, pts, [0, 0], [squares, squares], noise, margin)


def _cross(rng, n, *, noise=0.0, margin=0.05):
    """A plus sign: the segments ``[-1, 1] × {0}`` and ``{0} × [-1, 1]`` (a union of curves).

    Uniform in length (each segment gets half the mass in expectation); box ``[-1, 1]^2``;
    the segments map onto the lines ``x = 1/2`` and ``y = 1/2``.
    """
    pieces = [
        lambda t: np.stack([2.0 * t - 1.0, np.zeros_like(t)], axis=-1),
        lambda t: np.stack([np.zeros_like(t), 2.0 * t - 1.0], axis=-1),
    ]
    return _to_unit_square(rng, _sample_curves(rng, n, pieces), [-1, -1], [1, 1], noise, margin)


# --------------------------------------------------------------------------- d-dim sets


def _faces(components, d: int, k: int):
    """Validate cube components ``[(coords, value), ...]``: active [J, k], template [J, d]."""
    if len(components) == 0:
        raise ValueError("components must hold at least one (coords, value) pair")
    active, template = [], []
    for coords, value in components:
        coords = np.asarray(coords)
        if (
            coords.shape != (k,)
            or coords.dtype.kind not in "iu"
            or len(np.unique(coords)) != k
            or coords.min() < 0
            or coords.max() >= d
        ):
            raise ValueError(f"coords must be {k} distinct integers in [0, {d}); got {coords!r}")
        row = np.empty(d)
        inactive = np.setdiff1d(np.arange(d), coords)
        try:
            row[inactive] = np.broadcast_to(np.asarray(value, np.float64), inactive.shape)
        except ValueError:
            raise ValueError(
                f"value must be a number or {d - k} numbers (one per fixed coordinate); "
                f"got {value!r}"
            ) from None
        if not np.all((row[inactive] >= 0.0) & (row[inactive] <= 1.0)):
            raise ValueError(f"value must lie in [0, 1]; got {value!r}")
        active.append(coords)
        template.append(row)
    return np.array(active), np.array(template)


def _sample_faces(rng, n: int, active: np.ndarray, template: np.ndarray) -> np.ndarray:
    """Equal mixture of the uniform laws on the coordinate cubes (one row per cube)."""
    comp = rng.integers(len(active), size=n)
    X = template[comp]
    X[np.arange(n)[:, None], active[comp]] = rng.random((n, active.shape[1]))
    return X


def _subspace(rng, n, d, k, *, coords=None, value=0.5):
    """``x_A ~ U[0,1]^k`` on the coordinates ``A = coords``, the others fixed at ``value``.

    Zare Moayedi et al. Fig. 2 left (and App. D).  Default ``coords = (0, …, k-1)`` and
    ``value = 0.5`` for every fixed coordinate (the center of the cube; ``value`` may also
    give one number per fixed coordinate).  Exactly ``d - k`` coordinates are constant.
    """
    coords = np.arange(k) if coords is None else coords
    return _sample_faces(rng, n, *_faces([(coords, value)], d, k))


def _cubes(rng, n, d, k, *, components=None):
    """Equal mixture of uniform laws on ``J`` coordinate cubes (Zare Moayedi et al. Prop. 1, §C.6).

    ``S_l = {x : x_{A_l} ∈ [0,1]^k, x_{A_l^c} = z_l}``.  ``components`` is a sequence of
    ``(A_l, z_l)`` pairs (``z_l`` a number or ``d - k`` numbers).  Default: ``J = 3``
    cubes with cyclic windows ``A_l = {(l + i) mod d : i < k}`` and ``z_l = (l + 1)/4``
    (1/4, 1/2, 3/4), so the pieces have different active coordinates and may intersect,
    as Prop. 1 allows.  Each cube has unit ``k``-volume, so the equal mixture is the
    ``k``-dimensional uniform law on the union (when the cubes differ).
    """
    if components is None:
        components = [((l + np.arange(k)) % d, (l + 1) / 4) for l in range(3)]
    return _sample_faces(rng, n, *_faces(components, d, k))


def _ball(rng, n, d, *, radius=0.1):
    """Uniform law on the Euclidean ball of ``radius`` around the center.

    He §6 uses it to show that the unshifted partition pays ``2^d`` occupied cells
    after ``d`` levels.  Direction: normalised Gaussian; radius ``radius · U^{1/d}``.
    ``radius ≤ 1/2`` keeps the ball inside the cube.
    """
    radius = check_real(radius, "radius", 0.0, 0.5, closed_low=False)
    g = rng.standard_normal((n, d))
    u = g / np.linalg.norm(g, axis=1, keepdims=True)
    return 0.5 + radius * rng.random(n)[:, None] ** (1.0 / d) * u


def _uniform(rng, n, d):
    """The uniform law on [0,1]^d."""
    return rng.random((n, d))


# --------------------------------------------------------------------------- registry


@dataclasses.dataclass(frozen=True)
class _Spec:
    generate: Callable
    dims: str  # "2d": d fixed at 2, no k; "d": uses d; "dk": uses d and k
    dimension: Callable  # (d, k, options) -> intrinsic dimension
    summary: str


def _curved(d, k, options):
    """Curves are 1-D; jitter makes them 2-D at scales below the noise."""
    noise = check_real(options.get("noise", 0.0), "noise", 0.0, np.inf, closed_high=False)
    return 1 if noise == 0 else 2


def _ambient(d, k, options):
    return d


def _sub(d, k, options):
    return k


def _planar(d, k, options):
    return 2


_CURVE = "a curve: dimension 1 (2 when noise > 0, a thickened curve)"
_SPECS = {
    "two_moons": _Spec(_two_moons, "2d", _curved, f"two interleaved half circles; {_CURVE}"),
    "spiral": _Spec(_spiral, "2d", _curved, f"Archimedean spiral arm; {_CURVE}"),
    "annulus": _Spec(_annulus, "2d", _planar, "ring inner <= |x| <= 1, uniform area; dimension 2"),
    "s_curve": _Spec(_s_curve, "2d", _curved, f"S-shaped curve; {_CURVE}"),
    "pinwheel": _Spec(_pinwheel, "2d", _curved, f"disjoint curved arms; {_CURVE}"),
    "figure_eight": _Spec(_figure_eight, "2d", _curved, f"lemniscate of Gerono; {_CURVE}"),
    "four_blobs": _Spec(_four_blobs, "2d", _planar, "four truncated Gaussian blobs; dimension 2"),
    "checkerboard": _Spec(_checkerboard, "2d", _planar, "dark squares of a board; dimension 2"),
    "cross": _Spec(_cross, "2d", _curved, f"plus sign of two segments; {_CURVE}"),
    "subspace": _Spec(_subspace, "dk", _sub, "k-dim coordinate subspace x_A ~ U[0,1]^k; dim. k"),
    "cubes": _Spec(_cubes, "dk", _sub, "union of k-dim coordinate cubes (Prop. 1); dimension k"),
    "ball": _Spec(
        _ball,
        "d",
        _ambient,
        "uniform Euclidean ball at the center; dimension d (as n grows; He §6 counts "
        "it as s = 0 at scales above the radius)",
    ),
    "uniform": _Spec(_uniform, "d", _ambient, "uniform cube; dimension d"),
}


def names() -> list[str]:
    """The built-in data set names, in a stable order.

    Examples:
      >>> import jaxsynth as js
      >>> js.datasets.names()[:3]
      ['two_moons', 'spiral', 'annulus']
    """
    return list(_SPECS)


def _canonical(name: str) -> str:
    check_str(name, "name")
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    if key not in _SPECS:
        raise ValueError(
            f"unknown data set {name!r}; known names: {', '.join(_SPECS)}; "
            f"or a path ending in {', '.join(FILE_SUFFIXES)}"
        )
    return key


def _options(spec: _Spec) -> dict:
    """The generator's keyword options and their defaults."""
    return {
        p.name: p.default
        for p in inspect.signature(spec.generate).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def describe(name: str) -> str:
    """One-line description of a built-in data set: geometry, dimension, options.

    Raises:
      ValueError: for an unknown name (the message lists the known ones).

    Examples:
      >>> import jaxsynth as js
      >>> js.datasets.describe("spiral")
      'Archimedean spiral arm; a curve: dimension 1 (2 when noise > 0, a thickened curve). Options: turns=3.0, noise=0.0, margin=0.05.'
    """
    spec = _SPECS[_canonical(name)]
    opts = ", ".join(f"{k}={v!r}" for k, v in _options(spec).items()) or "none"
    return f"{spec.summary}. Options: {opts}."


def _resolve(name: str, d, k, options: dict):
    """Spec, ``d`` and ``k`` (defaults filled in), after checking arguments and options."""
    spec = _SPECS[_canonical(name)]
    if spec.dims == "2d":
        if d is not None and d != 2:
            raise ValueError(f"d must be 2 (or None) for the 2-D shape {name!r}; got {d!r}")
        d = 2
    else:
        d = DEFAULT_D if d is None else check_positive_int(d, "d")
    if spec.dims == "dk":
        k = DEFAULT_K if k is None else check_positive_int(k, "k")
        if k > d:
            raise ValueError(f"k must satisfy 1 <= k <= d = {d}; got k = {k}")
    elif k is not None:
        raise ValueError(f"k applies only to 'subspace' and 'cubes', not to {name!r}")
    allowed = list(_options(spec))
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for {name!r}; valid options: {allowed or 'none'}"
        )
    return spec, d, k


def intrinsic_dimension(name: str, d=None, k=None, **options) -> int:
    """The dimension the rate theory uses for a built-in data set.

    The exponent ``s`` in ``(εn)^{-1/s}`` (He Thm 5.9) / the packing-growth dimension
    ``k`` (Zare Moayedi et al. Thm 5): log2 of the occupied-cell count grows like ``s/d``
    per partition level.  Choices:

    - curves (``two_moons``, ``spiral``, ``s_curve``, ``pinwheel``, ``figure_eight``,
      ``cross``): 1 with the default ``noise = 0``; 2 with ``noise > 0``, since jitter
      thickens the curve into a 2-D set at scales below the noise;
    - ``annulus`` (a ring of positive area), ``four_blobs`` (Gaussian blobs),
      ``checkerboard`` (squares): 2;
    - ``subspace`` and ``cubes``: ``k`` (Zare Moayedi et al. Prop. 1);
    - ``uniform`` and ``ball``: ``d``.  For the ball this is the asymptotic value as
      ``n → ∞`` at fixed radius; He §6 counts a tiny ball as ``s = 0`` at scales above
      its radius, where its covering number is O(1).

    Args:
      name: a built-in name (``names()``); hyphens or underscores.
      d, k: as for ``load`` (defaults filled in the same way).
      **options: the generator's options (only ``noise`` changes the answer).

    Returns:
      The intrinsic dimension, an int in ``[1, d]``.

    Raises:
      ValueError: for an unknown name, a bad ``d`` or ``k``, or an unknown option.

    Examples:
      >>> import jaxsynth as js
      >>> js.datasets.intrinsic_dimension("spiral"), js.datasets.intrinsic_dimension(
      ...     "subspace", d=8, k=2)
      (1, 2)

    References:
      [He] Thm 5.9; [ZAYA26] Thm 5, Prop. 1.
    """
    spec, d, k = _resolve(name, d, k, options)
    return int(spec.dimension(d, k, options))


# --------------------------------------------------------------------------- loading


def load(name_or_path, n=None, d=None, k=None, key=0, **options) -> np.ndarray:
    """A built-in data set or a user file as a float64 array [n, d] inside [0,1]^d.

    Args:
      name_or_path: a built-in name (``names()``; hyphen or underscore spellings), or a
        path ending in ``.npy``, ``.npz`` (its only array, or the one ``array=`` names: an
        archive of several arrays needs it) or
        ``.csv`` (numbers separated by commas or whitespace, ``#`` lines are comments; a
        first line of column names, or pandas' default header ``0,1,…,d−1`` above floats,
        is a header: see ``_read_csv``).
      n: sample size (default ``DEFAULT_N``); for a file, if given, it must match.
      d: ambient dimension: ``None`` or 2 for the 2-D shapes, default 2 otherwise; for a
        file, if given, it must match.
      k: dimension of ``subspace`` / ``cubes`` (``1 <= k <= d``, default 1); not allowed
        otherwise.
      key: non-negative int or JAX PRNG key; the same key gives the same points.  Unused
        for files.
      **options: generator options, listed with their defaults by ``describe(name)``
        (e.g. ``noise``, ``margin``, ``radius``, ``coords``, ``value``, ``components``), or
        ``array`` for ``.npz`` files.

    Returns:
      [n, d] float64 array inside [0,1]^d.

    Raises:
      ValueError: unknown name or option, bad ``n``/``d``/``k``/``key``, a data set
        with fewer points than coordinates beyond ``d = 16`` (``validate.check_data``),
        arrays larger than the memory allows (a file's from the shape its header
        declares, before it is read), or a file that is missing, unreadable, empty, not
        of rank 2, an ``.npz`` of several arrays without ``array=``, or with NaN/inf or
        points outside the cube (the message names the file).

    Examples:
      >>> import jaxsynth as js
      >>> X = js.datasets.load("spiral", n=500, key=0)
      >>> X.shape, X.dtype, bool((X >= 0).all() and (X <= 1).all())
      ((500, 2), dtype('float64'), True)
      >>> js.datasets.load("subspace", n=100, d=8, k=2, key=1).shape
      (100, 8)

    References:
      [ZAYA26] §7 (the 2-D shapes), Fig. 2, Prop. 1; [He] §6 (the ball).
    """
    if isinstance(name_or_path, os.PathLike) or (
        isinstance(name_or_path, str) and name_or_path.lower().endswith(FILE_SUFFIXES)
    ):
        return _load_file(Path(name_or_path), n, d, k, options)
    if not isinstance(name_or_path, str):
        raise ValueError(f"name_or_path must be a data set name or a path; got {name_or_path!r}")
    spec, d, k = _resolve(name_or_path, d, k, options)
    n = DEFAULT_N if n is None else check_positive_int(n, "n")
    if d > n and d > WIDE_FROM:  # check_data's rule, said in this call's words
        raise ValueError(f"n: the data set {name_or_path!r} would have fewer points than "
                         f"coordinates (n = {n}, d = {d}); beyond d = {WIDE_FROM}, at least d "
                         f"points are needed: ask for n >= {d}")
    # refused before anything is allocated: the points alone, n·d float64 (generating and
    # checking them holds a few copies), must fit in validate.memory_limit()
    check_fits(8.0 * n * d, "n, d", f"the data set {name_or_path!r} [n = {n}, d = {d}] "
               "(float64)")
    dims = {"2d": (), "d": (d,), "dk": (d, k)}[spec.dims]
    X = spec.generate(_rng(key), n, *dims, **options)
    return check_data(X, name=f"generated data set {name_or_path!r}")


def _load_file(path: Path, n, d, k, options) -> np.ndarray:
    """Read and validate a user file; every error message names the file."""
    suffix = path.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise ValueError(f"unsupported file type {path}; expected {', '.join(FILE_SUFFIXES)}")
    unknown = sorted(set(options) - ({"array"} if suffix == ".npz" else set()))
    if unknown:
        raise ValueError(f"option(s) {unknown} do not apply to the file {path}")
    if k is not None:
        raise ValueError(f"k does not apply to the file {path}")
    if not path.is_file():
        raise ValueError(f"data file {path} not found")
    try:
        if suffix == ".npy":
            with open(path, "rb") as f:
                _check_declared_size(path, _declared_shape(f))
            arr = np.load(path, allow_pickle=False)
        elif suffix == ".npz":
            arr = _read_npz(path, options.get("array"))
        else:
            arr = _read_csv(path)
    except _Refused as exc:
        raise ValueError(str(exc)) from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"could not read data file {path}: {exc}") from None
    X = check_data(arr, name=f"data file {path}")
    for value, axis, label in ((n, 0, "n"), (d, 1, "d")):
        if value is not None and check_positive_int(value, label) != X.shape[axis]:
            raise ValueError(
                f"{label} = {value} does not match data file {path} of shape {X.shape}"
            )
    return X


class _Refused(ValueError):
    """A refusal raised while a file is read that is not a reading error (the file is
    readable, what it holds is refused): ``_load_file`` passes it on as it is."""


def _declared_shape(f) -> tuple:
    """The shape an ``.npy`` stream's header declares, read without the data
    (``numpy.lib.format``)."""
    version = np.lib.format.read_magic(f)
    read = (np.lib.format.read_array_header_1_0 if version[0] == 1 else
            np.lib.format.read_array_header_2_0)
    shape, _, _ = read(f)
    return shape


def _check_declared_size(path: Path, shape: tuple) -> None:
    """Refuse, before it is read, an array whose declared shape would not fit in memory
    (as float64, the data's type here: ``validate.check_fits``)."""
    count = float(np.prod(np.asarray(shape, np.float64)))
    try:
        check_fits(8.0 * count, f"data file {path}", f"its array of shape {tuple(shape)} "
                   "(declared in its header), as float64,", hint="use a subsample of it")
    except ValueError as exc:
        raise _Refused(str(exc)) from None


def _read_npz(path: Path, array):
    """The array of an ``.npz`` archive: its only one, or the one named ``array``."""
    with np.load(path, allow_pickle=False) as z:
        if not z.files:
            raise ValueError("the archive holds no arrays")
        if array is None and len(z.files) > 1:
            raise _Refused(
                f"data file {path} holds {len(z.files)} arrays ({', '.join(z.files)}); "
                f"name the one to use: array={z.files[0]!r} (on the command line, --data-array "
                f"{z.files[0]})")
        if array is None:
            array = z.files[0]
        if array not in z.files:
            raise ValueError(f"array {array!r} not in the archive; it holds {z.files}")
        with z.zip.open(f"{array}.npy") as member:
            _check_declared_size(path, _declared_shape(member))
        return z[array]


_NAME = re.compile(r'"?[A-Za-z_][^"]*"?|[0-9]+')
"""A header field: a column name (a letter or ``_`` first, optionally quoted) or an index."""

_INTEGER_FIELD = re.compile(r"(?:^|[,\s])[+-]?[0-9]+(?=[,\s]|$)", re.MULTILINE)
"""An integer literal as a whole field (a float written by pandas always has a point)."""


def _read_csv(path: Path) -> np.ndarray:
    """The numbers of a ``.csv`` file, after an optional header line.

    Lines that are blank or start with ``#`` are skipped; fields are separated by commas
    (if the first two lines hold one) or whitespace.  The first line is a header when

    * some field is not a number and every field is a column name or index (``_NAME``)
      and there are as many fields as in the next line; any other first line with a
      non-number (``0x1,0.2``) is refused, naming the line, never dropped;
    * or it is pandas' default header ``0,1,…,d−1`` (``to_csv(index=False)``) and every
      other field is written as a float (with a point or an exponent).  When other fields
      are integers too, the line is as much a data point as a header, and it is refused.

    Raises:
      ValueError: naming the line that is neither numbers nor a header, or that does not
        parse.
    """
    lines = [(i, ln) for i, ln in enumerate(path.read_text().splitlines(), 1)
             if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        return np.empty((0, 0))
    delimiter = "," if any("," in ln for _, ln in lines[:2]) else None
    body = lines[1:] if _is_header(lines, delimiter) else lines
    if not body:
        return np.empty((0, len(lines[0][1].split(delimiter))))
    try:
        return np.loadtxt([ln for _, ln in body], delimiter=delimiter, ndmin=2,
                          dtype=np.float64)
    except ValueError:
        width = len(body[0][1].split(delimiter))
        for i, ln in body:
            fields = ln.split(delimiter)
            if len(fields) != width or not all(_is_number(f) for f in fields):
                raise ValueError(f"line {i} ({ln.strip()!r}) is not a row of {width} "
                                 "numbers") from None
        raise


def _is_number(field: str) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def _is_header(lines, delimiter) -> bool:
    """Whether the first of ``lines`` (``(line number, text)``) is a header (``_read_csv``)."""
    number, first = lines[0]
    fields = [f.strip() for f in first.split(delimiter)]
    width = len(lines[1][1].split(delimiter)) if len(lines) > 1 else len(fields)
    if not all(_is_number(f) for f in fields):
        if len(fields) != width or not all(_NAME.fullmatch(f) for f in fields):
            raise ValueError(f"line {number} ({first.strip()!r}) is neither a row of numbers "
                             "nor a header of column names")
        return True
    if len(lines) == 1 or fields != [str(j) for j in range(len(fields))]:
        return False
    if _INTEGER_FIELD.search("\n".join(ln for _, ln in lines[1:])):
        raise ValueError(f"line {number} ({first.strip()!r}) is pandas' default header or a "
                         "data point: the other rows hold integers too; drop it or name the "
                         "columns")
    return True


# -------------------------------------------------------------------------- subsamples


def subsample(X, n: int, key=0) -> np.ndarray:
    """``n`` of the points of ``X``, drawn without replacement, in their order in ``X``.

    The draw keeps the first ``n`` of one random permutation (seeded by ``key`` as the
    generators are), so subsamples of one key are nested: the points of a smaller ``n``
    are among those of a larger one, and a rate fitted over sizes compares like with like.

    Args:
      X: [N, d] points in [0,1]^d.
      n: the subsample's size, ``1 <= n <= N``.
      key: non-negative int or JAX PRNG key.

    Returns:
      [n, d] float64 array.

    Example:
      >>> import numpy as np, jaxsynth as js
      >>> X = np.linspace(0, 1, 10)[:, None]
      >>> small, large = js.datasets.subsample(X, 3, key=1), js.datasets.subsample(X, 6, key=1)
      >>> bool(np.isin(small, large).all()), large.shape
      (True, (6, 1))
    """
    X = check_data(X, "X")
    n = check_positive_int(n, "n")
    if n > X.shape[0]:
        raise ValueError(f"n = {n} exceeds the {X.shape[0]} points of X")
    order = _rng(key).permutation(X.shape[0])[:n]
    return X[np.sort(order)]


# --------------------------------------------------------------------------- rescaling


def rescale_to_unit_cube(X, margin=0.0) -> np.ndarray:
    """Map finite data into ``[margin, 1 - margin]^d`` by one affine map with a common scale.

    ``Y = 1/2 + s (X - c)`` where ``c`` is the center of the data's bounding box and
    ``s = (1 - 2·margin) / (largest side of that box)``.  The scale is common to all
    coordinates, so shapes and ratios of distances (ℓ∞, ℓ2) are preserved and every
    distance is multiplied by ``s``; the widest coordinate spans exactly
    ``[margin, 1 - margin]``, the others are centered.  Data with a single distinct point
    map to the center.  (Only floating-point rounding, of a few ulps, is clamped.)  This is
    the explicit rescaling helper; no other entry point rescales (they refuse points
    outside [0,1]^d).

    Every finite range is mapped, from ``±1.8e308`` to subnormal widths: each coordinate
    is first scaled by a power of two (exact) to a largest magnitude in ``[1/2, 1)``, and
    the box's sides are compared as (exponent, mantissa) pairs, so nothing overflows or
    divides by a subnormal.

    Args:
      X: [n, d] finite numbers (any range).
      margin: gap to keep from the cube's faces, ``0 <= margin < 1/2``.

    Returns:
      [n, d] float64 array inside ``[margin, 1 - margin]^d``.

    Raises:
      ValueError: naming ``X`` (not a non-empty 2-D array of finite numbers) or ``margin``.

    Examples:
      >>> import numpy as np
      >>> import jaxsynth as js
      >>> js.datasets.rescale_to_unit_cube(np.array([[-3.0, 0.0], [1.0, 2.0]])).tolist()
      [[0.0, 0.25], [1.0, 0.75]]
    """
    arr = check_real_array(X, "X")
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"X must be a non-empty array of shape (n, d); got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("X contains NaN or inf; rescale_to_unit_cube needs finite data")
    margin = check_real(margin, "margin", 0.0, 0.5, closed_high=False)
    _, power = np.frexp(np.abs(arr).max(axis=0))  # coordinate j is ldexp(y_j, power_j)
    y = np.ldexp(arr, -power)
    lo, hi = y.min(axis=0), y.max(axis=0)
    half = (hi - lo) / 2  # 0 or at least 2^-55: |lo| or |hi| is at least 1/2
    if not np.any(half > 0):
        return np.full_like(arr, 0.5)
    mantissa, exponent = np.frexp(half)
    exponent = np.where(half > 0, exponent + power, np.iinfo(exponent.dtype).min)
    widest = np.lexsort((mantissa, exponent))[-1]  # the largest half side ldexp(m, e)
    dev = np.ldexp(y - (lo + hi) / 2, power - exponent[widest])  # |dev| <= mantissa[widest]
    return np.clip(0.5 + (0.5 - margin) * (dev / mantissa[widest]), margin, 1.0 - margin)
