"""Time per training epoch: the estimators' skorch path against a bare torch loop.

Both sides train the same network on the same data with Adam and the same minibatches size,
in the same process, one after the other (repeated, median taken):

- "bare loop": the hand-written loop the estimators ran before they moved to skorch (shuffle
  with ``randperm``, index the tensors, masks drawn from a local generator, weight decay summed
  in Python, ``zero_grad`` / ``backward`` / ``step``);
- "skorch": ``MCDropoutClassifier`` / ``MCDropoutRegressor`` / ``LossCalibratedBNN`` /
  ``PlanNetRegressor`` ``fit`` with ``max_iter`` epochs, timed as a whole (input validation,
  net construction and skorch's initialisation included, about 3 ms a fit), divided by the
  epochs run. The sine data set takes 1.5 ms an epoch, so it runs 4 times the epochs (200 at
  the default ``--epochs``, its default budget) to keep the per-fit cost from dominating.

The ratio skorch / bare is the figure reported in the docs (below 1: the skorch path is faster).
Times are CPU seconds of this process (``time.process_time``) on one thread, so that other
programs sharing the machine do not enter the comparison.

    python benchmarks/speed/skorch_epoch_speed.py            # ~1 min on one thread
    python benchmarks/speed/skorch_epoch_speed.py --epochs 40 --repeats 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sklearn.datasets import load_digits

from sklearn_bnn import LossCalibratedBNN, MCDropoutClassifier, MCDropoutRegressor, PlanNetRegressor
from sklearn_bnn.decision import bayes_decision
from sklearn_bnn.estimators.dropout import draw_masks, forward_with_masks
from sklearn_bnn.estimators.lcbnn import loss_calibrated_penalty, transformed_utility
from sklearn_bnn.losses import cholesky_gaussian_loss
from sklearn_bnn.nets import PlanNet, build_module


def bare_dropout_epochs(X, y, hidden, epochs, batch_size, classify):
    """The former hand-written MC-dropout loop, on float32 tensors; seconds per epoch."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    n_out = int(y.max()) + 1 if classify else 1
    net = build_module(None, X.shape[1], n_out, hidden_layer_sizes=hidden, dropout=0.1).eval()
    Xt = torch.tensor(X, dtype=torch.float32)
    yt = torch.as_tensor(y) if classify else torch.tensor(y, dtype=torch.float32)[:, None]
    log_tau = torch.zeros(1, requires_grad=True)
    params = list(net.parameters()) + ([] if classify else [log_tau])
    opt = torch.optim.Adam(params, lr=1e-3)
    decay = [(p, 1e-4) for p in net.parameters()]
    start = time.process_time()
    for _ in range(epochs):
        order = torch.randperm(len(Xt), generator=gen)
        total = 0.0
        for idx in order.split(batch_size):
            xb, yb = Xt[idx], yt[idx]
            out = forward_with_masks(net, xb, draw_masks(net, (len(xb),), gen, xb))
            if classify:
                loss = torch.nn.functional.cross_entropy(out, yb)
            else:
                loss = 0.5 * (log_tau.exp() * (yb - out).pow(2) - log_tau).sum(-1).mean()
            penalty = sum(c * p.pow(2).sum() for p, c in decay)
            opt.zero_grad()
            (loss + penalty).backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
    return (time.process_time() - start) / epochs


