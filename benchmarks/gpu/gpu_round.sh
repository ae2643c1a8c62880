#!/usr/bin/env bash
# Issue 31's GPU checks as one device call, at most 9.5 minutes (each step has its own limit):
#   1. the CUDA tests (recorded trajectories, SG and Adam steps, the GPU gradient forms, the
#      estimators on CUDA) with the CPU tests of the same files;
#   2. benchmarks/gpu/gpu_gemm_shapes.py: every matrix product of the MLP's step in each layout;
#   3. benchmarks/gpu/gpu_speed.py: host syncs, the kernel profile, ours against NumPyro at the
#      same fixed step (1, 8, 32 chains on digits);
#   4. benchmarks/gpu/gpu_speed.py: SGMCMCClassifier fits, MAP searches timed apart.
# Every log and JSON goes to the folder given (the device tool's $OUT: 5 files). On the
# device machine, with skorch carried as a wheel in .whl/ (docs/getting_started.md):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; \
#     bash benchmarks/gpu/gpu_round.sh "$OUT"
# GPU_ROUND_SMOKE=1 runs steps 2-4 at tiny sizes on the CPU, to check this script.
set -u
out=${1:-/tmp/gpu_round}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
smoke=()
[ "${GPU_ROUND_SMOKE:-0}" = 1 ] && smoke=(--smoke)
say() { printf '\n=== %s (%s)\n' "$*" "$(date +%T)"; }

say "1. CUDA tests"
timeout 120 python3 -m pytest -q -p no:cacheprovider -rs \
  tests/samplers/test_graphs.py tests/samplers/test_sg_graphs.py \
  tests/samplers/test_adam_graphs.py tests/targets/test_batched_mlp.py tests/test_priors.py \
  tests/estimators/test_dropout.py::test_cuda_fit_predict_and_pickle_on_cpu \
  tests/estimators/test_split_hmc.py::test_streaming_from_cpu_gives_the_same_draws_as_data_on_the_gpu \
  tests/test_persistence_security.py::test_split_model_fitted_with_data_on_a_gpu_loads_without_one \
  2>&1 | tee "$out/tests.log"

say "2. product layouts"
timeout 60 python3 benchmarks/gpu/gpu_gemm_shapes.py "${smoke[@]}" --out "$out/gemm.json"

say "3. syncs, profile, NumPyro"
timeout 170 python3 benchmarks/gpu/gpu_speed.py "${smoke[@]}" --out "$out/speed.json" \
  --only syncs,profile,numpyro --no-ess --budget 150 2>&1 | grep --line-buffered -v USDT \
  | tee "$out/speed.log"

say "4. SG-MCMC fits"
timeout 200 python3 benchmarks/gpu/gpu_speed.py "${smoke[@]}" --out "$out/sgfit.json" \
  --only sgfit --budget 180 2>&1 | grep --line-buffered -v USDT
say "done"
