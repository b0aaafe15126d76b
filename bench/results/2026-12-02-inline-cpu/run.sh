#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# Run to completion when idle, A/B on the CPU machine with the zero-cost replay engine (README).
# Needs /tmp/scheduler_base.py (git show 8a0c8f4:xfeat_ros/core/scheduler.py) and
# /tmp/scheduler_new.py (the same with run_inline.patch applied); swaps them into the tree between runs and puts the tree's own back at the end.
# CASES: "small" = 320x240 mono8 top_k 1024; "vga" = 640x480 rgb8 top_k 4096.
cd "$(dirname "$0")/../../.." && source scripts/ros_env.sh >/dev/null 2>&1
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
OUT=${OUT:-/tmp/ab_inline}
ROUNDS=${ROUNDS:-3}
mkdir -p $OUT
cp xfeat_ros/core/scheduler.py $OUT/scheduler_tree.py  # restored at the end
for round in $(seq $ROUNDS); do
  for case in ${CASES:-small vga}; do
    for arm in base new; do
      cp /tmp/scheduler_$arm.py xfeat_ros/core/scheduler.py
      export ROS_DOMAIN_ID=$((RANDOM % 100 + 101))
      if [ $case = small ]; then size="--resolution 320x240 --encoding mono8 --top-k 1024"
      else size="--resolution 640x480 --encoding rgb8 --top-k 4096"; fi
      name=${case}_${arm}_${round}
      timeout 120 xfeat_bench node --configs 1x30 $size \
        --backend onnxruntime --duration 15 --images /work/shared/data/tum_fr2_desk \
        --weights /work/shared/models/xfeat_backbone.npz --publisher-processes 1 \
        --node-wrapper "python bench/replay_engine.py" --json $OUT/$name.json \
        --log-dir /tmp/ab_logs_$name > $OUT/$name.log 2>&1
      python3 -c "
import json; c=json.load(open('$OUT/$name.json'))['configs'][0]
s=c['node_stage_medians_ms']['cam0']
print('$case $arm $round', 'p50 %.2f reader %.2f p99 reader %.2f' % (c['latency']['median_ms'], c['latency_at_reader']['median_ms'], c['latency_at_reader']['p99_ms']), ' '.join('%s %.3f' % (k, v) for k, v in s.items()), 'delivered', c['delivered'], 'dropped', c['dropped'])
"
    done
  done
done
cp $OUT/scheduler_tree.py xfeat_ros/core/scheduler.py
