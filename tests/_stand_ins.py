"""A cheap stand-in for a Bayesian classifier: bootstrapped logistic regressions.

It exposes ``predict_samples`` (per-member probabilities) like our HMC classifiers, so the
ensemble tools can be tested without running a sampler.
"""

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import LogisticRegression
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data


class BootstrapEnsemble(ClassifierMixin, BaseEstimator):
    """``n_members`` logistic regressions, each fitted on a stratified bootstrap resample."""

    def __init__(self, n_members=10, C=0.5, random_state=None):
        self.n_members = n_members
        self.C = C
        self.random_state = random_state

    def fit(self, X, y):
        X, y = validate_data(self, X, y)
        check_classification_targets(y)
        self.classes_, y_index = np.unique(y, return_inverse=True)
        rng = check_random_state(self.random_state)
        by_class = [np.flatnonzero(y_index == c) for c in range(len(self.classes_))]
        self.members_ = []
        for _ in range(self.n_members):
            rows = np.concatenate([rng.choice(idx, size=len(idx)) for idx in by_class])
            member = LogisticRegression(C=self.C, max_iter=200, tol=1e-3)
            self.members_.append(member.fit(X[rows], y_index[rows]))
        return self

    def predict_samples(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return np.stack([member.predict_proba(X) for member in self.members_])

    def predict_proba(self, X):
        return self.predict_samples(X).mean(axis=0)

    def predict(self, X):
        best = np.argmax(self.predict_proba(X), axis=1)
        return self.classes_[best]
