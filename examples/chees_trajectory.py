"""HMC's integration time adapted across chains (ChEES) beside the default 50 steps.

``trajectory_length="auto"`` climbs the ChEES criterion during warmup over the vectorized
chains (Hoffman, Radul & Sountsov 2021) and then keeps the time fixed. The script fits the same
1-D regression both ways and prints what each run cost and how well it mixed: the adapted time,
the mean steps per transition, the gradients, and the ESS and R-hat of the log density.
Run: python examples/chees_trajectory.py   (one to two minutes on a CPU)
"""

import warnings

import numpy as np

from sklearn_bnn import ConvergenceWarning, HMCRegressor
from sklearn_bnn.samplers import HMC

rng = np.random.default_rng(0)
x = rng.uniform(-3, 3, 100)
y = np.sin(x) + 0.1 * rng.normal(size=x.size)
X = x[:, None]

common = dict(hidden_layer_sizes=(20,), n_chains=4, n_warmup=300, n_draws=300, random_state=0)
print(
    f"{'trajectory':<12}{'T':>8}{'steps':>8}{'gradients':>11}{'ESS(lp)':>9}"
    f"{'per 1k grad':>13}{'R-hat':>7}"
)
for label, length in (("50 steps", None), ('"auto"', "auto")):
    reg = HMCRegressor(sampler=HMC(trajectory_length=length), **common)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # R-hat: shown in the table
        reg.fit(X, y)
    d = reg.diagnostics_
    stats = reg.samples_.stats
    steps = float(stats["n_steps"].double().mean()) if "n_steps" in stats else 50.0
    time = f"{float(stats['trajectory_time'][0, 0]):.3f}" if "trajectory_time" in stats else "-"
    gradients = int(np.sum(d["n_grad_evals"])) * common["n_chains"]
    ess = d["ess_bulk_log_prob"]
    print(
        f"{label:<12}{time:>8}{steps:>8.1f}{gradients:>11,}{ess:>9.1f}"
        f"{1e3 * ess / gradients:>13.2f}{d['rhat_log_prob']:>7.3f}"
    )
