"""The HELA WFC3 data set shipped in sklearn_bnn.datasets (Márquez-Neila et al. 2018)."""

from importlib import resources

import numpy as np
import pytest

from sklearn_bnn.datasets import load_exoplanet_spectra, load_wasp12b


def test_exoplanet_spectra_bunch():
    b = load_exoplanet_spectra()
    assert b.data.shape == (20001, 13) and b.target.shape == (20001, 5)
    assert b.data.dtype == b.target.dtype == np.float32
    assert b.target_names == ["T", "log_X_H2O", "log_X_HCN", "log_X_NH3", "log_kappa_0"]
    assert b.feature_names[0] == "depth_0.867um" and b.feature_names[-1] == "depth_1.6315um"
    np.testing.assert_allclose(b.wavelength[[0, -1]], [0.867, 1.6315])
    assert "Nature Astronomy 2, 719-724 (2018)" in b.DESCR
    # first row of HELA's testing.npy
    np.testing.assert_allclose(b.data[0, :2], [1.52140996, 1.53528974], rtol=1e-7)
    np.testing.assert_allclose(
        b.target[0], [1954.14733, -1.31941125, -0.419111213, -13.0, -8.29968442], rtol=1e-6
    )
    # the priors of the data set
    assert 500 <= b.target[:, 0].min() and b.target[:, 0].max() <= 2900
    assert np.all(b.target[:, 1:4] >= -13) and np.all(b.target[:, 1:4] <= 0)


def test_return_X_y_and_frame():
    X, y = load_exoplanet_spectra(return_X_y=True)
    assert X.shape == (20001, 13) and y.shape == (20001, 5)
    pd = pytest.importorskip("pandas")
    b = load_exoplanet_spectra(as_frame=True)
    assert isinstance(b.data, pd.DataFrame) and list(b.target.columns) == b.target_names
    assert b.frame.shape == (20001, 18)
    Xf, yf = load_exoplanet_spectra(return_X_y=True, as_frame=True)
    np.testing.assert_array_equal(Xf.to_numpy(), X)


def test_wasp12b():
    w = load_wasp12b()
    assert w.data.shape == (1, 13) and w.errors.shape == (13,) and w.wavelength.shape == (13,)
    np.testing.assert_allclose(w.data[0, [0, -1]], [1.4441, 1.4332])
    np.testing.assert_allclose(w.errors[[0, -1]], [0.0069, 0.0055])
    assert w.feature_names == load_exoplanet_spectra().feature_names
    plan_net = w.published["ensemble of 5 plan-nets (Cobb 2019)"]
    assert plan_net["T"][0] == 1123 and plan_net["log_X_H2O"][0] == -2.8


def test_shipped_file_is_small():
    path = resources.files("sklearn_bnn.datasets").joinpath("data", "hela_wfc3.npz")
    assert path.stat().st_size < 2_000_000
