#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# The node at 1 x 30 Hz on three trees, interleaved rounds (GPU machine, ROS wheels installed
# by bench/gpu_node_check.sh first; carry .base and .mid):
#   base = .base (the session's start, a52c4f1), mid = .mid (1166a53: the image thread fires
#   the armed frame), new = the working tree (also: no copy into staging).
# Each tree made with
#   mkdir .X; git archive C xfeat_ros kernels config | tar -x -C .X; rm .X/xfeat_ros/data/*.npz
#   ROUNDS=2 ENCODINGS="rgb8 mono8" DURATION=8 OUT=... bash bench/results/2026-12-03-sixteenth/ab3.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 2
OUT="${OUT:-/tmp/xfeat_ab3}"
mkdir -p "${OUT}"
[[ -e .venv ]] || ln -s "$(python3 -c 'import sys; print(sys.prefix)')" .venv
# shellcheck disable=SC1091
source scripts/ros_env.sh
export PYTHONPATH="${PWD}" PYTHONUNBUFFERED=1 ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$(( RANDOM % 100 + 1 ))}"
for round in $(seq "${ROUNDS:-2}"); do
  for encoding in ${ENCODINGS:-rgb8}; do
    for tree in base mid new; do
      wrapper=()
      if [[ "${tree}" != new ]]; then
        [[ -d ".${tree}/xfeat_ros" ]] || { echo "ab3: .${tree} is missing (carry it)"; exit 2; }
        # PYTHONSAFEPATH: the working directory must not come before the older tree
        wrapper=(--node-wrapper "env PYTHONSAFEPATH=1 PYTHONPATH=${PWD}/.${tree}:${PWD}")
      fi
      name="${tree}_${encoding}_${round}"
      echo "== ${name} ($(date -u +%T))"
      timeout 150 python3 -m xfeat_ros.tools.bench node --backend pytorch \
        --images test/data/data/tum_fr2_desk --weights xfeat_ros/data/xfeat_backbone.npz \
        --encoding "${encoding}" --configs 1x30 --duration "${DURATION:-8}" "${wrapper[@]}" \
        --log-dir "/tmp/xfeat_ab3/${name}" --json "${OUT}/${name}.json" > "${OUT}/${name}.txt" 2>&1
      python3 - "${OUT}/${name}.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))['configs'][0]
lat, rd = c.get('latency') or {}, c.get('latency_at_reader') or {}
st = next(iter((c.get('node_stage_medians_ms') or {}).values()), {})
cnt = next(iter((c.get('node_counts') or {}).values()), {})
print(f"  p50/p99 {lat.get('median_ms', 0):.2f}/{lat.get('p99_ms', 0):.2f} reader "
      f"{rd.get('median_ms', 0):.2f}/{rd.get('p99_ms', 0):.2f} dropped {c.get('dropped')} "
      f"stages {st} counts {cnt} error {c.get('error')}")
PY
    done
  done
done
