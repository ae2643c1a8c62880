"""MC dropout: predictive uncertainty for classification and regression.

Trains an MCDropoutClassifier on scikit-learn's digits and an MCDropoutRegressor on a noisy sine
with a gap in the training inputs, and prints what the dropout draws tell us: accuracy, how
uncertain the network is on the points it gets wrong, and how the regression error bars widen
away from the data. Runs in well under a minute on a CPU.
"""

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from sklearn_bnn import MCDropoutClassifier, MCDropoutRegressor

# --- classification --------------------------------------------------------------------------
X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(
    X / 16.0, y, test_size=0.5, stratify=y, random_state=0
)
clf = MCDropoutClassifier(
    hidden_layer_sizes=(100,),
    dropout=0.2,
    max_iter=100,
    learning_rate_init=3e-3,
    early_stopping=True,
    n_iter_no_change=20,
    random_state=0,
)
clf.fit(X_train, y_train)
proba = clf.predict_proba(X_test)  # mean over 100 dropout draws
samples = clf.predict_samples(X_test)  # (100, n_test, 10)
entropy = -np.sum(proba * np.log(np.clip(proba, 1e-12, None)), axis=1)
right = clf.predict(X_test) == y_test
print(f"digits: accuracy {right.mean():.3f} after {clf.n_iter_} epochs")
print(
    f"  predictive entropy, right answers {entropy[right].mean():.3f}, "
    f"wrong answers {entropy[~right].mean():.3f}"
)
spread = samples.std(axis=0)[np.arange(len(y_test)), proba.argmax(axis=1)]
print(
    f"  spread of the winning class's probability over draws: right {spread[right].mean():.3f},"
    f" wrong {spread[~right].mean():.3f}"
)

# --- regression ------------------------------------------------------------------------------
rng = np.random.default_rng(0)
x = np.concatenate([rng.uniform(-3, -1, 150), rng.uniform(1, 3, 150)])
X_reg = x[:, None]
y_reg = np.sin(2 * x) + 0.1 * rng.normal(size=x.size)
reg = MCDropoutRegressor(
    hidden_layer_sizes=(50, 50), dropout=0.2, max_iter=200, learning_rate_init=3e-3, random_state=0
).fit(X_reg, y_reg)
grid = np.array([[-2.0], [0.0], [2.0], [4.0]])
mean, std = reg.predict(grid, return_std=True)
print(
    f"\nsine with a gap in (-1, 1): learned noise std {1 / np.sqrt(reg.noise_precision_[0]):.3f}"
    " (true 0.1)"
)
for g, m, s in zip(grid[:, 0], mean, std, strict=True):
    where = "in the data" if 1 <= abs(g) <= 3 else "no data"
    print(f"  x = {g:+.1f} ({where:11s}): {m:+.3f} ± {s:.3f}   (true {np.sin(2 * g):+.3f})")
