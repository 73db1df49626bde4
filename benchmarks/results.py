"""Benchmark result files: one JSON file per run, ``results/<benchmark>-<stamp>.json``.

Every benchmark saves its run with ``write``: the benchmark's name, the date (UTC), the
machine, the versions of Python, JAX, NumPy, POT and jaxsynth, a ``description`` of what
each row means, the ``rows`` (dicts with the same keys; numbers as numbers, ratios against
the same run's baseline as their own keys) and ``notes`` (where the time goes, targets met
or missed: one text, or a list of them).  ``benchmarks/report.py`` writes BENCHMARKS.md from the newest file of each
benchmark.  The file is written atomically (a temporary file renamed into place).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    """The CPU's model name, its core count and the platform JAX computes on."""
    import jax

    from jaxsynth.compilation import cpu_model

    device = jax.devices()[0]
    kind = getattr(device, "device_kind", "") or ""
    plat = device.platform if kind.lower() in ("", device.platform) else f"{device.platform} ({kind})"
    return {"cpu": cpu_model(), "cores": os.cpu_count() or 1, "platform": plat,
            "devices": jax.device_count()}


def versions(**extra: str) -> dict:
    """Versions of Python, JAX, NumPy, POT and jaxsynth (and ``extra``)."""
    from importlib import metadata

    import jax
    import numpy as np

    out = {"python": platform.python_version(), "jax": jax.__version__, "numpy": np.__version__}
    for name, dist in (("POT", "POT"), ("jaxsynth", "jaxsynth")):
        try:
            out[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[name] = None
    out.update(extra)
    return out


def write(benchmark: str, description: str, rows: list[dict], notes: str,
          directory: Path | str = RESULTS, **extra_versions: str) -> Path:
    """Save one run of ``benchmark`` and return the file's path.

    Raises:
      ValueError: if ``rows`` is empty or its dicts do not all have the same keys.
    """
    if not rows:
        raise ValueError(f"rows: benchmark {benchmark!r} has no rows")
    keys = list(rows[0])
    if any(list(row) != keys for row in rows):
        raise ValueError(f"rows: every row of {benchmark!r} must have the keys {keys}")
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    record = {
        "benchmark": benchmark,
        "date": now.isoformat(),
        "machine": machine(),
        "versions": versions(**extra_versions),
        "description": description,
        "rows": rows,
        "notes": notes,
    }
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{benchmark}-{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{benchmark}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path
