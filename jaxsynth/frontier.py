"""Fixed-capacity frontiers: order-preserving compaction of slot arrays (SPEC §3, §5).

The sparse engines (Pruned-PMM, PrivTree) keep the nodes of one tree level in ``K``
slots.  A level step expands every slot into at most two entries and moves the entries
to keep to the front, in their order, with one cumulative sum.  Because the order is
kept, slots stay in Morton (depth-first) order from level to level.
"""

from __future__ import annotations

import jax.numpy as jnp


def compact(keep, capacity: int, *arrays):
    """Move entries with ``keep`` to the front (order kept) and cut them to ``capacity``.

    One int32 scatter finds each slot's source, then every array is gathered.  Slots past
    the kept entries read entry 0, so the caller masks them (``jnp.sum(keep)`` entries
    are real, at most ``capacity`` of them survive; the caller detects the excess).

    Args:
      keep: [N] bool, the entries to keep.
      capacity: static number of output slots.
      *arrays: arrays with leading axis N.

    Returns:
      tuple of the arrays gathered to leading axis ``capacity``.
    """
    pos = jnp.where(keep, jnp.cumsum(keep) - 1, capacity)
    source = jnp.zeros(capacity, jnp.int32).at[pos].set(
        jnp.arange(keep.shape[0], dtype=jnp.int32), mode="drop"
    )
    return tuple(a[source] for a in arrays)
