"""Weights-only persistence: :func:`save` and :func:`load`.

``joblib.dump`` works on every estimator, but a pickle runs code when it is loaded. These two
functions write and read a file that holds only tensors, numbers, strings and containers, read
back with ``torch.load(weights_only=True)``. What comes out of ``torch.load`` is then walked by an
allow-list decoder (:func:`decode`) that can only produce:

- ``None``, bools, ints, floats, strings, and lists, tuples and string-keyed dicts of these;
- plain dense CPU tensors, and numpy arrays of booleans, numbers or strings;
- the torch dtypes of :data:`DTYPES` and devices named ``cpu``, ``cuda[:N]`` or ``mps[:N]``;
- instances of the classes registered with :func:`register` (this package's estimators and
  :class:`~sklearn_bnn.PosteriorSamples`), rebuilt from checked plain values, and
  :class:`sklearn.frozen.FrozenEstimator` around one of them;
- network factories registered with :func:`register_network`, by their registered name;
- sampler objects of the classes registered with
  :func:`~sklearn_bnn.samplers.register_sampler`, by that name, rebuilt from their parameters
  (plain values or other registered samplers);
- a :class:`sklearn.pipeline.Pipeline` (at the top of the file or as a step of one) whose steps
  are such estimators, ``"passthrough"``, or the scikit-learn steps of
  :data:`sklearn_bnn._sklearn_steps.SKLEARN_STEPS` (scalers, PCA), rebuilt from their
  parameters and a fitted state of plain arrays and numbers checked against the class.

Any other entry is a ``ValueError`` naming the field. A class or factory is never imported or
looked up by a name taken from the file: names are matched against in-process registries.

An estimator takes part by being decorated with :func:`register` and by implementing
``_get_state() -> dict``, ``_check_loaded_state(state)`` and ``_set_state(state)`` (the
:class:`WeightsOnlyMixin` defaults get and set every public fitted attribute). ``load`` calls
``_check_loaded_state`` on the freshly constructed estimator before ``_set_state``: it must
check the type of every entry and that every size agrees with the stored tensors, before any
network is built. The ``check_*`` helpers of :mod:`._state_checks` make that short.

The registries (:mod:`._registry`, which a class imports to register), the codec
(:mod:`._codec`) and the checks live in their own modules; their names stay importable from
here.
"""

from __future__ import annotations

import os

import torch

# The registry, the codec and the state checks live in their own modules (a class registers
# without importing the codec); their names stay importable from here.
from ._codec import (  # noqa: F401
    DTYPES,
    FORMAT,
    PIPELINE,
    Unsaveable,
    decode,
    encode,
    encode_estimator,
    encode_pipeline,
    rebuild,
    rebuild_pipeline,
)
from ._persistence_registry import (  # noqa: F401
    NETWORKS,
    REGISTRY,
    SAMPLERS,
    WeightsOnlyMixin,
    is_estimator_class,
    register,
    register_network,
    register_sampler_class,
)
from ._state_checks import (  # noqa: F401
    Check,
    check_classes,
    check_depth,
    check_feature_names,
    check_named_shapes,
    check_state,
    dict_of,
    is_any,
    is_array,
    is_bool,
    is_fitted_estimator,
    is_float,
    is_instance,
    is_int,
    is_seed,
    is_tensor,
    list_of,
    meta_module,
    n_elements,
    optional,
)

__all__ = ["save", "load", "register", "register_network", "WeightsOnlyMixin"]


