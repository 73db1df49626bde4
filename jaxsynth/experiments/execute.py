"""The sweep's one loop: release → measure (``Evaluation``) → rows → ``sink.write``.

``execute`` runs a list of parts (``plan.Part``): per part, seeds in writes of at least
``CHUNK_REPLICATES`` replicates; per write, every plan of the part's budgets releases the
seeds (``engine.run``) and the W1 methods measure them per ε in batches of
``MEASURE_BATCH`` replicates, each batch timed (compilation apart, ``clock.Clock``) and
counted on the progress meter as it finishes; the rows (``rows.replicate_rows``, with the
sweep's provenance) go to the sink.  Replicate ``s`` is ``js.release(fold_in(key, s), ...)``
measured as ``js.w1`` measures it, whatever the part, the write or the batch.
"""

from __future__ import annotations

import dataclasses
import os
from typing import NamedTuple

import jax
import numpy as np
import pandas as pd

from jaxsynth import engine
from jaxsynth.core.keys import replicate_keys
from jaxsynth.experiments.clock import Clock
from jaxsynth.experiments.rows import replicate_rows
from jaxsynth.wasserstein.method import BLOCK

__all__ = ["CHUNK_REPLICATES", "MEASURE_BATCH", "Chunk", "Kept", "execute", "release_rows"]

CHUNK_REPLICATES = 256
"""Replicates released between two writes to the sink (at least one engine chunk)."""
MEASURE_BATCH = max(BLOCK, 2 * (os.cpu_count() or 1))
"""Replicates measured together (the exact W1 solves them in parallel threads, the
atom-based methods in blocks of ``jaxsynth.wasserstein.method.BLOCK``): the progress line
and ``measure_seconds`` advance batch by batch."""


class Chunk(NamedTuple):
    """One plan's release of some seeds, measured: engine outputs [E, S, ...], W1 values
    by column [E, S], the timing columns, and the seconds spent compiling."""

    out: dict
    values: dict
    seconds: dict
    compile: float


class Kept(NamedTuple):
    """Rows a calibration computed: the part's first ``seeds``, and the seconds it spent
    compiling."""

    seeds: int
    rows: pd.DataFrame
    compile: float


def _measure(sized, evaluation, key, seeds, advance) -> Chunk:
    """Release ``seeds`` × every ε of one sized plan and measure them (see the module
    docstring); finished numbers on the host."""
    with Clock() as release:
        out = engine.run(sized.plan, replicate_keys(key, seeds), atoms=evaluation.atoms,
                         memory_bytes=sized.memory, devices=sized.devices, chunk=sized.chunk)
        out = jax.block_until_ready(out)
    E, S = len(sized.plan.eps), len(seeds)
    values, measured, compiled = {}, np.full((E, S), np.nan), release.compile
    for e in range(E):
        for a in range(0, S, MEASURE_BATCH):
            b = min(a + MEASURE_BATCH, S)
            with Clock() as clock:
                block = jax.tree.map(lambda v, e=e, a=a, b=b: v[e:e + 1, a:b], out)
                part = evaluation.evaluate_outputs(block, seeds[a:b],
                                                   sized.plan.eps[e:e + 1])
            measured[e, a:b] = clock.work / (b - a)
            compiled += clock.compile
            for name, v in part.items():
                values.setdefault(name, np.empty((E, S)))[e, a:b] = np.asarray(v).reshape(-1)
            advance(b - a)
    per_replicate = release.work / (E * S)
    seconds = {"seconds": per_replicate + measured, "release_seconds": per_replicate,
               "measure_seconds": measured}
    return Chunk(out, values, seconds, compiled)


def release_rows(plan, prepared, part, seeds, advance=lambda count: None):
    """The rows of ``part``'s budgets for ``seeds`` (every plan of its ε groups), and
    each plan's ``(Chunk, Sized)``."""
    label, mech = plan.mechanisms[part.mechanism]
    ds, i = plan.data[part.data], part.data
    X = prepared.points
    common = {"mechanism": label, "kind": mech.name, "data": ds.label, "n": X.shape[0],
              "d": X.shape[1], "intrinsic_dim": prepared.intrinsic_dim}
    provenance = {"config": repr(mech), "key": plan.key_label, "data_key": plan.data_key,
                  "metric": plan.metric, "fingerprint": plan.fingerprints[i]}
    if plan.precision is not None and plan.precision.control is not None:
        provenance["control_only"] = part.controls
    evaluation = prepared.evaluating(plan, part)
    frames, chunks = [], []
    for sized in prepared.plans(plan, label, mech, part.eps):
        chunk = _measure(sized, evaluation, plan.key, list(seeds), advance)
        frames.append(replicate_rows(chunk.out, chunk.values, sized.plan, seeds, common,
                                     chunk.seconds))
        chunks.append((chunk, sized))
    rows = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    empty = {c: np.nan for c in plan.columns if c not in rows}  # control-only replicates'
    return rows.assign(**empty, **provenance), chunks


def _per_write(sized: list, eps) -> int:
    """Seeds released (every ε) between two writes: at least one chunk."""
    chunk = min(s.chunk for s in sized)
    return max(1, max(chunk, CHUNK_REPLICATES) // len(eps))


@dataclasses.dataclass
class Tally:
    """What ``execute`` did: replicates computed, compilation seconds by (mechanism
    label, data label, n)."""

    computed: int = 0
    compile: dict = dataclasses.field(default_factory=dict)
    warm: set = dataclasses.field(default_factory=set)  # plans released once untimed

    def add(self, key: tuple, rows: int, compile: float) -> None:
        self.computed += rows
        self.compile[key] = self.compile.get(key, 0.0) + compile


def execute(plan, parts, sink, progress, sets, kept=None, tally=None) -> Tally:
    """Release and measure every part, writing each write's rows to ``sink``.

    ``kept``: rows the calibration computed, by part (written first, not computed again);
    ``sets``: the prepared data sets (``prepare.PreparedSets``).
    """
    kept, tally = kept or {}, tally or Tally()
    for part in parts:
        prepared = sets.get(part.data)
        label, mech = plan.mechanisms[part.mechanism]
        ds = plan.data[part.data]
        seeds = list(part.seeds)
        if part in kept:
            first = kept.pop(part)
            progress.advance(len(first.rows))
            sink.write(first.rows)
            tally.add((label, ds.label, ds.n), len(first.rows), first.compile)
            seeds = seeds[first.seeds:]
        elif plan.warmup and seeds:  # the release kernels once, untimed
            for sized in prepared.plans(plan, label, mech, part.eps):
                warm = (label, ds.label, ds.n, tuple(sized.plan.eps.tolist()))
                if warm not in tally.warm:
                    tally.warm.add(warm)
                    engine.run(sized.plan, replicate_keys(plan.key, seeds[:1]), atoms=False,
                               memory_bytes=sized.memory, devices=sized.devices,
                               chunk=sized.chunk)
        step = _per_write(prepared.plans(plan, label, mech, part.eps), part.eps)
        for start in range(0, len(seeds), step):
            rows, chunks = release_rows(plan, prepared, part, seeds[start:start + step],
                                        progress.advance)
            sink.write(rows)
            tally.add((label, ds.label, ds.n), len(rows), sum(c.compile for c, _ in chunks))
    return tally
