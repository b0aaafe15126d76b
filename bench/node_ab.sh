#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# The node on several trees, interleaved rounds, `xfeat_bench node` (GPU machine, ROS wheels
# installed by bench/gpu_node_check.sh first; carry every older tree):
#   TREES="base new" ROUNDS=2 ENCODINGS="rgb8 mono8" CONFIGS=1x30 DURATION=8 OUT=... \
#     bash bench/node_ab.sh
# A tree named X other than `new` is the directory .X at the repository root (carry it),
# made with
#   mkdir .X; git archive C xfeat_ros kernels config | tar -x -C .X; rm .X/xfeat_ros/data/*.npz
# `new` is the working tree. An entry TREE@VAR=VALUE runs TREE with VAR=VALUE in the node's
# environment only (e.g. new@RMW_FASTRTPS_PUBLICATION_MODE=SYNCHRONOUS; label TREE-value);
# TREE@cpus=LIST runs the node under `taskset -c LIST` (label TREE-cpusLIST).
# Each run writes OUT/<label>_<encoding>_<round>.json and .txt and prints one summary line
# (latency and reader p50/p99, drops, the node's stage medians).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT="${OUT:-/tmp/xfeat_node_ab}"
mkdir -p "${OUT}"
# shellcheck disable=SC1091
source bench/node_env.sh
for entry in ${TREES:-base new}; do
  tree="${entry%%@*}"
  if [[ "${tree}" != new && ! -d ".${tree}/xfeat_ros" ]]; then
    echo "node_ab: .${tree} is missing (carry it)"
    exit 2
  fi
done
for round in $(seq "${ROUNDS:-2}"); do
  for encoding in ${ENCODINGS:-rgb8}; do
    for entry in ${TREES:-base new}; do
      tree="${entry%%@*}" setting="" label="${entry%%@*}"
      if [[ "${entry}" == *@* ]]; then
        setting="${entry#*@}"
        label="${tree}-$(tr '[:upper:]' '[:lower:]' <<< "${setting#*=}")"
      fi
      node_env=() pin=""
      if [[ "${setting}" == cpus=* ]]; then
        pin="taskset -c ${setting#cpus=}" label="${tree}-cpus${setting#cpus=}"
      elif [[ -n "${setting}" ]]; then
        node_env+=("${setting}")
      fi
      if [[ "${tree}" != new ]]; then
        # PYTHONSAFEPATH: the working directory must not come before the older tree
        node_env+=(PYTHONSAFEPATH=1 "PYTHONPATH=${PWD}/.${tree}:${PWD}")
      fi
      wrapper=()
      if [[ ${#node_env[@]} -gt 0 || -n "${pin}" ]]; then
        wrapper=(--node-wrapper "${pin:+${pin} }env ${node_env[*]}")
      fi
      name="${label}_${encoding}_${round}"
      echo "== ${name} ($(date -u +%T))"
      timeout 300 python3 -m xfeat_ros.tools.bench node --backend pytorch \
        --images test/data/data/tum_fr2_desk --weights xfeat_ros/data/xfeat_backbone.npz \
        --encoding "${encoding}" --configs "${CONFIGS:-1x30}" --duration "${DURATION:-8}" \
        "${wrapper[@]}" --log-dir "/tmp/xfeat_node_ab/${name}" --json "${OUT}/${name}.json" \
        > "${OUT}/${name}.txt" 2>&1
      python3 - "${OUT}/${name}.json" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))['configs']:
    lat, rd = c.get('latency') or {}, c.get('latency_at_reader') or {}
    st = next(iter((c.get('node_stage_medians_ms') or {}).values()), {})
    print(f"  {c['label']}: p50/p99 {lat.get('median_ms', 0):.2f}/{lat.get('p99_ms', 0):.2f} "
          f"reader {rd.get('median_ms', 0):.2f}/{rd.get('p99_ms', 0):.2f} "
          f"out {c.get('output_hz', 0):.0f} Hz dropped {c.get('dropped')} stages {st} "
          f"error {c.get('error')}")
PY
    done
  done
done
