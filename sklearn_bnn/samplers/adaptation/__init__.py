"""Warmup adaptation: the step size by dual averaging, the mass matrix over Stan's windows, the
warmup object the loop calls, and ChEES's adaptation of the integration time."""
