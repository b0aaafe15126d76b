#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# ONNX Runtime spinning (HEAD 0926a29, from a git archive in /tmp/hc_spin) vs allow_spinning 0 (worktree).
set -u
source /work/h-core/scripts/ros_env.sh
export ROS_DOMAIN_ID=21
for round in 1 2; do
  for v in spin nospin; do
    if [ $v = spin ]; then cd /tmp/hc_spin; else cd /work/h-core; fi
    echo "== $round $v load $(cut -d' ' -f1 /proc/loadavg)"
    python -m xfeat_ros.bench node --configs 1x60 --queue-size 100 --resolution 160x120 --encoding rgb8 --top-k 4096 --backend onnxruntime --duration 10 --images /work/shared/data/tum_fr2_desk --weights /work/shared/models/xfeat_backbone.npz --json /tmp/hc_spin_${v}_${round}.json --log-dir /tmp/hc_spin_logs_${v}_${round} 2>&1 | tail -1
    grep -h "stage medians" /tmp/hc_spin_logs_${v}_${round}/node_*.log | sed 's/.*ms: //'
  done
done
