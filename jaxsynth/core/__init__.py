"""Core: the partition and its data tree, random words, noise laws, the frontier.

``partition`` (geometry, exact digits), ``datatree`` (sorted data, counts, device
arrays), ``descent`` (a cell's children on device), ``keys`` and ``noise`` (node
randomness and exact laws), ``consistency`` (sibling rules), ``frontier`` (the sparse
level engine), ``measure`` (``SyntheticMeasure``), ``validate`` (input checks).
"""
