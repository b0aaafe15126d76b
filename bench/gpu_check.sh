#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# The GPU checks, on the GPU machine:
#   1. installs carried wheels from .whl/ and .gpuwhl/ (torchvision, for nvJPEG) if there are
#      any (into /tmp/site),
#   2. runs the GPU test suite (pytest -m gpu over test/features: golden parity, kernels,
#      engine, batches, matchers, backbone, armed frames, RANSAC, tracks, stamp jumps) and the NVRTC compile test of every kernel variant.
# Shared data comes from $XFEAT_ROS_SHARED (default: .devshared, bench/make_devshared.sh).
# Everything lands in $OUT: gpu.txt, pytest.log, junit_gpu.xml, junit_compile.xml,
# gpu_parity.json. The node tests on the GPU engine: bench/gpu_node_check.sh.
# Usage: bash bench/gpu_check.sh [all|tests] [extra pytest args...]   (both run everything)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT="${OUT:-/tmp/xfeat_gpu_check}"
mkdir -p "${OUT}"
WHAT="${1:-all}"
shift || true
if [[ "${WHAT}" != tests && "${WHAT}" != all ]]; then
  echo "gpu_check: unknown argument '${WHAT}' (all or tests)"
  exit 2
fi
export PYTHONUNBUFFERED=1
export XFEAT_ROS_SHARED="${XFEAT_ROS_SHARED:-${PWD}/.devshared}"
export XFEAT_ROS_REPORT_DIR="${OUT}"

if compgen -G '.gpuwhl/*.whl' > /dev/null; then  # torchvision (nvJPEG): bench/fetch_gpu_wheels.sh
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/site .gpuwhl/*.whl || exit 3
fi
if compgen -G '.whl/*.whl' > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:${PYTHONPATH}}"
fi
export PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}"

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import sys, torch, cupy; print(sys.version.split()[0], "torch", torch.__version__, "cupy", cupy.__version__)'
} 2>&1 | tee "${OUT}/gpu.txt"

# Every GPU-marked test of the features wing (the engines); the node's: gpu_node_check.sh.
python3 -m pytest -m gpu test/features -q -rs -p no:cacheprovider \
  --junitxml="${OUT}/junit_gpu.xml" "$@" 2>&1 | tee "${OUT}/pytest.log"
rc_tests=$?
python3 -m pytest test/features/gpu/test_kernels_compile.py -q -rs -p no:cacheprovider \
  --junitxml="${OUT}/junit_compile.xml" 2>&1 | tee -a "${OUT}/pytest.log"
rc_compile=$?
[[ ${rc_compile} -ne 0 ]] && rc_tests=${rc_compile}
echo "gpu_check: tests rc=${rc_tests}"
exit "${rc_tests}"
