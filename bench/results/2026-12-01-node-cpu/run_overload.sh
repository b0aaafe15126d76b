#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# Interleaved before/after node benchmark on the shared CPU machine (h-core).
set -u
source /work/h-core/scripts/ros_env.sh
export ROS_DOMAIN_ID=21
OUT=/work/h-core/bench/results/2026-12-01-node-cpu
COMMON="node --configs 1x30,1x120 --resolution 320x240 --encoding mono8 --top-k 1024 --backend onnxruntime --duration 15 --images /work/shared/data/tum_fr2_desk --weights /work/shared/models/xfeat_backbone.npz"
for round in 1 2 3; do
  for version in before after; do
    if [ $version = before ]; then cd /tmp/hcore_before_src; else cd /work/h-core; fi
    echo "== round $round $version $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "   engine: $(python $OUT/engine_time.py 2>/dev/null)"
    python -m xfeat_ros.bench $COMMON --json $OUT/${version}_round${round}.json --log-dir /tmp/hcore_logs_${version}_${round} 2>&1 | tail -3
    echo "   load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
