#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# A/B of the node's publishing on the CPU machine, zero-cost replay engine (bench/replay_engine.py):
# base = rclpy's publish(bytes) (XFEAT_ROS_RCL_IO=rclpy in the node only), new = rcl's call from
# a kept buffer (rcl_io.SerializedPublisher). The CPU engine takes images through rclpy in both.
# CASES: "small" = 320x240 mono8 top_k 1024; "vga" = 640x480 rgb8 top_k 4096. Needs ../shared.
cd "$(dirname "$0")/../../.." && source scripts/ros_env.sh >/dev/null 2>&1
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
SHARED=${SHARED:-$(cd .. && pwd)/shared}
OUT=${OUT:-/tmp/ab_publish}
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
        --backend onnxruntime --duration 15 --images "$SHARED/data/tum_fr2_desk" \
        --weights "$SHARED/models/xfeat_backbone.npz" --publisher-processes 1 \
        --node-wrapper "$wrapper" --json "$OUT/$name.json" \
        --log-dir "/tmp/ab_logs_$name" > "$OUT/$name.log" 2>&1
      grep -h 'messages: ' "/tmp/ab_logs_$name"/node*.log | head -1 | sed 's/^.*messages:/  node publishes with:/'
      python3 -c "
import json; c=json.load(open('$OUT/$name.json'))['configs'][0]
s=c['node_stage_medians_ms']['cam0']
print('$case $arm $round', 'reader p50 %.2f p99 %.2f' % (c['latency_at_reader']['median_ms'], c['latency_at_reader']['p99_ms']), ' '.join('%s %.3f' % (k, v) for k, v in s.items() if not k.startswith('transport_')), 'delivered', c['delivered'], 'dropped', c['dropped'])
"
    done
  done
done
