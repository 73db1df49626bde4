"""Per-replicate kernel of PrivTree, its shifted variant and the threshold oracles.

Y. He, "Intrinsic-Dimensional Wasserstein Guarantees for Private Synthetic Measures" §3,
§5, §6, on PrivTree (Zhang, Xiao, Xie, SIGMOD 2016); the mechanism and its parameters
are documented in ``jaxsynth.mechanisms.privtree``.  The tree grows level by level on the
shared frontier (``jaxsynth.core.frontier``): split children form the next level, the
others are leaves.  Every reached node is appended to a *node table* in breadth-first
order with its parent's index, level and true count, so reconstruction and measurement
need no sort:

* bottom-up, a node's noisy subtree sum is the sum of its children's;
* top-down, a node's mass is its parent's times ``(S_v)_+ / Σ_siblings (S)_+``, or an
  even share among its siblings when none is positive (``"topdown"``);
* the NOT PRIVATE level statistics (``core.measure.LEVEL_FIELDS``) sum, per level,
  ``|n_v/n − mass_v|`` over the nodes ``v ≠ root`` and the data plus synthetic mass of
  the leaves; the tree W1 method weighs them into the tree W1 and its upper bound.

Shifted partitions (``shifted``): the public shift ``U`` comes from the replicate's
``SHIFT`` words; the data ``y = (x + U)/2`` are coded, sorted and descended on the
device, children disjoint from the window ``[U/2, (1+U)/2]`` discarded, and distances
doubled.  The oracle rule (``rule="threshold"``) splits while ``count > θ + level·δ``,
draws nothing, and gives every leaf its exact mass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxsynth.core import frontier
from jaxsynth.core import keys as K
from jaxsynth.core import noise, partition
from jaxsynth.core.descent import child_boundary, child_boundary_search
from jaxsynth.core.partition import WORD_BITS

FIXED_POINT_BITS = 29
"""Data are truncated to 29 binary digits (``⌊x·2^29⌋``) for the shifted partition."""


@dataclasses.dataclass(frozen=True)
class TreeStatic:
    """Static options of the adaptive-tree kernel.

    Attributes:
      capacity: node-table slots (reached cells); the frontier has as many.
      piece: nodes per piece.
      max_depth: the largest depth cap of any replicate (loop bound, metric tables).
      dim: ``d``.
      rule: ``"privtree"`` (noisy split tests and leaf masses) or ``"threshold"`` (oracle).
      shifted: the randomly shifted partition of He (Intrinsic-Dimensional …) §6.
      uniform: uniform representatives in the leaf boxes instead of centers.
      split: audit hook, a module-level callable replacing ``privtree_split``
        (``(counts, level, word, lam, delta) -> bool``); ``None`` (the default) is the
        real test.  ``jaxsynth.audit`` reads it to audit the split test the kernel uses.
    """

    capacity: int
    piece: int
    max_depth: int
    dim: int
    rule: str = "privtree"
    shifted: bool = False
    uniform: bool = False
    split: Callable | None = None


def privtree_split(counts, level, word, lam, delta):
    """PrivTree's split test ``max(c − kδ, −δ) + Lap(λ) > 0`` in count units.

    He (Intrinsic-Dimensional …) §3; Zhang, Xiao, Xie (SIGMOD 2016).

    ``counts`` and ``level`` are float32; ``word`` each node's word (``noise.laplace``).
    The clamp at ``−δ`` (``θ = 0``) is what makes PrivTree private.
    """
    biased = jnp.maximum(counts - level * delta, -delta)
    return biased + noise.laplace(word, lam) > 0


def shift_vector(key, d: int):
    """Public shift ``U`` [d] float32 on the midpoints ``(2k+1)·2^-23`` (``keys.SHIFT`` words)."""
    words = jnp.stack(K.draw(key, K.SHIFT, 0, jnp.arange(-(-d // 2), dtype=jnp.uint32)), -1)
    bits = words.reshape(-1)[:d] >> 10
    return (bits.astype(jnp.float32) * 2.0 + 1.0) * jnp.float32(2.0**-23), bits


def shifted_codes(fixed, bits, depth: int):
    """Sorted Morton codes [n, W] of ``y = (x + U)/2`` from fixed-point data [n, d] (uint32).

    ``x`` is ``⌊x·2^29⌋`` and ``U·2^29 = (2k+1)·2^6`` with ``k = bits``, so ``S = 2^30·y``
    is an exact uint32 below 2^30 and digit ``k`` of ``y_c`` is bit ``30 − k`` of ``S_c``.
    Truncating ``x`` to 29 digits changes no cell of ≤ 22 bisections per coordinate: a
    boundary of ``x + U`` there is a multiple of 2^-21 and ``U`` one of 2^-23.
    """
    d = fixed.shape[1]
    total = fixed + ((bits * 2 + 1) << 6)[None, :].astype(jnp.uint32)
    n_words = -(-depth // WORD_BITS)

    def level(t, words):
        bit = (total[:, t % d] >> (29 - t // d).astype(jnp.uint32)) & jnp.uint32(1)
        row = t // WORD_BITS
        shifted = bit << (WORD_BITS - 1 - t % WORD_BITS).astype(jnp.uint32)
        return words.at[:, row].set(words[:, row] | shifted)

    words = jax.lax.fori_loop(0, depth, level, jnp.zeros((fixed.shape[0], n_words), jnp.uint32))
    if n_words == 1:
        return jnp.sort(words[:, 0])[:, None]
    return jnp.stack(jax.lax.sort(tuple(words.T), num_keys=n_words), axis=1)


def _boxes(lower, level, shift, d: int):
    """Boxes ``[a, b)`` [d, N] in Ω of cells ``(lower [d, N], level [N])`` (shift: ``Q ∩ (Ω+U) − U``)."""
    side = partition.cell_side(level[:, None], d, jnp).T
    if shift is None:
        return lower, lower + side
    u = shift[:, None]
    return jnp.maximum(2.0 * lower - u, 0.0), jnp.minimum(2.0 * (lower + side) - u, 1.0)


def _representatives(lower, level, key0, key1, word, shift, d: int, uniform: bool):
    """Leaf representatives [d, N]: box centers, or uniform in the box from PLACE words."""
    a, b = _boxes(lower, level, shift, d)
    if not uniform:
        return a + 0.5 * (b - a)
    blocks = [K.draw((key0, key1), K.PLACE + t, level, word) for t in range(-(-d // 2))]
    u = noise.uniform(jnp.stack([w for pair in blocks for w in pair])[:d])
    return jnp.minimum(a + u * (b - a), jnp.nextafter(b, a))


def tree_kernel(static: TreeStatic, key, params, shared, token):
    """One replicate of PrivTree (or a threshold oracle) with its reconstruction and W1.

    Args:
      static: ``TreeStatic``.
      key: raw replicate key [2].
      params: ``lam``, ``delta`` (PrivTree's ``λ``, ``δ`` in count units), ``leaf_scale``
        (``2/ε``), ``theta`` (threshold, count units), ``cap`` (depth cap).
      shared: ``tree`` (``DeviceTree``; unshifted) or ``fixed`` [n, d] uint32 (shifted).
      token: runtime-true flag.

    Returns:
      dict of ``size`` (atoms of positive mass), ``visited`` (cells tested), ``leaves``,
      ``depth`` (deepest leaf), ``cap_hits``, ``overflow``, tree W1 values, and per atom
      ``points`` [Q, d], ``weights``, ``leaf_depth``, ``noisy_mass``.
    """
    Q, P, L, d = static.capacity, static.piece, static.max_depth, static.dim
    cap = params["cap"]
    privtree = static.rule == "privtree"
    if static.shifted:
        shift, bits = shift_vector(key, d)
        words = shifted_codes(shared["fixed"], bits, L)
        n = words.shape[0]

        def boundary(lo, hi, level):
            return child_boundary_search(words, lo, hi, level)

        window = (shift / 2.0, (1.0 + shift) / 2.0)
    else:
        shift, window = None, None
        tree = shared["tree"]
        n = tree.n

        def boundary(lo, hi, level):
            return child_boundary(tree, lo, hi, level)

    def split_test(counts, level, word):
        if privtree:
            test = static.split or privtree_split
            return test(counts, level, word, params["lam"], params["delta"])
        return counts > params["theta"] + level * params["delta"]

    def leaf_noise(counts, nodes, level):
        if not privtree:
            return counts.astype(jnp.float32)
        word = nodes.path[level // K.LEVELS_PER_CHUNK]
        w, _ = K.draw((nodes.key0, nodes.key1), K.LEAF, level, word)
        return counts + noise.laplace(w, params["leaf_scale"])

    def table_rows(nodes, index_parent, level, counts, leaf):
        """Node-table entries [fields, N] of reached nodes."""
        level_vec = jnp.full(counts.shape, level, jnp.int32)
        row = level // K.LEVELS_PER_CHUNK
        points = _representatives(
            nodes.extra["lower"], level_vec, nodes.key0, nodes.key1, nodes.path[row],
            shift, d, static.uniform,
        )
        return {
            "parent": index_parent, "level": level_vec, "count": counts, "leaf": leaf,
            "noisy": jnp.where(leaf, leaf_noise(counts.astype(jnp.float32), nodes, level), 0.0),
            "points": points,
        }

    # the root: level 0, all points, tested with its ROOT word
    root = frontier.root(key, n, L, {"lower": jnp.zeros((d, 1), jnp.float32),
                                     "index": jnp.zeros(1, jnp.int32)})
    root_word, _ = K.draw(key, K.ROOT)
    root_splits = (cap > 0) & split_test(jnp.float32(n), jnp.float32(0), root_word)
    table = frontier.allocate(
        table_rows(root, jnp.full(1, -1, jnp.int32), jnp.int32(0), jnp.full(1, n, jnp.int32),
                   ~root_splits[None]),
        Q + 2 * P,
    )
    table = frontier.write(table, 0, table_rows(
        root, jnp.full(1, -1, jnp.int32), jnp.int32(0), jnp.full(1, n, jnp.int32), ~root_splits[None]
    ))
    a = frontier.write(frontier.allocate(root, Q + 2 * P), 0, root)

    def level(j, src, dst, carry):
        count, reached, overflow, cap_hits, table, bounds = carry
        live = j < cap
        child_level = j + 1
        bounds = bounds.at[j + 1].set(jnp.where(live, reached, bounds[j + 1]))

        def piece(i, state):
            dst, table, written, reached, cap_hits, overflow = state
            part = frontier.expand_piece(src, i, P, count, live, j, boundary)
            parents, counts, both = part.parents, part.counts, part.valid
            lower = parents.extra["lower"]
            axis, side = partition.bisection(j, d)
            upper = lower.at[axis].add(side)
            child_lower = jnp.concatenate([lower, upper], axis=-1)
            if window is not None:  # cells disjoint from the window are discarded
                side = partition.cell_side(child_level, d, jnp)[:, None]
                inside = jnp.all(
                    (child_lower < window[1][:, None]) & (child_lower + side > window[0][:, None]),
                    axis=0,
                )
                both = both & inside
            test = split_test(counts.astype(jnp.float32), child_level.astype(jnp.float32),
                              jnp.concatenate(part.words))
            test = frontier.barrier(test, token)
            at_cap = child_level >= cap
            splits = test & ~at_cap
            cap_hits = cap_hits + jnp.sum(both & test & at_cap, dtype=jnp.int32)
            children = part.children._replace(extra={
                "lower": child_lower,
                "index": jnp.concatenate([parents.extra["index"]] * 2),
            })
            kept, order = frontier.compact(both, jnp.arange(2 * P, dtype=jnp.int32))
            kept_nodes = jax.tree_util.tree_map(lambda x: x[..., order], children)
            rows = table_rows(kept_nodes, kept_nodes.extra["index"], child_level,
                              counts[order], ~splits[order])
            table = frontier.write(table, jnp.where(live, reached, Q), rows)
            index = reached + jnp.arange(2 * P, dtype=jnp.int32)
            kept_nodes = kept_nodes._replace(extra={"lower": kept_nodes.extra["lower"], "index": index})
            grow = (jnp.arange(2 * P) < kept) & splits[order]
            n_next, block = frontier.compact(grow, kept_nodes)
            dst = frontier.write(dst, jnp.where(live, written, Q), block)
            overflow = overflow | (reached + kept > Q) | (written + n_next > Q)
            return dst, table, written + n_next, reached + kept, cap_hits, overflow

        dst, table, written, reached, cap_hits, overflow = jax.lax.fori_loop(
            0, frontier.pieces(jnp.where(live, count, 0), P), piece,
            (dst, table, jnp.int32(0), reached, cap_hits, overflow),
        )
        bounds = bounds.at[j + 2].set(jnp.where(live, reached, bounds[j + 2]))
        return dst, (jnp.where(live, written, count), reached, overflow, cap_hits, table, bounds)

    unset = jnp.full(L + 3, Q + 2 * P, jnp.int32)  # levels never reached: empty ranges
    _, _, (_, reached, overflow, cap_hits, table, bounds) = frontier.level_pairs(
        frontier.batch_max(jnp.where(root_splits, cap, 0)), level, a,
        jax.tree_util.tree_map(jnp.zeros_like, a),
        (root_splits.astype(jnp.int32), jnp.int32(1), jnp.bool_(False), jnp.int32(0), table,
         unset.at[0].set(0).at[1].set(1)),
    )
    table = jax.tree_util.tree_map(lambda x: x[..., :Q], table)
    bounds = jnp.minimum(bounds, reached)
    return _reconstruct(static, table, bounds, reached, overflow, cap_hits, n, shared, shift)


def _sweep(bounds, levels, size: int, update, values):
    """``values[i] = update(values, index, valid)`` level by level (breadth-first table).

    Level ``ℓ`` occupies slots ``[bounds[ℓ], bounds[ℓ+1])``; ``levels`` lists the levels
    in processing order (a node's update may read any level processed before its own).
    Each level is processed ``size`` slots at a time, so the work is the table's size.
    ``values`` has ``size`` slack slots at its end.
    """

    def one_level(t, values):
        ell = levels[t]
        start, stop = bounds[ell], bounds[ell + 1]

        def piece(i, values):
            at = start + i * size
            index = at + jnp.arange(size, dtype=jnp.int32)
            block = update(values, index, index < stop)
            return jax.lax.dynamic_update_slice_in_dim(values, block, at, 0)

        return jax.lax.fori_loop(0, frontier.pieces(stop - start, size), piece, values)

    return jax.lax.fori_loop(0, levels.shape[0], one_level, values)


def _reconstruct(static, table, bounds, reached, overflow, cap_hits, n, shared, shift):
    """Masses, W1 and atoms from the node table (module docstring)."""
    Q, L, P = static.capacity, static.max_depth, static.piece
    slot = jnp.arange(Q)
    present = slot < reached
    level = jnp.where(present, table["level"], -1)
    child = present & (slot > 0)
    parent = jnp.where(child, table["parent"], Q)
    leaf = present & table["leaf"]
    counts = table["count"].astype(jnp.float32)
    # the children of every node: at most two, at the next level of the table
    first = jnp.full(Q, Q, jnp.int32).at[parent].min(slot, mode="drop")
    last = jnp.full(Q, -1, jnp.int32).at[parent].max(slot, mode="drop")
    has_two = last > first
    noisy = jnp.where(leaf, table["noisy"], 0.0)

    def at(values, index):
        return values[jnp.clip(index, 0, values.shape[0] - 1)]

    def subtree_sum(sums, index, valid):  # deepest levels first
        own = at(noisy, index)
        below = at(sums, at(first, index)) + jnp.where(at(has_two, index), at(sums, at(last, index)), 0.0)
        return jnp.where(valid, jnp.where(at(leaf, index), own, below), at(sums, index))

    slack = jnp.zeros(P, jnp.float32)
    sums = _sweep(bounds, jnp.arange(L, -1, -1), P, subtree_sum, jnp.concatenate([noisy, slack]))
    positive = jnp.maximum(sums[:Q], 0.0)
    up = jnp.clip(parent, 0, Q - 1)
    total = at(positive, first[up]) + jnp.where(has_two[up], at(positive, last[up]), 0.0)
    ratio = jnp.where(total > 0, positive / jnp.where(total > 0, total, 1.0),
                      jnp.where(has_two[up], 0.5, 1.0))
    if static.rule == "threshold":  # exact masses: the oracle measure ν_T
        mass = counts / n
    else:
        def share(mass, index, valid):  # shallowest levels first
            value = at(mass, at(parent, index)) * at(ratio, index)
            return jnp.where(valid, value, at(mass, index))

        start = jnp.concatenate([jnp.where(slot == 0, 1.0, 0.0), slack])
        mass = _sweep(bounds, jnp.arange(1, L + 1), P, share, start)[:Q]
    mass = jnp.where(present, mass, 0.0)
    scale = 2.0 if static.shifted else 1.0
    data = counts / n
    statistics = _level_statistics(jnp.clip(level, 0, L), L,
                                   scale * jnp.where(child, jnp.abs(data - mass), 0.0),
                                   scale * jnp.where(leaf, data + mass, 0.0))
    # atoms: the leaves, moved to the front in table order; zero padding after them
    n_leaves, atoms = frontier.compact(
        leaf, (table["points"], mass, level, table["noisy"] / n)
    )
    first = slot < n_leaves
    points, leaf_mass, leaf_level, noisy = (
        jnp.where(first, a, jnp.zeros_like(a)) for a in atoms
    )
    weights_out = leaf_mass / frontier.fixed_sum(leaf_mass)
    out = {
        "size": jnp.sum(weights_out > 0, dtype=jnp.int32),
        "visited": reached,
        "leaves": n_leaves,
        "depth": jnp.max(leaf_level),
        "cap_hits": cap_hits,
        "overflow": overflow,
        "points": points.T,
        "weights": weights_out,
        "leaf_depth": leaf_level,
        "noisy_mass": noisy,
    }
    if shift is not None:
        out["shift"] = shift
    return {**out, **statistics}


def _level_statistics(level, depth: int, gap, leaf) -> dict:
    """``LEVEL_FIELDS`` [depth+1] from per-node values: ``gap`` and ``leaf`` summed over
    the nodes of each level (``frontier.fixed_sum``: the same bits in any batch)."""
    def one(j, sums):
        here = level == j
        return tuple(s.at[j].set(frontier.fixed_sum(jnp.where(here, v, 0.0)))
                     for s, v in zip(sums, (gap, leaf)))

    zeros = jnp.zeros(depth + 1, jnp.float32)
    gaps, leaves = jax.lax.fori_loop(0, jnp.max(level) + 1, one, (zeros, zeros))
    return {"level_gap": gaps, "leaf_mass": leaves}
