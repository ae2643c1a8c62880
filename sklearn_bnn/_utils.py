"""Small helpers shared by every estimator: devices, dtypes, seeds, parameter checks."""

from __future__ import annotations

import contextlib
import functools
import numbers
from collections.abc import Iterator

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state

from ._config import switch

_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float": torch.float32,
    "double": torch.float64,
}


#: Forward multiply-adds per gradient (rows x parameters x chains) from which
#: ``device="auto"`` runs on CUDA rather than the CPU, for work that runs eagerly there (one
#: kernel launch per operation: NUTS, the split integrators, the stochastic-gradient samplers,
#: MC dropout's training). Below it a small network on a small data set runs faster on the CPU;
#: the measurements it comes from are in docs/hmc.md, "Choosing the device automatically".
AUTO_CUDA_WORK = 7.6e7

#: The threshold for work replayed from CUDA graphs (HMC's leapfrog trajectories, the SGLD and
#: SGHMC minibatch steps): CUDA is the faster from toy problems on; below it the transition's
#: fixed cost on the device dominates (docs/hmc.md, "Choosing the device
#: automatically").
AUTO_CUDA_WORK_REPLAYED = 5e4


def host_reads_are_free(tensor: torch.Tensor) -> bool:
    """Whether code may read ``tensor``'s values on the host to take a shorter path: on the
    CPU a read is free (unless the ``host_reads_on_cpu`` switch of
    :func:`sklearn_bnn.config_context` is off, as in the tests that count what a GPU would
    see); on a GPU it is a synchronisation."""
    return switch("host_reads_on_cpu") and tensor.device.type == "cpu"


def resolve_device(
    device: str | torch.device | None, work=None, threshold: float = AUTO_CUDA_WORK
) -> torch.device:
    """Turn ``"cpu"``, ``"cuda"``, ``"cuda:1"`` or ``"auto"`` into a :class:`torch.device`.

    ``"auto"`` (or None) is the CPU where CUDA is not available. Where it is, CUDA when the
    work per gradient is at least ``threshold`` multiply-adds, the CPU below it (a small
    network on a small data set runs faster there: each kernel launch costs more than its
    arithmetic); CUDA when ``work`` is not given.

    Parameters
    ----------
    device : str, torch.device or None
    work : float or callable, optional
        Forward multiply-adds per gradient (rows x parameters x chains), or a function
        returning it, called only when ``device`` is ``"auto"`` and CUDA is available.
    threshold : float, default=AUTO_CUDA_WORK
        The work from which CUDA is chosen: :data:`AUTO_CUDA_WORK` for work run eagerly,
        :data:`AUTO_CUDA_WORK_REPLAYED` for HMC trajectories replayed from CUDA graphs.
    """
    if device is None or device == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        if callable(work):
            work = work()
        if work is not None and work < threshold:
            return torch.device("cpu")
        return torch.device("cuda")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(
            f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {device!r}."
        ) from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} was requested but CUDA is not available on this machine; "
            "use device='cpu' or device='auto'."
        )
    return dev


def mlp_parameter_count(n_in: int, hidden_layer_sizes, n_out: int) -> int:
    """Weights and biases of a fully connected network with these layer widths."""
    widths = [int(n_in), *(int(h) for h in hidden_layer_sizes), int(n_out)]
    return sum((a + 1) * b for a, b in zip(widths[:-1], widths[1:], strict=False))


def predict_device(device) -> torch.device:
    """Device for prediction: the fit-time ``device``, or the CPU where CUDA is missing.

    A model fitted on a GPU and loaded on a machine without one predicts on the CPU. The
    estimators pass the device their fit resolved (``"auto"`` decided once, at fit time).
    """
    if device not in ("cpu", None) and not torch.cuda.is_available():
        return torch.device("cpu")
    return resolve_device(device)


def resolve_dtype(dtype: str | torch.dtype | type | None) -> torch.dtype:
    """Turn ``"float32"``/``"float64"`` (or the numpy/torch types) into a torch dtype."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype) and dtype in (torch.float32, torch.float64):
        return dtype
    if dtype in (np.float32, np.float64):
        return torch.float32 if dtype is np.float32 else torch.float64
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}.")


def draw_seed(random_state) -> int:
    """One seed in [0, 2**31) drawn from ``random_state`` (None, an int or a RandomState)."""
    return int(check_random_state(random_state).randint(0, 2**31 - 1))


@contextlib.contextmanager
def seeded_torch(seed: int) -> Iterator[None]:
    """Run a block (e.g. ``nn.Module`` construction) under a fixed torch seed.

    The global torch RNG state is restored afterwards, so user code sees no change.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _flushing_subnormals() -> bool:
    """Whether this thread already treats float subnormals as zero (torch has no getter)."""
    return bool((torch.full((1,), 1e-39, dtype=torch.float32) * 2.0)[0] == 0)


