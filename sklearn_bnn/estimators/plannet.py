"""Full-covariance Bayesian regression with concrete dropout: plan-net (seeds/003, ch. 7).

Each network maps an input to a Gaussian ``N(mu, (L L^T)^-1)`` over the targets and is trained on
eq. 7.1 plus the concrete-dropout regularisers; prediction averages ``T`` Monte Carlo passes and an
ensemble of ``M`` networks is combined by the law of total variance (eq. 7.7-7.8).
"""

from __future__ import annotations

import copy
import numbers

import numpy as np
import torch
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data
from tqdm.auto import tqdm

from .._persistence import register
from .._utils import check_scalar_param, draw_seed, resolve_device, resolve_dtype, seeded_torch
from ..losses import cholesky_factor, cholesky_gaussian_loss
from ..nets import ACTIVATIONS, PlanNet, check_hidden_layer_sizes

__all__ = ["PlanNetRegressor", "combine_gaussians"]

_ROWS_PER_FORWARD = 16384  # rows x passes evaluated in one forward call at prediction


def combine_gaussians(means, covs):
    """Moments of an equally weighted mixture of Gaussians (law of total variance).

    seeds/003 eq. 7.7-7.8: ``mu = mean_k mu_k`` and
    ``Sigma = mean_k (mu_k - mu)(mu_k - mu)^T + mean_k Sigma_k``.

    Parameters
    ----------
    means : Tensor or ndarray of shape (K, ..., D)
    covs : Tensor or ndarray of shape (K, ..., D, D)

    Returns
    -------
    mean : shape (..., D)
    cov : shape (..., D, D)

    Examples
    --------
    >>> m, c = combine_gaussians(np.array([[0.0], [2.0]]), np.array([[[1.0]], [[3.0]]]))
    >>> m, c
    (array([1.]), array([[3.]]))
    """
    mean = means.mean(0)
    dev = means - mean
    spread = (dev[..., :, None] * dev[..., None, :]).mean(0)
    return mean, spread + covs.mean(0)


def _precision_inverse(precision: torch.Tensor) -> torch.Tensor:
    """``precision^-1`` through its Cholesky factor (symmetric to rounding)."""
    return torch.cholesky_inverse(torch.linalg.cholesky(precision))


