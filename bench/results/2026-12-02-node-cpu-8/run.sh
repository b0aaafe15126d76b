#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# The scheduler's wake-ups, A/B on the CPU machine with the zero-cost replay engine (README).
# Needs /tmp/scheduler_base.py (git show 7386461:xfeat_ros/core/scheduler.py) and
# /tmp/scheduler_new.py (the same with three_conditions.patch applied); swaps them into the
# tree between runs and restores the committed one at the end.
cd "$(dirname "$0")/../../.." && source scripts/ros_env.sh >/dev/null 2>&1
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
OUT=${OUT:-/tmp/ab_sched}
mkdir -p $OUT
for round in 1 2 3; do
  for arm in base new; do
    cp /tmp/scheduler_$arm.py xfeat_ros/core/scheduler.py
    export ROS_DOMAIN_ID=$((RANDOM % 100 + 101))
    timeout 120 xfeat_bench node --configs 1x30 --resolution 320x240 --encoding mono8 --top-k 1024 \
      --backend onnxruntime --duration 15 --images /work/shared/data/tum_fr2_desk \
      --weights /work/shared/models/xfeat_backbone.npz --publisher-processes 1 \
      --node-wrapper "python bench/replay_engine.py" --json $OUT/replay_${arm}_${round}.json \
      --log-dir /tmp/ab_logs_${arm}_${round} > $OUT/replay_${arm}_${round}.log 2>&1
    python3 -c "
import json; c=json.load(open('$OUT/replay_${arm}_${round}.json'))['configs'][0]
s=c['node_stage_medians_ms']['cam0']
print('$arm', $round, 'p50 %.2f reader %.2f' % (c['latency']['median_ms'], c['latency_at_reader']['median_ms']), 'queue %.3f handoff %.3f tracks %.3f publish %.3f' % (s['queue'], s['handoff'], s['tracks'], s['publish']), 'delivered', c['delivered'], 'dropped', c['dropped'])
"
  done
done
git checkout -- xfeat_ros/core/scheduler.py  # the committed scheduler again