def save(estimator, path: str | os.PathLike) -> None:
    """Save a fitted estimator as weights and plain values only (no pickled code).

    Parameters
    ----------
    estimator : fitted sklearn_bnn estimator or Pipeline
        One of this package's estimators, :class:`~sklearn_bnn.BayesDecisionClassifier` /
        :class:`~sklearn_bnn.EnsembleReducer` around one of them, or a
        :class:`~sklearn.pipeline.Pipeline` whose steps are these, ``"passthrough"``, nested
        pipelines, or the scikit-learn steps ``StandardScaler``, ``MinMaxScaler``,
        ``RobustScaler``, ``MaxAbsScaler`` and ``PCA``.
    path : str or path-like

    Raises
    ------
    TypeError
        If the estimator, or a fitted estimator or pipeline step inside it, holds something
        other than plain values (for example a wrapped scikit-learn model, or a
        ``FunctionTransformer`` step): use ``joblib.dump`` for those.

    Notes
    -----
    A parameter of the outer estimator, or of one of a pipeline's steps, that holds Python code
    (a custom ``module`` class, factory or instance that was not registered with
    :func:`register_network`) cannot be stored this way; it is recorded as missing and must be
    passed again to :func:`load` (``load(path, module=MyNet)``, or for a pipeline's step
    ``load(path, hmcclassifier__module=MyNet)``).

    Examples
    --------
    >>> from sklearn_bnn import HMCClassifier, save, load  # doctest: +SKIP
    >>> save(clf, "model.pt"); clf2 = load("model.pt")  # doctest: +SKIP
    """
    from sklearn.pipeline import Pipeline
    from sklearn.utils.validation import check_is_fitted

    cls = type(estimator)
    is_pipeline = cls is Pipeline
    if not is_pipeline and (REGISTRY.get(cls.__name__) is not cls or not is_estimator_class(cls)):
        raise TypeError(
            f"{type(estimator).__name__} does not support weights-only saving; use joblib.dump."
        )
    check_is_fitted(estimator)
    try:
        if is_pipeline:
            payload = encode_pipeline(estimator, "pipeline")
        else:
            payload = encode_estimator(estimator, "estimator", nested=False)
    except Unsaveable as exc:
        raise TypeError(f"cannot save weights-only: {exc} is not a plain value") from None
    torch.save(payload, path)


def _check_container(path) -> None:
    """The file must be the uncompressed zip archive ``torch.save`` writes.

    Checked before ``torch.load`` sees it: a pickle or joblib file never reaches an unpickler,
    and a compressed entry (which could expand to gigabytes from a small file) is refused.
    """
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, EOFError, ValueError) as exc:
        raise ValueError(
            f"{_name(path)!r} is not a sklearn_bnn weights-only file (it may be a pickle or "
            f"joblib file, which load never unpickles, or truncated): {exc}"
        ) from None
    finally:
        if hasattr(path, "seek"):
            path.seek(0)
    for entry in entries:
        if entry.compress_type != zipfile.ZIP_STORED or entry.file_size != entry.compress_size:
            raise ValueError(
                f"{_name(path)!r} is not a sklearn_bnn weights-only file: entry "
                f"{entry.filename!r} is compressed (torch.save never compresses)."
            )


def _name(path) -> str:
    return os.fspath(path) if isinstance(path, str | os.PathLike) else f"<{type(path).__name__}>"


def load(path: str | os.PathLike, **params):
    """Load an estimator written by :func:`save`, without unpickling any code.

    The file is read with ``torch.load(weights_only=True)``; every value is then decoded through
    an allow-list (see the module docstring) and the fitted state is checked against the
    estimator class (types of every attribute; sizes against the stored tensors) before any
    network is built. A file that is not such a file, is truncated or edited, or names anything
    outside the allow-list raises ``ValueError``.

    Parameters
    ----------
    path : str or path-like
    **params
        Parameters to set on the rebuilt estimator; required for any parameter that held code
        at save time (for example ``module=MyNet``; ``<step>__module=MyNet`` for a step of a
        pipeline). These are trusted: they come from your code.

    Returns
    -------
    estimator or Pipeline
        Fitted, on the CPU, giving the same predictions as the saved one.

    Raises
    ------
    ValueError
        If the file is not a valid weights-only file of a registered estimator.
    """
    _check_container(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as exc:  # torch raises several types for a file it cannot read safely
        raise ValueError(
            f"{_name(path)!r} is not a sklearn_bnn weights-only file (it may be a pickle or "
            f"joblib file, which load never unpickles, or truncated): {str(exc)[:200]}"
        ) from None
    if type(payload) is not dict or payload.get("format") != FORMAT:
        raise ValueError(f"{_name(path)!r} is not a sklearn_bnn weights-only file.")
    try:
        if payload.get("class") == PIPELINE:
            return rebuild_pipeline(payload, params, _name(path))
        return rebuild(payload, params, _name(path))
    except ValueError:
        raise
    except Exception as exc:  # whatever else a malformed file trips over is still a bad file
        raise ValueError(
            f"{_name(path)}: invalid weights-only file ({type(exc).__name__}: {exc})"
        ) from exc
