"""Per-node reference of PMM and Pruned-PMM (arXiv 2609.33363 §3, Algorithms 1–2).

PMM is He, Vershynin, Zhu (COLT 2023) as described in §3 of Zare Moayedi, Asadi, Yassaee,
Aminian, "Geometry-Adaptive Mechanisms for Private Synthetic Data" (arXiv 2609.33363);
Pruned-PMM is that paper's Algorithms 1–2.

Breadth first over ``Node`` objects.  A node at level ``j`` that is expanded draws its
``EXPAND`` block (word 0 for child 0, word 1 for child 1, bit 30 of word 0 the coin);
the root count uses the replicate's ``ROOT`` word.  Noisy counts ``(c + LapZ(σ))_+`` come
from ``variates.noisy_counts`` (int saturated at ``2^30 − 1`` and the value in units of
``σ``); the consistency rules below are written per node in Python, with the
proportional ratio in float32 exactly as documented.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tests.reference import rng, tree, variates

SATURATION = 2**30 - 1
TINY32 = np.finfo(np.float32).tiny


# -------------------------------------------------------------------------- schedules

def uniform_schedule(eps: float, depth: int) -> np.ndarray:
    """``σ_j = 2r/ε``: inverse scales ``ε/(2r)``, float64 [r]."""
    return np.array([eps / (2.0 * depth)] * depth)


def packing_schedule(eps: float, depth: int, d: int, k: float) -> np.ndarray:
    """``1/σ_i`` of ``σ_i = 2S_r/(ε q^{i−1})``, ``q = 2^{(k−1)/(2d)}``, ``S_r = Σ_{j<r} q^j``."""
    log2q = (k - 1.0) / (2.0 * d)
    # 1/σ_i = ε q^{i−1} / (2 S_r) = ε / (2 Σ_j q^{j−(i−1)}), summed in float64
    return np.array([
        eps / (2.0 * math.fsum(2.0 ** (log2q * (j - i)) for j in range(depth)))
        for i in range(depth)
    ])


def pmm_scales(schedule, eps, depth, d, adjacency, packing_k=None, root_scale=None):
    """(level inverse scales float32 [r], root inverse scale float32) of a PMM-family release."""
    if schedule == "uniform":
        inv = uniform_schedule(eps, depth)
    else:
        inv = packing_schedule(eps, depth, d, d if packing_k is None else packing_k)
    if adjacency == "replacement":
        sigma0 = 1.0 / eps
    else:  # add/remove: the same levels spend Σ 1/σ_j = ε/2, the root ε/2 with σ_0 = 2/ε
        sigma0 = 2.0 / eps
    if root_scale is not None:
        sigma0 = root_scale
    return inv.astype(np.float32), np.float32(1.0 / sigma0)


# ------------------------------------------------------------------------------ consistency

def comparable_bounds(m, a, b):
    """Range of ``m0`` with ``(m0, m − m0)`` comparable to ``(a, b)``."""
    if a + b >= m:
        return max(0, m - b), min(a, m)
    return a, m - b


def proportional(m, a, b, a_scaled, b_scaled, coin):
    """``m0 = round(m·a/(a+b))`` (float32, half to even) clipped; ``a = b = 0``: even split."""
    if a + b == 0:
        return m // 2 + (m % 2 if coin == 0 else 0)  # the odd unit to child ``coin``
    if a >= SATURATION or b >= SATURATION:  # saturated counts: ratio of the σ-unit values
        total = np.float32(np.float32(a_scaled) + np.float32(b_scaled))
        ratio = np.float32(np.float32(a_scaled) / max(total, np.float32(TINY32)))
    else:
        ratio = np.float32(np.float32(a) / np.float32(max(a + b, 1)))
    m0 = int(np.rint(np.float32(np.float32(m) * ratio)))
    lo, hi = comparable_bounds(m, a, b)
    return min(max(m0, lo), hi)


def zero_respecting(m, a, b, a_scaled, b_scaled, coin):
    """One noisy child 0: it gets 0; both 0: child ``coin`` gets all; else proportional."""
    if a == 0 and b > 0:
        return 0
    if b == 0 and a > 0:
        return m
    if a == 0 and b == 0:
        return m if coin == 0 else 0
    return proportional(m, a, b, a_scaled, b_scaled, coin)


RULES = {"proportional": proportional, "zero_respecting": zero_respecting}


# ---------------------------------------------------------------- the release

@dataclasses.dataclass
class Node:
    bits: tuple
    count: int
    mass: int = 0

    @property
    def level(self):
        return len(self.bits)


@dataclasses.dataclass
class Result:
    size: int
    visited: int
    depth: int
    leaves: dict  # cell tuple -> positive mass (level = depth)
    masses: dict  # level -> {cell: mass} of every node with positive mass (root included)
    w1: dict  # "tree_linf", "tree_l2", "upper_linf", "upper_l2" (float64)
    saturated: int = 0  # noisy child counts that reached the saturation value


def release(key, counts: tree.Counts, depth: int, inv_sigma, inv_sigma0, rule: str,
            pruned: bool) -> Result:
    """One replicate of PMM (``pruned=False``: every node of the complete tree is drawn and
    split) or Pruned-PMM (``pruned=True``: only nodes of positive mass are expanded)."""
    split = RULES[rule]
    addr = rng.Addresser(key)
    n = counts.n
    root_word, _ = rng.draw(addr.key, rng.ROOT, 0, 0)
    value, _ = variates.noisy_counts([root_word], [n], inv_sigma0)
    m = max(1, int(value[0]))
    level_nodes = [Node((), n, m)]
    masses = {0: {(): m}}
    expanded = 0  # nodes expanded (children drawn) above the leaves
    saturated = 0
    for j in range(depth):
        parents = [v for v in level_nodes if (v.mass > 0 or not pruned)]
        expanded += len(parents)
        w0, w1 = addr.words(rng.EXPAND, [v.bits for v in parents])
        children0 = [v.bits + (0,) for v in parents]
        children1 = [v.bits + (1,) for v in parents]
        c0 = [counts.count(b) for b in children0]
        c1 = [counts.count(b) for b in children1]
        a, a_s = variates.noisy_counts(w0, c0, inv_sigma[j])
        b, b_s = variates.noisy_counts(w1, c1, inv_sigma[j])
        saturated += int(np.sum(a >= SATURATION) + np.sum(b >= SATURATION))
        nxt = []
        for i, v in enumerate(parents):
            coin = (int(w0[i]) >> 30) & 1
            m0 = split(v.mass, int(a[i]), int(b[i]), a_s[i], b_s[i], coin)
            assert 0 <= m0 <= v.mass
            nxt.append(Node(children0[i], c0[i], m0))
            nxt.append(Node(children1[i], c1[i], v.mass - m0))
        level_nodes = nxt
        masses[j + 1] = {
            tree.cell_of_bits(v.bits, counts.d): v.mass for v in nxt if v.mass > 0
        }
    visited = 1 + 2 * expanded  # pruned: 1 + 2 Σ_j |A_j|; complete tree: 2^{r+1} − 1
    leaves = dict(masses[depth])
    assert sum(leaves.values()) == m
    return Result(size=m, visited=visited, depth=depth, leaves=leaves, masses=masses,
                  w1=tree_w1(counts, masses, m, depth), saturated=saturated)


def tree_w1(counts: tree.Counts, masses: dict, m: int, depth: int) -> dict:
    """``Σ_{j=1..r} w_j Σ_{level-j cells} |n_c/n − m_c/m|`` over the complete depth-r tree,
    and ``+ diam(r)`` (float64).  Cells with no data and no mass contribute 0."""
    n, d = counts.n, counts.d
    out = {}
    for metric in ("linf", "l2"):
        total = 0.0
        for j in range(1, depth + 1):
            data = counts.level(j)
            syn = masses[j]
            gap = sum(abs(data.get(c, 0) / n - syn.get(c, 0) / m) for c in set(data) | set(syn))
            total += tree.edge_weight(j, d, metric) * gap
        out[f"tree_{metric}"] = total
        out[f"upper_{metric}"] = total + tree.diameter(depth, d, metric)
    return out



def uniform_points(key, leaves: dict, depth: int, d: int) -> dict:
    """Uniform placement: {leaf cell: [points]} for the leaves ``{cell: mass}`` at ``depth``.

    A leaf's point key is ``H(chunk key, (POINT·32 + depth mod 32, path word))`` (both
    words); its ``j``-th point is ``lower + u·side`` with ``u`` from words ``2t, 2t+1`` of
    ``H(point key, ((POINT + 1 + t)·32, j))`` (float64 here, exact up to the engine's
    float32 rounding).
    """
    addr = rng.Addresser(key)
    out = {}
    side = np.array([float(x) for x in tree.side(depth, d)])
    for cell, mass in leaves.items():
        bits = tree.bits_of_cell(cell, depth, d)
        chunk_key, word = addr.address(bits)
        own = tuple(int(x) for x in rng.draw(chunk_key, rng.POINT, depth, word))
        blocks = [rng.draw(own, rng.POINT + 1 + t, 0, np.arange(mass)) for t in range(-(-d // 2))]
        words = np.stack([w for pair in blocks for w in pair], axis=-1)[:, :d]
        u = variates.uniform(words.reshape(-1)).reshape(mass, d).astype(np.float64)
        lower = np.array([float(x) for x in tree.lower_corner(cell, depth, d)])
        out[cell] = lower + u * side
    return out
