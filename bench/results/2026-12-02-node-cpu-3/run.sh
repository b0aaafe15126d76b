#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# Busy-waiting threads (experiment, 2026-12-02 third session): the zero-cost node at 1x30,
# 320x240 mono8, with XFEAT_BUSY unset / 1 (receiver and device thread spin) / dev (device
# thread only); needs busy_wait.patch applied (git apply), which reads XFEAT_BUSY.
set -u
cd "$(dirname "$0")/../../.." && source scripts/ros_env.sh
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
OUT=${OUT:-bench/results/2026-12-02-node-cpu-3}
COMMON=(--configs 1x30 --resolution 320x240 --encoding mono8 --top-k 1024 --backend onnxruntime
        --duration 10 --images ../shared/data/tum_fr2_desk
        --weights ../shared/models/xfeat_backbone.npz --publisher-processes 1
        --node-wrapper "python bench/replay_engine.py")
for round in 1 2; do
  for mode in "" 1 dev; do
    XFEAT_BUSY=$mode xfeat_bench node "${COMMON[@]}" --json $OUT/r${round}_${mode:-off}.json \
      > /dev/null 2>&1
  done
done
for f in $OUT/r*_*.json; do
  python -c "
import json, sys
c = json.load(open(sys.argv[1]))['configs'][0]
lat, st = c['latency'], c['node_stage_medians_ms']['cam0']
print(sys.argv[1].rsplit('/', 1)[-1], 'p50 %.2f p99 %.2f cpu %.0f%%' % (lat['median_ms'], lat['p99_ms'],
      c['node_cpu_percent']), ' '.join('%s %.3f' % kv for kv in st.items()))" "$f"
done
