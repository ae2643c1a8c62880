"""Chains as joblib jobs on a Dask cluster (here a local one on loopback).

The same draws come out as with n_jobs=1: per-chain seeds do not depend on the
backend. Point Client at a real scheduler to use a cluster.
Needs: pip install -e ".[distributed]" (in a checkout)
Run: python examples/parallel_chains_dask.py   (about a minute)
"""

import joblib
import numpy as np
import torch
from dask.distributed import Client, LocalCluster
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler

from sklearn_bnn import HMCClassifier

X, y = load_iris(return_X_y=True)
X = StandardScaler().fit_transform(X)
params = dict(hidden_layer_sizes=(16,), n_draws=200, n_warmup=200, n_chains=4, random_state=0)

if __name__ == "__main__":
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        with joblib.parallel_config(backend="dask"):
            on_dask = HMCClassifier(n_jobs=4, **params).fit(X, y)
    local = HMCClassifier(n_jobs=1, **params).fit(X, y)
    print(on_dask.summary())
    print(
        "identical draws to the sequential run:",
        torch.equal(on_dask.samples_.draws, local.samples_.draws),
    )
    print("training accuracy:", np.mean(on_dask.predict(X) == y))
