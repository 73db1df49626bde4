"""Tests for jaxsynth.experiments.datasets: generators, intrinsic dimension, files,
rescaling.

Occupied-cell counts are computed independently with ``partition.cell_index`` (distinct
level-j cells).  Statistical checks use fixed keys; tolerances are stated where used.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from scipy import stats
from scipy.spatial.distance import pdist

from jaxsynth.core.partition import cell_index, coordinate_resolution
from jaxsynth.experiments import datasets as ds

SHAPES = [
    "two_moons", "spiral", "annulus", "s_curve", "pinwheel",
    "figure_eight", "four_blobs", "checkerboard", "cross",
]  # fmt: skip
CURVES = ["two_moons", "spiral", "s_curve", "pinwheel", "figure_eight", "cross"]
REGIONS = ["annulus", "four_blobs", "checkerboard"]


def _dims(name):
    """Arguments exercising each generator in more than 2 dimensions where it can."""
    return {"subspace": dict(d=3, k=2), "cubes": dict(d=3, k=2), "ball": dict(d=3),
            "uniform": dict(d=3)}.get(name, {})  # fmt: skip


def occupied(X, level):
    """Number of distinct level-``level`` cells holding a point of ``X``."""
    idx = cell_index(X, level)
    sizes = tuple(1 << coordinate_resolution(level, X.shape[1]))
    return len(np.unique(np.ravel_multi_index(idx.T, sizes)))


def growth_slope(X, levels):
    """Least-squares slope of log2(occupied cells) against the level."""
    counts = [occupied(X, j) for j in levels]
    return np.polyfit(levels, np.log2(counts), 1)[0]


# --------------------------------------------------------------------------- generators


def test_names_cover_spec():
    assert set(SHAPES) | {"subspace", "cubes", "ball", "uniform"} == set(ds.names())
    for name in ds.names():
        assert "Options" in ds.describe(name)


@pytest.mark.parametrize("name", ds.names())
def test_generator_contract(name):
    kw = _dims(name)
    d = kw.get("d", 2)
    X = ds.load(name, n=257, key=7, **kw)
    assert X.shape == (257, d) and X.dtype == np.float64
    assert np.all((X >= 0) & (X <= 1))
    np.testing.assert_array_equal(X, ds.load(name, n=257, key=7, **kw))
    assert not np.array_equal(X, ds.load(name, n=257, key=8, **kw))
    # JAX keys, typed and raw, are deterministic too and differ between keys.
    for make in (jax.random.key, jax.random.PRNGKey):
        Y = ds.load(name, n=257, key=make(3), **kw)
        np.testing.assert_array_equal(Y, ds.load(name, n=257, key=make(3), **kw))
        assert not np.array_equal(Y, ds.load(name, n=257, key=make(4), **kw))


def test_default_n_and_spellings():
    X = ds.load("two-moons", key=1)
    assert X.shape == (ds.DEFAULT_N, 2)
    np.testing.assert_array_equal(X, ds.load("Two_Moons", key=1))
    np.testing.assert_array_equal(ds.load("s-curve", n=9), ds.load("s_curve", n=9))


@pytest.mark.parametrize("name", SHAPES)
def test_noise_stays_inside_by_construction(name):
    # Jitter as large as the shapes themselves: a clipping implementation would leave
    # points exactly on the faces, one without truncation would leave the cube.
    X = ds.load(name, n=4000, key=0, noise=0.5, margin=0.0)
    assert np.all((X > 0) & (X < 1))
    Y = ds.load(name, n=4000, key=0, noise=0.05, margin=0.1)
    assert np.all((Y >= 0.1) & (Y <= 0.9))


@pytest.mark.parametrize("name", CURVES)
def test_curve_occupancy_grows_like_dimension_one(name):
    # Log2 of occupied cells grows ≈ 1/2 per level for a curve in d = 2 (the cell side
    # halves every 2 levels).  Levels 8..20 (cell sides 1/16..1/1024) are past the
    # shapes' coarse structure and far from saturation (≤ ~6000 cells for 2^16 points);
    # measured slopes are 0.49–0.50, so ±0.06 leaves room without admitting a 2-D set.
    X = ds.load(name, n=2**16, key=0)
    slope = growth_slope(X, np.arange(8, 21, 2))
    assert abs(slope - 0.5) < 0.06
    assert ds.intrinsic_dimension(name) == 1


@pytest.mark.parametrize("name", REGIONS)
def test_region_occupancy_grows_like_dimension_two(name):
    # Positive-area shapes: slope near 1 per level before saturation (levels 6..14,
    # ≤ 2^14 cells for 2^16 points).  Boundary cells and Gaussian tails pull the
    # finite-range slope down to 0.84–0.90 (measured); the uniform square gives 1.
    X = ds.load(name, n=2**16, key=0)
    levels = np.arange(6, 15, 2)
    slope = growth_slope(X, levels)
    square = growth_slope(ds.load("uniform", n=2**16, key=0), np.arange(2, 13, 2))
    assert slope > 0.75
    assert abs(square - 1.0) < 0.02
    curve = growth_slope(ds.load("spiral", n=2**16, key=0), levels)
    assert curve < slope - 0.2  # a curve is clearly below both
    assert ds.intrinsic_dimension(name) == 2


def test_cross_and_annulus_laws():
    # Cross: two segments of equal length, so half the mass on each (n = 20000,
    # sd 0.0035; tolerance 0.02 ≈ 6 sd).  Segments map onto x = 1/2 and y = 1/2.
    X = ds.load("cross", n=20000, key=2)
    on_h, on_v = X[:, 1] == 0.5, X[:, 0] == 0.5
    assert np.all(on_h | on_v)
    assert abs(on_h.mean() - 0.5) < 0.02
    # Annulus uniform in area: r^2 ~ U[inner^2, 1] in the shape's units (scale 0.45
    # with the default margin 0.05 on the box [-1, 1]^2).  KS at a fixed key.
    A = ds.load("annulus", n=5000, key=3, inner=0.5)
    r2 = np.sum(((A - 0.5) / 0.45) ** 2, axis=1)
    assert stats.kstest(r2, stats.uniform(0.25, 0.75).cdf).pvalue > 1e-3


def test_spiral_is_uniform_in_arc_length():
    # Spiral r ∈ [0.1, 1], φ = 2π·3·r: arc length element sqrt(1 + (ar)^2) dr with a = 6π,
    # whose primitive is (r sqrt(1 + (ar)^2) + asinh(ar)/a) / 2, so the radius has cdf
    # (L(r) - L(0.1)) / (L(1) - L(0.1)), far from the law of a parameter-uniform sampler
    # (r uniform).  KS at a fixed key, n = 5000.
    a = 6 * np.pi
    arc = lambda r: (r * np.sqrt(1 + (a * r) ** 2) + np.arcsinh(a * r) / a) / 2  # noqa: E731
    cdf = lambda r: (arc(np.clip(r, 0.1, 1.0)) - arc(0.1)) / (arc(1.0) - arc(0.1))  # noqa: E731
    X = ds.load("spiral", n=5000, key=4)
    r = np.linalg.norm((X - 0.5) / 0.45, axis=1)
    assert stats.kstest(r, cdf).pvalue > 1e-3
    assert stats.kstest(r, stats.uniform(0.1, 0.9).cdf).pvalue < 1e-6


@pytest.mark.parametrize("d,k", [(3, 1), (4, 2)])
def test_subspace_constant_coordinates_and_growth(d, k):
    n = 2**15
    X = ds.load("subspace", n=n, d=d, k=k, key=0)
    constant = np.ptp(X, axis=0) == 0
    assert constant.sum() == d - k and not constant[:k].any()
    np.testing.assert_array_equal(X[:, k:], 0.5)
    # Exactly 2^{qk} cells at level qd while 2^{qk} << n, so slope k/d per level; the
    # uniform cube gives slope 1 while 2^{qd} <= n/8 (no saturation).  Tolerance 0.03.
    sub = growth_slope(X, d * np.arange(1, 12 // k + 1))
    uni = growth_slope(ds.load("uniform", n=n, d=d, key=0), d * np.arange(1, 12 // d + 1))
    assert abs(sub - k / d) < 0.03
    assert abs(uni - 1.0) < 0.03
    assert ds.intrinsic_dimension("subspace", d=d, k=k) == k


def test_subspace_options():
    X = ds.load("subspace", n=3000, d=4, k=2, key=1, coords=(1, 3), value=[0.2, 0.7])
    np.testing.assert_array_equal(X[:, 0], 0.2)
    np.testing.assert_array_equal(X[:, 2], 0.7)
    for c in (1, 3):  # free coordinates are U[0,1]
        assert stats.kstest(X[:, c], "uniform").pvalue > 1e-3
    with pytest.raises(ValueError, match="coords"):
        ds.load("subspace", d=3, k=2, coords=(0, 0))
    with pytest.raises(ValueError, match="coords"):
        ds.load("subspace", d=3, k=2, coords=(0, 3))
    with pytest.raises(ValueError, match="value"):
        ds.load("subspace", d=3, k=1, value=1.5)


def test_cubes_default_union():
    # Documented default for d = 3, k = 1: A_l = {l}, other coordinates fixed at (l+1)/4.
    n = 30000
    X = ds.load("cubes", n=n, d=3, k=1, key=0)
    member = []
    for l in range(3):
        fixed = [c for c in range(3) if c != l]
        member.append(np.all(X[:, fixed] == (l + 1) / 4, axis=1))
    member = np.array(member)
    assert np.all(member.any(axis=0))
    np.testing.assert_allclose(member.mean(axis=1), 1 / 3, atol=0.02)  # sd 0.0027
    # Growth ≈ k/d per level on a union of k-cubes (Prop. 1): (d, k) = (4, 2), levels
    # 8..20 (≤ 3·2^10 cells for 2^15 points); measured 0.50, tolerance 0.04.
    Y = ds.load("cubes", n=2**15, d=4, k=2, key=0)
    assert abs(growth_slope(Y, 4 * np.arange(2, 6)) - 0.5) < 0.04
    Z = ds.load("cubes", n=50, d=3, k=2, components=[((0, 2), 0.3)])
    np.testing.assert_array_equal(Z[:, 1], 0.3)


def test_ball_radius_and_central_occupancy():
    d, r, n = 5, 0.1, 20000
    X = ds.load("ball", n=n, d=d, key=0, radius=r)
    dist = np.linalg.norm(X - 0.5, axis=1)
    assert dist.max() <= r * (1 + 1e-12) and dist.max() > 0.98 * r
    # Uniform in volume: P(|x - c| < r/2) = 2^{-d}; sd ≈ 0.0012, tolerance 0.006.
    assert abs(np.mean(dist < r / 2) - 2.0**-d) < 0.006
    # He (Intrinsic-Dimensional …) §6: centered at the cube's center, the ball meets all
    # 2^d cells after d levels; with radius 0.1 < 1/8 it stays inside the 2^d cells touching
    # the center at levels 2d and 3d (sides 1/4 and 1/8), so the count is exactly 2^d there.
    assert [occupied(X, j) for j in (d, 2 * d, 3 * d)] == [2**d] * 3
    assert ds.intrinsic_dimension("ball", d=d) == d
    with pytest.raises(ValueError, match="radius"):
        ds.load("ball", radius=0.6)


def test_intrinsic_dimension_table():
    for name in CURVES:
        assert ds.intrinsic_dimension(name) == 1
        assert ds.intrinsic_dimension(name, noise=0.01) == 2
    for name in REGIONS:
        assert ds.intrinsic_dimension(name) == 2
    assert ds.intrinsic_dimension("cubes", d=7, k=3) == 3
    assert ds.intrinsic_dimension("uniform", d=6) == 6
    assert ds.intrinsic_dimension("subspace") == 1  # defaults d = 2, k = 1


# --------------------------------------------------------------------------- bad arguments


def test_unknown_name_lists_known_names():
    with pytest.raises(ValueError) as info:
        ds.load("moons")
    assert all(name in str(info.value) for name in ds.names())


@pytest.mark.parametrize(
    "kwargs,arg",
    [
        (dict(name="uniform", n=0), "n"),
        (dict(name="uniform", n=2.5), "n"),
        (dict(name="spiral", d=3), "d"),
        (dict(name="uniform", d=0), "d"),
        (dict(name="subspace", d=2, k=3), "k"),
        (dict(name="subspace", d=2, k=0), "k"),
        (dict(name="uniform", k=1), "k"),
        (dict(name="spiral", k=1), "k"),
        (dict(name="uniform", key=-1), "key"),
        (dict(name="uniform", key="seed"), "key"),
        (dict(name="spiral", noise=-0.1), "noise"),
        (dict(name="spiral", radius=0.1), "radius"),
    ],
)
def test_bad_arguments_are_named(kwargs, arg):
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=rf"\b{arg}\b"):
        ds.load(name, **kwargs)


# --------------------------------------------------------------------------- files


def test_file_round_trips(tmp_path):
    X = ds.load("spiral", n=50, key=0)
    Y = ds.load("ball", n=30, d=2, key=1)
    np.save(tmp_path / "x.npy", X)
    np.testing.assert_array_equal(ds.load(tmp_path / "x.npy"), X)
    np.testing.assert_array_equal(ds.load(str(tmp_path / "x.npy"), n=50, d=2), X)
    np.savez(tmp_path / "xy.npz", first=X, second=Y)
    np.testing.assert_array_equal(ds.load(tmp_path / "xy.npz", array="first"), X)
    np.testing.assert_array_equal(ds.load(tmp_path / "xy.npz", array="second"), Y)
    np.savez_compressed(tmp_path / "one.npz", only=Y)  # one array: no name needed
    np.testing.assert_array_equal(ds.load(tmp_path / "one.npz"), Y)
    np.savetxt(tmp_path / "plain.csv", X, delimiter=",", fmt="%.17g")
    np.testing.assert_array_equal(ds.load(tmp_path / "plain.csv"), X)
    np.savetxt(tmp_path / "head.csv", X, delimiter=",", fmt="%.17g", header="x,y", comments="")
    np.testing.assert_array_equal(ds.load(tmp_path / "head.csv"), X)
    np.savetxt(tmp_path / "space.csv", X, fmt="%.17g", header="x y", comments="")
    np.testing.assert_array_equal(ds.load(tmp_path / "space.csv"), X)


def test_csv_headers_written_by_pandas(tmp_path):
    # truth: the array pandas was given (pandas writes floats with a point or exponent)
    import pandas as pd

    X = ds.load("spiral", n=400, key=0)
    for d in (1, 2, 3):
        path = tmp_path / f"pandas{d}.csv"
        pd.DataFrame(X[:, :1] if d == 1 else np.c_[X, X[:, :d - 2]]).to_csv(path, index=False)
        assert ds.load(path).shape == (400, d)
    pd.DataFrame(X).to_csv(tmp_path / "p.csv", index=False)
    np.testing.assert_array_equal(ds.load(tmp_path / "p.csv"), X)
    pd.DataFrame(X, columns=["x", "y"]).to_csv(tmp_path / "named.csv", index=False)
    np.testing.assert_array_equal(ds.load(tmp_path / "named.csv"), X)


@pytest.mark.parametrize("content, rows", [
    ("0,1\n0.5,0.25\n", [[0.5, 0.25]]),          # pandas' header above floats
    ("1,0\n0.5,0.25\n", [[1, 0], [0.5, 0.25]]),  # integers that are not 0..d-1: data
    ("0,1\n", [[0, 1]]),                         # one line: a point
    ("0 1\n0.5 0.25\n", [[0.5, 0.25]]),
    ("# c\n\nx,\"y 2\"\n1e-1,2E-1\n", [[0.1, 0.2]]),
])
def test_csv_header_rule(tmp_path, content, rows):
    path = _write(tmp_path / "x.csv", content)
    np.testing.assert_array_equal(ds.load(path), np.array(rows, np.float64))


@pytest.mark.parametrize("content, match", [
    ("0x1,0.2\n0.3,0.4\n", "line 1 ('0x1,0.2') is neither a row of numbers nor a header"),
    ("# c\n1.5e,0.2\n0.3,0.4\n", "line 2 ('1.5e,0.2')"),
    ("x,y,z\n0.1,0.2\n", "line 1 ('x,y,z') is neither"),
    ("0,1\n1,0\n0,0.5\n", "line 1 ('0,1') is pandas' default header or a data point"),
    ("x,y\n0.1,0.2\n# c\n0.3,0x4\n", "line 4 ('0.3,0x4') is not a row of 2 numbers"),
    ("0.1,0.2\n0.3\n", "line 2 ('0.3') is not a row of 2 numbers"),
])
def test_csv_first_lines_that_are_neither_data_nor_header_are_refused(tmp_path, content,
                                                                       match):
    path = _write(tmp_path / "x.csv", content)
    with pytest.raises(ValueError, match=re.escape(f"could not read data file {path}: {match}")):
        ds.load(path)


def _write(path, content):
    if isinstance(content, np.ndarray):
        np.save(path, content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    "filename,content",
    [
        ("nan.npy", np.array([[0.1, np.nan], [0.2, 0.3]])),
        ("outside.csv", "x,y\n0.1,0.2\n0.5,1.5\n"),
        ("rank1.npy", np.array([0.1, 0.2, 0.3])),
        ("empty.npy", np.zeros((0, 2))),
        ("empty.csv", ""),
        ("header_only.csv", "x,y\n"),
        ("garbage.npy", b"not a numpy file"),
        ("garbage.npz", b"not a zip file"),
        ("ragged.csv", "0.1,0.2\n0.3\n"),
        ("words.csv", "x,y\n0.1,abc\n"),
    ],
)
def test_bad_files_name_the_file(tmp_path, filename, content):
    path = _write(tmp_path / filename, content)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        ds.load(path)


def test_missing_file_and_file_arguments(tmp_path):
    missing = tmp_path / "missing.npy"
    with pytest.raises(ValueError, match=re.escape(str(missing))):
        ds.load(missing)
    path = _write(tmp_path / "x.npy", ds.load("uniform", n=10, d=3))
    with pytest.raises(ValueError, match=r"\bn\b"):
        ds.load(path, n=11)
    with pytest.raises(ValueError, match=r"\bd\b"):
        ds.load(path, d=2)
    with pytest.raises(ValueError, match=r"\bk\b"):
        ds.load(path, k=1)
    np.savez(tmp_path / "a.npz", a=np.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="'b'"):
        ds.load(tmp_path / "a.npz", array="b")


def test_an_archive_of_several_arrays_needs_the_name_of_one(tmp_path):
    np.savez(tmp_path / "xy.npz", first=np.full((3, 2), 0.5), second=np.full((4, 2), 0.5))
    with pytest.raises(ValueError, match=re.escape(
            f"data file {tmp_path / 'xy.npz'} holds 2 arrays (first, second); name the one "
            "to use: array='first' (on the command line, --data-array first)")):
        ds.load(tmp_path / "xy.npz")


def _declaring(path, shape, version=(1, 0), archive=False):
    """A file whose ``.npy`` header declares ``shape`` (float64) above 64 bytes of data."""
    import zipfile

    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    write = {(1, 0): np.lib.format.write_array_header_1_0,
             (2, 0): np.lib.format.write_array_header_2_0}[version]
    if archive:
        with zipfile.ZipFile(path, "w") as z, z.open("x.npy", "w") as member:
            write(member, header)
            member.write(b"\0" * 64)
    else:
        with open(path, "wb") as f:
            write(f, header)
            f.write(b"\0" * 64)
    return path


@pytest.mark.parametrize("name, version, archive", [("big.npy", (1, 0), False),
                                                    ("big2.npy", (2, 0), False),
                                                    ("big.npz", (1, 0), True)])
def test_a_file_declaring_more_than_the_memory_is_refused_before_it_is_read(
        tmp_path, monkeypatch, name, version, archive):
    # truth: 10^11 × 2 float64 values are 1.5 TiB (1.6e12 bytes), more than a quarter of a
    # 8 GiB machine, read from the header alone (the file holds 64 bytes; reading it would
    # allocate the declared size first)
    from jaxsynth.core import validate

    monkeypatch.setattr(validate, "host_memory", lambda: 8 * 2**30)
    path = _declaring(tmp_path / name, (10**11, 2), version, archive)
    with pytest.raises(ValueError, match=re.escape(
            f"data file {path}: its array of shape (100000000000, 2) (declared in its header), "
            "as float64, would take 1.5 TiB, more than the 2.0 GiB allowed")):
        ds.load(path)
    small = _declaring(tmp_path / ("small" + name), (8, 1), version, archive)
    np.testing.assert_array_equal(ds.load(small), np.zeros((8, 1)))  # the header is all


def test_a_generated_data_set_with_fewer_points_than_coordinates_names_n():
    with pytest.raises(ValueError, match=re.escape(
            "n: the data set 'uniform' would have fewer points than coordinates (n = 10, "
            "d = 100); beyond d = 16, at least d points are needed: ask for n >= 100")):
        ds.load("uniform", n=10, d=100)
    assert ds.load("uniform", n=100, d=100).shape == (100, 100)  # n = d is enough
    assert ds.load("uniform", n=3, d=16).shape == (3, 16)  # few coordinates: as it stands


# --------------------------------------------------------------------------- rescaling


def test_rescale_common_scale():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3)) * [1.0, 100.0, 0.01] + [5.0, -3.0, 1e3]
    for margin in (0.0, 0.1):
        Y = ds.rescale_to_unit_cube(X, margin=margin)
        assert Y.shape == X.shape and Y.dtype == np.float64
        assert np.all((Y >= margin) & (Y <= 1 - margin))
        # The widest coordinate (index 1) spans exactly [margin, 1 - margin].
        np.testing.assert_allclose([Y[:, 1].min(), Y[:, 1].max()], [margin, 1 - margin])
        # One common scale: every ℓ∞ (and ℓ2) distance is multiplied by the same factor.
        for metric in ("chebyshev", "euclidean"):
            ratio = pdist(Y, metric) / pdist(X, metric)
            np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)
        np.testing.assert_allclose(ratio[0], (1 - 2 * margin) / np.ptp(X[:, 1]))
    np.testing.assert_array_equal(ds.rescale_to_unit_cube(np.full((4, 2), 7.0)), 0.5)


def _rescaled_exactly(X, margin):
    """``1/2 + (1 − 2·margin)(x − c)/W`` in exact rational arithmetic, rounded once."""
    from fractions import Fraction

    cols = [[Fraction(v) for v in col] for col in np.asarray(X, np.float64).T]
    lo, hi = [min(c) for c in cols], [max(c) for c in cols]
    width = max(h - l for l, h in zip(lo, hi))
    if width == 0:
        return np.full(X.shape, 0.5)
    m = Fraction(margin)
    return np.array([[float(Fraction(1, 2) + (1 - 2 * m) * (v - (l + h) / 2) / width)
                      for v in col] for col, l, h in zip(cols, lo, hi)]).T


def test_rescale_any_finite_range_against_exact_arithmetic():
    rng = np.random.default_rng(5)
    big = np.finfo(np.float64).max
    cases = [np.array([[-1e308], [0.0], [1e308]]), np.array([[-big, 1.0], [big, 2.0]]),
             np.array([[0.0], [5e-324], [1e-323]]), np.array([[1e300, 0.0], [1e300, 2e-320]])]
    for _ in range(16):  # every coordinate at its own scale, subnormal to near overflow
        exponents = rng.choice([-1074, -1060, -1000, -20, 0, 300, 1000, 1022], size=3)
        mantissa = rng.uniform(-1, 1, size=(7, 3)) * rng.choice([1, 2**-40], size=3)
        cases.append(np.ldexp(np.round(np.ldexp(mantissa, 52)), exponents - 52))
    for X in cases:
        for margin in (0.0, 0.1):
            Y = ds.rescale_to_unit_cube(X, margin=margin)
            assert np.all(np.isfinite(Y)) and np.all((Y >= margin) & (Y <= 1 - margin))
            np.testing.assert_allclose(Y, _rescaled_exactly(X, margin), rtol=0, atol=2e-15,
                                       err_msg=repr(X))
    np.testing.assert_array_equal(ds.rescale_to_unit_cube(cases[2]).ravel(), [0, 0.5, 1])


@pytest.mark.parametrize(
    "bad", [np.array([[0.0, np.nan]]), np.array([[np.inf, 1.0]]), np.zeros((0, 2)), np.ones(3)]
)
def test_rescale_refuses_bad_input(bad):
    with pytest.raises(ValueError, match=r"\bX\b"):
        ds.rescale_to_unit_cube(bad)


def test_rescale_refuses_bad_margin():
    with pytest.raises(ValueError, match="margin"):
        ds.rescale_to_unit_cube(np.ones((2, 2)), margin=0.5)
