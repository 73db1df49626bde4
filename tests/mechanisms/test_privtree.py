"""PrivTree + Laplace leaf masses: split law, clamp, partition, shift, reconstruction, batching.

Compilations dominate the run time, so the tests share a few static configurations:
``MECH`` / ``SHIFT`` on ``clustered_data()`` (n = 200, d = 2, cap 12, capacity 128)
with batch shapes (E=2, S=4) and (E=1, S=1).
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsynth as js
from jaxsynth.core import keys as K
from jaxsynth.core import partition
from jaxsynth.core.datatree import DataTree
from jaxsynth.core.frontier import REPLICATES
from jaxsynth.mechanisms import privtree as pt
from jaxsynth.mechanisms import privtree_kernel as ptk

CAP, CAPACITY, EPS = 12, 512, [1.0, 4.0]
MECH = pt.PrivTree(depth_cap=CAP, capacity=CAPACITY)
SHIFT = pt.PrivTree(shift=True, depth_cap=CAP, capacity=CAPACITY)


def clustered_data(n=200):
    rng = np.random.default_rng(0)
    X = np.clip(0.3 + 0.08 * rng.standard_normal((n, 2)), 0, 1)
    X[:40] = rng.random((40, 2))
    return X


@pytest.fixture(scope="module")
def X():
    return clustered_data()


@pytest.fixture(scope="module")
def batch(X):
    return js.release_batch(7, MECH, X, eps=EPS, seeds=4)


@pytest.fixture(scope="module")
def shifted(X):
    return js.release_batch(7, SHIFT, X, eps=EPS, seeds=4)


def _words(n, key=0):
    return jax.random.bits(jax.random.key(key), (n,), jnp.uint32)


# ---------------------------------------------------------------- the split law

N_DRAWS = 40000


@pytest.mark.parametrize("count, level", [(0, 0), (3, 1), (10, 2), (25, 3), (5, 1)])
def test_split_frequency_matches_law(count, level):
    """Empirical split frequency vs ``P(Lap(λ) > −b)``; 5 binomial standard errors."""
    eps = 1.0
    lam, delta, _ = pt.privtree_scales(eps)
    counts = jnp.full(N_DRAWS, count, jnp.float32)
    split = ptk.privtree_split(counts, jnp.float32(level), _words(N_DRAWS, count + 7 * level), lam, delta)
    freq = float(jnp.mean(split))
    p = float(pt.split_probability(count, level, eps))
    assert abs(freq - p) < 5 * np.sqrt(p * (1 - p) / N_DRAWS)


def test_clamp_on_empty_deep_cell():
    """An empty cell at level 10 splits with ``P(Lap(λ) > δ) = e^{-ln 2}/2 = 1/4``.

    Without the clamp ``b = −10δ`` and the probability would be ``2^-10/2 ≈ 5e-4``.
    """
    lam, delta, _ = pt.privtree_scales(0.5)
    split = ptk.privtree_split(jnp.zeros(N_DRAWS), jnp.float32(10), _words(N_DRAWS, 3), lam, delta)
    freq = float(jnp.mean(split))
    assert pt.split_probability(0, 10, 0.5) == pytest.approx(0.25)
    assert abs(freq - 0.25) < 5 * np.sqrt(0.25 * 0.75 / N_DRAWS)
    unclamped = 0.5 * np.exp(-10 * delta / lam)
    assert abs(freq - unclamped) > 0.2


def test_scales_follow_the_paper():
    """λ = 6/ε (count units: σ = 6/(εn) in mass units), δ = λ ln 2, leaf noise 2/ε."""
    lam, delta, leaf = pt.privtree_scales(2.0)
    assert (lam, leaf) == (3.0, 1.0)
    assert delta == pytest.approx(3.0 * np.log(2.0))


@pytest.mark.slow
def test_mean_leaf_count_matches_exact_expectation(X):
    """The whole tree law: mean leaves over 200 seeds vs ``expected_leaves`` (5 SE).

    ``expected_leaves`` multiplies the exact per-cell split probabilities along the data
    tree and models ghost subtrees with the clamped probability 1/4, so a wrong bias,
    scale, clamp or descent would move the mean.  Seeds run in chunks of 4 (same
    compiled shape as the other tests).
    """
    out = js.release_batch(11, MECH, X, eps=EPS, seeds=200)
    tree = DataTree.build(X, CAP)
    leaves = np.asarray(out.leaves, np.float64)
    for e, row in zip(EPS, leaves):
        se = row.std(ddof=1) / np.sqrt(row.size)
        assert abs(row.mean() - pt.expected_leaves(tree, e, CAP)) < 5 * se


def test_expected_leaves_below_paper_bound():
    """``E[#leaves] ≤ 6 + εn/(4 ln 2)`` for any data (uniform is the worst).

    He (Intrinsic-Dimensional …) §5.2.
    """
    U = np.random.default_rng(3).random((2000, 2))
    tree = DataTree.build(U, 30)
    for eps in (0.5, 1.0, 4.0):
        assert pt.expected_leaves(tree, eps, 30) <= 6 + eps * 2000 / (4 * np.log(2))


# ---------------------------------------------------------------- the partition


def _leaf_cells(out, shift=None):
    """(depth, per-coordinate cell index) of every leaf of one replicate, via cell_index."""
    size = int(out.leaves)
    pts = np.asarray(out.points[:size], np.float64)
    if shift is not None:
        pts = (pts + shift) / 2
    depth = np.asarray(out.leaf_depth[:size])
    cells = [tuple(partition.cell_index(pts[i : i + 1], k)[0]) for i, k in enumerate(depth)]
    return pts, depth, cells


def _in_cells(points, depth, cells):
    """[n] number of leaf cells ``(depth, cells)`` containing each of ``points`` (brute force)."""
    inside = np.zeros(len(points), int)
    for k in np.unique(depth):
        index = partition.cell_index(points, int(k))
        mine = np.array([c for c, kk in zip(cells, depth) if kk == k])
        inside += np.all(index[:, None, :] == mine[None], axis=2).sum(axis=1)
    return inside


def test_leaves_partition_the_cube(X, batch):
    """Leaves are disjoint cells whose volumes ``2^-depth`` sum to 1; every point in one leaf."""
    for e, s in itertools.product(range(2), range(4)):
        out = batch[e, s]
        _, depth, cells = _leaf_cells(out)
        assert np.sum(np.exp2(-depth.astype(float))) == 1.0
        assert np.all(_in_cells(X, depth, cells) == 1)
        assert int(out.depth) == depth.max() <= CAP


def test_outputs_are_well_formed(batch):
    w = np.asarray(batch.weights)
    assert w.shape == (2, 4, CAPACITY)
    assert np.all(w >= 0) and np.allclose(w.sum(-1), 1, atol=1e-5)
    leaves = np.asarray(batch.leaves)
    assert np.all(np.asarray(batch.size) <= leaves)
    assert np.all(np.asarray(batch.size) == np.sum(w > 0, axis=-1))
    # every visited cell is a leaf or was split: visited = leaves + internal (+ cap draws)
    assert np.all(np.asarray(batch.visited) >= leaves)
    pad = np.arange(CAPACITY) >= leaves[..., None]
    assert np.all(w[pad] == 0) and np.all(np.asarray(batch.leaf_depth)[pad] == 0)
    acc = batch.accounting
    assert acc["adjacency"] == "add_remove" and batch.mechanism == "privtree"
    assert np.allclose(acc["eps_tree"] + acc["eps_leaves"], acc["epsilon"])
    assert np.allclose(acc["epsilon"][:, 0], EPS)


def _topdown_reference(noisy, paths):
    """Brute-force top-down reconstruction over an explicit tree of path strings."""
    sums = {}
    for p, v in zip(paths, noisy):
        for t in range(len(p) + 1):
            sums[p[:t]] = sums.get(p[:t], 0.0) + float(v)
    masses = []
    for p in paths:
        mass = 1.0
        for t in range(len(p)):
            kids = [p[:t] + b for b in "01" if p[:t] + b in sums]
            pos = {c: max(sums[c], 0.0) for c in kids}
            total = sum(pos.values())
            mass *= pos[p[: t + 1]] / total if total > 0 else 1.0 / len(kids)
        masses.append(mass)
    return np.array(masses)


def _paths(points, depth):
    return [
        "".join(str(int(partition.morton_bit(points[i : i + 1], t)[0])) for t in range(k))
        for i, k in enumerate(depth)
    ]


@pytest.mark.parametrize("which", ["plain", "shift"])
def test_topdown_matches_bruteforce(which, batch, shifted):
    out = batch if which == "plain" else shifted
    for e, s in itertools.product(range(2), range(4)):
        rep = out[e, s]
        shift = np.asarray(rep.info["shift"], np.float64) if which == "shift" else None
        pts, depth, _ = _leaf_cells(rep, shift)
        noisy = np.asarray(rep.info["noisy_mass"][: int(rep.leaves)])
        ref = _topdown_reference(noisy, _paths(pts, depth))
        got = np.asarray(rep.weights[: int(rep.leaves)])
        np.testing.assert_allclose(got, ref, atol=2e-6)
        assert got.sum() == pytest.approx(1.0, abs=1e-5)


def _reconstruct_tree(noisy):
    """The kernel's reconstruction of the tree ``root → '0' (leaf), '1' → '10', '11'``."""
    static = ptk.TreeStatic(capacity=8, piece=4, max_depth=2, dim=1)
    table = {
        "parent": jnp.array([-1, 0, 0, 2, 2, 0, 0, 0]), "level": jnp.array([0, 1, 1, 2, 2, 0, 0, 0]),
        "count": jnp.array([4, 1, 3, 1, 2, 0, 0, 0]),
        "leaf": jnp.array([False, True, False, True, True, False, False, False]),
        "noisy": jnp.zeros(8).at[jnp.array([1, 3, 4])].set(jnp.asarray(noisy, jnp.float32)),
        "points": jnp.zeros((1, 8)),
    }
    bounds = jnp.array([0, 1, 3, 5, 5])
    shared = {"weights": jnp.ones((2, 3)), "diameters": jnp.ones((2, 3))}

    def run(table):
        return ptk._reconstruct(static, table, bounds, 5, False, 0, 4, shared, None)

    batched = jax.tree_util.tree_map(lambda a: a[None], table)
    return np.asarray(jax.vmap(run, axis_name=REPLICATES)(batched)["weights"][0, :3])


def test_topdown_all_nonpositive_splits_evenly():
    """Leaves ``'0', '10', '11'`` with all-negative masses: ``1/2, 1/4, 1/4``."""
    np.testing.assert_allclose(_reconstruct_tree([-1.0, -2.0, -0.5]), [0.5, 0.25, 0.25])
    # S_'1' = 2, S_'0' = 2: 2/4 each; '10' takes all of '1' (its sibling is negative)
    np.testing.assert_allclose(_reconstruct_tree([2.0, 3.0, -1.0]), [0.5, 0.5, 0.0])


def test_duplicated_points_terminate_at_the_cap():
    """200 copies of one point split to the cap; the cap is reported as hit."""
    dup = np.tile([[0.3, 0.7]], (200, 1))
    out = js.release_batch(0, MECH, dup, eps=EPS, seeds=4)
    assert np.all(np.asarray(out.depth) == CAP)
    assert np.all(np.asarray(out.info["cap_hits"]) >= 1)
    assert np.all(np.asarray(out.info["depth_cap"]) == CAP)


# ---------------------------------------------------------------- the random shift


def test_shift_keeps_representatives_in_omega_and_covers_the_window(X, shifted):
    """Atoms in Ω, inside their leaf and the window; leaf boxes ``Q ∩ (Ω+U)`` tile Ω."""
    U = np.asarray(shifted.info["shift"], np.float64)
    assert U.shape == (2, 4, 2) and np.all((U > 0) & (U < 1))
    assert np.all(U[0] == U[1])  # public, drawn from the seed only, shared by every ε
    assert shifted.mechanism == "privtree-shift"
    for e, s in itertools.product(range(2), range(4)):
        rep = shifted[e, s]
        u = U[e, s]
        size = int(rep.leaves)
        y = np.asarray(rep.points[:size], np.float64)
        assert np.all((y >= 0) & (y <= 1))
        z, depth, cells = _leaf_cells(rep, u)
        volume = 0.0
        for i, (k, cell) in enumerate(zip(depth, cells)):
            side = partition.cell_side(int(k), 2)
            lower = np.asarray(cell) * side
            a, b = np.maximum(2 * lower - u, 0), np.minimum(2 * (lower + side) - u, 1)
            assert np.all(b > a), "a leaf disjoint from the window got an atom"
            assert np.all((y[i] > a) & (y[i] < b))  # the center of Q ∩ (Ω + U), shifted back
            volume += np.prod(b - a)
        assert volume == pytest.approx(1.0, abs=1e-12)
        assert np.all(_in_cells((X + u) / 2, depth, cells) == 1)


@pytest.mark.parametrize("shift", [False, True])
def test_representatives_inside_boxes(shift):
    """Uniform points lie in ``[a, b)`` of each leaf box (``b = 1`` allowed); centers exact."""
    rng = np.random.default_rng(0)
    level = rng.integers(0, 30, 500)
    res = np.stack([partition.coordinate_resolution(int(j), 2) for j in level])
    lower = np.floor(rng.random((500, 2)) * 2.0**res) / 2.0**res
    u = (2 * np.array([1258291, 2306867]) + 1) / 2.0**23 if shift else None  # U ≈ (0.3, 0.55)
    u = None if u is None else jnp.asarray(u, jnp.float32)

    @jax.jit
    def place(lower, level, k0, k1, word):
        a, b = ptk._boxes(lower, level, u, 2)
        return (a, b, ptk._representatives(lower, level, k0, k1, word, u, 2, True),
                ptk._representatives(lower, level, k0, k1, word, u, 2, False))

    words = np.arange(1500, dtype=np.uint32).reshape(3, 500)
    a, b, y, c = (np.asarray(v).T for v in place(jnp.asarray(lower.T, jnp.float32),
                                                 jnp.asarray(level), *words))
    meets = np.all(b > a, axis=1)  # the others miss the window: the mechanism discards them
    assert meets.sum() > 100 and (shift or meets.all())
    a, b, y, c = a[meets], b[meets], y[meets], c[meets]
    assert np.all((a >= 0) & (b <= 1))
    assert np.all((y >= a) & ((y < b) | ((y == b) & (b == 1.0))))
    np.testing.assert_array_equal(c.astype(np.float64), (a.astype(np.float64) + b) / 2)


def test_shift_vectors_are_exact_midpoints(shifted):
    U = np.asarray(shifted.info["shift"], np.float64)
    vectors = jax.vmap(lambda k: ptk.shift_vector(k, 2)[0])(K.replicate_keys(7, 4))
    np.testing.assert_array_equal(U[0], np.asarray(vectors))
    k = U * 2**23
    assert np.all(k == np.round(k)) and np.all(k % 2 == 1)
    assert len(np.unique(U)) == U[0].size  # distinct per seed and coordinate


# ---------------------------------------------------------------- batching and capacity


def test_release_equals_release_batch(X, batch):
    keys = K.replicate_keys(7, 4)
    for e, s in itertools.product(range(2), range(4)):
        single = js.release(keys[s], MECH, X, eps=EPS[e])
        rep = batch[e, s]
        for field in ("points", "weights", "leaf_depth"):
            np.testing.assert_array_equal(
                np.asarray(getattr(single, field)), np.asarray(getattr(rep, field))
            )
        assert int(single.visited) == int(rep.visited)


def test_shift_batch_order_invariance(X, shifted):
    other = js.release_batch(7, SHIFT, X, eps=EPS[::-1], seeds=[3, 2, 1, 0])
    for e, s in itertools.product(range(2), range(4)):
        a, b = shifted[e, s], other[1 - e, 3 - s]
        for field in ("points", "weights", "leaf_depth"):
            np.testing.assert_array_equal(
                np.asarray(getattr(a, field)), np.asarray(getattr(b, field))
            )


@pytest.mark.slow
def test_capacity_overflow_raises_or_doubles(X, monkeypatch):
    """A fixed capacity that overflows raises; the automatic mode doubles and reproduces."""
    # key 2 at ε = 4 reaches more than 64 cells: 64 slots overflow
    with pytest.raises(ValueError, match="capacity=64 overflowed"):
        js.release(2, pt.PrivTree(depth_cap=CAP, capacity=64), X, eps=4.0)
    monkeypatch.setattr(pt.PrivTree, "_initial_capacity", lambda *a: 64)
    auto = js.release(2, pt.PrivTree(depth_cap=CAP), X, eps=4.0)
    fixed = js.release(2, MECH, X, eps=4.0)
    assert int(auto.visited) > 64 and int(auto.leaves) == int(fixed.leaves)
    size = int(fixed.leaves)
    for field in ("points", "weights", "leaf_depth"):
        np.testing.assert_array_equal(
            np.asarray(getattr(auto, field))[:size], np.asarray(getattr(fixed, field))[:size]
        )
    assert np.all(np.asarray(auto.weights)[size:] == 0)


# ---------------------------------------------------------------- LP reconstruction


def _bl_vertices(points, bound):
    """Vertices of ``{f : |f_i| ≤ B, f_i − f_j ≤ ‖y_i − y_j‖}`` by brute-force enumeration."""
    size = len(points)
    rows, rhs = [], []
    for i in range(size):
        for sign in (1, -1):
            r = np.zeros(size)
            r[i] = sign
            rows.append(r)
            rhs.append(bound)
    for i, j in itertools.permutations(range(size), 2):
        r = np.zeros(size)
        r[i], r[j] = 1, -1
        rows.append(r)
        rhs.append(np.linalg.norm(points[i] - points[j]))
    A, b = np.array(rows), np.array(rhs)
    vertices = []
    for active in itertools.combinations(range(len(A)), size):
        sub = A[list(active)]
        if abs(np.linalg.det(sub)) < 1e-12:
            continue
        f = np.linalg.solve(sub, b[list(active)])
        if np.all(A @ f <= b + 1e-9):
            vertices.append(f)
    return np.array(vertices)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lp_projection_matches_vertex_enumeration(seed):
    """Flow-dual LP vs the primal objective ``max_v (p − p̃)·f_v`` over enumerated vertices."""
    from scipy.optimize import linprog

    rng = np.random.default_rng(seed)
    points = rng.random((3, 2))
    noisy = rng.normal(0.33, 0.4, 3)
    p, value = pt.lp_projection(noisy, points)
    V = _bl_vertices(points, 2.0)
    objective = lambda q: np.max(V @ (q - noisy))  # noqa: E731
    # epigraph LP over the vertices: min t s.t. V(p − p̃) ≤ t, p in the simplex
    c = np.r_[np.zeros(3), 1.0]
    res = linprog(c, A_ub=np.c_[V, -np.ones(len(V))], b_ub=V @ noisy,
                  A_eq=np.r_[np.ones(3), 0.0][None], b_eq=[1.0],
                  bounds=[(0, None)] * 3 + [(None, None)], method="highs")
    assert value == pytest.approx(res.fun, abs=1e-9)
    assert objective(p) == pytest.approx(value, abs=1e-9)
    assert p.min() >= 0 and p.sum() == pytest.approx(1.0)
    grid = [np.array([a, b, 1 - a - b]) for a in np.linspace(0, 1, 41)
            for b in np.linspace(0, 1 - a, max(2, int(round((1 - a) * 40)) + 1))]
    assert objective(p) <= min(objective(q) for q in grid) + 1e-12


def test_lp_reconstruction_end_to_end(X):
    lp = pt.PrivTree(depth_cap=CAP, capacity=CAPACITY, reconstruction="lp")
    out = js.release(5, lp, X, eps=1.0)
    ref = js.release(5, MECH, X, eps=1.0)
    size = int(out.leaves)
    w = np.asarray(out.weights)
    assert np.all(w >= 0) and w.sum() == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_array_equal(np.asarray(out.points), np.asarray(ref.points))
    noisy = np.asarray(out.info["noisy_mass"][:size])
    p, _ = pt.lp_projection(noisy, np.asarray(out.points[:size]))
    np.testing.assert_allclose(w[:size], p, atol=1e-7)


def test_lp_refuses_large_trees():
    with pytest.raises(ValueError, match="at most"):
        pt.lp_projection(np.zeros(pt.LP_MAX_LEAVES + 1), np.zeros((pt.LP_MAX_LEAVES + 1, 2)))


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(reconstruction="greedy"), "reconstruction"),
        (dict(placement="corner"), "placement"),
        (dict(depth_cap=0), "depth_cap"),
        (dict(capacity=-3), "capacity"),
    ],
)
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pt.PrivTree(**kwargs)


def test_bad_inputs(X):
    with pytest.raises(ValueError, match="depth_cap"):
        js.release(0, pt.PrivTree(depth_cap=45), X, eps=1.0)
    with pytest.raises(ValueError, match="eps"):
        js.release(0, MECH, X, eps=-1.0)
    with pytest.raises(ValueError, match="outside"):
        js.release(0, MECH, X + 1.0, eps=1.0)


def test_default_cap_rule():
    assert pt.default_depth_cap(30000, 2, 1.0) == 2 * (15 + 1)
    assert pt.default_depth_cap(10, 3, 0.01) == 3
    assert pt.default_depth_cap(10**9, 1, 100.0) == pt.MAX_BISECTIONS
    assert pt.PrivTree().name == "privtree" and pt.PrivTree(shift=True).name == "privtree-shift"
