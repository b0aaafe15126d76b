#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# The CPU goal's figures (docs/performance.md, "One camera on a 2-core CPU"): 320x240 mono8,
# 1 x 30 Hz, top_k 1024, ONNX Runtime, 15 s a run. Per round, interleaved:
#   1. the engine alone in a hot loop (bench/engine_time.py) -> engine.jsonl;
#   2. xfeat_bench node with the ONNX Runtime engine -> cpu_<CONFIG>_round<N>.json;
#   3. xfeat_bench node with the zero-cost engine (bench/replay_engine.py: the node's own
#      path and the transports only) -> replay_<CONFIG>_round<N>.json.
# Then the engine alone hot and paced at 30 Hz, ROUNDS rounds -> engine_paced.jsonl.
# Usage (repository root, after `make setup-test`):
#   OUT=/tmp/cpu_goal ROS_DOMAIN_ID=<free domain> bash bench/cpu_goal.sh
# Knobs: ROUNDS (default 3), CONFIG (default 1x30), DURATION (default 15), REPLAY=0 leaves out
# the zero-cost runs, XFEAT_ROS_SHARED (default ../shared: TUM fr2/desk and the weights).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
# shellcheck disable=SC1091
source scripts/ros_env.sh
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$(( RANDOM % 100 + 101 ))}"
SHARED="${XFEAT_ROS_SHARED:-$(cd .. && pwd)/shared}"
OUT="${OUT:-/tmp/xfeat_cpu_goal}"
ROUNDS="${ROUNDS:-3}"
CONFIG="${CONFIG:-1x30}"
mkdir -p "${OUT}"
COMMON=(--configs "${CONFIG}" --resolution 320x240 --encoding mono8 --top-k 1024
        --backend onnxruntime --duration "${DURATION:-15}" --images "${SHARED}/data/tum_fr2_desk"
        --weights "${SHARED}/models/xfeat_backbone.npz" --publisher-processes 1)
rc=0
: > "${OUT}/engine.jsonl"
for round in $(seq 1 "${ROUNDS}"); do
  echo "== round ${round} $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  python bench/engine_time.py --shared "${SHARED}" | tee -a "${OUT}/engine.jsonl" || rc=1
  xfeat_bench node "${COMMON[@]}" --json "${OUT}/cpu_${CONFIG}_round${round}.json" \
    --log-dir "${OUT}/logs/cpu_${round}" 2>&1 | tail -n 1 || rc=1
  if [[ "${REPLAY:-1}" != 0 ]]; then
    xfeat_bench node "${COMMON[@]}" --node-wrapper "python bench/replay_engine.py" \
      --json "${OUT}/replay_${CONFIG}_round${round}.json" --log-dir "${OUT}/logs/replay_${round}" \
      2>&1 | tail -n 1 || rc=1
  fi
done
python bench/engine_time.py --shared "${SHARED}" --rounds "${ROUNDS}" --frames 95 --paced \
  | tee "${OUT}/engine_paced.jsonl" || rc=1
exit "${rc}"
