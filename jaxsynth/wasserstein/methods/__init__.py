"""The W1 methods, one module each (``W1Method`` objects, listed in ``registry``)."""