def bare_lcbnn_epochs(X, y, hidden, epochs, batch_size, n_decision=10, warmup=0.5):
    """The former hand-written loss-calibrated loop (Algorithm 1 after the warm-up)."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    n_out = int(y.max()) + 1
    utility = np.eye(n_out)
    u_star = transformed_utility(utility, 1e-4)
    net = build_module(None, X.shape[1], n_out, hidden_layer_sizes=hidden, dropout=0.1).eval()
    Xt, yt = torch.tensor(X, dtype=torch.float32), torch.as_tensor(y)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    decay = [(p, 1e-4) for p in net.parameters()]
    start = time.process_time()
    for epoch in range(epochs):
        order = torch.randperm(len(Xt), generator=gen)
        total = 0.0
        for idx in order.split(batch_size):
            xb, yb = Xt[idx], yt[idx]
            n = len(xb)
            if epoch >= round(warmup * epochs):
                with torch.no_grad():
                    masks = draw_masks(net, (n_decision, n), gen, xb)
                    probs = torch.softmax(forward_with_masks(net, xb, masks), -1).mean(0)
                decisions = bayes_decision(probs.numpy(), utility)
            out = forward_with_masks(net, xb, draw_masks(net, (n,), gen, xb))
            loss = torch.nn.functional.cross_entropy(out, yb, reduction="none")
            if epoch >= round(warmup * epochs):
                log_p = torch.log_softmax(out, -1)
                loss = loss + loss_calibrated_penalty(log_p, decisions, u_star)
            loss = loss.mean()
            penalty = sum(c * p.pow(2).sum() for p, c in decay)
            opt.zero_grad()
            (loss + penalty).backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
    return (time.process_time() - start) / epochs


def bare_plannet_epochs(X, Y, hidden, epochs, batch_size):
    """The former hand-written plan-net loop; seconds per epoch."""
    torch.manual_seed(0)
    net = PlanNet(X.shape[1], hidden, Y.shape[1])
    mask_gen, order_gen = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    Xt, Yt = torch.tensor(X, dtype=torch.float32), torch.tensor(Y, dtype=torch.float32)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    start = time.process_time()
    for _ in range(epochs):
        total = torch.zeros(())
        for idx in torch.randperm(len(Xt), generator=order_gen).split(batch_size):
            mean, log_diag, off = net(Xt[idx], mask_gen)
            loss = cholesky_gaussian_loss(Yt[idx], mean, log_diag, off)
            objective = loss + net.regularizer(1e-8 / len(Xt), 2.0 / len(Xt))
            opt.zero_grad()
            objective.backward()
            opt.step()
            total += loss.detach() * len(idx)
        total.item()
    return (time.process_time() - start) / epochs


def estimator_epochs(make, X, y, epochs):
    est = make(epochs)
    start = time.process_time()
    est.fit(X, y)
    seconds = time.process_time() - start
    runs = est.n_iter_ if np.isscalar(est.n_iter_) else int(np.sum(est.n_iter_))
    return seconds / runs


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    digits_X, digits_y = load_digits(return_X_y=True)
    digits_X = digits_X / 16.0
    rng = np.random.default_rng(0)
    sine_X = rng.uniform(-2, 2, size=(256, 1))
    sine_y = np.sin(2 * sine_X[:, 0]) + 0.05 * rng.normal(size=256)
    plan_X = rng.normal(size=(4000, 10))
    plan_Y = plan_X[:, :3] + 0.1 * rng.normal(size=(4000, 3))
    kw = dict(dropout=0.1, batch_size=128, random_state=0)

    cases = [
        (
            "MCDropoutClassifier, digits 1797 x 64, (100,)",
            lambda e: bare_dropout_epochs(digits_X, digits_y, (100,), e, 128, True),
            lambda e: MCDropoutClassifier(hidden_layer_sizes=(100,), max_iter=e, **kw),
            (digits_X, digits_y),
        ),
        (
            "MCDropoutRegressor, sine 256 x 1, (100,), 4 x the epochs",
            lambda e: bare_dropout_epochs(sine_X, sine_y, (100,), 4 * e, 128, False),
            lambda e: MCDropoutRegressor(hidden_layer_sizes=(100,), max_iter=4 * e, **kw),
            (sine_X, sine_y),
        ),
        (
            "LossCalibratedBNN (half warm-up, T = 10), digits, (100,)",
            lambda e: bare_lcbnn_epochs(digits_X, digits_y, (100,), e, 128),
            lambda e: LossCalibratedBNN(hidden_layer_sizes=(100,), max_iter=e, **kw),
            (digits_X, digits_y),
        ),
        (
            "PlanNetRegressor, 4000 x 10 -> 3, (128, 128)",
            lambda e: bare_plannet_epochs(plan_X, plan_Y, (128, 128), e, 512),
            lambda e: PlanNetRegressor(
                hidden_layer_sizes=(128, 128),
                n_estimators=1,
                max_iter=e,
                batch_size=512,
                early_stopping=False,
                random_state=0,
            ),
            (plan_X, plan_Y),
        ),
    ]
    print(f"torch threads {torch.get_num_threads()}, {args.epochs} epochs, {args.repeats} repeats")
    print("| case | bare loop CPU ms/epoch | skorch CPU ms/epoch | ratio skorch / bare |")
    print("| --- | --- | --- | --- |")
    for name, bare, make, data in cases:
        bare_t, skorch_t = [], []
        for r in range(args.repeats):  # interleaved, alternating which goes first
            if r % 2:
                skorch_t.append(estimator_epochs(make, *data, args.epochs))
            bare_t.append(bare(args.epochs))
            if not r % 2:
                skorch_t.append(estimator_epochs(make, *data, args.epochs))
        b, s = np.median(bare_t), np.median(skorch_t)
        print(f"| {name} | {1e3 * b:.2f} | {1e3 * s:.2f} | {s / b:.2f} |")


if __name__ == "__main__":
    main()
