#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# Issue 10's CPU case with OpenBLAS's worker spin cut short (OPENBLAS_THREAD_TIMEOUT=4 in the
# node's environment only) against the default, three interleaved rounds, each after the
# engine alone; 320x240 mono8, 1 x 30 Hz, top_k 1024, ONNX Runtime (CPU machine).
#   OUT=... bash bench/results/2026-12-03-sixteenth/blas_timeout_ab.sh
set -u
cd "$(dirname "$0")/../../.." && source scripts/ros_env.sh
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-26} ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
OUT=${OUT:-bench/results/2026-12-03-sixteenth/blas_timeout}
mkdir -p "$OUT"
COMMON=(--configs 1x30 --resolution 320x240 --encoding mono8 --top-k 1024
        --backend onnxruntime --duration 15 --images /work/shared/data/tum_fr2_desk
        --weights /work/shared/models/xfeat_backbone.npz --publisher-processes 1)
for round in ${ROUNDS:-1 2 3}; do
  echo "== round $round $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "   engine: $(python bench/results/2026-12-01-node-cpu/engine_time.py 2>/dev/null)"
  for arm in ${ARMS:-default timeout4}; do
    wrapper=()
    [[ "$arm" == timeout4 ]] && wrapper=(--node-wrapper "env OPENBLAS_THREAD_TIMEOUT=4")
    echo "   $arm: $(xfeat_bench node "${COMMON[@]}" "${wrapper[@]}" \
      --json "$OUT/${arm}_round${round}.json" --log-dir "/tmp/blas_to_${arm}_${round}" 2>&1 \
      | tail -1)"
  done
done
