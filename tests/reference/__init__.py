"""A slow, obviously correct, per-node NumPy reference ("oracle") of every mechanism.

It consumes exactly the random words the JAX engines consume, so engine and reference
must agree replicate by replicate (``tests/mechanisms/test_engine_vs_reference.py``).

Independence from the package:

* ``rng``: its own uint32 Threefry-2x32-20, counter layout, chunk keys and path words,
  written from the docstring of ``jaxsynth.core.keys`` (not importing it), and checked
  against ``jax.extend.random.threefry_2x32``.
* ``tree``: nodes are Python objects holding their path bits; true counts come by brute
  force from the data (``partition.cell_index`` or exact integer digits); cell geometry,
  diameters, edge weights and the tree-W1 sums are written here.
* ``pmm``, ``adaptive``, ``privtree``: one node at a time (breadth first), own schedules,
  own consistency rules, own PrivTree split rule, window rule, reconstruction, candidate
  set, scores and exponential race.

The only package code the reference calls is the word -> variate layer
(``jaxsynth.core.noise``: ``noisy_count``, ``laplace``, ``uniform``, ``exponential``),
batched per level on NumPy arrays of words the reference computed itself (``variates``),
so that float32 noise values agree bit for bit; the laws of those functions are tested
separately against exact pmfs.  Nothing here is collected by pytest (no ``test_`` names).
"""