@register
class PlanNetRegressor(RegressorMixin, BaseEstimator):
    """Multi-output regression with a full predictive covariance per input: plan-net.

    An ensemble of ``n_estimators`` networks, each a stack of concrete-dropout layers
    (Gal, Hron & Kendall 2017) ending in a Gaussian head that outputs a mean ``mu`` and the
    Cholesky factor ``L`` of the precision ``L L^T`` (exp on its diagonal), trained with Adam on
    the loss of seeds/003 eq. 7.1 plus the concrete-dropout regularisers, with early stopping on a
    held-out fraction. Inputs and targets are standardised internally; every output is in the
    original units. Cobb et al. (2019) / seeds/003 ch. 7.

    Parameters
    ----------
    hidden_layer_sizes : sequence of int, default=(1024, 1024, 1024, 1024)
        Widths of the concrete-dropout hidden layers (four of 1024 in plan-net).
    activation : str, default="relu"
    covariance : {"full", "diagonal"}, default="full"
        ``"diagonal"`` trains the heteroscedastic variant (no correlations between targets).
    n_estimators : int, default=5
        Networks in the ensemble (eq. 7.7-7.8).
    n_mc_samples : int, default=30
        Monte Carlo dropout passes ``T`` per network at prediction.
    prediction : {"expectation", "sampling"}, default="expectation"
        ``"expectation"``: each network predicts ``N(E[mu], E[L L^T]^-1)`` over its ``T`` passes
        (eq. 7.4-7.5). ``"sampling"``: each pass is its own Gaussian and the network predicts
        their mixture (eq. 7.6; its moments for ``predict``, one pass per draw in
        :meth:`sample_y`).
    length_scale : float, default=1e-4
        Prior length-scale ``l`` of the weights: weight regulariser ``l^2 / N``; the dropout
        regulariser is ``2 / N`` (``N`` training points).
    temperature : float, default=0.1
        Concrete relaxation temperature.
    init_dropout : float, default=0.1
        Initial drop probability of every layer (then learned).
    learning_rate : float, default=1e-3
        Adam step size.
    batch_size : int, default=512
    max_iter : int, default=200
        Maximum number of epochs per network.
    early_stopping : bool, default=True
        Hold out ``validation_fraction`` of the data, stop when its loss has not improved by
        ``tol`` for ``n_iter_no_change`` epochs, and keep the best weights.
    validation_fraction : float, default=0.1
    n_iter_no_change : int, default=20
    tol : float, default=1e-4
    device : {"auto", "cpu", "cuda"} or torch.device, default="auto"
    dtype : {"float32", "float64"}, default="float32"
    verbose : int, default=0
        Show a progress bar per network.
    random_state : int, RandomState or None, default=None
        Seeds initialisation, shuffling, the validation split and the dropout masks; prediction
        is deterministic once fitted.

    Attributes
    ----------
    estimators_ : list of PlanNet
        The trained networks, on the CPU.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string column names.
    n_outputs_ : int
    n_iter_ : ndarray of shape (n_estimators,)
        Epochs run by each network.
    validation_loss_ : ndarray of shape (n_estimators,)
        Best held-out eq. 7.1 loss per point (standardised units; NaN without early stopping).
    dropout_rates_ : ndarray of shape (n_estimators, n_layers)
        Learned drop probability of every concrete-dropout layer, input side first.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); Y = X[:, :2] + 0.1 * rng.normal(size=(200, 2))
    >>> reg = PlanNetRegressor(hidden_layer_sizes=(32,), n_estimators=2, max_iter=20,
    ...                        random_state=0).fit(X, Y)
    >>> mean, cov = reg.predict(X[:4], return_cov=True)
    >>> mean.shape, cov.shape
    ((4, 2), (4, 2, 2))
    """

    def __init__(
        self,
        hidden_layer_sizes=(1024, 1024, 1024, 1024),
        activation="relu",
        covariance="full",
        n_estimators=5,
        n_mc_samples=30,
        prediction="expectation",
        length_scale=1e-4,
        temperature=0.1,
        init_dropout=0.1,
        learning_rate=1e-3,
        batch_size=512,
        max_iter=200,
        early_stopping=True,
        validation_fraction=0.1,
        n_iter_no_change=20,
        tol=1e-4,
        device="auto",
        dtype="float32",
        verbose=0,
        random_state=None,
    ):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.covariance = covariance
        self.n_estimators = n_estimators
        self.n_mc_samples = n_mc_samples
        self.prediction = prediction
        self.length_scale = length_scale
        self.temperature = temperature
        self.init_dropout = init_dropout
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.device = device
        self.dtype = dtype
        self.verbose = verbose
        self.random_state = random_state

    # ------------------------------------------------------------------ checks and set-up
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def _check_params(self) -> None:
        for name, choices in (
            ("covariance", ("full", "diagonal")),
            ("prediction", ("expectation", "sampling")),
            ("activation", tuple(sorted(ACTIVATIONS))),
        ):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {choices}, got {getattr(self, name)!r}.")
        check_hidden_layer_sizes(self.hidden_layer_sizes)
        for name in ("n_estimators", "n_mc_samples", "batch_size", "max_iter", "n_iter_no_change"):
            check_scalar_param(getattr(self, name), name, kind="int", low=1)
        check_scalar_param(self.length_scale, "length_scale", low=0)
        check_scalar_param(self.tol, "tol", low=0)
        for name in ("temperature", "learning_rate"):
            check_scalar_param(getattr(self, name), name, low=0, low_inclusive=False)
        for name in ("init_dropout", "validation_fraction"):
            check_scalar_param(
                getattr(self, name), name, low=0, high=1, low_inclusive=False, high_inclusive=False
            )
        if not isinstance(self.early_stopping, bool | np.bool_):
            raise ValueError(f"early_stopping must be True or False, got {self.early_stopping!r}.")
        if not isinstance(self.verbose, numbers.Integral):
            raise ValueError(f"verbose must be an integer or a bool, got {self.verbose!r}.")

    def _new_net(self) -> PlanNet:
        return PlanNet(
            self.n_features_in_,
            check_hidden_layer_sizes(self.hidden_layer_sizes),
            self.n_outputs_,
            activation=self.activation,
            diagonal=self.covariance == "diagonal",
            temperature=self.temperature,
            init_p=self.init_dropout,
        )

    # ------------------------------------------------------------------ fit
    def fit(self, X, y):
        """Train ``n_estimators`` networks on ``(X, y)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)

        Returns
        -------
        self
        """
        self._check_params()
        X, y = validate_data(
            self, X, y, multi_output=True, y_numeric=True, dtype=[np.float64, np.float32]
        )
        device, dtype = resolve_device(self.device), resolve_dtype(self.dtype)
        self._single_target = y.ndim == 1
        Y = y.reshape(len(y), -1)
        self.n_outputs_ = Y.shape[1]
        self._x_mean, self._x_scale = _moments(X)
        self._y_mean, self._y_scale = _moments(Y)
        Xs = torch.as_tensor((X - self._x_mean) / self._x_scale, dtype=dtype, device=device)
        Ys = torch.as_tensor((Y - self._y_mean) / self._y_scale, dtype=dtype, device=device)

        rng = check_random_state(self.random_state)
        train, val = self._split(len(X), rng)
        seeds = [draw_seed(rng) for _ in range(self.n_estimators)]
        self._mc_seeds = [draw_seed(rng) for _ in range(self.n_estimators)]
        self.estimators_, n_iter, val_loss = [], [], []
        for m, seed in enumerate(seeds):
            net, epochs, best = self._train_one(m, seed, Xs, Ys, train, val, device, dtype)
            self.estimators_.append(net.cpu())
            n_iter.append(epochs)
            val_loss.append(best)
        self.n_iter_ = np.array(n_iter)
        self.validation_loss_ = np.array(val_loss, dtype=float)
        self.dropout_rates_ = np.array([net.dropout_rates() for net in self.estimators_])
        return self

    def _split(self, n: int, rng) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not self.early_stopping:
            return torch.arange(n), None
        n_val = max(1, int(round(self.validation_fraction * n)))
        if n - n_val < 1:
            raise ValueError(
                f"early_stopping=True needs at least 2 samples to hold out a validation set; "
                f"got n_samples = {n}. Set early_stopping=False."
            )
        perm = torch.as_tensor(rng.permutation(n))
        return perm[n_val:], perm[:n_val]

    def _train_one(self, m, seed, Xs, Ys, train, val, device, dtype):
        """Adam on eq. 7.1 + regularisers for one network; returns (net, epochs, best val)."""
        with seeded_torch(seed):
            net = self._new_net()
        net.to(device=device, dtype=dtype)
        mask_gen = torch.Generator(device=device).manual_seed(seed + 1)
        order_gen = torch.Generator().manual_seed(seed + 2)
        optimizer = torch.optim.Adam(net.parameters(), lr=self.learning_rate)
        n_train = len(train)
        weight_reg, dropout_reg = self.length_scale**2 / n_train, 2.0 / n_train
        best, best_state, stall, epochs = np.inf, None, 0, 0
        bar = tqdm(
            range(self.max_iter),
            desc=f"plan-net {m + 1}/{self.n_estimators}",
            disable=not self.verbose,
            leave=False,
        )
        for _ in bar:
            epochs += 1
            total = torch.zeros((), device=device, dtype=dtype)
            for idx in train[torch.randperm(n_train, generator=order_gen)].split(self.batch_size):
                idx = idx.to(device)
                mean, log_diag, off = net(Xs[idx], mask_gen)
                loss = cholesky_gaussian_loss(Ys[idx], mean, log_diag, off)
                objective = loss + net.regularizer(weight_reg, dropout_reg)
                optimizer.zero_grad()
                objective.backward()
                optimizer.step()
                total += loss.detach() * len(idx)
            postfix = {"loss": f"{total.item() / n_train:.4g}"}
            if val is not None:
                current = self._held_out_loss(net, Xs[val.to(device)], Ys[val.to(device)], seed)
                postfix["val"] = f"{current:.4g}"
                if current < best - self.tol:
                    best, stall = current, 0
                    best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
                else:
                    stall += 1
            bar.set_postfix(postfix)
            if stall >= self.n_iter_no_change:
                break
        bar.close()
        if best_state is not None:
            net.load_state_dict(best_state)
        return net, epochs, best if val is not None else np.nan

    @staticmethod
    @torch.no_grad()
    def _held_out_loss(net, X, Y, seed) -> float:
        """Eq. 7.1 per point on held-out data, with the same dropout noise every epoch."""
        gen = torch.Generator(device=X.device).manual_seed(seed + 3)
        total = 0.0
        for xb, yb in zip(X.split(_ROWS_PER_FORWARD), Y.split(_ROWS_PER_FORWARD), strict=True):
            total += cholesky_gaussian_loss(yb, *net(xb, gen), reduction="sum").item()
        return total / len(X)

    # ------------------------------------------------------------------ prediction
    def _prepare(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        device = resolve_device(self.device)
        nets = [
            net if device.type == "cpu" else copy.deepcopy(net).to(device)
            for net in self.estimators_
        ]
        dtype = next(self.estimators_[0].parameters()).dtype
        Xs = torch.as_tensor((X - self._x_mean) / self._x_scale, dtype=dtype, device=device)
        return nets, Xs

    @torch.no_grad()
    def _passes(self, net, Xs, n_passes: int, seed: int):
        """Yield ``(rows, mean, L)`` of ``n_passes`` MC passes over row chunks of ``Xs``.

        One dropout mask per pass, shared by all rows (seeded by ``seed``, so every chunk sees
        the same masks and a row's prediction does not depend on the other rows).
        """
        rows = max(1, _ROWS_PER_FORWARD // n_passes)
        for start in range(0, len(Xs), rows):
            gen = torch.Generator(device=Xs.device).manual_seed(seed)
            xb = Xs[start : start + rows]
            mean, log_diag, off = net(xb.expand(n_passes, *xb.shape), gen, share_mask=True)
            L = cholesky_factor(log_diag, off).double()
            yield slice(start, start + len(xb)), mean.double(), L

    def _member_moments(self, X):
        """Per-network predictive mean and covariance, standardised units.

        Returns tensors of shape (n_estimators, n, D) and (n_estimators, n, D, D).
        """
        nets, Xs = self._prepare(X)
        n, d, T = len(Xs), self.n_outputs_, self.n_mc_samples
        means = torch.empty(len(nets), n, d, dtype=torch.float64, device=Xs.device)
        covs = torch.empty(len(nets), n, d, d, dtype=torch.float64, device=Xs.device)
        for m, (net, seed) in enumerate(zip(nets, self._mc_seeds, strict=True)):
            for rows, mu, L in self._passes(net, Xs, T, seed):
                precision = L @ L.transpose(-1, -2)
                if self.prediction == "expectation":  # eq. 7.4-7.5
                    moments = mu.mean(0), _precision_inverse(precision.mean(0))
                else:  # eq. 7.6: the mixture of the T pass Gaussians
                    moments = combine_gaussians(mu, _precision_inverse(precision))
                means[m, rows], covs[m, rows] = moments
        return means, covs

    def _to_original_units(self, mean, cov=None):
        """Undo the target standardisation: ndarrays ``mean`` and, if given, ``cov``."""
        scale = torch.as_tensor(self._y_scale, dtype=mean.dtype, device=mean.device)
        mean = (mean * scale + torch.as_tensor(self._y_mean, device=mean.device)).cpu().numpy()
        if cov is None:
            return mean
        return mean, (cov * scale[:, None] * scale[None, :]).cpu().numpy()

    def predict(self, X, return_std: bool = False, return_cov: bool = False):
        """Predictive mean, and optionally its standard deviation or covariance.

        The ensemble predictive is ``N(mu_ens, Sigma_ens)`` of eq. 7.7-7.8, built from each
        network's Gaussian (see ``prediction``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool
            Also return the marginal standard deviations.
        return_cov : bool
            Also return the full covariance between the targets, per input.

        Returns
        -------
        mean : ndarray of shape (n_samples,) or (n_samples, n_targets)
            1-D when ``y`` was 1-D at fit.
        std : ndarray, same shape as ``mean``
            Only with ``return_std``.
        cov : ndarray of shape (n_samples, n_targets, n_targets)
            Only with ``return_cov``.
        """
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        mean, cov = self._to_original_units(*combine_gaussians(*self._member_moments(X)))
        out_mean = mean[:, 0] if self._single_target else mean
        if return_cov:
            return out_mean, cov
        if return_std:
            std = np.sqrt(np.diagonal(cov, axis1=1, axis2=2))
            return out_mean, std[:, 0] if self._single_target else std
        return out_mean

    def sample_y(self, X, n_samples: int = 1, random_state=0):
        """Draw targets from the predictive distribution.

        ``prediction="expectation"``: from ``N(mu_ens, Sigma_ens)`` (eq. 7.5, 7.7-7.8).
        ``prediction="sampling"``: each draw from its own dropout pass of a network taken in
        turn (eq. 7.6).

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int
        random_state : int, RandomState or None, default=0

        Returns
        -------
        ndarray of shape (n_samples_X, n_samples) when ``y`` was 1-D, else
        (n_samples_X, n_targets, n_samples)
        """
        check_scalar_param(n_samples, "n_samples", kind="int", low=1)
        rng = check_random_state(random_state)
        noise_gen = torch.Generator().manual_seed(draw_seed(rng))
        if self.prediction == "expectation":
            mean, cov = combine_gaussians(*self._member_moments(X))
            eps = torch.randn(n_samples, *mean.shape, generator=noise_gen, dtype=torch.float64)
            chol = torch.linalg.cholesky(cov).cpu()
            draws = mean.cpu() + (chol @ eps[..., None])[..., 0]
        else:
            draws = self._sample_passes(X, n_samples, rng, noise_gen)
        draws = np.moveaxis(self._to_original_units(draws), 0, -1)  # (n, D, n_samples)
        return draws[:, 0] if self._single_target else draws

    def _sample_passes(self, X, n_samples, rng, noise_gen):
        """Eq. 7.6: draw k comes from one dropout pass of network k mod M."""
        nets, Xs = self._prepare(X)
        draws = torch.empty(n_samples, len(Xs), self.n_outputs_, dtype=torch.float64)
        for m, net in enumerate(nets):
            which = range(m, n_samples, len(nets))
            if not len(which):
                continue
            seed = draw_seed(rng)
            for rows, mu, L in self._passes(net, Xs, len(which), seed):
                eps = torch.randn(*mu.shape, 1, generator=noise_gen, dtype=torch.float64)
                # L^T a = eps gives a with covariance (L L^T)^-1
                a = torch.linalg.solve_triangular(L.transpose(-1, -2).cpu(), eps, upper=True)
                draws[list(which), rows] = mu.cpu() + a[..., 0]
        return draws

    # ------------------------------------------------------------------ persistence
    def _get_state(self) -> dict:
        state = {k: v for k, v in vars(self).items() if k.endswith("_") and k != "estimators_"}
        state["estimators_"] = [net.state_dict() for net in self.estimators_]
        for k in ("_single_target", "_x_mean", "_x_scale", "_y_mean", "_y_scale", "_mc_seeds"):
            state[k] = getattr(self, k)
        return state

    def _check_loaded_state(self, state: dict) -> None:
        """Types of the fitted attributes, and every network's weights against the network
        these parameters build (on the ``meta`` device: no size in the file allocates memory)."""
        from .. import _persistence as P

        self._check_params()
        m, n_in, n_out = self.n_estimators, state.get("n_features_in_"), state.get("n_outputs_")
        P.check_state(
            state,
            {
                "n_features_in_": P.is_int(1),
                "n_outputs_": P.is_int(1),
                "n_iter_": P.is_array(kinds="iu", shape=(m,)),
                "validation_loss_": P.is_array(kinds="f", shape=(m,)),
                "dropout_rates_": P.is_array(kinds="f", shape=(m, None)),
                "estimators_": P.list_of(P.dict_of(P.is_tensor(floating=True)), length=m),
                "_single_target": P.is_bool,
                "_x_mean": P.is_array(kinds="f", shape=(n_in,)),
                "_x_scale": P.is_array(kinds="f", shape=(n_in,)),
                "_y_mean": P.is_array(kinds="f", shape=(n_out,)),
                "_y_scale": P.is_array(kinds="f", shape=(n_out,)),
                "_mc_seeds": P.list_of(P.is_seed, length=m),
            },
            {"feature_names_in_": P.is_array(ndim=1, kinds="UO")},
        )
        P.check_feature_names(state)
        if state["_single_target"] and n_out != 1:
            raise ValueError(f"n_outputs_={n_out} for a single-target model.")
        self.n_features_in_, self.n_outputs_ = n_in, n_out  # read by _new_net
        P.check_depth(self.hidden_layer_sizes, len(state["estimators_"][0]), "estimators_[0]")
        expected = P.meta_module(self._new_net).state_dict()
        what = f"the plan-net of n_features_in_={n_in}, n_outputs_={n_out} and these parameters"
        for i, weights in enumerate(state["estimators_"]):
            P.check_named_shapes(f"estimators_[{i}]", weights, expected, what)

    def _set_state(self, state: dict) -> None:
        weights = state.pop("estimators_")
        for k, v in state.items():
            setattr(self, k, v)
        self.estimators_ = []
        for sd in weights:
            net = self._new_net().to(next(iter(sd.values())).dtype)
            net.load_state_dict(sd)
            self.estimators_.append(net)


def _moments(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations (1 where a column is constant)."""
    mean = a.mean(0)
    scale = a.std(0)
    scale[scale == 0] = 1.0
    return mean, scale
