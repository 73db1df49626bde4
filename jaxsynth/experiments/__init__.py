"""Experiments: data sets, Monte Carlo sweeps, the result store, rates and plots.

``datasets`` (generators and files), ``sweep`` (``simulate`` and its loop), ``grid`` (the
sweep's mechanisms, data sets and devices), ``rows`` (its table, one row per replicate),
``store`` (the result store), ``rates`` (``estimate_rate``), ``plots``.
"""
