"""S3HMC: a regressor that learns its prior precisions and its noise (Cobb et al. 2019, App. C).

``prior_precision=HierarchicalPrior()`` puts Gamma hyperpriors on one precision per weight and
bias tensor and on the output noise precision; ``sampler="s3hmc"`` samples them jointly with
the weights, so neither ``prior_precision`` nor ``noise_precision`` needs guessing.
The budget is kept short for a demonstration: the noise precision mixes (R-hat 1.00), the
weight tensors' precisions do not yet (R-hat 1.7-2.3 at ``random_state=0``), as the printed
R-hats show; give ``n_warmup`` and ``n_draws`` more for figures to rely on.
Run: python examples/s3hmc_regression.py   (about a minute on a CPU)
"""

import numpy as np

from sklearn_bnn import HMCRegressor
from sklearn_bnn.priors import HierarchicalPrior
from sklearn_bnn.samplers import S3HMC

rng = np.random.default_rng(0)
X = rng.uniform(-3, 3, (80, 1))
y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=80)  # true noise sd 0.1

reg = HMCRegressor(
    hidden_layer_sizes=(50,),
    activation="tanh",
    prior_precision=HierarchicalPrior(alpha=2.0, beta=1.0),
    sampler=S3HMC(n_steps=20),
    n_draws=100,
    n_warmup=150,
    n_chains=2,
    random_state=0,
)
reg.fit(X, y)

noise_sd = np.sqrt((1.0 / reg.precisions_[..., -1].double().numpy()).mean()) * reg.y_scale_
print(f"learned noise sd: {noise_sd:.3f} (truth 0.100)")
for k, name in enumerate(reg.precision_names_):
    print(
        f"{name:22s} mean {float(reg.precisions_[..., k].double().mean()):8.3f}   "
        f"R-hat {reg.diagnostics_['rhat_precisions'][name]:.2f}"
    )
mean, std = reg.predict(np.linspace(-4, 4, 9)[:, None], return_std=True)
print("predictive mean:", np.round(mean, 2))
print("predictive sd:  ", np.round(std, 2))
