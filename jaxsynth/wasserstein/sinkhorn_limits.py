"""Numbers of the certified Sinkhorn solve that the ``sinkhorn`` method's option checks
and memory model need (``methods.sinkhorn``), without loading ott-jax (``sinkhorn``, the
solve, is slow to import)."""

MOMENTUM_START = 100
"""Iteration at which a round's adaptive momentum starts (``max_iterations`` must pass
it)."""
CHUNK_ELEMENTS = 1 << 22
"""Cost-matrix entries per row chunk of the certificate (no ``n × m`` array in memory)."""
