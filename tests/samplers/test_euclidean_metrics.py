"""Euclidean metric objects (DiagonalMetric, DenseMetric) and the shared kick / drift steps."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.base import clone

from sklearn_bnn.diagnostics import ess
from sklearn_bnn.samplers import (
    HMC,
    NUTS,
    DenseMetric,
    DiagonalMetric,
    State,
    as_metric,
    kinetic_energy,
    leapfrog,
    sample,
)
from sklearn_bnn.samplers.hamiltonian.constrained import ReflectingLeapfrog

DATA = Path(__file__).resolve().parents[1] / "data"


def _correlated_5d():
    idx = torch.arange(5, dtype=torch.float64)
    prec = torch.linalg.inv(0.6 ** (idx[:, None] - idx[None]).abs())
    return lambda x: -0.5 * x @ prec @ x


# Reference draws (tests/data/reference_draws.pt, written by tests/data/write_reference_draws.py).
# Portable by construction: a fixed step size, or warmups of 10-30 transitions. A long
# dual-averaging warmup amplifies the last-bit differences between CPUs (another BLAS or vector
# kernel) into draws that differ by 1e-7 and more, and can flip an accept decision; over these
# short runs the draws of one machine and of another instruction set (measured with
# ATEN_CPU_CAPABILITY=default, MKL_ENABLE_INSTRUCTIONS=SSE4_2) differ by at most 4e-10, while a
# changed formula or seeding moves them by about the step size.
REFERENCE_CASES = {
    "hmc": (HMC(n_steps=8, step_size=0.4), dict(n_warmup=0, n_draws=20, random_state=0)),
    "nuts": (
        NUTS(max_tree_depth=5, step_size=0.4),
        dict(n_warmup=0, n_draws=20, random_state=0),
    ),
    "hmc_warmup": (HMC(n_steps=8), dict(n_warmup=10, n_draws=10, random_state=0)),
    "nuts_warmup": (NUTS(max_tree_depth=5), dict(n_warmup=10, n_draws=10, random_state=0)),
    "hmc_adapt": (
        HMC(n_steps=8, adapt_mass=True),
        dict(n_warmup=20, n_draws=5, random_state=1),
    ),
    "nuts_adapt": (
        NUTS(max_tree_depth=5, adapt_mass=True),
        dict(n_warmup=30, n_draws=5, random_state=1),
    ),
}


def reference_run(key):
    """The run whose draws tests/data/reference_draws.pt stores under ``key`` (the warmup's
    settings on the sampler: adapt_mass=False, its default, unless the case says otherwise)."""
    sampler, kwargs = REFERENCE_CASES[key]
    return sample(
        _correlated_5d(), torch.zeros(5, dtype=torch.float64), clone(sampler), n_chains=2,
        **kwargs,
    )


@pytest.mark.parametrize("key", sorted(REFERENCE_CASES))
def test_reference_draws_unchanged(key):
    """HMC and NUTS with the default metric draw what the stored reference drew, to a
    tolerance that holds across CPUs (see REFERENCE_CASES)."""
    expected = torch.load(DATA / "reference_draws.pt", weights_only=True)[key]
    torch.testing.assert_close(reference_run(key).draws, expected, rtol=1e-6, atol=1e-8)


# -- the metric objects ------------------------------------------------------------------------
F64 = torch.float64


def _spd(D, seed, jitter=0.5):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(D, D, generator=g, dtype=F64)
    return a @ a.T + jitter * torch.eye(D, dtype=F64)


def test_dense_velocity_and_kinetic_energy_are_the_closed_forms():
    A = _spd(4, 0)
    p = torch.randn(3, 4, generator=torch.Generator().manual_seed(1), dtype=F64)
    metric = DenseMetric(A)
    torch.testing.assert_close(metric.velocity(p), (A @ p.T).T, rtol=1e-12, atol=1e-12)
    expected = 0.5 * torch.einsum("ci,ij,cj->c", p, A, p)
    torch.testing.assert_close(metric.kinetic_energy(p), expected, rtol=1e-12, atol=1e-12)
    # one matrix per chain
    per_chain = torch.stack([_spd(4, s) for s in range(3)])
    metric = DenseMetric(per_chain)
    expected_v = torch.stack([per_chain[c] @ p[c] for c in range(3)])
    torch.testing.assert_close(metric.velocity(p), expected_v, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        metric.kinetic_energy(p), 0.5 * (p * expected_v).sum(-1), rtol=1e-12, atol=1e-12
    )
    torch.testing.assert_close(metric.select(torch.tensor([2])).velocity(p[2:]), expected_v[2:])


def test_dense_momentum_has_covariance_the_mass_matrix():
    A = _spd(3, 2)  # the inverse mass
    M = torch.linalg.inv(A)
    n = 20_000
    p = DenseMetric(A).sample_momentum(
        (n, 3), torch.Generator().manual_seed(3), dtype=F64, device="cpu"
    )
    cov = p.T @ p / n  # mean zero by construction
    # standard error of a Gaussian covariance entry: sqrt((M_ii M_jj + M_ij^2) / n)
    se = ((M.diagonal()[:, None] * M.diagonal()[None] + M**2) / n).sqrt()
    assert ((cov - M).abs() < 4 * se).all(), (cov, M)
    assert (p.mean(0).abs() < 4 * (M.diagonal() / n).sqrt()).all()


def test_diagonal_metric_is_the_tensor_arithmetic():
    v = torch.tensor([0.5, 2.0, 3.0], dtype=F64)
    p = torch.randn(2, 3, generator=torch.Generator().manual_seed(0), dtype=F64)
    metric = DiagonalMetric(v)
    assert torch.equal(metric.velocity(p), v * p)
    assert torch.equal(metric.kinetic_energy(p), kinetic_energy(p, v))
    draw = metric.sample_momentum((2, 3), torch.Generator().manual_seed(5), dtype=F64, device="cpu")
    z = torch.randn((2, 3), generator=torch.Generator().manual_seed(5), dtype=F64)
    assert torch.equal(draw, z / v.sqrt())
    assert as_metric(metric) is metric
    # a (C, D) tensor with C == D is C diagonals, never a dense matrix
    square = torch.ones(3, 3, dtype=F64)
    assert isinstance(as_metric(square), DiagonalMetric)


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.ones(3, 4, dtype=F64), "square"),
        (torch.tensor([[1.0, 0.5], [0.0, 1.0]], dtype=F64), "symmetric"),
        (torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=F64), "positive definite"),
        (torch.ones(3, dtype=F64), "square"),
        (torch.tensor([[1.0, float("nan")], [float("nan"), 1.0]]), "finite"),
    ],
)
def test_bad_dense_matrix_is_refused_by_name(bad, message):
    with pytest.raises(ValueError, match=f"inv_mass.*{message}"):
        DenseMetric(bad)


def test_bad_diagonal_is_refused_by_name():
    with pytest.raises(ValueError, match="inv_mass must be positive"):
        DiagonalMetric(torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="metric must be None"):
        HMC(metric=torch.ones(3)).build(_Gaussian(torch.eye(3, dtype=F64)))


# -- shared steps with a dense metric --------------------------------------------------------------
class _Gaussian:
    """N(0, cov) as a target object, with the closed-form gradient (fast, exact)."""

    def __init__(self, cov):
        self.cov = cov
        self.precision = torch.linalg.inv(cov)
        self.dim = cov.shape[0]
        self.dtype, self.device = cov.dtype, cov.device

    def value_and_grad(self, theta):
        grad = -theta @ self.precision
        return 0.5 * (theta * grad).sum(-1), grad


def _energy(state, p, metric):
    return -state.log_prob + metric.kinetic_energy(p)


def test_leapfrog_with_a_dense_metric_is_reversible():
    target = _Gaussian(_spd(5, 4))
    metric = DenseMetric(_spd(5, 5))
    g = torch.Generator().manual_seed(6)
    q = torch.randn(3, 5, generator=g, dtype=F64)
    start = State(q, *target.value_and_grad(q))
    p0 = metric.sample_momentum((3, 5), g, dtype=F64, device="cpu")
    eps = torch.full((3,), 0.05, dtype=F64)
    end, p1, n_grad = leapfrog(target, start, p0, eps, 40, metric)
    assert n_grad == 40  # one gradient a step
    assert not torch.allclose(end.position, q)
    back, p2, _ = leapfrog(target, end, -p1, eps, 40, metric)
    torch.testing.assert_close(back.position, q, rtol=0, atol=1e-10)
    torch.testing.assert_close(-p2, p0, rtol=0, atol=1e-10)


def test_leapfrog_with_a_dense_metric_conserves_energy_to_second_order():
    target = _Gaussian(_spd(5, 7))
    metric = DenseMetric(_spd(5, 8))
    g = torch.Generator().manual_seed(9)
    q = torch.randn(1, 5, generator=g, dtype=F64)
    start = State(q, *target.value_and_grad(q))
    p0 = metric.sample_momentum((1, 5), g, dtype=F64, device="cpu")
    h0 = _energy(start, p0, metric)
    errors = []
    for n in (20, 40, 80):  # the same integration time, halving the step
        eps = torch.full((1,), 0.4 / n, dtype=F64)
        end, p1, _ = leapfrog(target, start, p0, eps, n, metric)
        errors.append(float((_energy(end, p1, metric) - h0).abs()))
    assert errors[0] > 1e-8  # the error is measurable, not rounding
    for a, b in zip(errors[:-1], errors[1:], strict=True):
        assert 3.0 < a / b < 5.0, errors  # O(eps^2): halving eps divides it by ~4


def test_reflecting_leapfrog_refuses_a_dense_metric():
    target = _Gaussian(torch.eye(2, dtype=F64))
    q = torch.zeros(1, 2, dtype=F64)
    integrator = ReflectingLeapfrog(torch.full((2,), -1.0, dtype=F64), torch.ones(2, dtype=F64))
    with pytest.raises(ValueError, match="diagonal metric"):
        integrator(
            target,
            State(q, *target.value_and_grad(q)),
            q,
            torch.ones(1, dtype=F64),
            1,
            DenseMetric(torch.eye(2, dtype=F64)),
        )


# -- sampling with a dense metric --------------------------------------------------------------
def _correlated_10d():
    """N(0, Sigma), D = 10, correlation 0.95 between every pair, scales 0.5 to 2."""
    scales = torch.linspace(0.5, 2.0, 10, dtype=F64)
    corr = torch.full((10, 10), 0.95, dtype=F64).fill_diagonal_(1.0)
    return scales[:, None] * corr * scales[None]


def _min_ess_per_gradient(result):
    draws = result.draws.numpy()
    min_ess = min(ess(draws[:, :, i]) for i in range(draws.shape[-1]))
    return min_ess / result.info["n_grad_evals"]


def _within_mc_error(draws, cov, n_se=4.0):
    """Every mean and variance within ``n_se`` Monte Carlo standard errors (ESS-based)."""
    x = draws.numpy()
    true_var = cov.diagonal().numpy()
    for i in range(x.shape[-1]):
        xi = x[:, :, i]
        mean_se = math.sqrt(xi.var() / ess(xi))
        assert abs(xi.mean()) < n_se * mean_se, (i, xi.mean(), mean_se)
        sq = xi**2  # the mean is known (0): E x^2 is the variance
        var_se = math.sqrt(sq.var() / ess(sq))
        assert abs(sq.mean() - true_var[i]) < n_se * var_se, (i, sq.mean(), true_var[i], var_se)


@pytest.mark.parametrize(
    "make",
    [lambda metric: HMC(trajectory_length=3.0, metric=metric), lambda metric: NUTS(metric=metric)],
    ids=["hmc", "nuts"],
)
def test_dense_metric_samples_a_correlated_gaussian_efficiently(make):
    cov = _correlated_10d()
    target = _Gaussian(cov)
    start = torch.zeros(10, dtype=F64)
    dense = sample(
        target,
        start,
        make(DenseMetric(cov)),
        n_warmup=300,
        n_draws=1000,
        n_chains=4,
        random_state=0,
    )
    _within_mc_error(dense.draws, cov)
    identity = sample(  # the identity metric, with the adapted diagonal mass
        target,
        start,
        make(None).set_params(adapt_mass=True),
        n_warmup=300,
        n_draws=500,
        n_chains=4,
        random_state=0,
    )
    # Measured (this seed, CPU): minimum ESS per gradient, dense metric against identity,
    # HMC 1.40 against 0.023 (about 60x), NUTS 0.62 against 0.0085 (about 70x): the dense
    # metric whitens the target, so the step size is no longer set by its narrowest direction.
    dense_rate, identity_rate = _min_ess_per_gradient(dense), _min_ess_per_gradient(identity)
    assert dense_rate > 10 * identity_rate, (dense_rate, identity_rate)


def test_diagonal_metric_gives_the_draws_of_its_tensor():
    from sklearn_bnn.samplers import run_chains

    cov = _correlated_10d()[:4, :4]
    target = _Gaussian(cov)
    per_chain = torch.linspace(0.5, 2.0, 12, dtype=F64).reshape(3, 4)  # (C, D): select per chain
    for inv_mass in (cov.diagonal(), per_chain):
        for sampler in (HMC(n_steps=20, step_jitter=0.0), NUTS()):
            with_metric = clone(sampler).set_params(metric=DiagonalMetric(inv_mass))
            runs = []
            for kernel, passed in (
                (sampler.build(target), inv_mass),
                (with_metric.build(target), None),
            ):
                state = kernel.init(torch.zeros(3, 4, dtype=F64))
                run = run_chains(
                    kernel,
                    state,
                    torch.Generator().manual_seed(0),
                    n_warmup=20,
                    n_draws=20,
                    inv_mass=passed,
                )
                runs.append(run)
            assert torch.equal(runs[0].draws, runs[1].draws), sampler
            assert torch.equal(runs[0].inv_mass, runs[1].inv_mass)


def test_fixed_metric_wins_over_mass_adaptation():
    cov = _correlated_10d()[:3, :3]
    sampler = NUTS(metric=DenseMetric(cov), adapt_mass=True)
    with pytest.warns(UserWarning, match="adapt_mass=True is ignored"):
        result = sample(
            _Gaussian(cov),
            torch.zeros(3, dtype=F64),
            sampler,
            n_warmup=30,
            n_draws=10,
            n_chains=2,
            random_state=0,
        )
    # the run reports the diagonal of the metric it used, not an adapted one
    np.testing.assert_array_equal(result.info["inv_mass"], cov.diagonal().numpy())
    # and a step's inv_mass is ignored when the kernel has a metric
    kernel = sampler.build(_Gaussian(cov))
    state = kernel.init(torch.zeros(2, 3, dtype=F64))
    a = kernel.step(state, torch.Generator().manual_seed(1), step_size=0.3)[0]
    b = kernel.step(
        state, torch.Generator().manual_seed(1), step_size=0.3, inv_mass=torch.full((3,), 9.0)
    )[0]
    assert torch.equal(a.position, b.position)


# -- scikit-learn parameters and files -----------------------------------------------------------
@pytest.mark.parametrize("sampler_type", [HMC, NUTS])
def test_clone_and_params_with_a_metric(sampler_type):
    cov = _correlated_10d()[:3, :3]
    sampler = sampler_type(metric=DenseMetric(cov))
    copy = clone(sampler)
    assert copy.metric is not sampler.metric  # a deep copy of the parameter
    assert torch.equal(copy.metric.inv_mass, cov)
    assert sampler.get_params()["metric"] is sampler.metric
    assert "DenseMetric" in repr(sampler)
    # a copy samples as the original does
    target = _Gaussian(cov)
    draws = [
        sample(
            target,
            torch.zeros(3, dtype=F64),
            s,
            n_warmup=20,
            n_draws=10,
            n_chains=2,
            random_state=0,
        ).draws
        for s in (sampler, copy)
    ]
    assert torch.equal(*draws)


@pytest.mark.parametrize(
    "metric",
    [
        DenseMetric(_correlated_10d()[:3, :3]),
        DenseMetric(torch.stack([_spd(3, s) for s in range(2)])),
        DiagonalMetric(torch.tensor([1.0, 2.0, 3.0], dtype=F64)),
    ],
    ids=["dense", "dense-per-chain", "diagonal"],
)
def test_sampler_with_a_metric_survives_a_file(tmp_path, metric):
    from sklearn_bnn._persistence import decode, encode

    path = tmp_path / "s.pt"
    torch.save(encode(NUTS(max_tree_depth=4, metric=metric)), path)
    back = decode(torch.load(path, weights_only=True))
    assert type(back.metric) is type(metric)
    assert torch.equal(back.metric.inv_mass, metric.inv_mass)
    assert back.max_tree_depth == 4


def test_a_tampered_metric_file_is_refused(tmp_path):
    from sklearn_bnn._persistence import decode, encode

    payload = encode(HMC(metric=DenseMetric(_correlated_10d()[:3, :3])))
    state = payload["params"]["__dict__"]["metric"]["state"]["__dict__"]
    not_pd = -torch.eye(3, dtype=F64)
    state["inv_mass"] = encode(not_pd)
    with pytest.raises(ValueError, match="positive definite"):
        decode(payload)


def test_per_chain_metric_needs_as_many_chains():
    per_chain = torch.stack([_spd(3, s) for s in range(2)])  # two chains
    with pytest.raises(ValueError, match="each of 2 chains, but 3 chains"):
        sample(
            _Gaussian(torch.eye(3, dtype=F64)),
            torch.zeros(3, dtype=F64),
            HMC(n_steps=2, metric=DenseMetric(per_chain)),
            n_warmup=5,
            n_draws=5,
            n_chains=3,
            random_state=0,
        )
    result = sample(
        _Gaussian(torch.eye(3, dtype=F64)),
        torch.zeros(3, dtype=F64),
        NUTS(max_tree_depth=4, metric=DenseMetric(per_chain)),
        n_warmup=20,
        n_draws=20,
        n_chains=2,
        random_state=0,
    )
    assert result.draws.shape == (2, 20, 3)
