"""The driver: :func:`~sklearn_bnn.samplers.sample`, the chain runners (one batch or joblib jobs),
the one sampling loop, the records of a run and its summary, and the warmup and draw budgets."""
