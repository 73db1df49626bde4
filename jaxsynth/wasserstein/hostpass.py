"""The dense pass over all atoms on the host CPU: ``ctransform``'s arithmetic in SIMD loops.

On the CPU, XLA runs ``ctransform``'s dense pass (a ``[CHUNK, M]`` block of reduced
costs, then minima) several times slower than a loop over the atoms that the compiler
vectorises; ``reduced_pass`` sends the dense passes of CPU arrays here (numba, compiled
without the GIL, so the thread pool of ``exact.w1_exact`` runs them in parallel).

The result is the jitted pass's, ``ctransform.reduced_block``: the same float32
operations in the same order (``|x − y|`` per coordinate, their maximum or the sum of
squares and its square root, minus ``v``), so the same c-transform, and the same picks
of best atoms (``ctransform._smallest``'s keys: a value's low bits replaced by its
index).  Reduced costs are nonnegative (the potentials are centred, ``v ≤ 0``), so their
float32 bit patterns order as the values do: the minima and maxima run on those
integers, which the compiler vectorises where it leaves float minima scalar.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

__all__ = ["host_pass"]

GROUP = 16
"""Atoms per group in the best-atoms search (atom counts are padded to multiples of 64)."""
_MAX = np.int32(0x7FFFFFFF)


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


@numba.njit(cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
def _pass(x, yT, v, linf, k, group_bits, pick_bits):
    """``host_pass`` on atoms in group-major order: position ``t·G + g`` holds atom
    ``g·GROUP + t`` (so that the groups' minima are contiguous loops)."""
    count, size = x.shape[0], len(v)
    groups = size // GROUP
    fmin = np.empty(count, np.float32)
    best = np.zeros((count, k), np.int32)
    row = np.empty(size, np.int32)
    minima = np.empty(groups, np.int32)
    candidates = np.empty(k * GROUP, np.int32)
    chosen, picks = np.empty(k, np.int32), np.empty(k, np.int32)
    group_low, pick_low = np.int32((1 << group_bits) - 1), np.int32((1 << pick_bits) - 1)
    for i in range(count):
        fmin[i] = _float(_reduced_row(x[i], yT, v, linf, row))
        if k == 0:
            continue
        minima[:] = row[:groups]
        for t in range(1, GROUP):
            for g in range(groups):
                minima[g] = min(minima[g], row[t * groups + g])
        for g in range(groups):
            minima[g] = (minima[g] & ~group_low) | g
        _pick(minima, k, group_low, chosen)
        for p in range(k):
            for t in range(GROUP):
                candidates[p * GROUP + t] = (row[t * groups + chosen[p]] & ~pick_low) | (p * GROUP + t)
        _pick(candidates, k, pick_low, picks)
        for p in range(k):
            best[i, p] = chosen[picks[p] // GROUP] * GROUP + picks[p] % GROUP
    return fmin, best


def host_pass(x, y, v, metric: str, k: int):
    """``(fmin [P], best [P, k])``: the c-transform ``min_j c(x_i, y_j) − v_j`` of the points
    ``x`` [P, d] over the atoms ``y`` [S, d] (``S`` a multiple of ``GROUP``) with centred
    potentials ``v ≤ 0`` [S] (float32), and each point's ``k ≤ GROUP`` atoms of least
    reduced cost; ``ctransform.reduced_block``'s result."""
    x = np.ascontiguousarray(x, np.float32)
    y, v = np.asarray(y, np.float32), np.asarray(v, np.float32)
    groups = len(v) // GROUP
    order = np.arange(len(v)).reshape(groups, GROUP).T.ravel()
    return _pass(x, np.ascontiguousarray(y[order].T), np.ascontiguousarray(v[order]),
                 metric == "linf", k, max(1, (groups - 1).bit_length()),
                 max(1, (k * GROUP - 1).bit_length()))
