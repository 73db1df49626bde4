"""The tidy table of ``simulate``: one row per replicate from a chunk's engine outputs."""

from __future__ import annotations

import jax
import numpy as np
import pandas as pd

__all__ = ["replicate_rows", "row_fields"]


def row_fields(out: dict, plan) -> dict:
    """The fields of ``out`` that ``replicate_rows`` reads (no atoms)."""
    return {k: out[k] for k in ("depth", "size", "leaves", "visited") + tuple(plan.info_fields)
            if k in out}


def replicate_rows(out: dict, values: dict, plan, seeds, common: dict,
                   seconds: dict) -> pd.DataFrame:
    """One row per replicate of ``out`` [E, S] (E-major)."""
    E, S = len(plan.eps), len(seeds)
    host = jax.device_get(row_fields(out, plan))
    cols = dict(common)
    cols["eps"] = np.repeat(np.asarray(plan.eps, np.float64), S)
    cols["seed"] = np.tile(np.asarray(seeds, np.int64), E)
    for name, field in (("depth", "depth"), ("m", "size"), ("leaves", "leaves"),
                        ("visited", "visited")):
        cols[name] = np.asarray(host[field]).reshape(E * S).astype(np.int64)
    for name, v in values.items():
        cols[name] = np.asarray(v, np.float64).reshape(E * S)
    cols.update({k: np.broadcast_to(np.asarray(v, np.float64), (E, S)).reshape(E * S)
                 for k, v in seconds.items()})
    cols["adjacency"] = plan.adjacency
    for name, v in plan.budget.items():
        cols[name] = np.repeat(np.asarray(v, np.float64), S)
    for name in plan.info_fields:
        a = np.asarray(host.get(name))
        if a.shape == (E, S):  # scalar diagnostics per replicate (vectors are left out)
            cols[name] = a.reshape(E * S)
    for name, v in {**plan.info, **plan.diagnostics}.items():  # a table of measurements
        a = np.asarray(v)
        if a.shape == (E,):
            cols[name] = np.repeat(a, S)
    return pd.DataFrame(cols)
