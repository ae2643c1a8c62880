"""ConcreteDropout, CholeskyGaussianHead and PlanNet (seeds/003 §7.4; Gal, Hron & Kendall 2017)."""

import math

import pytest
import torch
from torch import nn

from sklearn_bnn.nets import CholeskyGaussianHead, ConcreteDropout, PlanNet


def _identity_dropout(n, p, temperature=0.1):
    layer = nn.Identity()
    return ConcreteDropout(layer, n, temperature=temperature, init_p=p)


def test_concrete_dropout_drops_a_fraction_p_and_keeps_the_mean(generator):
    cd = _identity_dropout(200_000, 0.3)
    with torch.no_grad():
        out = cd(torch.ones(1, 200_000), generator)[0]
    # the relaxed drop variable z exceeds 1/2 with probability exactly p; at temperature 0.1 it
    # is nearly binary, so the outputs sit close to 0 or to 1 / (1 - p)
    dropped = (out < 0.5 / 0.7).double().mean().item()
    assert dropped == pytest.approx(0.3, abs=0.01)
    assert out.mean().item() == pytest.approx(1.0, abs=0.02)
    near_binary = ((out < 0.1) | ((out - 1 / 0.7).abs() < 0.1)).double().mean().item()
    assert near_binary > 0.85


def test_concrete_dropout_p_gets_a_gradient(generator):
    cd = _identity_dropout(50, 0.2)
    cd(torch.randn(8, 50), generator).square().sum().backward()
    assert cd.p_logit.grad is not None and torch.isfinite(cd.p_logit.grad)
    assert cd.p.item() == pytest.approx(0.2)


def test_concrete_dropout_is_reproducible_and_shares_masks():
    cd = _identity_dropout(6, 0.5)
    x = torch.ones(3, 4, 6)
    a = cd(x, torch.Generator().manual_seed(1), share_mask=True)
    b = cd(x, torch.Generator().manual_seed(1), share_mask=True)
    assert torch.equal(a, b)
    # one mask per leading index, the same for every row
    assert torch.equal(a[:, :1].expand_as(a), a)
    assert not torch.equal(a[0], a[1])


def test_concrete_dropout_regularizer_by_hand():
    layer = nn.Linear(3, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0, 0.0], [0.0, -1.0, 1.0]]))
        layer.bias.copy_(torch.tensor([0.5, 0.0]))
    cd = ConcreteDropout(layer, 3, init_p=0.25)
    square = 1 + 4 + 1 + 1 + 0.25
    p = 0.25
    expected = 0.01 * square / (1 - p) + 0.2 * 3 * (p * math.log(p) + (1 - p) * math.log(1 - p))
    assert cd.regularizer(0.01, 0.2).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1])
def test_concrete_dropout_rejects_bad_init_p(bad):
    with pytest.raises(ValueError, match="init_p"):
        _identity_dropout(3, bad)


@pytest.mark.parametrize("d, diagonal, n_off", [(1, False, 0), (4, False, 6), (4, True, 0)])
def test_cholesky_head_shapes(d, diagonal, n_off):
    head = CholeskyGaussianHead(5, d, diagonal=diagonal)
    mean, log_diag, off = head(torch.zeros(7, 5))
    assert mean.shape == (7, d) and log_diag.shape == (7, d) and off.shape == (7, n_off)
    assert head.linear.out_features == 2 * d + n_off


def test_plan_net_layers_and_regularizer(generator):
    net = PlanNet(4, (8, 8), 3, init_p=0.1)
    concrete = [m for m in net.modules() if isinstance(m, ConcreteDropout)]
    assert len(concrete) == 3  # two hidden layers and the head
    assert net.dropout_rates() == pytest.approx([0.1] * 3)
    total = sum(m.regularizer(1e-3, 1e-2) for m in concrete)
    assert net.regularizer(1e-3, 1e-2).item() == pytest.approx(total.item())
    mean, log_diag, off = net(torch.zeros(5, 4), generator)
    assert (mean.shape, log_diag.shape, off.shape) == ((5, 3), (5, 3), (5, 3))
    # a leading axis of Monte Carlo passes
    mean, _, _ = net(torch.zeros(2, 5, 4), generator, share_mask=True)
    assert mean.shape == (2, 5, 3)
