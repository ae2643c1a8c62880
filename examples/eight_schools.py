"""Sampling a model that is not a network: the eight schools, non-centred, with the public driver.

Rubin's (1981) eight schools: treatment effects y_j with known standard errors sigma_j,
y_j ~ N(theta_j, sigma_j), theta_j = mu + tau * eta_j, eta_j ~ N(0, 1), mu ~ N(0, 5),
tau ~ half-Cauchy(0, 5). The non-centred form (sampling eta rather than theta) removes the funnel
between tau and theta that defeats HMC in the centred form. tau is sampled as log tau, with the
Jacobian term.

``sklearn_bnn.samplers.sample`` takes the log density as a plain torch function of one flat
vector [mu, log tau, eta_1..eta_8] and runs four NUTS chains batched with ``torch.func.vmap``.

Run: python examples/eight_schools.py   (about 20 s on a CPU)
"""

import math

import numpy as np
import torch

from sklearn_bnn.samplers import NUTS, sample

y = torch.tensor([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], dtype=torch.float64)
sigma = torch.tensor([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0], dtype=torch.float64)


def log_density(params: torch.Tensor) -> torch.Tensor:
    """log p(mu, log tau, eta | y) up to a constant."""
    mu, log_tau, eta = params[0], params[1], params[2:]
    tau = log_tau.exp()
    theta = mu + tau * eta
    log_lik = -0.5 * (((y - theta) / sigma) ** 2).sum()
    log_prior_mu = -0.5 * (mu / 5.0) ** 2
    log_prior_tau = (
        -torch.log1p((tau / 5.0) ** 2) + log_tau
    )  # half-Cauchy, + log |d tau / d log tau|
    log_prior_eta = -0.5 * (eta**2).sum()
    return log_lik + log_prior_mu + log_prior_tau + log_prior_eta


def main() -> None:
    names = ["mu", "log_tau"] + [f"eta_{j}" for j in range(1, 9)]
    result = sample(
        log_density,
        torch.zeros(10, dtype=torch.float64),
        NUTS(max_tree_depth=8, adapt_mass=True),  # a diagonal mass adapted in warmup
        n_warmup=1000,
        n_draws=1000,
        n_chains=4,
        names=names,
        random_state=0,
    )
    summary = result.summary()
    draws = result.draws.reshape(-1, 10)
    tau = draws[:, 1].exp()
    theta = draws[:, :1] + tau[:, None] * draws[:, 2:]
    print(
        f"4 chains x 1000 draws, {result.info['n_divergent']} divergences after warmup, "
        f"acceptance {np.round(result.info['acceptance_rate'], 2)}"
    )
    print(f"{'':<8}{'mean':>8}{'sd':>8}{'ESS bulk':>10}{'R-hat':>8}")
    for k, name in enumerate(names[:2]):
        print(
            f"{name:<8}{summary['mean'][k]:>8.2f}{summary['sd'][k]:>8.2f}"
            f"{summary['ess_bulk'][k]:>10.0f}{summary['rhat'][k]:>8.3f}"
        )
    print(f"tau: mean {tau.mean():.2f}, median {tau.median():.2f}")
    for j in range(8):
        print(
            f"theta_{j + 1}: {theta[:, j].mean():6.2f} +- {theta[:, j].std():5.2f}"
            f"   (y = {y[j]:5.1f} +- {sigma[j]:4.1f})"
        )
    assert math.isfinite(float(summary["rhat"].max()))


if __name__ == "__main__":
    main()
