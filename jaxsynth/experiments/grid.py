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

__all__ = ["DataSet", "data_sets", "devices", "fingerprint", "key_label", "mechanisms"]


# --------------------------------------------------------------------------- mechanisms


def mechanisms(mechanisms) -> list[tuple[str, object]]:
    """(label, config) pairs from a config, a name, a list of them or a ``{label: ...}`` dict."""
    items = _items(list(mechanisms) if isinstance(mechanisms, tuple) else mechanisms,
                   "mechanisms")
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
class DataSet:
    """One (data set, n) of the sweep: a generator name, or given points (an array, a
    file's, a ``DataTree``'s) of which the sweep uses ``n``: all of them, or a nested
    subsample (``datasets.subsample`` with the data key) when ``n`` is smaller."""

    label: str
    source: object  # a generator name, an array [N, d] or a DataTree
    options: dict
    n: int
    data_key: int
    held: dict = dataclasses.field(default_factory=dict, repr=False)  # the points, once made

    @property
    def generated(self) -> bool:
        return isinstance(self.source, str)

    def points(self) -> np.ndarray:
        """The points as the sweep uses them, [n, d] float64 (those ``held``, if any)."""
        if "points" in self.held:
            return self.held["points"]
        if self.generated:
            return datasets.load(self.source, n=self.n, key=self.data_key, **self.options)
        X = self.source.points if isinstance(self.source, DataTree) else self.source
        return X if X.shape[0] == self.n else datasets.subsample(X, self.n, self.data_key)

    def load(self, mechs, eps):
        """(points, DataTree deep enough for every mechanism at every ε, intrinsic dimension)."""
        X = self.points()
        whole = isinstance(self.source, DataTree) and self.source.n == self.n
        tree = self.source if whole else None
        intrinsic = datasets.intrinsic_dimension(self.source, **dict(
            self.options, d=X.shape[1])) if self.generated else X.shape[1]
        need = max(check_measurable(m, X.shape[0], X.shape[1], eps) for m in mechs)
        if tree is None or tree.depth < need:
            tree = DataTree.build(X, need)
        return X, tree, int(intrinsic)


def _is_file(spec) -> bool:
    return isinstance(spec, os.PathLike) or str(spec).lower().endswith(datasets.FILE_SUFFIXES)


def _label(name, options: dict) -> str:
    if not options:
        return str(name)
    return f"{name}(" + ",".join(f"{k}={v}" for k, v in sorted(options.items())) + ")"


def _items(value, name: str) -> list:
    """(label or None, item) pairs of a single item, a list or a ``{label: item}`` dict."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = [(None, item) for item in value]
    else:
        items = [(None, value)]
    if not items:
        raise ValueError(f"{name} is empty")
    for label, _ in items:
        if label is not None and not str(label).strip():
            raise ValueError(f"{name}: a label is empty; every label must name its entry")
    return items


def _sizes(n) -> list[int] | None:
    if n is None:
        return None
    sizes = [check_positive_int(v, "n") for v in np.atleast_1d(n).tolist()]
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"n has duplicate values: {sizes}")
    return sizes


def data_sets(data, n, data_key) -> list[DataSet]:
    """Expand ``data`` × ``n`` into the sweep's data sets, in order.

    Generated data sets get one entry per size in ``n`` (default ``datasets.DEFAULT_N``).
    Given points (arrays, files, which are read here, and data trees) keep their own
    size without ``n``; with ``n``, each size is a nested subsample of them under their
    one label (``datasets.subsample``: the smaller sizes' points are among the larger's),
    drawn with ``data_key``.
    """
    sizes = _sizes(n)
    out = []
    for label, item in _items(data, "data"):
        options = {}
        if is_pair(item):
            item, options = item
            bad = sorted({"n", "key"} & set(options))
            if bad:
                raise ValueError(f"data options {bad} are set by simulate's n and data_key")
        if isinstance(item, (str, os.PathLike)) and not _is_file(item):
            name = _label(item, options) if label is None else str(label)
            out += [DataSet(name, str(item), options, size, int(data_key))
                    for size in (sizes or [datasets.DEFAULT_N])]
            continue
        if isinstance(item, (str, os.PathLike)):
            default, item = str(item), datasets.load(item, **options)
        elif options:
            raise ValueError("data options apply only to named data sets and files")
        else:
            default = "array"
            item = item if isinstance(item, DataTree) else check_data(item, "data")
        whole = item.n if isinstance(item, DataTree) else item.shape[0]
        too_large = [size for size in sizes or () if size > whole]
        if too_large:
            raise ValueError(f"n={too_large} exceeds the {whole} points of the data set "
                             f"{default}: each n is a subsample of them")
        name = default if label is None else str(label)
        out += [DataSet(name, item, {}, size, int(data_key)) for size in (sizes or [whole])]
    keys = [(ds.label, ds.n) for ds in out]
    if len(set(keys)) != len(keys):
        raise ValueError(f"data: duplicate data sets {keys}; pass a dict {{label: data}}")
    return out


# ------------------------------------------------------------------- devices, key


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


def fingerprint(X) -> str:
    """SHA-256 of the points as used [n, d] (float64), so that a store never mixes rows
    measured on two data sets under one label."""
    X = np.ascontiguousarray(X, np.float64)
    return "sha256:" + hashlib.sha256(repr(X.shape).encode() + X.tobytes()).hexdigest()
