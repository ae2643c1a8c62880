"""HMCClassifier on scikit-learn's breast-cancer data: accuracy, calibration, diagnostics.

Run: python examples/hmc_classification.py   (about a minute on a CPU)
"""

from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_bnn import HMCClassifier, uncertainty_report

X, y = load_breast_cancer(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, stratify=y, random_state=0)

model = make_pipeline(
    StandardScaler(),
    HMCClassifier(
        hidden_layer_sizes=(32,),
        n_draws=300,
        n_warmup=300,
        n_chains=2,
        verbose=True,
        random_state=0,
    ),
)
model.fit(X_train, y_train)
print(model[-1].summary())
report = uncertainty_report(model, X_test, y_test)
for name, value in report.items():
    print(f"{name:>24}: {value:.4f}")
