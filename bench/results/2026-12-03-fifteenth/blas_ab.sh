#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# Issue 10's CPU case with NumPy's OpenBLAS left at its default threads (XFEAT_ROS_BLAS_THREADS=
# default) and with the node's one thread (xfeat_ros.blas of commit 0480745, reverted after
# this run: check that commit out to rerun), interleaved, order alternating;
# per round the engine alone first. 320x240 mono8, 1 x 30 Hz, top_k 1024, ONNX Runtime, 15 s.
#   OUT=bench/results/2026-12-03-fifteenth/blas_ab ROS_DOMAIN_ID=<n> bash .../blas_ab.sh
set -u
cd "$(dirname "$0")/../../.." && source scripts/ros_env.sh
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-26} ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
OUT=${OUT:-bench/results/2026-12-03-fifteenth/blas_ab}
mkdir -p "$OUT"
COMMON=(--configs 1x30 --resolution 320x240 --encoding mono8 --top-k 1024
        --backend onnxruntime --duration 15 --images /work/shared/data/tum_fr2_desk
        --weights /work/shared/models/xfeat_backbone.npz --publisher-processes 1)
for round in 1 2 3; do
  echo "== round $round $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "   engine: $(python bench/results/2026-12-01-node-cpu/engine_time.py 2>/dev/null)"
  arms=(default one); (( round % 2 == 0 )) && arms=(one default)
  for arm in "${arms[@]}"; do
    value=$([[ $arm == default ]] && echo default || echo '')
    echo "   blas $arm"
    XFEAT_ROS_BLAS_THREADS=$value xfeat_bench node "${COMMON[@]}" \
      --json "$OUT/cpu_1x30_blas_${arm}_round${round}.json" --log-dir "/tmp/blas_ab_${arm}_${round}" \
      2>&1 | tail -1
  done
done
