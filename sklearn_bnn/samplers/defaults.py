"""Defaults the samplers share, declared once."""

#: The mean acceptance probability the step-size adaptation aims at (dual averaging, Hoffman &
#: Gelman 2014; 0.8 is the usual choice for HMC and NUTS, as in Stan).
TARGET_ACCEPT = 0.8

#: A transition whose energy error exceeds this many nats is divergent: it is rejected and
#: counted in the diagnostics (NUTS stops building its tree there).
DIVERGENCE_THRESHOLD = 1000.0
