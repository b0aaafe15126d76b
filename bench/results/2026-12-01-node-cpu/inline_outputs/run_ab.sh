#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# A/B of commit 39a5cad (device thread sends outputs when idle: inline) against 52b272a (hop),
# each run from a git archive of its commit in /tmp/hc_<version>.
set -u
source /work/h-core/scripts/ros_env.sh
export ROS_DOMAIN_ID=21
for round in 1 2 3; do
  for v in hop inline; do
    cd /tmp/hc_$v
    echo "== $round $v load $(cut -d' ' -f1 /proc/loadavg)"
    python -m xfeat_ros.bench node --configs 1x5 --threads 1 --resolution 320x240 --encoding mono8 --top-k 1024 --backend onnxruntime --duration 20 --images /work/shared/data/tum_fr2_desk --weights /work/shared/models/xfeat_backbone.npz --json /tmp/hc_ab_${v}_${round}.json --log-dir /tmp/hc_ab_logs_${v}_${round} 2>&1 | tail -1
    grep -h "stage medians" /tmp/hc_ab_logs_${v}_${round}/node_*.log | sed 's/.*ms: //'
  done
done
