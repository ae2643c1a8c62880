"""Stochastic-gradient MCMC on scikit-learn's digits, and a smaller ensemble of its draws.

An MLP (64 -> 100 -> 10) sampled by SGHMC, generalized SGHMC (GSGHMC) and the Hamiltonian
trajectory ensemble (HTE) with 64-row minibatches (Schmal & Mäder 2026), each started at a mode
found by minibatch Adam (``init="map"``): one draw per epoch after a short burn-in. For each:
held-out accuracy, negative log-likelihood, expected calibration error and the acceptance
rate. Then :class:`~sklearn_bnn.ensemble.EnsembleReducer` keeps the fewest SGHMC draws that
preserve validation accuracy, and again for calibration (Schmal & Mäder 2026, Fig. 5: accuracy needs
under half of the ensemble, calibration almost all of it). About 20 seconds on a CPU.
"""

import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import train_test_split

from sklearn_bnn import ConvergenceWarning, SGMCMCClassifier
from sklearn_bnn.ensemble import EnsembleReducer
from sklearn_bnn.metrics import expected_calibration_error
from sklearn_bnn.samplers import GSGHMC, HTE, SGHMC

warnings.simplefilter("ignore", ConvergenceWarning)  # R-hat of a short single-chain run

X, y = load_digits(return_X_y=True)
X = (X / 16.0).astype(np.float32)
X_train, X_rest, y_train, y_rest = train_test_split(X, y, test_size=0.5, stratify=y, random_state=0)
X_val, X_test, y_val, y_test = train_test_split(
    X_rest, y_rest, test_size=0.5, stratify=y_rest, random_state=0
)

# eps is a time step (the SGD learning rate on the summed loss is eps**2); the likelihood is
# summed over N = 898 rows, so eps = 0.01 is a mean-loss learning rate of about 0.09.
# GSGHMC's per-step test wants a smaller step (acceptance ~0.8 at 0.003, ~0.4 at 0.01).
samplers = {
    "SGHMC": SGHMC(step_size=0.01),
    "GSGHMC": GSGHMC(step_size=0.003),
    "HTE": HTE(step_size=0.01, max_tries=3),
}
fitted = {}
print(f"{'sampler':<8}{'accuracy':>10}{'NLL':>8}{'ECE':>8}{'accept':>8}{'draws':>7}")
for name, sampler in samplers.items():
    clf = SGMCMCClassifier(
        hidden_layer_sizes=(100,),
        sampler=sampler,
        batch_size=64,
        init="map",  # minibatch Adam to scikit-learn's stopping rule (MAPStart(n_steps="auto"))
        n_warmup=10,
        n_draws=60,
        random_state=0,
    ).fit(X_train, y_train)
    proba = np.clip(clf.predict_proba(X_test), 1e-12, 1.0)
    nll = -np.mean(np.log(proba[np.arange(len(y_test)), y_test]))
    ece = expected_calibration_error(y_test, proba)
    print(
        f"{name:<8}{clf.score(X_test, y_test):>10.3f}{nll:>8.3f}{ece:>8.3f}"
        f"{clf.acceptance_rate_:>8.2f}{len(clf.samples_):>7}"
    )
    fitted[name] = clf

print("\nensemble-size reduction of the SGHMC draws (selected on the validation half):")
for metric in ("accuracy", "ece"):
    reducer = EnsembleReducer(FrozenEstimator(fitted["SGHMC"]), scoring=metric, random_state=0)
    reducer.fit(X_val, y_val)
    print(
        f"  {metric:<9} keeps {reducer.n_members_:>2} of {reducer.n_members_full_} draws; "
        f"test accuracy {reducer.score(X_test, y_test):.3f} "
        f"(all draws {fitted['SGHMC'].score(X_test, y_test):.3f})"
    )
