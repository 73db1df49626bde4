"""Experiments: data sets, Monte Carlo sweeps, the result store, rates and plots (SPEC §8–§9)."""
