#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# Issue 10's CPU case (fourth session): per round the engine alone (hot loop), the node with
# ONNX Runtime, and the node with the zero-cost replay engine (its own overhead and the
# transports only); 320x240 mono8, 1 x 30 Hz, top_k 1024, interleaved.
# NODE_THREADS (added 2026-12-02): ONNX Runtime thread counts of the node runs, one run each
# (default "": one run, the node's default, named as before; "0 1": cpu_1x30_threads0_*
# and cpu_1x30_threads1_*); REPLAY=0 leaves out the zero-cost runs; CONFIG (added
# 2026-12-03, default 1x30) runs another camera rate, e.g. 1x15 (files named after it).
set -u
cd "$(dirname "$0")/../../.." && source scripts/ros_env.sh
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-25} ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
OUT=${OUT:-bench/results/2026-12-01-node-cpu-5}
CONFIG=${CONFIG:-1x30}
COMMON=(--configs "$CONFIG" --resolution 320x240 --encoding mono8 --top-k 1024
        --backend onnxruntime --duration 15 --images /work/shared/data/tum_fr2_desk
        --weights /work/shared/models/xfeat_backbone.npz --publisher-processes 1)
for round in 1 2 3; do
  echo "== round $round $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "   engine: $(python bench/results/2026-12-01-node-cpu/engine_time.py 2>/dev/null)"
  if [[ -z "${NODE_THREADS:-}" ]]; then
    xfeat_bench node "${COMMON[@]}" --json "$OUT/cpu_${CONFIG}_round${round}.json" \
      --log-dir /tmp/cpu5_logs_${round} 2>&1 | tail -1
  fi
  for threads in ${NODE_THREADS:-}; do
    xfeat_bench node "${COMMON[@]}" --threads "$threads" \
      --json "$OUT/cpu_${CONFIG}_threads${threads}_round${round}.json" \
      --log-dir "/tmp/cpu5_logs_${threads}_${round}" 2>&1 | tail -1
  done
  if [[ "${REPLAY:-1}" != 0 ]]; then
    xfeat_bench node "${COMMON[@]}" --node-wrapper "python bench/replay_engine.py" \
      --json "$OUT/replay_${CONFIG}_round${round}.json" --log-dir /tmp/cpu5_replay_${round} \
      2>&1 | tail -1
  fi
done
