"""Experiments: data sets, Monte Carlo sweeps, the result store, rates and plots."""
