"""Loss-calibrated Bayesian neural network (seeds/003, section 4.2, eq. 4.10, Algorithm 1).

The loss-calibrated lower bound (eq. 4.9) adds to the MC-dropout ELBO the expected log
conditional gain ``E_q log G(H | X, w)``, where ``G(h | x, w) = sum_c u(h, c) p(y = c | x, w)``
(eq. 4.3). With one dropout draw per point this is the dropout loss plus the penalty of eq. 4.10::

    - sum_i log sum_c u*(h_i, c) p(y_i = c | x_i, w_i)

with the utility shifted to positive values, ``u* = u + M`` (eq. 4.11). Training alternates one
gradient step on the weights with resetting each point's decision to the Bayes action under
``T`` dropout passes, ``h_i = argmax_h (1/T) sum_t G(h | x_i, w_t)`` (Algorithm 1).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.utils.validation import check_is_fitted

from .._persistence import register
from .._utils import check_scalar_param, to_numpy
from ..decision import bayes_decision, check_utility, expected_utilities
from .dropout import _COMMON_PARAMS_DOC, MCDropoutClassifier, draw_masks, forward_with_masks

__all__ = ["LossCalibratedBNN", "loss_calibrated_penalty", "transformed_utility"]


def transformed_utility(utility, utility_bound: float) -> np.ndarray:
    """The positive utility ``u*`` of eq. 4.11: ``u - min(u) + utility_bound``.

    This is ``u + M`` with ``M = utility_bound - inf u``, so that the smallest entry of ``u*``
    is ``utility_bound``; for a utility whose smallest entry is 0 (Table 4.3), ``M`` is the
    bound itself. Shifting a utility does not change any Bayes action.

    Examples
    --------
    >>> transformed_utility([[1.0, 0.0], [0.3, 1.0]], 0.5)
    array([[1.5, 0.5],
           [0.8, 1.5]])
    """
    u = np.asarray(utility, dtype=np.float64)
    return u - u.min() + utility_bound


def loss_calibrated_penalty(log_prob: torch.Tensor, decisions, utility_star) -> torch.Tensor:
    """Utility-dependent penalty of eq. 4.10 for each point.

    Parameters
    ----------
    log_prob : Tensor of shape (n, n_classes)
        ``log p(y_i = c | x_i, w_i)`` for one dropout draw ``w_i`` per point.
    decisions : array-like of int, shape (n,)
        The decision ``h_i`` of each point (a column of the utility).
    utility_star : array-like of shape (n_classes, n_decisions)
        Positive utility ``u*[c, h]`` (true class ``c``, decision ``h``).

    Returns
    -------
    Tensor of shape (n,)
        ``-log sum_c u*[c, h_i] p(y_i = c | x_i, w_i)``, computed in log space.

    Examples
    --------
    >>> p = torch.tensor([[0.2, 0.3, 0.5]])
    >>> u = [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]
    >>> loss_calibrated_penalty(p.log(), [0], u)  # -log(0.2 * 1 + 0.3 * 0.5)
    tensor([1.0498])
    """
    u = torch.as_tensor(utility_star, dtype=log_prob.dtype, device=log_prob.device)
    h = torch.as_tensor(decisions, device=log_prob.device, dtype=torch.long)
    return -torch.logsumexp(log_prob + u.log().T[h], dim=-1)


@register
class LossCalibratedBNN(MCDropoutClassifier):
    __doc__ = f"""MC-dropout classifier trained on the loss-calibrated bound (seeds/003, ch. 4).

    The network learns, besides the data, the task's preferences: the utility-dependent penalty
    of eq. 4.10 rewards probability on the classes that give a high utility to the decision
    currently taken for each training point, which itself is reset before every gradient step
    to the Bayes action under ``n_decision_samples`` dropout passes (Algorithm 1). Decisions at
    prediction are Bayes actions under ``utility``.

    Parameters
    ----------
    utility : array-like of shape (n_classes, n_decisions) or None, default=None
        ``utility[c, h]``: the gain of decision ``h`` when the true class is ``c``; rows follow
        ``classes_`` (sorted labels). Columns are decisions; when the matrix is square, decision
        ``h`` means "predict ``classes_[h]``". ``None`` is the identity (utility = accuracy).
    utility_bound : float > 0, default=1e-4
        Smallest entry of the shifted utility ``u*`` used in the penalty (the thesis's
        ``M = 1e-4`` for a utility with minimum 0); see :func:`transformed_utility`. Larger
        bounds weaken the penalty (seeds/003, Figure 4.4).
    n_decision_samples : int, default=10
        Dropout passes ``T`` used to reset each point's decision during training.
    warmup_fraction : float in [0, 1), default=0.5
        Fraction of ``max_epochs`` trained on the dropout loss alone before the penalty is
        switched on, so that the alternation of Algorithm 1 starts from an MC-dropout fit
        rather than from random weights (whose near-uniform predictions make every point take
        the same decision, and the penalty then pulls all of them towards that one class).
        0 runs Algorithm 1 from the random initialisation. Early stopping starts counting after
        the warm-up.
    {_COMMON_PARAMS_DOC.strip()}
    class_weight : dict, "balanced" or None, default=None
        Class weights of the cross-entropy term, as in :class:`MCDropoutClassifier`.

    Attributes
    ----------
    utility_ : ndarray of shape (n_classes, n_decisions)
        The validated utility.
    classes_, class_weight_, n_features_in_, feature_names_in_, module_, loss_curve_,
    validation_loss_curve_, best_validation_loss_, n_iter_, mc_seed_
        As in :class:`MCDropoutClassifier`; losses include the penalty.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import load_iris
    >>> from sklearn_bnn import LossCalibratedBNN
    >>> X, y = load_iris(return_X_y=True)
    >>> U = np.eye(3); U[2] = [0.5, 0.5, 1.0]  # missing class 2 costs less than others
    >>> clf = LossCalibratedBNN(U, hidden_layer_sizes=(32,), max_epochs=100, lr=1e-2,
    ...                         random_state=0).fit(X, y)
    >>> clf.predict_expected_utility(X[:2]).shape
    (2, 3)
    >>> bool(clf.score(X, y) > 0.9)  # mean utility of the decisions
    True
    """

    def __init__(
        self,
        utility=None,
        utility_bound=1e-4,
        n_decision_samples=10,
        warmup_fraction=0.5,
        hidden_layer_sizes=(100,),
        activation="relu",
        dropout=0.1,
        prior_length_scale=1.0,
        weight_decay=None,
        n_mc_samples=100,
        max_epochs=200,
        batch_size=128,
        lr=1e-3,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=10,
        class_weight=None,
        device="cpu",
        dtype="float32",
        verbose=False,
        random_state=None,
    ):
        self.utility = utility
        self.utility_bound = utility_bound
        self.n_decision_samples = n_decision_samples
        self.warmup_fraction = warmup_fraction
        super().__init__(
            hidden_layer_sizes=hidden_layer_sizes,
            activation=activation,
            dropout=dropout,
            prior_length_scale=prior_length_scale,
            weight_decay=weight_decay,
            n_mc_samples=n_mc_samples,
            max_epochs=max_epochs,
            batch_size=batch_size,
            lr=lr,
            early_stopping=early_stopping,
            validation_fraction=validation_fraction,
            n_iter_no_change=n_iter_no_change,
            class_weight=class_weight,
            device=device,
            dtype=dtype,
            verbose=verbose,
            random_state=random_state,
        )

    def _check_params(self):
        super()._check_params()
        check_scalar_param(self.utility_bound, "utility_bound", low=0, low_inclusive=False)
        check_scalar_param(self.n_decision_samples, "n_decision_samples", kind="int", low=1)
        check_scalar_param(
            self.warmup_fraction, "warmup_fraction", low=0, high=1, high_inclusive=False
        )

    def _prepare_targets(self, y):
        encoded = super()._prepare_targets(y)
        n = len(self.classes_)
        self.utility_ = check_utility(np.eye(n) if self.utility is None else self.utility, n)
        return encoded

    def _extra_loaded_spec(self, state: dict) -> dict:
        def check(value, field):
            if not isinstance(value, np.ndarray):
                raise ValueError(f"{field} must be an array, got {type(value).__name__}.")
            check_utility(value, len(state.get("classes_", ())))

        return {"utility_": check}

    def _calibrated_loss(self, out, yb, decisions) -> torch.Tensor:
        """Per-point dropout loss plus the penalty of eq. 4.10."""
        u_star = transformed_utility(self.utility_, self.utility_bound)
        penalty = loss_calibrated_penalty(F.log_softmax(out, dim=-1), decisions, u_star)
        return self._nll(out, yb, None) + penalty

    def _n_warmup_epochs(self):
        return int(round(self.warmup_fraction * self.max_epochs))

    def _batch_loss(self, net, extra, xb, yb, generator, epoch):
        """One step of Algorithm 1: reset the decisions ``h*``, then the loss of eq. 4.10.

        During the warm-up epochs, the dropout loss alone.
        """
        if epoch < self._n_warmup_epochs():
            return super()._batch_loss(net, extra, xb, yb, generator, epoch)
        n = len(xb)
        with torch.no_grad():
            masks = draw_masks(net, (self.n_decision_samples, n), generator, xb)
            probs = torch.softmax(forward_with_masks(net, xb, masks), dim=-1)
            probs = probs.reshape(-1, n, probs.shape[-1]).mean(dim=0)
        decisions = bayes_decision(to_numpy(probs), self.utility_)
        out = forward_with_masks(net, xb, draw_masks(net, (n,), generator, xb))
        return self._calibrated_loss(out, yb, decisions).mean()

    def _validation_loss(self, net, extra, X, y, epoch):
        """The calibrated loss with dropout replaced by its expectation (decisions likewise)."""
        if epoch < self._n_warmup_epochs():
            return super()._validation_loss(net, extra, X, y, epoch)
        out = net(X)
        decisions = bayes_decision(to_numpy(torch.softmax(out, dim=-1)), self.utility_)
        return float(self._calibrated_loss(out, y, decisions).mean())

    def predict_expected_utility(self, X) -> np.ndarray:
        """Posterior expected utility of every decision, ``sum_c p(c | x) u[c, h]`` (eq. 4.3).

        Returns
        -------
        ndarray of shape (n_samples, n_decisions)
        """
        return expected_utilities(self.predict_proba(X), self.utility_)

    def predict(self, X) -> np.ndarray:
        """The Bayes action: the decision of highest expected utility.

        Returns the class label ``classes_[h]`` when the utility is square, otherwise the
        decision's column index ``h``.
        """
        h = np.argmax(self.predict_expected_utility(X), axis=1)
        square = self.utility_.shape[0] == self.utility_.shape[1]
        return self.classes_[h] if square else h

    def score(self, X, y, sample_weight=None) -> float:
        """Mean utility ``u[y_i, h_i]`` of the decisions on the true labels ``y``.

        With the default identity utility this is the accuracy.
        """
        check_is_fitted(self)
        y = np.asarray(y)
        idx = np.searchsorted(self.classes_, y)
        idx = np.clip(idx, 0, len(self.classes_) - 1)
        if not np.array_equal(self.classes_[idx], y):
            raise ValueError("y contains labels not seen at fit.")
        h = np.argmax(self.predict_expected_utility(X), axis=1)
        return float(np.average(self.utility_[idx, h], weights=sample_weight))
