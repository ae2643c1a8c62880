"""The Hamiltonian Monte Carlo family: HMC and its integrators, NUTS, constrained and bridged HMC,
Riemannian manifold HMC and semi-separable HMC."""
