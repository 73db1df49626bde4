"""Per-node reference of PrivTree + Laplace leaf masses, its shifted variant, and the
threshold oracles (Y. He, "Intrinsic-Dimensional Wasserstein Guarantees for Private
Synthetic Measures" §3, §4, §5.1, §5.2, §6; Zhang–Xiao–Xie 2016).

Count units (``θ = 0``): ``λ = 6/ε``, ``δ = λ ln 2``, leaf noise ``Lap(2/ε)``, the three
passed to the device as float32.  A reached cell at level ``k`` with ``c`` points is split
iff ``k < cap`` and ``max(c − k·δ, −δ) + Lap(λ) > 0`` (float32), the noise from the word
its parent's ``EXPAND`` block drew for it (the root: its ``ROOT`` word).  A leaf's noisy
count is ``c + Lap(2/ε)`` from its ``LEAF`` word.  With the shift, ``U`` comes from the
``SHIFT`` words (coordinate ``c``: word ``c mod 2`` of block ``⌊c/2⌋``, top 22 bits ``k``,
``U_c = (2k+1)·2^-23``), the data become ``y = (x + U)/2`` (digits computed exactly), and a
child cell disjoint from the window ``[U/2, (1+U)/2]`` is discarded: not reached, never
tested, no noise.  Reconstruction top down, one node at a time; tree W1 over the grown
tree (doubled with the shift: ``[0,2]^d`` is ``[0,1]^d`` scaled by 2).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np

from tests.reference import rng, tree, variates

MAX_BISECTIONS = 22


@dataclasses.dataclass
class Node:
    bits: tuple
    count: int
    parent: Node | None = None
    children: list = dataclasses.field(default_factory=list)
    leaf: bool = True
    noisy: float = 0.0  # leaf noisy count (count units, a float32 value)
    subtotal: float = 0.0  # S_v (float32 value)
    mass: float = 0.0  # reconstructed mass (float32 value)

    @property
    def level(self):
        return len(self.bits)


@dataclasses.dataclass
class Result:
    nodes: list  # every reached node, breadth first
    leaves: dict  # (level, cell) -> Node
    cap_hits: int
    shift: np.ndarray | None
    shift_bits: list | None
    w1: dict


def shift_vector(key, d: int):
    """``(U float64 [d], k [d])``: ``U_c = (2k_c+1)·2^-23`` from the ``SHIFT`` words."""
    ks = []
    for c in range(d):
        words = rng.draw(key, rng.SHIFT, 0, c // 2)
        ks.append(int(words[c % 2]) >> 10)
    return np.array([(2 * k + 1) * 2.0**-23 for k in ks]), ks


def intersects_window(bits, d: int, U) -> bool:
    """Does the cell of ``bits`` (in y-coordinates) meet the window ``[U/2, (1+U)/2]``?"""
    level = len(bits)
    lower = tree.lower_corner(tree.cell_of_bits(bits, d), level, d)
    side = tree.side(level, d)
    for c in range(d):
        lo_w, hi_w = Fraction(float(U[c])) / 2, (1 + Fraction(float(U[c]))) / 2
        if not (lower[c] <= hi_w and lower[c] + side[c] > lo_w):
            return False
    return True


def box(bits, d: int, U):
    """Exact box ``[a, b)`` in Ω of the cell: the cell itself, or ``(Q ∩ (Ω+U)) − U`` with the
    shift (in x-coordinates, ``Q`` spans ``[2·lower, 2·(lower+side))``)."""
    level = len(bits)
    lower = tree.lower_corner(tree.cell_of_bits(bits, d), level, d)
    side = tree.side(level, d)
    if U is None:
        return lower, [lower[c] + side[c] for c in range(d)]
    u = [Fraction(float(x)) for x in U]
    a = [max(2 * lower[c] - u[c], Fraction(0)) for c in range(d)]
    b = [min(2 * (lower[c] + side[c]) - u[c], Fraction(1)) for c in range(d)]
    return a, b


def grow(key, counts: tree.Counts, cap: int, test, U=None):
    """Grow the tree breadth first: ``test(nodes, level, words)`` -> split decisions [N]."""
    d = counts.d
    addr = rng.Addresser(key)
    root = Node((), counts.n)
    root_word, _ = rng.draw(addr.key, rng.ROOT, 0, 0)
    root.leaf = not (cap > 0 and bool(test([root], 0, np.array([root_word]))[0]))
    nodes, frontier, cap_hits = [root], ([] if root.leaf else [root]), 0
    while frontier:
        j = frontier[0].level
        w0, w1 = addr.words(rng.EXPAND, [v.bits for v in frontier])
        kids, words = [], []
        for i, v in enumerate(frontier):
            for bit, w in ((0, w0[i]), (1, w1[i])):
                bits = v.bits + (bit,)
                if U is not None and not intersects_window(bits, d, U):
                    continue  # discarded: not reached, not tested
                child = Node(bits, counts.count(bits), parent=v)
                v.children.append(child)
                kids.append(child)
                words.append(w)
        decision = test(kids, j + 1, np.array(words, np.uint32))
        frontier = []
        for child, split in zip(kids, decision):
            if split and child.level < cap:
                child.leaf = False
                frontier.append(child)
            else:
                child.leaf = True
                cap_hits += int(bool(split) and child.level >= cap)
        nodes += kids
    return addr, nodes, cap_hits


def privtree_test(eps: float):
    """The PrivTree split rule in float32 (count units)."""
    lam = np.float32(6.0 / eps)
    delta = np.float32(6.0 / eps * math.log(2.0))

    def test(nodes, level, words):
        if not nodes:
            return np.zeros(0, bool)
        c = np.array([v.count for v in nodes], np.float32)
        biased = np.maximum(c - np.float32(level) * delta, -delta)
        return (biased + variates.laplace(words, lam)) > np.float32(0.0)

    return test


def release(key, counts: tree.Counts, eps: float, cap: int, shift: bool, placement: str):
    """One replicate of PrivTree (``counts`` are of the unshifted data; with ``shift`` the
    shifted counts are built here from the replicate's ``U``)."""
    d = counts.d
    U = shift_bits = None
    if shift:
        U, shift_bits = shift_vector(key, d)
        counts = tree.ShiftedCounts(counts.X, U, MAX_BISECTIONS)
    addr, nodes, cap_hits = grow(key, counts, cap, privtree_test(eps), U)
    leaves = [v for v in nodes if v.leaf]
    # leaf masses: count + Lap(2/ε) from each leaf's LEAF word
    w, _ = addr.words(rng.LEAF, [v.bits for v in leaves])
    noise = variates.laplace(w, np.float32(2.0 / eps))
    for v, z in zip(leaves, noise):
        v.noisy = np.float32(np.float32(v.count) + z)
    reconstruct(nodes)
    if placement == "uniform":
        place_uniform(addr, leaves, d, U)
    else:
        for v in leaves:
            a, b = box(v.bits, d, U)
            v.point = np.array([float(a[c] + (b[c] - a[c]) / 2) for c in range(d)])
    return Result(
        nodes=nodes, cap_hits=cap_hits, shift=U, shift_bits=shift_bits,
        leaves={(v.level, tree.cell_of_bits(v.bits, d)): v for v in leaves},
        w1=tree_w1(nodes, counts.n, d, 2.0 if shift else 1.0),
    )


def place_uniform(addr, leaves, d: int, U):
    """Uniform representative in each leaf's box from its ``PLACE + t`` words."""
    blocks = [addr.words(rng.PLACE + t, [v.bits for v in leaves]) for t in range(-(-d // 2))]
    for i, v in enumerate(leaves):
        words = [int(blocks[t][k][i]) for t in range(len(blocks)) for k in (0, 1)][:d]
        u = variates.uniform(words).astype(np.float64)
        a, b = box(v.bits, d, U)
        v.point = np.array([float(a[c]) + u[c] * float(b[c] - a[c]) for c in range(d)])
        v.box = (a, b)


def reconstruct(nodes):
    """Top down: ``S_v`` = noisy subtree sums (float32, bottom up); root mass 1; a child
    gets its parent's mass times ``(S_child)_+ / Σ_siblings (S)_+``, or an even share among
    the reached siblings when none is positive."""
    for v in reversed(nodes):  # breadth-first order reversed: children before parents
        if v.leaf:
            v.subtotal = v.noisy
        else:
            total = np.float32(0.0)
            for c in v.children:
                total = np.float32(total + c.subtotal)
            v.subtotal = total
    nodes[0].mass = np.float32(1.0)
    for v in nodes:
        if v.leaf:
            continue
        pos = [np.float32(max(c.subtotal, np.float32(0.0))) for c in v.children]
        total = np.float32(sum(pos, np.float32(0.0)))
        for c, p in zip(v.children, pos):
            ratio = p / total if total > 0 else np.float32(1.0 / len(v.children))
            c.mass = np.float32(v.mass * np.float32(ratio))


def tree_w1(nodes, n: int, d: int, scale: float) -> dict:
    """Tree W1 over the grown tree: ``scale·Σ_{v≠root} w_{level v}|n_v/n − mass_v|``;
    upper bound ``+ scale·Σ_leaves diam(Q)(n_Q/n + mass_Q)/2`` (float64)."""
    out = {}
    for metric in ("linf", "l2"):
        tw = scale * math.fsum(
            tree.edge_weight(v.level, d, metric) * abs(v.count / n - float(v.mass))
            for v in nodes[1:]
        )
        within = 0.5 * scale * math.fsum(
            tree.diameter(v.level, d, metric) * (v.count / n + float(v.mass))
            for v in nodes if v.leaf
        )
        out[f"tree_{metric}"] = tw
        out[f"upper_{metric}"] = tw + within
    return out


# -------------------------------------------------------------------------- threshold oracles

def threshold_tree(counts: tree.Counts, theta: float, delta: float, cap: int):
    """Split a cell at level ``k < cap`` while ``count > θn + kδn`` (exact comparison).

    Returns (leaves {(level, cell): count}, reached cells, cap hits).
    """
    n, d = counts.n, counts.d
    th, de = Fraction(theta) * n, Fraction(delta) * n
    leaves, reached, cap_hits = {}, 0, 0
    stack = [()]
    while stack:
        bits = stack.pop()
        reached += 1
        c = counts.count(bits)
        k = len(bits)
        wants = c > th + k * de
        if wants and k < cap:
            stack += [bits + (0,), bits + (1,)]
        else:
            cap_hits += int(wants)
            leaves[(k, tree.cell_of_bits(bits, d))] = c
    return leaves, reached, cap_hits
