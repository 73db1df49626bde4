"""The pass over all atoms on the host CPU: ``ctransform``'s arithmetic in SIMD loops.

On the CPU, XLA runs ``ctransform``'s passes (blocks of reduced costs, then minima)
several times slower than loops over the atoms that the compiler vectorises;
``reduced_pass`` sends every pass of CPU arrays here, dense or pruned by boxes of points,
both one kernel (numba, compiled without the GIL, so the thread pool of
``exact.w1_exact`` runs them in parallel).

Until ``_pass`` is in memory (a new process loading or compiling it:
``numba_cache.ready``), a pass that picks no best atoms (``k = 0``) over at most
``STAND_IN_PAIRS`` point-atom pairs runs on ``_c_transform``, the same float32
operations in NumPy: the same c-transform, bit for bit.

The result is the jitted pass's, ``ctransform.reduced_block``: the same float32
operations in the same order (``|x − y|`` per coordinate, their maximum or the sum of
squares and its square root, minus ``v``), so the same c-transform, and the same picks
of best atoms (``ctransform._smallest``'s keys: a value's low bits replaced by its
index).  Reduced costs are nonnegative (the potentials are centred, ``v ≤ 0``), so their
float32 bit patterns order as the values do: the minima and maxima run on those
integers, which the compiler vectorises where it leaves float minima scalar.
A pruned pass that picks no best atoms bounds each atom of the kept groups alone
(``_near_atoms``) and prices only those that can hold a point's minimum.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import intrinsic

from jaxsynth.core import partition
from jaxsynth.numba_cache import helper, kernel, ready

__all__ = ["host_pass", "pruning_margin"]

GROUP = 16
"""Atoms per group in the best-atoms search (atom counts are padded to multiples of 64)."""
_MAX = np.int32(0x7FFFFFFF)
STAND_IN_PAIRS = 2**23
"""Point-atom pairs up to which a pass runs on ``_c_transform`` while the kernel is not
in memory (about a tenth of a second in NumPy, dense: the data of a one-off call of up
to about 10^4 points); a larger one waits for it."""


@intrinsic
def _bits(typingctx, x):
    """The bit pattern of a float32 as an int32."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int32))
    return types.int32(types.float32), codegen


