"""The work grid of ``simulate``: its mechanisms, data sets, devices and key, checked.

Mechanisms become (label, config) pairs, data sets one entry per (data set, n) loaded
on demand, devices a list of local JAX devices; every bad argument is refused with a
``ValueError`` naming it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os

import jax
import numpy as np

from jaxsynth.api import check_measurable, check_mechanism
from jaxsynth.core.datatree import DataTree
from jaxsynth.core.keys import as_raw_key
from jaxsynth.core.validate import check_data, check_positive_int, is_pair
from jaxsynth.experiments import datasets
from jaxsynth.mechanisms.registry import mechanism

__all__ = ["data_sets", "devices", "fingerprint", "key_label", "load", "mechanisms"]


# --------------------------------------------------------------------------- mechanisms


def mechanisms(mechanisms) -> list[tuple[str, object]]:
    """(label, config) pairs from a config, a name, a list of them or a ``{label: ...}`` dict."""
    if isinstance(mechanisms, dict):
        items = list(mechanisms.items())
    elif isinstance(mechanisms, (list, tuple)):
        items = [(None, m) for m in mechanisms]
    else:
        items = [(None, mechanisms)]
    if not items:
        raise ValueError("mechanisms is empty")
    out = []
    for label, m in items:
        if isinstance(m, str):
            m = mechanism(m)
        check_mechanism(m, "mechanisms")
        out.append((str(label) if label is not None else m.name, m))
    labels = [label for label, _ in out]
    if len(set(labels)) != len(labels):
        raise ValueError(
            f"mechanisms: duplicate labels {labels}; pass a dict {{label: config}} to tell "
            "configurations of the same mechanism apart"
        )
    return out


# --------------------------------------------------------------------------- data sets


@dataclasses.dataclass(frozen=True, eq=False)
class _DataSet:
    """One (data set, n) of the sweep: a generator name (loaded lazily), or given points."""

    label: str
    spec: object  # a generator name, an array [n, d] or a DataTree
    options: dict
    n: int
    data_key: int

    def load(self):
        """(points [n, d] float64, DataTree or None, intrinsic dimension)."""
        if isinstance(self.spec, DataTree):
            return self.spec.points, self.spec, self.spec.d
        if not isinstance(self.spec, str):
            return self.spec, None, self.spec.shape[1]
        X = datasets.load(self.spec, n=self.n, key=self.data_key, **self.options)
        opts = dict(self.options, d=X.shape[1])
        return X, None, datasets.intrinsic_dimension(self.spec, **opts)


def _is_file(spec) -> bool:
    return isinstance(spec, os.PathLike) or str(spec).lower().endswith(datasets.FILE_SUFFIXES)


def _label(name, options: dict) -> str:
    if not options:
        return str(name)
    return f"{name}(" + ",".join(f"{k}={v}" for k, v in sorted(options.items())) + ")"


def data_sets(data, n, data_key) -> list[_DataSet]:
    """Expand ``data`` × ``n`` into the sweep's data sets, in order.

    Generated data sets get one entry per size in ``n``; files are read here and, like
    arrays, keep their own size (``n``, if given, must match it).
    """
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list):
        items = [(None, item) for item in data]
    else:
        items = [(None, data)]
    if not items:
        raise ValueError("data is empty")
    sizes = None if n is None else [check_positive_int(v, "n") for v in np.atleast_1d(n).tolist()]
    if sizes is not None and len(set(sizes)) != len(sizes):
        raise ValueError(f"n has duplicate values: {sizes}")
    out = []
    for label, item in items:
        options = {}
        if is_pair(item):
            item, options = item
            bad = sorted({"n", "key"} & set(options))
            if bad:
                raise ValueError(f"data options {bad} are set by simulate's n and data_key")
        if isinstance(item, (str, os.PathLike)) and not _is_file(item):
            name = _label(item, options) if label is None else str(label)
            out += [_DataSet(name, str(item), options, size, int(data_key))
                    for size in (sizes or [datasets.DEFAULT_N])]
            continue
        if isinstance(item, (str, os.PathLike)):
            default, item = str(item), datasets.load(item, **options)
        elif options:
            raise ValueError("data options apply only to named data sets and files")
        else:
            default = "array"
            item = item if isinstance(item, DataTree) else check_data(item, "data")
        size = item.n if isinstance(item, DataTree) else item.shape[0]
        if sizes is not None and sizes != [size]:
            raise ValueError(f"n={sizes} does not match the data set {default} of {size} points")
        name = default if label is None else str(label)
        out.append(_DataSet(name, item, {}, size, int(data_key)))
    keys = [(ds.label, ds.n) for ds in out]
    if len(set(keys)) != len(keys):
        raise ValueError(f"data: duplicate data sets {keys}; pass a dict {{label: data}}")
    return out


# ----------------------------------------------------------------- devices, key, loading


def devices(devices) -> list:
    """The local JAX devices to shard over: all (``None``), the first ``devices``, or a list."""
    local = jax.local_devices()
    if devices is None:
        return local
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, (bool, np.bool_)):
        if not 1 <= devices <= len(local):
            raise ValueError(f"devices must be between 1 and {len(local)}; got {devices}")
        return local[: int(devices)]
    if not isinstance(devices, (list, tuple)):
        raise ValueError(f"devices must be None, a count or a list of jax devices; got {devices!r}")
    devices = list(devices)
    if not devices:
        raise ValueError("devices is empty")
    for dev in devices:
        if not isinstance(dev, jax.Device):
            raise ValueError(f"devices must be jax devices (jax.local_devices()); got {dev!r}")
    if len(set(devices)) != len(devices):
        raise ValueError(f"devices has duplicates: {devices}")
    return devices


def key_label(key) -> str:
    """The sweep key as text: the int, or the raw key words ``w0:w1``."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return str(int(key))
    return ":".join(str(int(w)) for w in np.asarray(as_raw_key(key)).ravel())


def fingerprint(ds) -> str | None:
    """SHA-256 of given points (arrays, files, trees), so a store never mixes two data sets
    of one label; ``None`` for generated data (fixed by name, options, n and data key)."""
    if isinstance(ds.spec, str):
        return None
    X = ds.spec.points if isinstance(ds.spec, DataTree) else ds.spec
    X = np.ascontiguousarray(X, np.float64)
    return "sha256:" + hashlib.sha256(repr(X.shape).encode() + X.tobytes()).hexdigest()


def load(ds, mechs, eps):
    """(points, DataTree deep enough for every mechanism at every ε, intrinsic dimension)."""
    X, tree, intrinsic = ds.load()
    need = max(check_measurable(m, X.shape[0], X.shape[1], eps) for m in mechs)
    if tree is None or tree.depth < need:
        tree = DataTree.build(X, need)
    return X, tree, int(intrinsic)
