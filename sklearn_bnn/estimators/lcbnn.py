"""Loss-calibrated Bayesian neural network (Cobb 2019, section 4.2, eq. 4.10, Algorithm 1).

The loss-calibrated lower bound (eq. 4.9) adds to the MC-dropout ELBO the expected log
conditional gain ``E_q log G(H | X, w)``, where ``G(h | x, w) = sum_c u(h, c) p(y = c | x, w)``
(eq. 4.3). With one dropout draw per point this is the dropout loss plus the penalty of eq. 4.10::

    - sum_i log sum_c u*(h_i, c) p(y_i = c | x_i, w_i)

with the utility shifted to positive values, ``u* = u + M`` (eq. 4.11). Training alternates one
gradient step on the weights with resetting each point's decision to the Bayes action under
``T`` dropout passes, ``h_i = argmax_h (1/T) sum_t G(h | x_i, w_t)`` (Algorithm 1).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from .._persistence_registry import register
from .._utils import to_numpy
from ..decision import bayes_decision, check_utility, expected_utilities
from ._dropout_base import DROPOUT_PARAMS_DOC
from ._dropout_classifier import DropoutClassifierBase
from ._dropout_masks import draw_masks, forward_with_masks
from ._skorch import split_weights, weighted_mean
from ._trained import parameters

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
@parameters
class LossCalibratedBNN(DropoutClassifierBase):
    __doc__ = f"""MC-dropout classifier trained on the loss-calibrated bound (Cobb 2019, ch. 4).

    The network learns, besides the data, the task's preferences: the utility-dependent penalty
    of eq. 4.10 rewards probability on the classes that give a high utility to the decision
    currently taken for each training point, which itself is reset before every gradient step
    to the Bayes action under ``n_train_draws`` dropout passes (Algorithm 1). Decisions at
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
        bounds weaken the penalty (Cobb 2019, Figure 4.4).
    n_train_draws : int, default=10
        Dropout passes ``T`` used to reset each point's decision during training.
    warmup_fraction : float in [0, 1), default=0.5
        Fraction of ``max_iter`` trained on the dropout loss alone before the penalty is
        switched on, so that the alternation of Algorithm 1 starts from an MC-dropout fit
        rather than from random weights (whose near-uniform predictions make every point take
        the same decision, and the penalty then pulls all of them towards that one class).
        0 runs Algorithm 1 from the random initialisation. Early stopping starts counting after
        the warm-up.
    {DROPOUT_PARAMS_DOC.strip()}
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
    >>> clf = LossCalibratedBNN(utility=U, hidden_layer_sizes=(32,), max_iter=100,
    ...                         learning_rate_init=1e-2, random_state=0).fit(X, y)
    >>> clf.predict_expected_utility(X[:2]).shape
    (2, 3)
    >>> bool(clf.score(X, y) > 0.9)  # mean utility of the decisions
    True
    """

    utility: object = None
    utility_bound: float = 1e-4
    n_train_draws: int = 10
    warmup_fraction: float = 0.5
    dropout: float = 0.1  # MC dropout's, at a fixed rate (no "auto": see below)

    # no calibration: tempering the predictive would move the Bayes actions of a utility the
    # network was trained for
    _parameter_constraints = {
        **DropoutClassifierBase._parameter_constraints,
        # its penalty draws Bernoulli masks of a fixed rate (no learned rate)
        "dropout": [Interval(Real, 0, 1, closed="left")],
        "utility": ["array-like", None],
        "utility_bound": [Interval(Real, 0, None, closed="neither")],
        "n_train_draws": [Interval(Integral, 1, None, closed="left")],
        "warmup_fraction": [Interval(Real, 0, 1, closed="left")],
    }

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

    def _n_warmup_epochs(self, max_iter):
        return int(round(self.warmup_fraction * max_iter))

    def _loss(self, net, y_pred, y_true, X, training):
        """skorch loss hook: one step of Algorithm 1, or the dropout loss during the warm-up.

        In training, the decisions ``h*`` are first reset to the Bayes actions under
        ``n_train_draws`` dropout passes (one mask per pass and point), then the loss of
        eq. 4.10 is taken on ``y_pred``, the module's output with a fresh dropout mask per
        point. In validation (dropout replaced by its expectation) the decisions are the Bayes
        actions of the deterministic output.
        """
        if net.epoch < self._n_warmup_epochs(net.max_epochs):
            return super()._loss(net, y_pred, y_true, X, training)
        y_true, weights = split_weights(y_true)
        if training:
            module, n = net.module_, len(X)
            with torch.no_grad():
                masks = draw_masks(module, (self.n_train_draws, n), None, X)
                probs = torch.softmax(forward_with_masks(module, X, masks), dim=-1).mean(0)
        else:
            probs = torch.softmax(y_pred.detach(), dim=-1)
        decisions = bayes_decision(to_numpy(probs), self.utility_)
        return weighted_mean(self._calibrated_loss(y_pred, y_true, decisions), weights)

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

        :func:`sklearn_bnn.metrics.mean_utility` of the Bayes actions; with the default identity
        utility this is the accuracy.
        """
        from ..metrics import mean_utility

        check_is_fitted(self)
        h = np.argmax(self.predict_expected_utility(X), axis=1)
        return mean_utility(y, h, self.utility_, labels=self.classes_, sample_weight=sample_weight)
