"""Fitting on a GPU with ``device="auto"``: HMC and SG-MCMC on digits.

``device="auto"`` runs a fit on CUDA where a GPU is present and the work of one gradient (rows
x parameters x chains) is past the measured crossover, on the CPU otherwise (docs/
getting_started.md, "Choosing a device"). On a GPU the HMC trajectories and the SGLD / SGHMC
minibatch steps are recorded once as CUDA graphs and replayed (docs/hmc.md and docs/sgmcmc.md,
"On a GPU"). The same script runs anywhere: without CUDA every fit takes the CPU. About two
minutes on a laptop CPU.

    python examples/gpu_device.py
"""

import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from sklearn_bnn import HMCClassifier, SGMCMCClassifier

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
scaler = StandardScaler().fit(X_train)
X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)

print(f"CUDA available: {torch.cuda.is_available()}")
for model in (
    HMCClassifier(device="auto", random_state=0),
    SGMCMCClassifier(device="auto", random_state=0),
):
    start = time.perf_counter()
    model.fit(X_train, y_train)
    seconds = time.perf_counter() - start
    proba = model.predict_proba(X_test)
    nll = -np.mean(np.log(np.clip(proba[np.arange(len(y_test)), y_test], 1e-12, None)))
    accuracy = np.mean(proba.argmax(1) == y_test)
    print(
        f"{type(model).__name__:<17} device={model.device_:<5} fit {seconds:6.1f} s  "
        f"accuracy {accuracy:.3f}  NLL {nll:.3f}"
    )
