"""Bridged HMC on a two-mode Gaussian mixture (the bridged-HMC thesis, §4.1).

One HMC chain rarely crosses between the modes of 0.5 N([0, 0], S) + 0.5 N([5, 5], S), so its
mean is off; bridged HMC splits the plane at y = 1, samples each half with reflecting walls and
weights the halves by bridge sampling. Run: ``python examples/bridged_mixture.py`` (~1 minute).
"""

import torch

from sklearn_bnn.samplers import HMC, BridgedHMC, sample

S_INV = torch.linalg.inv(torch.tensor([[1.0, 0.8], [0.8, 1.0]], dtype=torch.float64))
MODES = torch.tensor([[0.0, 0.0], [5.0, 5.0]], dtype=torch.float64)


def log_p(theta):
    d = theta - MODES
    return torch.logsumexp(-0.5 * ((d @ S_INV) * d).sum(-1), 0)


start = torch.zeros(2, dtype=torch.float64)
plain = sample(
    log_p,
    start,
    HMC(n_steps=10, adapt_mass=True),
    n_warmup=300,
    n_draws=2000,
    n_chains=1,
    random_state=0,
)
bridged = sample(
    log_p,
    start,
    BridgedHMC(split_coords=[1], split_points=1.0, n_steps=10, adapt_mass=True),
    n_warmup=300,
    n_draws=1000,
    n_chains=1,
    random_state=0,
)
print("true mean      [2.5, 2.5]")
print("HMC, 1 chain  ", plain.draws.reshape(-1, 2).mean(0).numpy().round(2))
print("bridged HMC   ", bridged.draws.reshape(-1, 2).mean(0).numpy().round(2))
info = bridged.info
for b in range(info["n_boxes"]):
    print(
        f"box {b}: y in [{info['box_lower'][b, 1]}, {info['box_upper'][b, 1]}]  "
        f"log mass {info['box_log_mass'][b]:.3f} +- {info['box_log_mass_se'][b]:.3f}  "
        f"weight {info['box_weight'][b]:.3f}  acceptance {info['box_acceptance_rate'][b]:.2f}"
    )
