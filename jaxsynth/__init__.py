"""jaxsynth (being restructured)."""
