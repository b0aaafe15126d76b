#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# Branch armed-fix only: the checks to pass before the armed chain goes back to main, in one
# GPU call (device tool, carry .devlite and .upstream):
#   1. bench/results/2026-12-03-thirteenth/armed_probe.py: every arm() timed, and which
#      ordinary frame each armed frame equals (fresh process);
#   2. test/test_gpu_armed.py alone, five times, each in a fresh process (the fault of
#      3c7f636 showed only there);
#   3. the GPU suite and the NVRTC compile test (bench/gpu_check.sh tests).
# Writes probe.log, alone.log, suite_pytest.log, gpu_parity.json and gpu.txt into $OUT.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT="${OUT:-/tmp/xfeat_armed_check}"
mkdir -p "${OUT}"
export PYTHONPATH="${PWD}" XFEAT_ROS_SHARED="${XFEAT_ROS_SHARED:-${PWD}/.devlite}" PYTHONUNBUFFERED=1
echo "== probe"
timeout 180 python3 bench/results/2026-12-03-thirteenth/armed_probe.py \
  --shared "${XFEAT_ROS_SHARED}" 2>&1 | tee "${OUT}/probe.log" | tail -30
for i in 1 2 3 4 5; do
  echo "== alone ${i}"
  timeout 120 python3 -m pytest -q -p no:cacheprovider test/test_gpu_armed.py 2>&1 | tail -4
done 2>&1 | tee "${OUT}/alone.log"
echo "== suite"
OUT=/tmp/xfeat_armed_suite timeout 240 bash bench/gpu_check.sh tests > /tmp/xfeat_armed_suite.log 2>&1
rc_suite=$?
tail -4 /tmp/xfeat_armed_suite.log
cp /tmp/xfeat_armed_suite/pytest.log "${OUT}/suite_pytest.log"
cp /tmp/xfeat_armed_suite/gpu_parity.json /tmp/xfeat_armed_suite/gpu.txt "${OUT}/" 2>/dev/null
failed_alone=$(grep -c -E "failed|error" "${OUT}/alone.log")
echo "armed_check: suite rc=${rc_suite}, alone runs with a failure: ${failed_alone} of 5"
[[ ${rc_suite} -eq 0 && ${failed_alone} -eq 0 ]]
