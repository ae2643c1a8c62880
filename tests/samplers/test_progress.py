"""The sampling loop's progress bar: the acceptance it shows is the running mean of the phase."""

import re

import torch

from sklearn_bnn.samplers import run_chains
from sklearn_bnn.samplers._base import Info, Kernel, State
from sklearn_bnn.samplers.driver._loop import _Progress


class _Alternating(Kernel):
    """A kernel that stays put and reports acceptance probability 0, 1, 0, 1, ... in warmup
    and 1 in sampling: the last transition's figure flickers, the mean does not."""

    adapts_step_size = False
    step_size = 0.1

    def __init__(self, n_warmup):
        self.n_warmup, self.n = n_warmup, 0

    def init(self, position, generator=None, *, n_warmup=0):
        position = position.reshape(1, -1)
        return State(position, torch.zeros(1), torch.zeros_like(position))

    def step(self, state, generator, step_size=None, inv_mass=None):
        acc = float(self.n % 2) if self.n < self.n_warmup else 1.0
        self.n += 1
        info = Info(
            accept_prob=torch.tensor([acc]),
            accepted=torch.tensor([acc > 0.5]),
            energy_error=torch.zeros(1),
            divergent=torch.zeros(1, dtype=torch.bool),
            step_size=torch.full((1,), 0.1),
            n_grad=1,
        )
        return state, info


class _Bar:
    """A stand-in for tqdm that keeps every postfix."""

    disable = False

    def __init__(self):
        self.postfixes = []

    def update(self, n):
        pass

    def set_postfix_str(self, s, refresh=True):
        self.postfixes.append(s)

    def close(self):
        pass


def _acc(postfix):
    return float(re.search(r"acc=([0-9.]+)", postfix).group(1))


def test_acceptance_is_the_running_mean_of_the_phase():
    kernel, bar = _Alternating(n_warmup=11), _Bar()
    progress = _Progress(bar)
    state = kernel.init(torch.zeros(2))
    div = torch.zeros(1, dtype=torch.long)
    for phase, n in (("warmup", 11), ("sampling", 11)):
        for i in range(n):
            state, info = kernel.step(state, None)
            progress.show(i, phase, kernel, info, div)
    warm = [p for p in bar.postfixes if p.startswith("warmup")]
    draw = [p for p in bar.postfixes if p.startswith("sampling")]
    # warmup at i=10: 5 of the 11 transitions had probability 1, the last one 0
    assert [_acc(p) for p in warm] == [0.0, round(5 / 11, 2)]
    # sampling restarts the mean: 1.00, not (5 + 1) / 12 carried over from warmup
    assert [_acc(p) for p in draw] == [1.0, 1.0]


def test_the_bar_of_a_run_shows_the_mean(capsys):
    kernel = _Alternating(n_warmup=21)
    state = kernel.init(torch.zeros(2))
    run_chains(kernel, state, torch.Generator(), n_warmup=21, n_draws=0, verbose=True)
    err = capsys.readouterr().err
    shown = [float(a) for a in re.findall(r"acc=([0-9.]+)", err)]
    assert shown and shown[-1] == round(10 / 21, 2)  # the last transition's was 0.00
