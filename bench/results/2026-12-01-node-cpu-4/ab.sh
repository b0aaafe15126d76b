#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# Issue 10's CPU case (320x240 mono8, 1 x 30 Hz, top_k 1024, ONNX Runtime default threads),
# interleaved A/B: base = a git worktree of 6e038a2 at /tmp/base (images through rclpy's
# executor; `git worktree add /tmp/base 6e038a2`), new = this checkout (image receiver).
# The engine alone is timed before each node run.
set -u
cd "$(dirname "$0")/../../.." && source scripts/ros_env.sh
export ROS_DOMAIN_ID=25 ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
OUT=$PWD/bench/results/2026-12-01-node-cpu-4
ENGINE=$PWD/bench/results/2026-12-01-node-cpu/engine_time.py
for round in 1 2 3; do
  for v in base new; do
    if [ $v = base ]; then R=/tmp/base; else R=$PWD; fi
    echo "== $v round $round $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "   engine: $(python $ENGINE 2>/dev/null)"
    (cd $R && PYTHONPATH=$R python -m xfeat_ros.tools.bench node --configs 1x30 \
      --resolution 320x240 --encoding mono8 --top-k 1024 --backend onnxruntime --duration 20 \
      --images /work/shared/data/tum_fr2_desk --weights /work/shared/models/xfeat_backbone.npz \
      --publisher-processes 1 --json $OUT/ab_${v}_round${round}.json \
      --log-dir /tmp/cpu4_ab_${v}_${round} 2>&1 | tail -1)
    grep -h "image_receiver\|stage medians" /tmp/cpu4_ab_${v}_${round}/node_1x30.log | tail -1 | cut -c1-240
  done
done