def flush_subnormals(fn):
    """Run ``fn`` with float subnormals flushed to zero on the CPU, then restore the setting.

    A confident softmax puts probabilities of about e^-90 into float32 gradients; arithmetic on
    such subnormal numbers is tens of times slower on x86 CPUs (docs/rmhmc.md, "Benchmarks",
    times a digits fit with and without the flush). Values below 1.2e-38 (float32) or 2.2e-308
    (float64) become 0, which changes no result this package reports. A caller that had already
    enabled it keeps it.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _flushing_subnormals():
            return fn(*args, **kwargs)
        if not torch.set_flush_denormal(True):  # not supported on this CPU
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_flush_denormal(False)

    return wrapper


def check_scalar_param(
    value,
    name: str,
    *,
    kind: str = "real",
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
    allow: tuple = (),
):
    """Validate one numeric hyperparameter; raise ``ValueError`` naming it and the allowed range.

    Parameters
    ----------
    value : object
        The value to check.
    name : str
        The parameter's name, used in the message.
    kind : {"real", "int"}
        Integers are accepted for ``"real"``; ``"int"`` refuses floats and booleans.
    low, high : float, optional
        Bounds of the allowed interval.
    allow : tuple
        Extra values accepted as they are (e.g. ``("auto",)``).
    """
    message = (
        f"{name} must be "
        f"{_describe(kind, low, high, low_inclusive, high_inclusive, allow)}, got {value!r}."
    )
    if isinstance(value, str) or value is None:
        if value in allow:
            return value
        raise ValueError(message)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(message)
    if kind == "int" and not isinstance(value, numbers.Integral):
        raise ValueError(message)
    ok = np.isfinite(value)
    if low is not None:
        ok = ok and (value >= low if low_inclusive else value > low)
    if high is not None:
        ok = ok and (value <= high if high_inclusive else value < high)
    if not ok:
        raise ValueError(message)
    return value


def _describe(kind, low, high, low_inclusive, high_inclusive, allow) -> str:
    what = "an integer" if kind == "int" else "a finite number"
    if low is not None and high is not None:
        lb = "[" if low_inclusive else "("
        hb = "]" if high_inclusive else ")"
        what += f" in {lb}{low}, {high}{hb}"
    elif low is not None:
        what += f" {'>=' if low_inclusive else '>'} {low}"
    elif high is not None:
        what += f" {'<=' if high_inclusive else '<'} {high}"
    if allow:
        what += " or one of " + ", ".join(repr(a) for a in allow)
    return what


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """Detach, move to the CPU and convert to a float64-or-native numpy array."""
    return tensor.detach().cpu().numpy()


class FitDeviceMixin:
    """An estimator's ``device_``: the device its fit ran on, ``device="auto"`` resolved."""

    @property
    def device_(self) -> str:
        """The device the fit ran on (``"cpu"``, ``"cuda"``, ...): what ``device="auto"``
        chose, decided once at the start of ``fit``; predictions run there (or on the CPU, for
        a model loaded where that device is missing)."""
        try:
            return self._fit_device
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__} has no device_: it is set by fit."
            ) from None


class SettingsObject(BaseEstimator):
    """A parameter's object with settings of its own (``MAPStart``, ``TemperatureCalibration``):
    scikit-learn parameters, a ``_check_params``, and saved by :func:`sklearn_bnn.save` as those
    parameters (its record; :func:`sklearn_bnn.load` checks them before building it)."""

    def _check_params(self) -> None:
        raise NotImplementedError

    def to_state(self) -> dict:
        return self.get_params(deep=False)

    @classmethod
    def _check_state(cls, state) -> None:
        names = set(cls._get_param_names())
        if type(state) is not dict or set(state) != names:
            raise ValueError(f"a {cls.__name__} record holds {sorted(names)} only.")
        cls(**state)._check_params()

    @classmethod
    def from_state(cls, state: dict):
        return cls(**state)
