#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# Issue 10's CPU case on this 2-core machine: 320x240 mono8, 1 x 30 Hz, top_k 1024, ONNX
# Runtime with its default threads; the engine alone timed just before each node run.
set -u
cd "$(dirname "$0")/../../.." && source scripts/ros_env.sh
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-23} ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
OUT=${OUT:-bench/results/2026-12-01-node-cpu-2}  # OUT, LOGS: where a later run writes
for round in 1 2 3; do
  echo "== round $round $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "   engine: $(python bench/results/2026-12-01-node-cpu/engine_time.py 2>/dev/null)"
  xfeat_bench node --configs 1x30 --resolution 320x240 --encoding mono8 --top-k 1024 \
    --backend onnxruntime --duration 20 --images /work/shared/data/tum_fr2_desk \
    --weights /work/shared/models/xfeat_backbone.npz --publisher-processes 1 \
    --json $OUT/cpu_1x30_round${round}.json --log-dir ${LOGS:-/tmp/cpu2_logs}_${round} 2>&1 | tail -1
done
