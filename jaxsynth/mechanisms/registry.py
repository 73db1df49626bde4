"""Mechanism names of the command line and sweeps, and depth sweeps."""

from __future__ import annotations

import dataclasses

from jaxsynth.core.validate import check_positive_int
from jaxsynth.mechanisms.adaptive import AdaptivePrunedPMM
from jaxsynth.mechanisms.pmm import PMM, PrunedPMM
from jaxsynth.mechanisms.privtree import PrivTree

MECHANISMS = {
    "pmm": (PMM, {}),
    "pruned-pmm": (PrunedPMM, {}),
    "adaptive-pruned-pmm": (AdaptivePrunedPMM, {}),
    "privtree": (PrivTree, {"shift": False}),
    "privtree-shift": (PrivTree, {"shift": True}),
}
"""Command-line mechanism names: (config class, fixed options)."""

_DEPTH_OPTION = {"pmm": "depth", "pruned-pmm": "depth", "privtree": "depth_cap",
                 "privtree-shift": "depth_cap"}
"""The option a ``depth`` maps to: the tree depth, or PrivTree's depth cap."""


def mechanism(name: str, depth: int | None = None, **options):
    """A mechanism config from its command-line name (``MECHANISMS``).

    Args:
      name: ``pmm``, ``pruned-pmm``, ``adaptive-pruned-pmm``, ``privtree`` or
        ``privtree-shift``.
      depth: tree depth (PMM family) or depth cap (PrivTree); ``None`` for the
        mechanism's default.  Adaptive Pruned-PMM selects its depth and takes none.
      **options: further fields of the config class.

    Returns:
      the frozen config, e.g. ``jaxsynth.PMM(depth=depth)``.
    """
    if not isinstance(name, str):
        raise ValueError(f"mechanism must be a name such as 'pmm'; got {name!r}")
    key = name.strip().lower().replace("_", "-")
    if key not in MECHANISMS:
        raise ValueError(f"unknown mechanism {name!r}; known: {', '.join(MECHANISMS)}")
    config_class, fixed = MECHANISMS[key]
    if depth is not None:
        if key not in _DEPTH_OPTION:
            raise ValueError(f"depth does not apply to {key!r}, which selects its own depth")
        options[_DEPTH_OPTION[key]] = check_positive_int(depth, "depth")
    try:
        return config_class(**fixed, **options)
    except TypeError as exc:
        raise ValueError(f"bad options for mechanism {key!r}: {exc}") from None


def depth_sweep(mech, depths) -> dict:
    """``{"<name> r=<depth>": config}`` for ``mech`` at each depth: input for a depth sweep.

    Pass the result as ``simulate``'s ``mechanisms``; ``plots.depth_plot`` draws it.
    """
    field = _DEPTH_OPTION.get(getattr(mech, "name", None))
    if field is None:
        raise ValueError(f"mechanism {mech!r} has no depth to sweep")
    return {f"{mech.name} r={r}": dataclasses.replace(
        mech, **{field: check_positive_int(r, "depths")}) for r in depths}
