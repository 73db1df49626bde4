"""jaxsynth: batched differentially private synthetic data on dyadic partitions."""
