"""A Bayesian network on moons sampled by bridged HMC, its boxes run as parallel jobs
(the bridged-HMC thesis, §4.2).

Four boxes (two weights split at zero), each a joblib job with its own seed; the estimator gets
an equal-weight resample of the boxes' draws, and per-box diagnostics in ``diagnostics_``.
Run: ``python examples/bridged_moons.py`` (a minute or two on a CPU).
"""

from sklearn.datasets import make_moons

from sklearn_bnn import HMCClassifier
from sklearn_bnn.samplers import BridgedHMC

X, y = make_moons(600, noise=0.2, random_state=0)
X_train, y_train, X_test, y_test = X[:300], y[:300], X[300:], y[300:]

clf = HMCClassifier(
    hidden_layer_sizes=(5, 5),
    activation="tanh",
    sampler=BridgedHMC(n_split_params=2, n_steps=20),
    n_warmup=200,
    n_draws=250,  # per box
    n_jobs=2,
    random_state=0,
)
clf.fit(X_train, y_train)
print(f"test accuracy {clf.score(X_test, y_test):.3f}")
diag = clf.diagnostics_
print("box  draws  acceptance  log mass (se)      weight  overlap")
for b in range(diag["n_boxes"]):
    print(
        f"{b:>3} {diag['box_n_draws'][b]:>6} {diag['box_acceptance_rate'][b]:>11.2f}  "
        f"{diag['box_log_mass'][b]:>8.2f} ({diag['box_log_mass_se'][b]:.2f})  "
        f"{diag['box_weight'][b]:>8.3f}  {diag['box_bridge_overlap'][b]:.1e}"
    )
# An overlap near 0 (a warning says so) means that the Gaussian proposal misses the box's
# posterior and the weights are arbitrary: see docs/bridged_hmc.md, Limits.
