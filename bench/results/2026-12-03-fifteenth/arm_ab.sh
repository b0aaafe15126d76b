#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# The node at 1 x 30 Hz with the next frame armed and without (arm_next_frame), interleaved
# rounds, one code; GPU machine with the ROS wheels installed (bench/gpu_node_check.sh first),
# carry .devlite. Writes ab_<round>_<arm>.json into $OUT.
#   ROUNDS=2 ENCODING=rgb8 DURATION=10 bash bench/results/2026-12-03-fifteenth/arm_ab.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 2
OUT="${OUT:-/tmp/xfeat_arm_ab}"
mkdir -p "${OUT}"
# shellcheck disable=SC1091
source bench/node_env.sh
DATA="${XFEAT_BENCH_DATA:-${PWD}/.devlite}"
for round in $(seq "${ROUNDS:-2}"); do
  for arm in true false; do
    echo "== round ${round} arm_next_frame=${arm} ($(date -u +%T))"
    timeout 150 env -u FASTDDS_DEFAULT_PROFILES_FILE python3 -m xfeat_ros.tools.bench node \
      --backend pytorch --images "${DATA}/data/tum_fr2_desk" \
      --weights "${DATA}/models/xfeat_backbone.npz" --encoding "${ENCODING:-rgb8}" \
      --configs 1x30 --duration "${DURATION:-10}" --node-param "arm_next_frame:=${arm}" \
      --log-dir "/tmp/xfeat_arm_ab/${round}_${arm}" --json "${OUT}/ab_${round}_${arm}.json" \
      2>&1 | grep -E "1x30|p50|armed|error|Error" | tail -6
  done
done