@intrinsic
def _float(typingctx, x):
    """The float32 of an int32 bit pattern."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))
    return types.float32(types.int32), codegen


@helper
def _reduced_row(x, yT, v, linf, out):
    """``out[j]`` = the bits of ``c(x, y_j) − v_j`` (float32) for the atoms ``yT`` [d, S];
    returns the least of them.  One loop over the atoms per coordinate, the last one
    also subtracting ``v``."""
    d, size = yT.shape
    last = d - 1
    for k in range(last):  # the first d − 1 coordinates: |x − y|'s maximum, or squares' sum
        for j in range(size):
            t = x[k] - yT[k, j]
            if linf:
                out[j] = _bits(abs(t)) if k == 0 else max(out[j], _bits(abs(t)))
            else:
                out[j] = _bits(t * t) if k == 0 else _bits(_float(out[j]) + t * t)
    least = _MAX
    for j in range(size):
        t = x[last] - yT[last, j]
        if linf:
            c = _float(max(out[j], _bits(abs(t)))) if last else abs(t)
        else:
            c = np.sqrt(_float(out[j]) + t * t if last else t * t)
        out[j] = _bits(c - v[j])
        least = min(least, out[j])
    return least


@helper
def _pick(keys, count, low, out):
    """``out[:count]``: the low bits (``& low``) of the ``count`` least ``keys``, least
    first (``ctransform._smallest``); the picked keys are overwritten."""
    for p in range(count):
        least = _MAX
        for g in range(len(keys)):
            least = min(least, keys[g])
        out[p] = least & low
        for g in range(len(keys)):
            if keys[g] == least:
                keys[g] = _MAX


@helper
def _bit_length(value):
    """Bits of a positive integer (at least 1)."""
    bits = 1
    while value >> bits:
        bits += 1
    return bits


@helper
def _point(x, yT, v, linf, k, row, minima, candidates, chosen, picks, best):
    """One point's c-transform (returned) and ``best[:k]``: positions (into ``yT``'s atoms,
    in group-major order: position ``t·G + g`` holds the group ``g``'s ``t``-th atom) as
    group ``· GROUP +`` rank in the group; ``ctransform.reduced_block``'s picks."""
    size = yT.shape[1]
    groups = size // GROUP
    fmin = _float(_reduced_row(x, yT, v, linf, row))
    if k == 0:
        return fmin
    count = min(k, groups)
    group_low = np.int32((1 << _bit_length(groups - 1)) - 1)
    pick_low = np.int32((1 << _bit_length(count * GROUP - 1)) - 1)
    for g in range(groups):  # (a loop: numba's slice assignment is seconds of compiling)
        minima[g] = row[g]
    for t in range(1, GROUP):
        for g in range(groups):
            minima[g] = min(minima[g], row[t * groups + g])
    for g in range(groups):
        minima[g] = (minima[g] & ~group_low) | g
    _pick(minima[:groups], count, group_low, chosen)
    for p in range(count):
        for t in range(GROUP):
            candidates[p * GROUP + t] = ((row[t * groups + chosen[p]] & ~pick_low)
                                         | (p * GROUP + t))
    _pick(candidates[:count * GROUP], k, pick_low, picks)
    for p in range(k):
        best[p] = chosen[picks[p] // GROUP] * GROUP + picks[p] % GROUP
    return fmin


@helper
def _near_atoms(y, yT, v, groups, lo, hi, linf, margin, bounds, atoms, potentials, index):
    """The atoms of ``groups`` that can hold the minimum of a point in the box ``[lo,
    hi]``, into ``atoms`` (coordinate-major) and ``potentials``; returns their count.
    An atom whose least reduced cost over the box (its distance to the box minus ``v_j``,
    float64) exceeds the least of the atoms' greatest (their farthest corner minus
    ``v``) by more than ``margin`` is no point's minimum; that least is over the kept
    groups' atoms alone, as the group that bounds ``_pass``'s threshold is kept.
    ``yT``: the atoms coordinate-major (float64); ``bounds`` [2, GROUP] scratch."""
    d = len(lo)
    threshold = np.inf
    count = 0
    for g in groups:
        first = g * GROUP
        for t in range(GROUP):
            bounds[0, t] = bounds[1, t] = 0.0
        for c in range(d):
            for t in range(GROUP):
                value = yT[c, first + t]
                low_gap = max(0.0, max(value - hi[c], lo[c] - value))
                high_gap = max(hi[c] - value, value - lo[c])
                if linf:
                    bounds[0, t] = max(bounds[0, t], low_gap)
                    bounds[1, t] = max(bounds[1, t], high_gap)
                else:
                    bounds[0, t] += low_gap * low_gap
                    bounds[1, t] += high_gap * high_gap
        for t in range(GROUP):
            near, far = bounds[0, t], bounds[1, t]
            if not linf:
                near, far = np.sqrt(near), np.sqrt(far)
            threshold = min(threshold, far - v[first + t])
            potentials[count] = near - v[first + t]  # (the bound, until chosen)
            index[count] = first + t
            count += 1
    used = 0
    for q in range(count):
        if potentials[q] <= threshold + margin:
            index[used] = index[q]
            used += 1
    out = atoms[:d * used].reshape(d, used)
    for q in range(used):
        potentials[q] = v[index[q]]
        for c in range(d):
            out[c, q] = y[index[q], c]
    return used


@kernel
def _pass(x, y, v, linf, k, box, margin):
    """``host_pass`` by boxes of ``box`` consecutive points, each against the groups of
    ``GROUP`` consecutive atoms that can hold one of its points' ``GROUP`` best atoms
    (``ctransform._candidate_groups``'s bounds, in float64, ``margin`` for the float32
    rounding; an infinite one keeps every group: the dense pass), in group-major order
    (``_point``)."""
    count, d = x.shape
    size = len(v)
    groups = size // GROUP
    glo, ghi = np.empty((groups, d)), np.empty((groups, d))
    vmax, vmin = np.empty(groups), np.empty(groups)
    for g in range(groups):
        for c in range(d):
            glo[g, c] = ghi[g, c] = y[g * GROUP, c]
        vmax[g] = vmin[g] = v[g * GROUP]
        for t in range(1, GROUP):
            a = g * GROUP + t
            for c in range(d):
                glo[g, c] = min(glo[g, c], y[a, c])
                ghi[g, c] = max(ghi[g, c], y[a, c])
            vmax[g], vmin[g] = max(vmax[g], v[a]), min(vmin[g], v[a])
    fmin = np.empty(count, np.float32)
    best = np.zeros((count, k), np.int32)
    atoms_buffer, potentials_buffer = np.empty(d * size, np.float32), np.empty(size, np.float32)
    row, minima = np.empty(size, np.int32), np.empty(groups, np.int32)
    candidates = np.empty(k * GROUP, np.int32)
    chosen, picks = np.empty(k, np.int32), np.empty(k, np.int32)
    near, kept = np.empty(groups), np.empty(groups, np.int64)
    index = np.empty(size, np.int64)
    yT64, bounds = np.empty((d, size)), np.empty((2, GROUP))  # (for the c-transform alone)
    if k == 0:
        for a in range(size):
            for c in range(d):
                yT64[c, a] = y[a, c]
    lo, hi = np.empty(d), np.empty(d)
    for start in range(0, count, box):
        stop = min(count, start + box)
        for c in range(d):
            lo[c] = hi[c] = x[start, c]
        for i in range(start + 1, stop):
            for c in range(d):
                lo[c], hi[c] = min(lo[c], x[i, c]), max(hi[c], x[i, c])
        threshold = np.inf
        for g in range(groups):
            gap = far = 0.0
            for c in range(d):
                low_gap = max(0.0, max(glo[g, c] - hi[c], lo[c] - ghi[g, c]))
                high_gap = max(hi[c] - glo[g, c], ghi[g, c] - lo[c])
                if linf:
                    gap, far = max(gap, low_gap), max(far, high_gap)
                else:
                    gap, far = gap + low_gap * low_gap, far + high_gap * high_gap
            if not linf:
                gap, far = np.sqrt(gap), np.sqrt(far)
            near[g] = gap - vmax[g]
            threshold = min(threshold, far - vmin[g])
        width = 0
        for g in range(groups):
            if near[g] <= threshold + margin:
                kept[width] = g
                width += 1
        if k == 0 and margin < np.inf:  # the c-transform alone: the kept groups' atoms
            used = _near_atoms(y, yT64, v, kept[:width], lo, hi, linf, margin, bounds,
                               atoms_buffer, potentials_buffer, index)
            yT = atoms_buffer[:d * used].reshape(d, used)
            for i in range(start, stop):
                fmin[i] = _float(_reduced_row(x[i], yT, potentials_buffer[:used], linf, row))
            continue
        used = width * GROUP  # the kept groups' atoms, group-major (contiguous arrays)
        yT, vs = atoms_buffer[:d * used].reshape(d, used), potentials_buffer[:used]
        for t in range(GROUP):
            for w in range(width):
                a = kept[w] * GROUP + t
                for c in range(d):
                    yT[c, t * width + w] = y[a, c]
                vs[t * width + w] = v[a]
        for i in range(start, stop):
            fmin[i] = _point(x[i], yT, vs, linf, k, row, minima, candidates, chosen, picks,
                             best[i])
            for p in range(k):
                best[i, p] = kept[best[i, p] // GROUP] * GROUP + best[i, p] % GROUP
    return fmin, best


def _c_transform(x, y, v, linf: bool, rows: int = 1024):
    """``_pass``'s c-transform (``k = 0``) in NumPy, bit for bit: ``_reduced_row``'s float32
    operations in its order (coordinates in turn, then the square root, minus ``v``),
    ``rows`` points at a time."""
    yT = y.T
    fmin = np.empty(len(x), np.float32)
    for start in range(0, len(x), rows):
        cost = None
        for c in range(x.shape[1]):
            t = x[start:start + rows, c:c + 1] - yT[c]
            term = np.abs(t) if linf else t * t
            cost = term if cost is None else np.maximum(cost, term) if linf else cost + term
        fmin[start:start + rows] = ((cost if linf else np.sqrt(cost)) - v).min(axis=1)
    return fmin


def pruning_margin(v, d: int, metric: str) -> float:
    """What the pruned passes add to a box's bound before they drop an atom group: twice
    the float32 rounding of a reduced cost under the potentials ``v``."""
    diam = float(partition.diameter(0, d, metric))
    return 2 * (d + 4) * 2.0**-24 * (diam + float(np.abs(np.asarray(v)).max()))


def host_pass(x, y, v, metric: str, k: int, box: int | None = None):
    """``(fmin [P], best [P, k])``: the c-transform ``min_j c(x_i, y_j) − v_j`` of the points
    ``x`` [P, d] over the atoms ``y`` [S, d] (``S`` a multiple of ``GROUP``) with centred
    potentials ``v ≤ 0`` [S] (float32), and each point's ``k ≤ GROUP`` atoms of least
    reduced cost: ``ctransform.reduced_block``'s result.

    ``box``: points and atoms in Morton order, each box of ``box`` consecutive points
    meets only the atom groups that can hold its points' best atoms (the pruned pass,
    ``ctransform.reduced_pass``): the same c-transform, best atoms up to near-ties."""
    x = np.ascontiguousarray(x, np.float32)
    y, v = np.ascontiguousarray(y, np.float32), np.ascontiguousarray(v, np.float32)
    if not v.max(initial=0.0) <= 0.0:
        raise ValueError("v must be centred potentials (every v_j <= 0, no NaN)")
    linf = metric == "linf"
    args = ((x, y, v, linf, k, max(1, len(x)), np.inf) if box is None  # every group kept
            else (x, y, v, linf, k, box, pruning_margin(v, x.shape[1], metric)))
    if k == 0 and len(x) * len(y) <= STAND_IN_PAIRS and not ready(_pass, *args):
        return _c_transform(x, y, v, linf), np.zeros((len(x), 0), np.int32)
    return _pass(*args)
