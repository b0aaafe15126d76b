#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# A/B of the node's serialized messages on the CPU machine, zero-cost replay engine (README):
# base = rclpy's own calls (XFEAT_ROS_RCL_IO=rclpy in the node only), new = rcl's (rcl_io.py).
# CASES: "small" = 320x240 mono8 top_k 1024; "vga" = 640x480 rgb8 top_k 4096.
cd "$(dirname "$0")/../../.." && source scripts/ros_env.sh >/dev/null 2>&1
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
OUT=${OUT:-/tmp/ab_rcl_io}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT"
for round in $(seq "$ROUNDS"); do
  for case in ${CASES:-vga small}; do
    for arm in base new; do
      export ROS_DOMAIN_ID=$((RANDOM % 100 + 101))
      if [ "$case" = small ]; then size="--resolution 320x240 --encoding mono8 --top-k 1024"
      else size="--resolution 640x480 --encoding rgb8 --top-k 4096"; fi
      if [ "$arm" = base ]; then wrapper="env XFEAT_ROS_RCL_IO=rclpy python bench/replay_engine.py"
      else wrapper="python bench/replay_engine.py"; fi
      name=${case}_${arm}_${round}
      # shellcheck disable=SC2086
      timeout 120 xfeat_bench node --configs 1x30 $size \
        --backend onnxruntime --duration 15 --images /work/shared/data/tum_fr2_desk \
        --weights /work/shared/models/xfeat_backbone.npz --publisher-processes 1 \
        --node-wrapper "$wrapper" --json "$OUT/$name.json" \
        --log-dir "/tmp/ab_logs_$name" > "$OUT/$name.log" 2>&1
      grep -h 'serialized messages through' "/tmp/ab_logs_$name"/node*.log | head -1 | sed 's/^.*serialized/  node: serialized/'
      python3 -c "
import json; c=json.load(open('$OUT/$name.json'))['configs'][0]
s=c['node_stage_medians_ms']['cam0']
print('$case $arm $round', 'p50 %.2f reader %.2f p99 reader %.2f' % (c['latency']['median_ms'], c['latency_at_reader']['median_ms'], c['latency_at_reader']['p99_ms']), ' '.join('%s %.3f' % (k, v) for k, v in s.items()), 'delivered', c['delivered'], 'dropped', c['dropped'])
"
    done
  done
done
