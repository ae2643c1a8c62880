"""The package's scoreboard: every estimator at its defaults beside what a user would pick instead.

Each model runs inside ``make_pipeline(StandardScaler(), model)`` with its default settings and
only ``random_state`` set; nothing is tuned per data set. Beside the package's estimators:

* classification: ``MLPClassifier()``, a deep ensemble of five ``MLPClassifier`` (different
  seeds, probabilities averaged), ``HistGradientBoostingClassifier()``, and, when
  ``laplace-torch`` can be imported, a post-hoc last-layer Kronecker-factored Laplace
  approximation of a torch MLP trained with Adam (prior precision by marginal likelihood,
  probit predictive). ``laplace-torch`` is a benchmark-only dependency.
* regression: ``MLPRegressor()``, the ensemble of five, ``HistGradientBoostingRegressor()``.
  They have no predictive variance of their own: the MLP and gradient boosting get a Gaussian
  with the standard deviation of their training residuals (homoscedastic), the ensemble the
  variance of its members' means plus that noise variance.

Data sets: digits with classes 7-9 held out as out-of-distribution inputs; breast cancer; wine;
a 200,000-row synthetic 5-class problem (``make_classification``); the four UCI regression sets
of ``../shared/data/uci`` with their standard splits (loaded by ``benchmarks/scoreboard/uci.py``);
a 1-D regression with a gap between two clusters of inputs. Regression targets are standardised with
the training mean and sd before fitting (the UCI protocol; the same for every model) and the
scores are in the original units.

One JSON line per fitted model is appended to ``--out`` as soon as it is scored (by default
``benchmarks/out/panel.jsonl``, which git ignores; the record the docs' tables and figures are
made from is ``benchmarks/results/panel.jsonl``, appended to only when named); a rerun skips
the (data set, model, seed) cells already there, so an interrupted run resumes. The per-point
arrays go to ``arrays/`` beside ``--out``.

    python benchmarks/scoreboard/panel.py                   # everything, 3 seeds / splits
    python benchmarks/scoreboard/panel.py --quick           # one seed, digits + breast cancer + gap
    python benchmarks/scoreboard/panel.py --datasets digits wine --models hmc mlp --seeds 1
    python benchmarks/scoreboard/panel.py --report          # tables and figures from --out
    python benchmarks/scoreboard/panel.py --report --out benchmarks/results/panel.jsonl \\
        --doc docs/benchmarks.md                            # the docs' tables and figures

HMC and split HMC at their defaults are infeasible on the 200,000-row set: the panel times a
few transitions there and records the cell as skipped with the projected fit time. The same for
the plan-net (four hidden layers of 1024 units, five networks) when one epoch projects past the
limit set below.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # HistGradientBoosting and BLAS: one thread
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone  # noqa: E402
from sklearn.datasets import (  # noqa: E402
    load_breast_cancer,
    load_digits,
    load_wine,
    make_classification,
)
from sklearn.ensemble import (  # noqa: E402
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
)
from sklearn.metrics import accuracy_score, roc_auc_score  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.neural_network import MLPClassifier, MLPRegressor  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from uci import DATA_DIR as UCI_DIR_DEFAULT  # noqa: E402
from uci import DATASETS as UCI_DATASETS  # noqa: E402
from uci import load_uci, standardise  # noqa: E402

from sklearn_bnn import (  # noqa: E402
    HMCClassifier,
    HMCRegressor,
    LossCalibratedBNN,
    MCDropoutClassifier,
    MCDropoutRegressor,
    PlanNetRegressor,
    SGMCMCClassifier,
    SGMCMCRegressor,
    SplitHMCClassifier,
    SplitHMCRegressor,
)
from sklearn_bnn.metrics import (  # noqa: E402
    brier_score,
    expected_calibration_error,
    gaussian_nll,
    interval_coverage,
    mutual_information,
    negative_log_likelihood,
    predict_samples,
    predictive_entropy,
)
from sklearn_bnn.samplers.starts import MAPStart  # noqa: E402

# --- the only estimator parameter names the panel ever uses -------------------------------------
# Every estimator runs at its defaults. These names are read (to project a fit time) or set (only
# to *time* a model too slow to run at its defaults; the cell is then recorded as skipped). They
# follow the package's public vocabulary and live here alone, so a rename touches this dict.
P = {
    "draws": "n_draws",  # posterior draws per chain
    "steps": "sampler__n_steps",  # integrator steps per transition
    "warmup": "n_warmup",
    "init_steps": "init__n_steps",  # "auto": 500 full-data Adam steps
    "epochs": "max_iter",
}
TIMING_PARAMS = {
    "hmc": {P["init_steps"]: 1, P["warmup"]: 2, P["draws"]: 2},  # four transitions
    "plannet": {P["epochs"]: 1, "early_stopping": False},  # one epoch
}
PLANNET_LIMIT_S = 300.0  # skip the plan-net on a set where its default epochs project past this
HMC_MAX_ROWS = 50_000  # HMC / split HMC are timed, not fitted, on larger training sets

REPO_ROOT = Path(__file__).resolve().parents[2]


def _uci_dir() -> Path:
    """``shared/data/uci`` beside the checkout (uci.py's place), or beside a parent folder of
    it (a git worktree under ``wt/``); ``$SKLEARN_BNN_UCI_DIR`` overrides both."""
    if os.environ.get("SKLEARN_BNN_UCI_DIR"):
        return Path(os.environ["SKLEARN_BNN_UCI_DIR"])
    for parent in REPO_ROOT.parents:
        candidate = parent / "shared" / "data" / "uci"
        if candidate.is_dir():
            return candidate
    return UCI_DIR_DEFAULT


OUT = REPO_ROOT / "benchmarks" / "out"  # ignored by git
STATIC = REPO_ROOT / "docs" / "_static"
N_BINS = 15
N_ENSEMBLE = 5

CLASSIFICATION_SETS = ("digits", "breast_cancer", "wine", "synthetic_200k")
REGRESSION_SETS = ("gap1d",) + tuple(UCI_DATASETS)
QUICK_SETS = ("digits", "breast_cancer", "gap1d")
CLASSIFIERS = ("hmc", "split_hmc", "sgmcmc", "mc_dropout", "lcbnn", "mlp", "ensemble5", "hgb",
               "laplace")
REGRESSORS = ("hmc", "split_hmc", "sgmcmc", "mc_dropout", "plannet", "mlp", "ensemble5", "hgb")
#: Candidate defaults under study: a package model with some settings changed. Run only when
#: named in ``--models`` (``--models hmc hmc_tanh``), on both tasks.
VARIANTS = {
    "hmc_tanh": ("hmc", {"activation": "tanh"}),
    "hmc_4chains": ("hmc", {"n_chains": 4}),
    "hmc_fixed": ("hmc", {"n_warmup": 500, "n_draws": 500}),  # the fixed budget of 0.1
    "hmc_random_init": ("hmc", {"init": "random"}),  # chains from the prior's draws
    "hmc_short_map": ("hmc", {"init": MAPStart(n_steps=200)}),  # a less over-fit start
    "hmc_auto_prior": ("hmc", {"prior_precision": "auto"}),  # fan-in scaled precisions
    "sgmcmc_auto_prior": ("sgmcmc", {"prior_precision": "auto"}),
}
PACKAGE_MODELS = ("hmc", "split_hmc", "sgmcmc", "mc_dropout", "lcbnn", "plannet", *VARIANTS)
LABELS = {
    "hmc": "HMC",
    "hmc_tanh": "HMC, tanh",
    "hmc_4chains": "HMC, 4 chains",
    "hmc_fixed": "HMC, 500 + 500 transitions",
    "hmc_random_init": "HMC, chains started from the prior",
    "hmc_short_map": "HMC, a 200-step MAP start",
    "hmc_auto_prior": 'HMC, prior_precision="auto"',
    "sgmcmc_auto_prior": 'SG-MCMC, prior_precision="auto"',
    "split_hmc": "split HMC",
    "sgmcmc": "SG-MCMC",
    "mc_dropout": "MC dropout",
    "lcbnn": "loss-calibrated (identity utility)",
    "plannet": "plan-net",
    "mlp": "MLP",
    "ensemble5": "MLP ensemble (5)",
    "hgb": "hist. gradient boosting",
    "laplace": "Laplace (last layer, KFAC)",
}


# --- baselines that need a wrapper --------------------------------------------------------------


class MLPEnsembleClassifier(ClassifierMixin, BaseEstimator):
    """Five ``MLPClassifier()`` with different seeds; probabilities averaged."""

    def __init__(self, n_members=N_ENSEMBLE, random_state=None):
        self.n_members = n_members
        self.random_state = random_state

    def fit(self, X, y):
        base = 0 if self.random_state is None else int(self.random_state)
        self.members_ = [
            MLPClassifier(random_state=base * 1000 + k).fit(X, y) for k in range(self.n_members)
        ]
        self.classes_ = self.members_[0].classes_
        return self

    def predict_samples(self, X):
        return np.stack([m.predict_proba(X) for m in self.members_])

    def predict_proba(self, X):
        return self.predict_samples(X).mean(axis=0)

    def predict(self, X):
        return self.classes_[self.predict_proba(X).argmax(axis=1)]


class ResidualNoiseRegressor(RegressorMixin, BaseEstimator):
    """A point regressor with a Gaussian predictive: sd = the sd of its training residuals."""

    def __init__(self, regressor=None):
        self.regressor = regressor

    def fit(self, X, y):
        self.regressor_ = clone(self.regressor).fit(X, y)
        self.noise_std_ = float(np.std(y - self.regressor_.predict(X)))
        return self

    def predict(self, X, return_std=False):
        mean = self.regressor_.predict(X)
        if return_std:
            return mean, np.full_like(mean, self.noise_std_)
        return mean


class MLPEnsembleRegressor(RegressorMixin, BaseEstimator):
    """Five ``MLPRegressor()``; predictive variance = spread of the members' means + noise.

    The noise variance is the variance of the ensemble mean's training residuals.
    """

    def __init__(self, n_members=N_ENSEMBLE, random_state=None):
        self.n_members = n_members
        self.random_state = random_state

    def fit(self, X, y):
        base = 0 if self.random_state is None else int(self.random_state)
        self.members_ = [
            MLPRegressor(random_state=base * 1000 + k).fit(X, y) for k in range(self.n_members)
        ]
        self.noise_std_ = float(np.std(y - self.predict(X)))
        return self

    def predict(self, X, return_std=False):
        means = np.stack([m.predict(X) for m in self.members_])
        mean = means.mean(axis=0)
        if return_std:
            return mean, np.sqrt(means.var(axis=0) + self.noise_std_**2)
        return mean


class LaplaceMLPClassifier(ClassifierMixin, BaseEstimator):
    """A torch MLP (one hidden layer of 100 ReLU units, as ``MLPClassifier()``) trained with
    Adam, then a post-hoc Laplace approximation with ``laplace-torch``: last layer, Kronecker-
    factored Hessian, prior precision by marginal likelihood, probit predictive.

    Training: Adam (learning rate 1e-3, weight decay 1e-4 as ``MLPClassifier``'s ``alpha``),
    batches of 128, 200 epochs capped at 10,000 steps.
    """

    def __init__(self, hidden=100, max_epochs=200, max_steps=10_000, batch_size=128,
                 random_state=None):
        self.hidden = hidden
        self.max_epochs = max_epochs
        self.max_steps = max_steps
        self.batch_size = batch_size
        self.random_state = random_state

    def fit(self, X, y):
        from laplace import Laplace

        seed = 0 if self.random_state is None else int(self.random_state)
        torch.manual_seed(seed)
        self.classes_, codes = np.unique(y, return_inverse=True)
        Xt = torch.as_tensor(X, dtype=torch.float32)
        yt = torch.as_tensor(codes, dtype=torch.long)
        model = torch.nn.Sequential(
            torch.nn.Linear(X.shape[1], self.hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(self.hidden, len(self.classes_)),
        )
        optimiser = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
        generator = torch.Generator().manual_seed(seed)
        steps = 0
        while steps < self.max_steps and steps < self.max_epochs * math.ceil(
            len(yt) / self.batch_size
        ):
            order = torch.randperm(len(yt), generator=generator)
            for start in range(0, len(yt), self.batch_size):
                batch = order[start : start + self.batch_size]
                optimiser.zero_grad()
                torch.nn.functional.cross_entropy(model(Xt[batch]), yt[batch]).backward()
                optimiser.step()
                steps += 1
                if steps >= self.max_steps:
                    break
        self.n_steps_ = steps
        model.eval()
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(Xt, yt), batch_size=256
        )
        self.laplace_ = Laplace(
            model, "classification", subset_of_weights="last_layer", hessian_structure="kron"
        )
        self.laplace_.fit(loader)
        self.laplace_.optimize_prior_precision(method="marglik")
        return self

    def predict_proba(self, X):
        with torch.no_grad():
            Xt = torch.as_tensor(X, dtype=torch.float32)
            proba = self.laplace_(Xt, pred_type="glm", link_approx="probit")
        return proba.numpy().astype(np.float64)

    def predict_samples(self, X):
        Xt = torch.as_tensor(X, dtype=torch.float32)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            draws = self.laplace_.predictive_samples(
                Xt, pred_type="glm", n_samples=100, generator=generator
            )
        return draws.numpy().astype(np.float64)

    def predict(self, X):
        return self.classes_[self.predict_proba(X).argmax(axis=1)]


def laplace_available() -> bool:
    try:
        import laplace  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return False
    return True


def make_model(task: str, name: str, seed: int):
    """The final estimator of the pipeline: defaults, only ``random_state`` set (a
    :data:`VARIANTS` entry: its base model with the variant's settings)."""
    if name in VARIANTS:
        base, settings = VARIANTS[name]
        return make_model(task, base, seed).set_params(**settings)
    if task == "classification":
        table = {
            "hmc": HMCClassifier,
            "split_hmc": SplitHMCClassifier,
            "sgmcmc": SGMCMCClassifier,
            "mc_dropout": MCDropoutClassifier,
            "lcbnn": LossCalibratedBNN,  # utility=None: the identity utility (accuracy)
            "mlp": MLPClassifier,
            "ensemble5": MLPEnsembleClassifier,
            "hgb": HistGradientBoostingClassifier,
            "laplace": LaplaceMLPClassifier,
        }
        return table[name](random_state=seed)
    if name == "mlp":
        return ResidualNoiseRegressor(MLPRegressor(random_state=seed))
    if name == "hgb":
        return ResidualNoiseRegressor(HistGradientBoostingRegressor(random_state=seed))
    table = {
        "hmc": HMCRegressor,
        "split_hmc": SplitHMCRegressor,
        "sgmcmc": SGMCMCRegressor,
        "mc_dropout": MCDropoutRegressor,
        "plannet": PlanNetRegressor,
        "ensemble5": MLPEnsembleRegressor,
    }
    return table[name](random_state=seed)


# --- data ---------------------------------------------------------------------------------------


def gap_data(seed: int, n_per_cluster: int = 100, noise: float = 0.1):
    """x uniform on [-3, -1] U [1, 3], y = sin(x) + N(0, noise^2); train and test sets."""
    rng = np.random.default_rng(seed)

    def draw(n):
        x = np.concatenate([rng.uniform(-3, -1, n), rng.uniform(1, 3, n)])
        return x[:, None], np.sin(x) + noise * rng.standard_normal(2 * n)

    X_train, y_train = draw(n_per_cluster)
    X_test, y_test = draw(n_per_cluster)
    return X_train, y_train, X_test, y_test


GAP_GRID = np.linspace(-4.5, 4.5, 181)[:, None]


def load(name: str, seed: int):
    """(task, X_train, y_train, X_test, y_test, X_ood or None)."""
    if name == "digits":
        X, y = load_digits(return_X_y=True)
        inside = y <= 6
        X_train, X_test, y_train, y_test = train_test_split(
            X[inside], y[inside], test_size=0.25, stratify=y[inside], random_state=seed
        )
        return "classification", X_train, y_train, X_test, y_test, X[~inside]
    if name in ("breast_cancer", "wine"):
        X, y = (load_breast_cancer if name == "breast_cancer" else load_wine)(return_X_y=True)
        X_train, X_test, y_train, y_test = train_test_split(
            X, y, test_size=0.25, stratify=y, random_state=seed
        )
        return "classification", X_train, y_train, X_test, y_test, None
    if name == "synthetic_200k":
        X, y = make_classification(
            n_samples=200_000, n_features=50, n_informative=20, n_redundant=10,
            n_classes=5, n_clusters_per_class=2, class_sep=1.0, flip_y=0.01, random_state=0,
        )
        X_train, X_test, y_train, y_test = train_test_split(
            X, y, test_size=0.2, stratify=y, random_state=seed
        )
        return "classification", X_train, y_train, X_test, y_test, None
    if name == "gap1d":
        return ("regression", *gap_data(seed), None)
    X_train, y_train, X_test, y_test = load_uci(name, seed, _uci_dir())
    return "regression", X_train, y_train, X_test, y_test, None


# --- scoring ------------------------------------------------------------------------------------


def _samples_or_none(pipe, X):
    try:
        return predict_samples(pipe, X)
    except TypeError:
        return None


def score_classifier(pipe, X_test, y_test, X_ood, labels):
    """Scores, and the per-point arrays kept for the figures."""
    draws = _samples_or_none(pipe, X_test)  # per-draw probabilities, for the MI only
    proba = pipe.predict_proba(X_test)  # what a user reads (calibrated where the model is)
    pred = labels[proba.argmax(axis=1)]
    scores = {
        "accuracy": accuracy_score(y_test, pred),
        "nll": negative_log_likelihood(y_test, proba, labels=labels),
        "ece": expected_calibration_error(y_test, proba, n_bins=N_BINS, labels=labels),
        "brier": brier_score(y_test, proba, labels=labels),
        "mean_confidence": float(proba.max(axis=1).mean()),
        "n_draws": None if draws is None else int(draws.shape[0]),
    }
    arrays = {"proba": proba}
    if X_ood is not None:
        ood_draws = _samples_or_none(pipe, X_ood)
        ood_proba = pipe.predict_proba(X_ood)
        is_ood = np.r_[np.zeros(len(X_test)), np.ones(len(X_ood))]
        entropy = np.r_[predictive_entropy(proba), predictive_entropy(ood_proba)]
        scores["auroc_entropy"] = roc_auc_score(is_ood, entropy)
        if draws is not None and draws.shape[0] > 1:
            mi = np.r_[mutual_information(draws), mutual_information(ood_draws)]
            scores["auroc_mi"] = roc_auc_score(is_ood, mi)
            arrays["mi"] = mi[: len(X_test)]
        else:
            scores["auroc_mi"] = None  # one network: no disagreement between draws
        scores["mean_entropy_in"] = float(entropy[: len(X_test)].mean())
        scores["mean_entropy_ood"] = float(entropy[len(X_test) :].mean())
    return scores, arrays


def score_regressor(pipe, X_test, y_test, y_mean, y_scale, gap=False):
    """Scores in y's units; on the gap set also the predictive on a grid."""
    mean_s, std_s = pipe.predict(X_test, return_std=True)
    mean = np.ravel(mean_s) * y_scale + y_mean
    std = np.ravel(std_s) * y_scale
    scores = {
        "rmse": float(np.sqrt(np.mean((y_test - mean) ** 2))),
        "nll": gaussian_nll(y_test, mean, std),
        "coverage95": interval_coverage(y_test, mean, std, level=0.95),
        "mean_std": float(std.mean()),
    }
    arrays = {}
    if gap:
        grid_mean, grid_std = pipe.predict(GAP_GRID, return_std=True)
        grid_mean = np.ravel(grid_mean) * y_scale + y_mean
        grid_std = np.ravel(grid_std) * y_scale
        scores["gap_sd_ratio"] = gap_ratio(GAP_GRID[:, 0], grid_std)
        arrays = {"grid_mean": grid_mean, "grid_std": grid_std}
    return scores, arrays


def gap_ratio(x, std) -> float:
    """Mean predictive sd in the gap (|x| < 0.8) over the mean sd on the clusters."""
    in_gap = np.abs(x) < 0.8
    on_clusters = (np.abs(x) >= 1) & (np.abs(x) <= 3)
    return float(std[in_gap].mean() / std[on_clusters].mean())


# --- timing-only runs for models too slow at their defaults --------------------------------------


def time_hmc(name, X_train, y_train, seed):
    """Fit HMC / split HMC with four transitions; project the fit at the defaults."""
    model = make_model("classification", name, seed)
    defaults = model.get_params()
    model.set_params(**TIMING_PARAMS["hmc"])
    pipe = make_pipeline(StandardScaler(), model)
    start = time.perf_counter()
    pipe.fit(X_train, y_train)
    seconds = time.perf_counter() - start
    timing = model.get_params()

    def gradients(params):  # MAP start, then (steps + 1) gradients per transition at most
        transitions = params[P["warmup"]] + params[P["draws"]]
        init = params[P["init_steps"]]
        init = 500 if init == "auto" else init
        return init + transitions * (defaults[P["steps"]] + 1)

    per_gradient = seconds / gradients(timing)
    return {
        "skipped": "infeasible at its defaults on this set: timed, not fitted",
        "timed_fit_s": seconds,
        "timed_budget": {k: timing[k] for k in TIMING_PARAMS["hmc"]},
        "seconds_per_gradient": per_gradient,
        "projected_fit_s": per_gradient * gradients(defaults),
    }


def time_plannet(X_train, ys_train, seed):
    """One epoch of ``PlanNetRegressor()``; projected time of its default epochs."""
    model = make_model("regression", "plannet", seed)
    epochs = model.get_params()[P["epochs"]]
    model.set_params(**TIMING_PARAMS["plannet"])
    pipe = make_pipeline(StandardScaler(), model)
    start = time.perf_counter()
    pipe.fit(X_train, ys_train)
    seconds = time.perf_counter() - start
    return seconds, seconds * epochs


# --- the run ------------------------------------------------------------------------------------


def done_keys(path: Path) -> set:
    if not path.exists():
        return set()
    keys = set()
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            if "error" not in r:
                keys.add((r["dataset"], r["model"], r["seed"]))
    return keys


def _jsonable(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def run_cell(dataset, model_name, seed, arrays_dir: Path):
    """Fit and score one (data set, model, seed); return its record."""
    task, X_train, y_train, X_test, y_test, X_ood = load(dataset, seed)
    record = {
        "dataset": dataset,
        "task": task,
        "model": model_name,
        "seed": seed,
        "n_train": int(len(y_train)),
        "n_test": int(len(y_test)),
        "package": model_name in PACKAGE_MODELS,
        "torch_threads": torch.get_num_threads(),
    }
    if (task == "classification" and model_name in ("hmc", "split_hmc")
            and len(y_train) > HMC_MAX_ROWS):
        record.update(time_hmc(model_name, X_train, y_train, seed))
        return record

    y_mean, y_scale = 0.0, 1.0
    fit_y = y_train
    if task == "regression":
        fit_y, _, y_mean, y_scale = standardise(y_train, y_test)
        if model_name == "plannet":
            epoch_s, projected = time_plannet(X_train, fit_y, seed)
            record["plannet_epoch_s"] = epoch_s
            record["projected_fit_s"] = projected
            if projected > PLANNET_LIMIT_S:
                record["skipped"] = (
                    f"one epoch took {epoch_s:.1f} s: the default epochs project past "
                    f"{PLANNET_LIMIT_S:.0f} s"
                )
                return record

    pipe = make_pipeline(StandardScaler(), make_model(task, model_name, seed))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        pipe.fit(X_train, fit_y)
        record["fit_s"] = time.perf_counter() - start
        start = time.perf_counter()
        if task == "classification":
            labels = np.unique(y_train)
            scores, arrays = score_classifier(pipe, X_test, y_test, X_ood, labels)
        else:
            scores, arrays = score_regressor(
                pipe, X_test, y_test, y_mean, y_scale, gap=dataset == "gap1d"
            )
        record["predict_s"] = time.perf_counter() - start
    record.update(scores)
    record["warnings"] = sorted({str(w.message).split("\n")[0][:160] for w in caught})[:6]
    final = pipe[-1]
    for attr in ("acceptance_rate_", "noise_std_", "n_iter_"):
        value = getattr(final, attr, None)
        if isinstance(value, (float, int, np.floating, np.integer)):
            record[attr.rstrip("_")] = float(value)
    if dataset in ("digits", "gap1d"):
        arrays["y_test"] = y_test
        if dataset == "gap1d":
            arrays["x_test"] = X_test[:, 0]
            arrays["x_grid"] = GAP_GRID[:, 0]
        np.savez_compressed(arrays_dir / f"{dataset}_{model_name}_seed{seed}.npz", **arrays)
    return record


def run(args):
    torch.set_num_threads(1)
    out_path = Path(args.out)
    arrays_dir = out_path.parent / "arrays"
    arrays_dir.mkdir(parents=True, exist_ok=True)
    done = done_keys(out_path)
    for dataset in args.datasets:
        task = "classification" if dataset in CLASSIFICATION_SETS else "regression"
        allowed = (CLASSIFIERS if task == "classification" else REGRESSORS) + tuple(VARIANTS)
        names = [m for m in args.models if m in allowed]
        for seed in range(args.splits if dataset in UCI_DATASETS else args.seeds):
            for model_name in names:
                if (dataset, model_name, seed) in done:
                    continue
                if model_name == "laplace" and not laplace_available():
                    print(f"{dataset} seed {seed}: laplace-torch not importable, skipped")
                    continue
                print(f"{time.strftime('%H:%M:%S')} {dataset} seed {seed} {model_name} ...",
                      flush=True)
                try:
                    record = run_cell(dataset, model_name, seed, arrays_dir)
                except Exception as error:  # noqa: BLE001 - record the failure, go on
                    record = {"dataset": dataset, "task": task, "model": model_name,
                              "seed": seed, "error": f"{type(error).__name__}: {error}"[:300]}
                record["machine"] = f"{platform.machine()}, {os.cpu_count()} cores (shared)"
                record["torch"] = torch.__version__
                record["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                with out_path.open("a") as handle:
                    handle.write(json.dumps(_jsonable(record)) + "\n")
                keys = ("accuracy", "rmse", "nll", "ece", "coverage95", "auroc_entropy",
                        "auroc_mi", "gap_sd_ratio", "fit_s", "projected_fit_s", "skipped",
                        "error")
                shown = {k: record[k] for k in keys if record.get(k) is not None}
                print("   ", json.dumps(_jsonable(shown)), flush=True)


# --- report: tables and figures -----------------------------------------------------------------


def load_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _cell(values, digits=3):
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    mean = float(np.mean(values))
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    se = float(np.std(values, ddof=1) / np.sqrt(len(values)))
    return f"{mean:.{digits}f} ± {se:.{digits}f}"


CLASS_COLUMNS = (("accuracy", "accuracy", 3), ("nll", "NLL", 3), ("ece", "ECE", 3),
                 ("brier", "Brier", 3))
DIGITS_COLUMNS = (("auroc_entropy", "OOD AUROC (entropy)", 3),
                  ("auroc_mi", "OOD AUROC (MI)", 3))
REG_COLUMNS = (("rmse", "RMSE", 3), ("nll", "NLL", 3), ("coverage95", "95 % coverage", 3))


def table(records, dataset) -> str:
    """Markdown table of one data set: mean ± standard error over the seeds / splits."""
    rows = [r for r in records if r["dataset"] == dataset]
    if not rows:
        return ""
    task = rows[0]["task"]
    order = CLASSIFIERS if task == "classification" else REGRESSORS
    columns = list(CLASS_COLUMNS if task == "classification" else REG_COLUMNS)
    if dataset == "digits":
        columns += list(DIGITS_COLUMNS)
    if dataset == "gap1d":
        columns.append(("gap_sd_ratio", "sd gap / sd clusters", 2))
    columns.append(("fit_s", "fit s", 1))
    lines = ["| model | n | " + " | ".join(c[1] for c in columns) + " |",
             "| --- | --- |" + " --- |" * len(columns)]
    for name in order:
        mine = [r for r in rows if r["model"] == name]
        if not mine:
            continue
        good = [r for r in mine if "skipped" not in r and "error" not in r]
        skipped = [r for r in mine if "skipped" in r]
        errors = [r for r in mine if "error" in r]
        label = LABELS[name] + (" †" if name in PACKAGE_MODELS else "")
        blank = " |" * (len(columns) - 1)
        if good:
            cells = [_cell([r.get(key) for r in good], digits) for key, _, digits in columns]
            lines.append(f"| {label} | {len(good)} | " + " | ".join(cells) + " |")
        elif skipped:
            r = skipped[0]
            projected = r.get("projected_fit_s", 0.0)
            note = (f"skipped: projected fit {projected / 3600:.1f} h" if projected > 3600
                    else f"skipped: projected fit {projected:.0f} s")
            if "plannet_epoch_s" in r:
                note += f" (one epoch: {r['plannet_epoch_s']:.1f} s)"
            elif "timed_fit_s" in r:
                note += f" (4 transitions + 1 MAP step timed: {r['timed_fit_s']:.1f} s)"
            lines.append(f"| {label} | 0 | {note} |{blank}")
        elif errors:
            lines.append(f"| {label} | 0 | error: {errors[0]['error'][:100]} |{blank}")
    return "\n".join(lines)


def figures(path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sklearn_bnn.plotting import plot_reliability_diagram

    arrays = path.parent / "arrays"
    STATIC.mkdir(parents=True, exist_ok=True)
    digits = [(m, arrays / f"digits_{m}_seed0.npz") for m in CLASSIFIERS]
    digits = [(m, f) for m, f in digits if f.exists()]
    if digits:
        n = len(digits)
        cols = min(n, 5)
        rows = math.ceil(n / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.4 * rows), squeeze=False)
        for ax, (m, f) in zip(axes.ravel(), digits, strict=False):
            data = np.load(f)
            plot_reliability_diagram(data["y_test"], data["proba"], n_bins=N_BINS, ax=ax)
            ax.set_title(LABELS[m], fontsize=9)
            ax.legend(fontsize=7, loc="upper left")
            ax.set_xlabel("confidence", fontsize=8)
            ax.set_ylabel("accuracy", fontsize=8)
        for ax in axes.ravel()[n:]:
            ax.axis("off")
        fig.suptitle("Digits 0-6 (seed 0): reliability, 15 bins")
        fig.tight_layout()
        fig.savefig(STATIC / "panel_digits_reliability.png", dpi=100)
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(6.5, 4.3))
        for m, f in digits:
            data = np.load(f)
            proba, y = data["proba"], data["y_test"]
            correct = np.unique(y)[proba.argmax(axis=1)] == y
            order = np.argsort(predictive_entropy(proba), kind="stable")  # most certain first
            kept = np.arange(1, len(y) + 1)
            accuracy = np.cumsum(correct[order]) / kept
            style = "-" if m in PACKAGE_MODELS else "--"
            ax.plot(100 * (1 - kept / len(y)), accuracy, style, label=LABELS[m])
        ax.set(xlabel="% of test points refused (highest predictive entropy first)",
               ylabel="accuracy on the points kept", xlim=(0, 30),
               title="Digits 0-6 (seed 0): risk-coverage")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(STATIC / "panel_digits_risk_coverage.png", dpi=100)
        plt.close(fig)

    gap = [(m, arrays / f"gap1d_{m}_seed0.npz") for m in ("hmc", "mc_dropout", "ensemble5")]
    gap = [(m, f) for m, f in gap if f.exists()]
    if gap:
        fig, axes = plt.subplots(1, len(gap), figsize=(4.2 * len(gap), 3.4), sharey=True,
                                 squeeze=False)
        for ax, (m, f) in zip(axes.ravel(), gap, strict=False):
            data = np.load(f)
            x, mu, sd = data["x_grid"], data["grid_mean"], data["grid_std"]
            ax.axvspan(-0.8, 0.8, color="orange", alpha=0.12, label="gap, |x| < 0.8")
            ax.fill_between(x, mu - 2 * sd, mu + 2 * sd, alpha=0.3, label="mean ± 2 sd")
            ax.plot(x, mu, label="predictive mean")
            ax.plot(x, np.sin(x), ":", color="gray", label="sin(x)")
            ax.scatter(data["x_test"], data["y_test"], s=3, color="k", label="test points")
            ax.set_title(f"{LABELS[m]}: sd ratio {gap_ratio(x, sd):.2f}", fontsize=9)
            ax.set_ylim(-3, 3)
            ax.set_xlabel("x")
        axes.ravel()[0].legend(fontsize=7, loc="lower left")
        fig.tight_layout()
        fig.savefig(STATIC / "panel_gap1d.png", dpi=100)
        plt.close(fig)


def fill_doc(doc: Path, records) -> None:
    """Replace each block ``<!-- panel:NAME -->...<!-- /panel:NAME -->`` of ``doc`` with the
    current table of data set NAME."""
    text = doc.read_text(encoding="utf-8")
    for dataset in CLASSIFICATION_SETS + REGRESSION_SETS:
        start, end = f"<!-- panel:{dataset} -->", f"<!-- /panel:{dataset} -->"
        if start in text and end in text:
            head, rest = text.split(start, 1)
            _, tail = rest.split(end, 1)
            text = f"{head}{start}\n{table(records, dataset)}\n{end}{tail}"
    doc.write_text(text, encoding="utf-8")


def report(args):
    path = Path(args.out)
    records = load_records(path)
    for dataset in CLASSIFICATION_SETS + REGRESSION_SETS:
        text = table(records, dataset)
        if text:
            print(f"\n### {dataset}\n\n{text}")
    if args.doc:
        fill_doc(Path(args.doc), records)
    if not args.no_figures:
        figures(path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+",
                        default=list(CLASSIFICATION_SETS + REGRESSION_SETS),
                        choices=CLASSIFICATION_SETS + REGRESSION_SETS)
    parser.add_argument("--models", nargs="+", default=sorted(set(CLASSIFIERS + REGRESSORS)))
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..k-1")
    parser.add_argument("--splits", type=int, default=5,
                        help="UCI sets: the standard splits 0..k-1")
    parser.add_argument("--quick", action="store_true",
                        help="one seed; digits, breast cancer and the gap set; defaults unchanged")
    parser.add_argument("--out", default=str(OUT / "panel.jsonl"))
    parser.add_argument("--report", action="store_true", help="tables and figures from --out")
    parser.add_argument("--no-figures", action="store_true")
    parser.add_argument("--doc", help="with --report: refill the tables of this markdown file")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds = args.splits = 1
        args.datasets = [d for d in args.datasets if d in QUICK_SETS] or list(QUICK_SETS)
    if args.report:
        report(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
