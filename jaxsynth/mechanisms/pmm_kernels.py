"""Per-replicate kernels of the PMM family: the complete tree and the pruned frontier.

PMM (He, Vershynin, Zhu, "Algorithmically Effective Differentially Private Synthetic
Data", COLT 2023) and Pruned-PMM as in Zare Moayedi, Asadi, Yassaee, Aminian,
"Geometry-Adaptive Mechanisms for Private Synthetic Data" (arXiv 2609.33363) §3, §4.1,
§A.2.  Both kernels draw a node's noise from its parent's expansion block
(``jaxsynth.core.keys``), so when they visit the same nodes they release the same
measure, whatever the engine, batch or chunk.  While they descend, both sum the
metric-free level statistics of their release against the data (NOT PRIVATE,
``core.measure.LEVEL_FIELDS``): for the complete depth-``r`` tree of the partition,

    level_gap[j] = Σ_{cells c at level j} |μ(c) − ν(c)|,

with ``μ(c) = n_c/n`` and ``ν(c) = m_c/m`` the node's corrected mass (consistency makes
it the synthetic mass of the cell); cells outside the pruned tree have ``ν = 0`` and
contribute their data mass, which the sparse kernel accumulates as the data mass of the
pruned subtrees (a sum of non-negative terms, no cancellation); every leaf is at level
``r`` (``leaf_mass[r] = 2``).  The tree W1 method weighs them into the tree W1.

Kernels run under ``jax.vmap`` with axis ``frontier.REPLICATES`` (``jaxsynth.engine``);
``depth`` is traced, so replicates of different depths share one compilation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxsynth.core import frontier
from jaxsynth.core import keys as K
from jaxsynth.core import noise, partition
from jaxsynth.core.consistency import RULES, zero_respecting_split
from jaxsynth.core.descent import child_boundary


def level_statistics(gaps, depth) -> dict:
    """NOT PRIVATE ``LEVEL_FIELDS`` of a balanced release of ``depth``: the per-level
    gaps [R+1] summed by the kernel, and data plus synthetic mass 2 at level ``depth``."""
    return {"level_gap": gaps, "leaf_mass": jnp.zeros_like(gaps).at[depth].set(2.0)}


@dataclasses.dataclass(frozen=True)
class DenseStatic:
    """Static options of the complete-tree kernel.

    Attributes:
      max_depth: ``R``, the deepest depth of any replicate (arrays hold ``2^R`` leaves).
      piece: nodes per piece of a level.
      rule: ``"proportional"`` (PMM) or ``"zero_respecting"`` (dense Pruned-PMM), or a
        module-level callable ``rule(m, a, b, a_scaled, b_scaled, coin, c0, c1) -> (m0,
        m1)`` that also receives the TRUE child counts ``c0, c1`` (an audit hook: a rule
        that reads them is not private; ``jaxsynth.audit`` must catch it).
      dim: ``d``.
      points: synthetic points per replicate with uniform placement (0: cell centers).
      noise: audit hook, a module-level callable replacing ``noise.noisy_count``
        (``(word, count, inv_sigma) -> (value, scaled)``) for the root and every node;
        ``None`` (the default) is the real sampler.
      transcript: also return ``transcript`` [2^{R+1} − 1], the noisy counts the privacy
        proof covers (``(n_θ + λ_θ)_+`` in planar order: the root, then level 1, ...;
        nodes below a replicate's depth are 0), for the white-box privacy audit.
    """

    max_depth: int
    piece: int
    rule: str | Callable
    dim: int
    points: int = 0
    noise: Callable | None = None
    transcript: bool = False


@dataclasses.dataclass(frozen=True)
class SparseStatic:
    """Static options of the pruned-frontier kernel.

    Attributes:
      max_depth: ``R``, the length of the scale vectors (deepest depth of any replicate).
      capacity: frontier slots, at least the largest root mass (so never overflowed).
      piece: nodes per piece.
      dim: ``d``.
      points: synthetic points per replicate with uniform placement (0: cell centers).
    """

    max_depth: int
    capacity: int
    piece: int
    dim: int
    points: int = 0


def root_count(key, n, inv_sigma0, noisy=noise.noisy_count):
    """The noisy root count ``(n + λ_∅)_+``, ``λ_∅ ~ LapZ(σ_0)`` from the ROOT word."""
    word, _ = K.draw(key, K.ROOT)
    value, _ = noisy(word, n, inv_sigma0)
    return value


def root_mass(key, n, inv_sigma0, noisy=noise.noisy_count):
    """``m = max(1, (n + λ_∅)_+)``, ``λ_∅ ~ LapZ(σ_0)`` from the ROOT word.

    The root of Pruned-PMM (Zare Moayedi et al. §A.2).  ``noisy`` is the noisy-count
    sampler (``DenseStatic.noise`` audit hook).
    """
    return jnp.maximum(root_count(key, n, inv_sigma0, noisy), 1)


def uniform_points(leaf_key, leaf_word, depth, mass, lower, side, count: int):
    """``count`` synthetic points, ``mass[l]`` i.i.d. uniform in leaf ``l`` (PMM's output step).

    The ``j``-th point of a leaf draws its position from the leaf's own words, so every
    engine places the same points: the leaf key ``H(chunk key, (POINT·32 + depth, path
    word))``, then words ``POINT + 1 + t`` of counter ``j``.  Points are listed in leaf
    order; slots past ``Σ mass`` get weight 0.

    Args:
      leaf_key: ``(k0, k1)`` [L] chunk keys of the leaves; leaf_word: [L] their path words.
      depth: the leaves' level.
      mass: [L] int32 leaf masses; lower: [L, d] corners; side: [d] cell sides.
      count: static number of points (at least ``Σ mass``).

    Returns:
      (points [count, d], weights [count]).
    """
    d = lower.shape[-1]
    index = jnp.arange(count, dtype=jnp.int32)
    ends = jnp.cumsum(mass)
    leaf = jnp.minimum(jnp.searchsorted(ends, index, side="right"), mass.shape[0] - 1)
    rank = (index - (ends[leaf] - mass[leaf])).astype(jnp.uint32)
    own = K.draw((leaf_key[0][leaf], leaf_key[1][leaf]), K.POINT, depth, leaf_word[leaf])
    blocks = [K.draw(own, K.POINT + 1 + t, 0, rank) for t in range(-(-d // 2))]
    u = noise.uniform(jnp.stack([w for pair in blocks for w in pair], axis=-1)[:, :d])
    corner = lower[leaf]
    points = jnp.minimum(corner + u * side, jnp.nextafter(corner + side, corner))
    m = jnp.sum(mass)
    return points, (index < m).astype(jnp.float32) / m.astype(jnp.float32)


def dense_kernel(static: DenseStatic, key, params, shared, token):
    """One replicate of PMM on the complete tree, level by level in planar order.

    Args:
      static: ``DenseStatic``.
      key: raw replicate key [2].
      params: ``inv_sigma`` [R] (``1/σ_j`` of levels ``1..R``), ``inv_sigma0``, ``depth``.
      shared: ``counts`` (flat planar counts, ``DataTree.planar_counts(R)``),
        and nothing else.
      token: runtime-true flag (``frontier.barrier``).

    Returns:
      dict of ``size``, ``visited``, ``leaves``, ``depth``, tree W1 values, ``points``
      [M, d] and ``weights`` [M] (``M = 2^R`` leaves in planar order, or the synthetic
      points with uniform placement).
    """
    R, P, d = static.max_depth, static.piece, static.dim
    reads_truth = callable(static.rule)  # audit hook: a rule that also sees the true counts
    split = static.rule if reads_truth else RULES[static.rule]
    noisy = static.noise or noise.noisy_count
    counts = shared["counts"]
    depth = params["depth"]
    n = counts[0]
    m = root_mass(key, n, params["inv_sigma0"], noisy)
    inv_n, inv_m = 1.0 / n.astype(jnp.float32), 1.0 / m.astype(jnp.float32)
    scratch = max(1 << R, 2 * P)  # writes of masked replicates land past the levels
    a = jnp.zeros(scratch + 2 * P, jnp.int32).at[0].set(m)
    nodes = (2 << R) - 1  # transcript slots (planar order); its scratch follows them

    def level(j, src, dst, carry):
        gaps, active = carry[:2]
        live = j < depth
        width = jnp.left_shift(1, j)
        base = 2 * width - 1  # planar offset of level j + 1 in the flat counts
        inv = params["inv_sigma"][jnp.minimum(j, R - 1)]

        def piece(i, inner):
            dst, term, active = inner[:3]
            start = i * P
            index = start + jnp.arange(P, dtype=jnp.int32)
            valid = live & (index < width)
            parent = jax.lax.dynamic_slice_in_dim(src, start, P)
            c0 = jax.lax.dynamic_slice_in_dim(counts, base + start, P)
            c1 = jax.lax.dynamic_slice_in_dim(counts, base + width + start, P)
            w0, w1_ = K.draw(key, K.EXPAND, j, K.bit_reverse(index.astype(jnp.uint32)))
            a0, s0 = noisy(w0, c0, inv)
            a1, s1 = noisy(w1_, c1, inv)
            truth = (c0, c1) if reads_truth else ()
            m0, _ = split(parent, a0, a1, s0, s1, noise.coin(w0), *truth)
            m0 = jnp.where(valid, frontier.barrier(m0, token), 0)
            m1 = jnp.where(valid, parent - m0, 0)
            gap = jnp.abs(c0 * inv_n - m0 * inv_m) + jnp.abs(c1 * inv_n - m1 * inv_m)
            term = term + frontier.fixed_sum(jnp.where(valid, gap, 0.0))
            active = active + jnp.sum(valid & (parent > 0), dtype=jnp.int32)
            dst = jax.lax.dynamic_update_slice_in_dim(dst, m0, jnp.where(live, start, scratch), 0)
            dst = jax.lax.dynamic_update_slice_in_dim(
                dst, m1, jnp.where(live, width + start, scratch), 0
            )
            if not static.transcript:
                return dst, term, active
            # level j + 1 starts at planar offset 2·width − 1 (spills past a block's valid
            # entries are overwritten by the next write, or land in the trailing scratch)
            tr = inner[3]
            for offset, value in ((0, a0), (width, a1)):
                at = jnp.where(live, 2 * width - 1 + offset + start, nodes)
                tr = jax.lax.dynamic_update_slice_in_dim(tr, jnp.where(valid, value, 0), at, 0)
            return dst, term, active, tr

        n_pieces = frontier.pieces(jnp.where(live, width, 0), P)
        out = jax.lax.fori_loop(
            0, n_pieces, piece, (dst, jnp.float32(0.0), active) + tuple(carry[2:])
        )
        dst, term, active = out[:3]
        return dst, (gaps.at[jnp.minimum(j + 1, R)].add(term), active) + out[3:]

    init = (jnp.zeros(R + 1, jnp.float32), jnp.int32(0))
    if static.transcript:
        root = root_count(key, n, params["inv_sigma0"], noisy)
        init += (jnp.zeros(nodes + 2 * P, jnp.int32).at[0].set(root),)
    a, b, carry = frontier.level_pairs(R, level, a, jnp.zeros_like(a), init)
    gaps, active = carry[:2]
    index = jnp.arange(1 << R, dtype=jnp.int32)
    leaf_mass = frontier.final(a, b, depth)[: 1 << R]
    leaf_mass = jnp.where(index < jnp.left_shift(1, depth), leaf_mass, 0)
    if isinstance(static.rule, str) and static.rule == "zero_respecting":
        visited = 1 + 2 * active
    else:
        visited = jnp.left_shift(2, depth) - 1
    out = {
        "size": m, "visited": visited, "leaves": jnp.sum(leaf_mass > 0, dtype=jnp.int32),
        "depth": depth, **level_statistics(gaps, depth),
    }
    if static.transcript:
        out["transcript"] = carry[2][:nodes]
    # every depth's corners from one pass shared by the chunk (the slots' bits are the
    # same in every replicate; a runtime index, so XLA does not fold them at compile
    # time), then each replicate's own row
    slots = frontier.barrier(index, token)
    lower = partition.lower_corner_levels(lambda t: (slots >> t) & 1, R, d, index.shape[0])[depth]
    side = partition.cell_side(depth, d, jnp)
    if static.points:  # complete trees of depth ≤ 30 are in chunk 0: the replicate key
        keys = tuple(jnp.broadcast_to(k, index.shape) for k in key)
        points, weights = uniform_points(
            keys, K.bit_reverse(index.astype(jnp.uint32)), depth, leaf_mass, lower, side,
            static.points,
        )
    else:
        points, weights = lower + 0.5 * side, leaf_mass * inv_m
    return {**out, **_atoms(points, weights, depth, weights.shape[0] if static.points
                            else jnp.left_shift(1, depth))}


def _atoms(points, weights, depth, count):
    """Atom outputs; slots past ``count`` are padding: point 0, weight 0, level 0 (the root)."""
    real = jnp.arange(weights.shape[0]) < count
    return {"points": jnp.where(real[:, None], points, 0.0), "weights": jnp.where(real, weights, 0.0),
            "leaf_depth": jnp.where(real, depth, 0).astype(jnp.int32)}


def sparse_kernel(static: SparseStatic, key, params, shared, token):
    """One replicate of Pruned-PMM on the pruned frontier (sparse form; Algorithm 1).

    Level by level, every active node (mass > 0) is split: its two children's true counts
    come from the data tree in O(1) (``descent.child_boundary``), their noise from its
    expansion block, and the zero-respecting rule (Zare Moayedi et al. Algorithm 2) divides
    its mass.  Active nodes never outnumber the root mass, so ``capacity ≥ m`` makes overflow
    impossible; a smaller capacity (``engine.Plan.shrink``) is checked: ``overflow``
    reports a replicate that needed more (it stops early and is rerun), ``needed`` the
    slots it used.  Nodes of mass 1 (*units*) always keep exactly one child, so they live in
    a pool of their own and are stepped in place (``frontier.descend``); nodes of mass
    ≥ 2 are expanded and compacted (``frontier.expand``), and a child of mass 1 joins the
    pool.  Deep levels are almost all units, so most of the work is in-place.

    Args:
      static: ``SparseStatic``.
      key: raw replicate key [2].
      params: ``inv_sigma`` [R], ``inv_sigma0``, ``depth`` (traced, ``≤ R``).
      shared: ``tree`` (``DeviceTree``).
      token: runtime-true flag.

    Returns:
      dict of ``size``, ``visited`` ``1 + 2 Σ_{j<r} |A_j|``, ``leaves`` ``|A_r|``,
      ``depth``, tree W1 values, ``points`` [K, d] and ``weights`` [K].
    """
    R, cap, P, d = static.max_depth, static.capacity, static.piece, static.dim
    tree = shared["tree"]
    depth = params["depth"]
    n = tree.n
    m = root_mass(key, jnp.int32(n), params["inv_sigma0"])
    inv_n, inv_m = jnp.float32(1.0 / n), 1.0 / m.astype(jnp.float32)
    root = frontier.root(key, n, R, m[None])
    branch_cap = cap // 2 + 1  # nodes of mass ≥ 2
    # the root starts the branching frontier, or the unit pool when m = 1 (the other
    # write lands in the scratch slots past the capacity)
    units = frontier.allocate(root, cap + branch_cap + 2 * P)
    units = frontier.write(units, jnp.where(m == 1, 0, cap + branch_cap), root)
    a = frontier.allocate(root, branch_cap + 2 * P)
    a = frontier.write(a, jnp.where(m == 1, branch_cap, 0), root)

    def boundary(lo, hi, level):
        return child_boundary(tree, lo, hi, level)

    def split(mass, counts0, counts1, w0, w1_, inv):
        a0, s0 = noise.noisy_count(w0, counts0, inv)
        a1, s1 = noise.noisy_count(w1_, counts1, inv)
        m0, _ = zero_respecting_split(mass, a0, a1, s0, s1, noise.coin(w0))
        return frontier.barrier(m0, token)

    def unit_piece(j, live, inv, n_units):
        row = j // K.LEVELS_PER_CHUNK

        def piece(i, state):
            units, gap, dead = state
            start = i * P
            old = frontier.read((units.lo, units.hi, units.key0, units.key1), start, P)
            old += (jax.lax.dynamic_slice(units.path, (row, start), (1, P))[0],)
            # read once into fresh arrays, so the in-place writes below alias nothing
            old = frontier.barrier(old, token)
            lo, hi, k0, k1, word = old
            valid = live & (start + jnp.arange(P) < n_units)
            p = boundary(lo, hi, j)
            w0, w1_ = K.draw((k0, k1), K.EXPAND, j, word)
            bit = 1 - split(jnp.ones_like(lo), p - lo, hi - p, w0, w1_, inv)
            (k0, k1), word = frontier.child_keys((k0, k1), word, j, bit)
            new = (jnp.where(bit == 1, p, lo), jnp.where(bit == 1, hi, p), k0, k1, word)
            new = tuple(jnp.where(valid, x, y) for x, y in zip(new, old))
            kept = jnp.where(bit == 1, hi - p, p - lo) * inv_n
            gap = gap + frontier.fixed_sum(jnp.where(valid, jnp.abs(kept - inv_m), 0.0))
            dead = dead + frontier.fixed_sum(jnp.where(valid, (hi - lo) * inv_n - kept, 0.0))
            lo, hi, k0, k1 = frontier.write(
                (units.lo, units.hi, units.key0, units.key1), start, new[:4]
            )
            path = jax.lax.dynamic_update_slice(units.path, new[4][None], (row, start))
            units = units._replace(lo=lo, hi=hi, key0=k0, key1=k1, path=path)
            return units, gap, dead

        return piece

    def level(j, src, dst, carry):
        units, n_branch, n_units, gaps, dead, visited, overflow, most = carry
        live = (j < depth) & ~overflow  # an overflowed replicate is rerun: stop early
        inv = params["inv_sigma"][jnp.minimum(j, R - 1)]
        units, gap, dead = jax.lax.fori_loop(
            0, frontier.pieces(jnp.where(live, n_units, 0), P),
            unit_piece(j, live, inv, n_units), (units, jnp.float32(0.0), dead),
        )

        def branch_piece(i, state):
            dst, units, written, born, gap, dead = state
            part = frontier.expand_piece(src, i, P, n_branch, live, j, boundary)
            mass, counts, both = part.parents.extra, part.counts, part.valid
            m0 = split(mass, counts[:P], counts[P:], *part.words, inv)
            child_mass = jnp.concatenate([m0, mass - m0])
            data = counts * inv_n
            alive = both & (child_mass > 0)
            gap = gap + frontier.fixed_sum(jnp.where(alive, jnp.abs(data - child_mass * inv_m), 0.0))
            dead = dead + frontier.fixed_sum(jnp.where(both & ~alive, data, 0.0))
            children = part.children._replace(extra=child_mass)
            kept, block = frontier.compact(alive & (child_mass >= 2), children)
            dst = frontier.write(dst, jnp.where(live, written, branch_cap), block)
            new, block = frontier.compact(alive & (child_mass == 1), children)
            units = frontier.write(units, jnp.where(live, n_units + born, cap + branch_cap), block)
            return dst, units, written + kept, born + new, gap, dead

        dst, units, written, born, gap, dead = jax.lax.fori_loop(
            0, frontier.pieces(jnp.where(live, n_branch, 0), P), branch_piece,
            (dst, units, jnp.int32(0), jnp.int32(0), gap, dead),
        )
        gaps = gaps.at[jnp.minimum(j + 1, R)].add(jnp.where(live, gap + dead, 0.0))
        visited = visited + jnp.where(live, 2 * (n_branch + n_units), 0)
        overflow = overflow | (live & ((written > branch_cap) | (n_units + born > cap)))
        n_branch = jnp.where(live, written, n_branch)
        n_units = jnp.where(live, n_units + born, n_units)
        most = jnp.maximum(most, 2 * n_branch)
        return dst, (units, n_branch, n_units, gaps, dead, visited, overflow, most)

    init = (units, (m > 1).astype(jnp.int32), (m == 1).astype(jnp.int32),
            jnp.zeros(R + 1, jnp.float32), jnp.float32(0.0), jnp.int32(1), jnp.bool_(False),
            jnp.int32(0))
    a, b, (units, n_branch, n_units, gaps, _, visited, overflow, most) = frontier.level_pairs(
        frontier.batch_max(depth), level, a, jax.tree_util.tree_map(jnp.zeros_like, a), init
    )
    leaves = frontier.write(units, n_units, frontier.final(a, b, depth))
    leaves = jax.tree_util.tree_map(lambda x: x[..., :cap], leaves)
    count = n_units + n_branch
    slot = jnp.arange(cap)
    mass = jnp.where(slot < count, jnp.where(slot < n_units, 1, leaves.extra), 0)
    out = {
        "size": m, "visited": visited, "leaves": count, "depth": depth,
        "overflow": overflow | (count > cap), "needed": jnp.maximum(count, most),
        **level_statistics(gaps, depth),
    }
    side = partition.cell_side(depth, d, jnp)
    lower = partition.lower_corners(lambda t: frontier.path_bit(leaves.path, t), depth, d, cap)
    if static.points:
        word = leaves.path[depth // K.LEVELS_PER_CHUNK]
        points, weights = uniform_points(
            (leaves.key0, leaves.key1), word, depth, mass, lower, side, static.points
        )
        return {**out, **_atoms(points, weights, depth, m)}
    return {**out, **_atoms(lower + 0.5 * side, mass * inv_m, depth, count)}
