#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# The GPU node's host path on the CPU machine: the zero-cost replay engine offering image
# buffers (XFEAT_REPLAY_BUFFERS=1: rcl take into pooled buffers, rcl publish from kept
# buffers, as with the GPU engine), 640x480 rgb8, top_k 4096, shipped DDS profile.
# ROUNDS runs of each CONFIGS entry; PROFILE=1 adds one py-spy run (active threads, raw).
# Needs ../shared and py-spy in the venv. Results: $OUT/<config>_<round>.json, .log.
set -u
cd "$(dirname "$0")/../../.." && source scripts/ros_env.sh >/dev/null 2>&1
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
SHARED=${SHARED:-$(cd .. && pwd)/shared}
OUT=${OUT:-/tmp/host_path}
mkdir -p "$OUT"
run() {  # name wrapper config
  export ROS_DOMAIN_ID=$((RANDOM % 100 + 101))
  timeout 200 xfeat_bench node --configs "$3" --resolution 640x480 --encoding rgb8 \
    --top-k 4096 --backend onnxruntime --duration "${DURATION:-15}" \
    --images "$SHARED/data/tum_fr2_desk" --weights "$SHARED/models/xfeat_backbone.npz" \
    --publisher-processes 1 --node-wrapper "$2" --json "$OUT/$1.json" \
    --log-dir "/tmp/host_path_logs_$1" > "$OUT/$1.log" 2>&1
  python3 - "$OUT/$1.json" "$1" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))['configs'][0]
s = c['node_stage_medians_ms']['cam0']
cpu = c.get('node_cpu_percent') or 0.0
print(sys.argv[2], 'reader p50 %.2f p99 %.2f' % (c['latency_at_reader']['median_ms'],
      c['latency_at_reader']['p99_ms']), 'node CPU %.1f%% = %.2f ms/frame' % (
      cpu, 10.0 * cpu / max(c['output_hz'], 1e-9)),
      ' '.join('%s %.3f' % (k, v) for k, v in s.items()),
      'delivered', c['delivered'], 'dropped', c['dropped'])
PY
}
WRAP="env XFEAT_REPLAY_BUFFERS=1 python bench/replay_engine.py"
for round in $(seq "${ROUNDS:-3}"); do
  for config in ${CONFIGS:-1x30}; do
    run "${config}_${round}" "$WRAP" "$config"
  done
done
if [[ "${PROFILE:-0}" == 1 ]]; then
  for config in ${CONFIGS:-1x30}; do
    run "${config}_profile" "env XFEAT_REPLAY_BUFFERS=1 py-spy record --threads -r 250 -f raw \
      -o $OUT/profile_${config}.txt -- python bench/replay_engine.py" "$config"
  done
fi
