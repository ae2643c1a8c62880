"""Loaders for the HELA WFC3 spectra (Márquez-Neila et al. 2018) shipped in ``data/``."""

from __future__ import annotations

from importlib import resources

import numpy as np
from sklearn.utils import Bunch

__all__ = ["load_exoplanet_spectra", "load_wasp12b"]

TARGET_NAMES = ["T", "log_X_H2O", "log_X_HCN", "log_X_NH3", "log_kappa_0"]

# Cobb 2019, Table 7.2: retrieved parameters of WASP-12b, (value, -1 sigma, +1 sigma)
PUBLISHED_WASP12B = {
    "Kreidberg et al. 2015": {"T": (1371, 343, 466), "log_X_H2O": (-2.7, 1.1, 1.0)},
    "nested sampling (Márquez-Neila et al. 2018)": {
        "T": (1105, 287, 345),
        "log_X_H2O": (-3.0, 1.9, 2.0),
        "log_X_HCN": (-8.5, 2.9, 3.8),
        "log_X_NH3": (-8.4, 2.9, 3.1),
        "log_kappa_0": (-2.8, 0.9, 0.9),
    },
    "ensemble of 5 plan-nets (Cobb 2019)": {
        "T": (1123, 301, 301),
        "log_X_H2O": (-2.8, 1.2, 1.2),
        "log_X_HCN": (-8.4, 3.0, 3.0),
        "log_X_NH3": (-9.5, 3.2, 3.2),
        "log_kappa_0": (-2.6, 0.8, 0.8),
    },
}


def _read():
    with resources.files(__package__).joinpath("data", "hela_wfc3.npz").open("rb") as f:
        with np.load(f) as data:
            return {k: data[k] for k in data.files}


def _descr() -> str:
    return resources.files(__package__).joinpath("data", "README.md").read_text(encoding="utf-8")


def load_exoplanet_spectra(*, return_X_y: bool = False, as_frame: bool = False):
    """Load 20,001 synthetic WFC3 transmission spectra with their atmospheric parameters.

    The HELA example set (Márquez-Neila et al. 2018, Nature Astronomy 2, 719-724; cite it when
    you use these data): 13 transit depths per spectrum (features) and 5 parameters (targets):
    temperature ``T`` in K, the log10 abundances of H2O, HCN and NH3, and the log10 cloud opacity.

    Parameters
    ----------
    return_X_y : bool, default=False
        Return ``(data, target)`` instead of a Bunch.
    as_frame : bool, default=False
        ``data`` and ``target`` as pandas DataFrames (requires pandas), ``frame`` both together.

    Returns
    -------
    Bunch with ``data`` (20001, 13) float32, ``target`` (20001, 5) float32, ``feature_names``,
    ``target_names``, ``wavelength`` (13,) in micrometres, ``frame`` and ``DESCR``;
    or ``(data, target)`` with ``return_X_y=True``.

    Examples
    --------
    >>> X, y = load_exoplanet_spectra(return_X_y=True)
    >>> X.shape, y.shape
    ((20001, 13), (20001, 5))
    """
    raw = _read()
    feature_names = [f"depth_{w:g}um" for w in raw["wavelength"]]
    data, target, frame = raw["spectra"], raw["parameters"], None
    if as_frame:
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("as_frame=True requires pandas.") from exc
        data = pd.DataFrame(data, columns=feature_names)
        target = pd.DataFrame(target, columns=TARGET_NAMES)
        frame = pd.concat([data, target], axis=1)
    if return_X_y:
        return data, target
    return Bunch(
        data=data,
        target=target,
        frame=frame,
        feature_names=feature_names,
        target_names=list(TARGET_NAMES),
        wavelength=raw["wavelength"],
        DESCR=_descr(),
    )


def load_wasp12b():
    """The observed WFC3 transmission spectrum of WASP-12b (Kreidberg et al. 2015).

    As distributed with HELA (Márquez-Neila et al. 2018), in the same units and channels as
    :func:`load_exoplanet_spectra`.

    Returns
    -------
    Bunch with ``data`` (1, 13): the spectrum, ready for ``predict``; ``errors`` (13,): its
    one-sigma errors; ``wavelength`` (13,) in micrometres; ``feature_names``; ``published``: the
    retrieved parameters of Cobb 2019, Table 7.2 as ``{source: {parameter: (value, minus, plus)}}``.

    Examples
    --------
    >>> load_wasp12b().data.shape
    (1, 13)
    """
    raw = _read()
    return Bunch(
        data=raw["wasp12b"][None, :],
        errors=raw["wasp12b_errors"],
        wavelength=raw["wavelength"],
        feature_names=[f"depth_{w:g}um" for w in raw["wavelength"]],
        published=PUBLISHED_WASP12B,
        DESCR=_descr(),
    )
