"""Atmospheric retrieval of WASP-12b with plan-net (Cobb 2019, ch. 7).

Trains a small ``PlanNetRegressor`` ensemble on the HELA WFC3 spectra (Márquez-Neila et al. 2018,
Nature Astronomy 2, 719-724), retrieves the five atmospheric parameters of WASP-12b from its
observed spectrum, prints them beside the published retrievals (Cobb 2019, Table 7.2), and draws
the pairwise marginals of the predictive distribution (saved to ``exoplanet_retrieval.png`` when
matplotlib is installed). A heteroscedastic (diagonal) model is trained too, to show the T-H2O
correlation that only the full covariance of eq. 7.1 can express.

The networks here are small and briefly trained so that the script runs in a minute or two on a
CPU; plan-net itself uses 4 layers of 1024 units (the estimator's defaults).
"""

import numpy as np

from sklearn_bnn import PlanNetRegressor
from sklearn_bnn.datasets import load_exoplanet_spectra, load_wasp12b

spectra = load_exoplanet_spectra()
wasp = load_wasp12b()
names = spectra.target_names
small = dict(
    hidden_layer_sizes=(128, 128, 128),
    max_iter=40,
    n_iter_no_change=10,
    n_predict_draws=30,
    device="cpu",
    random_state=0,
)

model = PlanNetRegressor(n_estimators=2, **small).fit(spectra.data, spectra.target)
diagonal = PlanNetRegressor(n_estimators=1, covariance="diagonal", **small).fit(
    spectra.data, spectra.target
)

mean, cov = model.predict(wasp.data, return_cov=True)
std = np.sqrt(np.diag(cov[0]))
print("WASP-12b: retrieved mean +- std, beside Cobb 2019, Table 7.2")
print(f"{'':<44}" + "".join(f"{n:>20}" for n in names))
print(
    f"{'this run (2 small plan-nets)':<44}"
    + "".join(f"{f'{m:.1f} +- {s:.1f}':>20}" for m, s in zip(mean[0], std, strict=True))
)
for source, values in wasp.published.items():
    cells = [
        f"{values[n][0]:.1f} -{values[n][1]:.1f} +{values[n][2]:.1f}" if n in values else "-"
        for n in names
    ]
    print(f"{source:<44}" + "".join(f"{c:>20}" for c in cells))


def correlation(c, i, j):
    return c[0, i, j] / np.sqrt(c[0, i, i] * c[0, j, j])


corr = correlation(cov, 0, 1)
corr_diag = correlation(diagonal.predict(wasp.data, return_cov=True)[1], 0, 1)
print(f"\ncorrelation of T and log X_H2O: full covariance {corr:+.2f}, diagonal {corr_diag:+.2f}")

draws = model.sample_y(wasp.data, n_draws=4000, random_state=0)[0].T  # (4000, 5)
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("matplotlib is not installed: no corner plot.")
else:
    d = len(names)
    fig, axes = plt.subplots(d, d, figsize=(10, 10))
    for i in range(d):
        for j in range(d):
            ax = axes[i, j]
            if j > i:
                ax.axis("off")
            elif i == j:
                ax.hist(draws[:, i], bins=40, color="tab:blue", alpha=0.8)
            else:
                ax.hist2d(draws[:, j], draws[:, i], bins=40, cmap="Blues")
            if i == d - 1:
                ax.set_xlabel(names[j])
            if j == 0 and i > 0:
                ax.set_ylabel(names[i])
    fig.suptitle(f"WASP-12b retrieval (plan-net), corr(T, H2O) = {corr:+.2f}")
    fig.tight_layout()
    fig.savefig("exoplanet_retrieval.png", dpi=80)
    print("corner plot saved to exoplanet_retrieval.png")
