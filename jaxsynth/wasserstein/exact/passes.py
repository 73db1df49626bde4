"""Concurrent replicates' passes over all atoms, stacked into one device call.

``w1_exact`` runs replicates on a thread pool; each asks for passes
(``ctransform.reduced_pass``: the c-transform of a level's blocks or of the points, and
their best atoms) between its transport LPs.  ``BatchedPasses`` takes those requests
from every thread: one device thread runs every request queued since its last call,
those on the same points (the same level of the same data), atom count, metric and
``k`` as one vmapped call.  While it runs, the other threads solve their LPs on the
host, so LP work overlaps device work; no request waits for a batch to fill.

A request's result is the one ``reduced_pass`` gives it alone, bit for bit: the pass is
elementwise arithmetic and exact minima, the same for every slot of the stacked call, so a
replicate's pair does not depend on what ran beside it.  Passes on many atoms (the
pruned pass, whose work is ragged per replicate) and passes of CPU arrays (the host
kernel's, ``ctransform.on_host``) run on the requesting thread.
"""

from __future__ import annotations

import concurrent.futures
import functools
import queue
import threading
from collections import defaultdict
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsynth.core.batching import capacity_bucket
from jaxsynth.wasserstein import ctransform
from jaxsynth.wasserstein.ctransform import CHUNK, PRUNE_ATOMS, reduced_block, reduced_pass

__all__ = ["BatchedPasses", "MAX_STACKED"]

MAX_STACKED = 1 << 26
"""Most reduced costs (float32) one stacked call holds per chunk step: replicates ×
``CHUNK`` × atoms (256 MiB a temporary)."""


@functools.lru_cache(maxsize=None)
def _stacked_pass(metric: str, k: int):
    """Jitted ``reduced_pass`` (dense) of the points ``chunks`` [C, CHUNK, d] for a stack
    of replicates' atoms ``ys`` [R, S, d] and potentials ``vs`` [R, S]."""

    @jax.jit
    def run(chunks, ys, vs):
        each = jax.vmap(lambda x, y, v: reduced_block(x, y, v, metric, k), (None, 0, 0))
        fmin, best = jax.lax.map(lambda x: each(x, ys, vs), chunks)  # [C, R, CHUNK(, k)]
        count = chunks.shape[0] * chunks.shape[1]
        return (jnp.moveaxis(fmin, 1, 0).reshape(len(ys), count),
                jnp.moveaxis(best, 1, 0).reshape(len(ys), count, k))

    return run


class _Request(NamedTuple):
    """A queued pass: ``key`` (the points' identity, atoms' shape, metric, ``k``) groups
    requests that can share a call."""

    key: tuple
    chunks: jax.Array
    y: jax.Array
    v: jax.Array
    result: concurrent.futures.Future


class BatchedPasses:
    """``reduced_pass`` for many threads at once, stacked on one device thread.

    Use as a context manager around the pool; calling it has ``reduced_pass``'s signature
    and result.  Stacks hold a power of two of replicates (few shapes to compile; the
    padding repeats the first), at most ``MAX_STACKED / (CHUNK · atoms)``.
    """

    def __init__(self):
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="jaxsynth-passes", daemon=True)

    def __enter__(self) -> BatchedPasses:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._requests.put(None)
        self._thread.join()

    def __call__(self, chunks, y, v, metric: str, k: int):
        return self.submit(chunks, y, v, metric, k).result()

    def submit(self, chunks, y, v, metric: str, k: int) -> concurrent.futures.Future:
        """The pass's future (run by the device thread once the context is entered)."""
        result: concurrent.futures.Future = concurrent.futures.Future()
        if y.shape[0] >= PRUNE_ATOMS or ctransform.on_host(chunks):
            result.set_result(reduced_pass(chunks, y, v, metric, k))
        else:
            self._requests.put(_Request((id(chunks), y.shape, metric, k), chunks, y, v, result))
        return result

    def _serve(self) -> None:
        while (first := self._requests.get()) is not None:
            pending, stop = [first], False
            while not self._requests.empty():
                request = self._requests.get()
                if request is None:
                    stop = True
                    break
                pending.append(request)
            groups = defaultdict(list)
            for request in pending:
                groups[request.key].append(request)
            for (_, shape, metric, k), group in groups.items():
                most = capacity_bucket(MAX_STACKED // (CHUNK * shape[0]), 1, 1, down=True)
                for start in range(0, len(group), most):
                    _run_stack(group[start:start + most], metric, k)
            if stop:
                return


def _run_stack(stack, metric: str, k: int) -> None:
    """One stacked call for ``stack`` (requests on the same points), results delivered."""
    try:
        size = capacity_bucket(len(stack), per_octave=1, minimum=1)
        padded = stack + [stack[0]] * (size - len(stack))
        fmin, best = jax.device_get(_stacked_pass(metric, k)(
            stack[0].chunks, jnp.stack([r.y for r in padded]), jnp.stack([r.v for r in padded])))
        for slot, request in enumerate(stack):
            request.result.set_result((np.asarray(fmin[slot]), np.asarray(best[slot])))
    except BaseException as error:  # the requesting threads raise it
        for request in stack:
            if not request.result.done():
                request.result.set_exception(error)
