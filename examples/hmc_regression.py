"""HMCRegressor on a 1-D problem: predictive mean and two-standard-deviation band.

Weight uncertainty grows away from the data; the band combines it with the observation noise.
The fit warns that R-hat is about 2: the two chains of this two-layer network settle at
different log densities within 300 transitions of 50 steps (the predictions' R-hat is
1.06-1.08). ``sampler=HMC(trajectory_length="auto")`` (ChEES, docs/hmc.md) mixed them (R-hat
1.00, no divergences, random_state=0) at about 7x the time.
Run: python examples/hmc_regression.py   (about a minute on a CPU; writes hmc_regression.png
when matplotlib is installed)
"""

import numpy as np

from sklearn_bnn import HMCRegressor

rng = np.random.default_rng(0)
x = np.concatenate([rng.uniform(-3, -1, 40), rng.uniform(1, 3, 40)])
y = np.sin(2 * x) + 0.1 * rng.normal(size=x.size)
X = x[:, None]

reg = HMCRegressor(
    hidden_layer_sizes=(50, 50),
    activation="tanh",
    noise_precision=100.0,
    n_draws=300,
    n_warmup=300,
    n_chains=2,
    verbose=True,
    random_state=0,
)
reg.fit(X, y)
print(reg.summary())

grid = np.linspace(-5, 5, 201)[:, None]
mean, std = reg.predict(grid, return_std=True)
for xv in (-4.0, -2.0, 0.0, 2.0, 4.0):
    i = np.argmin(np.abs(grid[:, 0] - xv))
    print(f"x = {xv:+.1f}: mean {mean[i]:+.3f}, std {std[i]:.3f}")

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    pass
else:
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.fill_between(grid[:, 0], mean - 2 * std, mean + 2 * std, alpha=0.3, label="mean +- 2 sd")
    ax.plot(grid[:, 0], mean, label="posterior predictive mean")
    ax.scatter(x, y, s=8, color="k", label="data")
    ax.legend()
    fig.savefig("hmc_regression.png", dpi=120, bbox_inches="tight")
    print("wrote hmc_regression.png")
