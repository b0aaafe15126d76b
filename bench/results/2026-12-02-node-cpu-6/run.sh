#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# The zero-cost node (bench/replay_engine.py), 640x480 rgb8, top_k 4096, 1 x 30 Hz, 10 s,
# with rmw_fastrtps publication mode ASYNCHRONOUS for the node only against the default
# (SYNCHRONOUS), three interleaved rounds. Usage: ROS_DOMAIN_ID=<random> bash run.sh
set -u
cd "$(dirname "$0")/../../.." && source scripts/ros_env.sh
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
OUT=bench/results/2026-12-02-node-cpu-6
COMMON=(--configs 1x30 --resolution 640x480 --encoding rgb8 --top-k 4096 --backend onnxruntime
        --duration 10 --images /work/shared/data/tum_fr2_desk
        --weights /work/shared/models/xfeat_backbone.npz --publisher-processes 1)
for round in 1 2 3; do
  for mode in default ASYNCHRONOUS; do
    wrapper="python bench/replay_engine.py"
    [[ $mode == ASYNCHRONOUS ]] && wrapper="env RMW_FASTRTPS_PUBLICATION_MODE=ASYNCHRONOUS $wrapper"
    echo "== round $round $mode $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
    xfeat_bench node "${COMMON[@]}" --node-wrapper "$wrapper" \
      --json "$OUT/replay_rgb8_1x30_${mode}_round${round}.json" \
      --log-dir "/tmp/pm_logs_${mode}_${round}" 2>&1 | tail -1
  done
done
