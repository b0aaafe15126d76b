#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# xfeat_bench node runs over several node processes with CUDA MPS (the node matrix and the
# port-queue table of docs/performance.md and docs/transport.md), on the GPU machine; the ROS
# wheels are carried in .whl/ (installed through bench/gpu_node_check.sh):
#     RUNS="rgb8:shipped:8x120:4 rgb8:shipped:8xmax:8" OUT=/tmp/procs bash bench/procs_matrix.sh
# RUNS: ENCODING:PROFILE:CONFIG:NODE_PROCESSES[:COLLECTOR_TAKE[:QUEUE_SIZE]] words (PROFILE 'shipped',
# a file, or 'default' = Fast DDS defaults; COLLECTOR_TAKE rcl (default) or rclpy; QUEUE_SIZE the
# node's queue_size, the shipped default when empty). A word may repeat (A/B rounds): its
# files then get a suffix _r2, _r3, ... Writes
# procs_<word>.json, lat_<word>.png, logs/ and summary.txt under $OUT, and $OUT.tar.gz.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT="${OUT:-/tmp/xfeat_procs}"
mkdir -p "${OUT}/logs"
# the ROS wheels installed and the messages built as for the node tests (collection only)
if ! OUT="${OUT}" bash bench/gpu_node_check.sh --co -q test/ros/test_rcl_io.py > "${OUT}/setup_check.log" 2>&1; then
  tail -n 30 "${OUT}/setup_check.log"
  exit 3
fi
# shellcheck disable=SC1091
source scripts/ros_env.sh
export PYTHONPATH="${PWD}" PYTHONUNBUFFERED=1 ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$(( RANDOM % 100 + 1 ))}"
export XFEAT_ROS_WEIGHTS="${PWD}/xfeat_ros/data/xfeat_backbone.npz"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mkdir -p "${CUDA_MPS_PIPE_DIRECTORY}" "${CUDA_MPS_LOG_DIRECTORY}"
nvidia-cuda-mps-control -d && echo "MPS daemon started" | tee "${OUT}/summary.txt"
rc=0
for word in ${RUNS:-rgb8:shipped:8x120:4}; do
  IFS=: read -r encoding profile config procs take queue <<< "${word}"
  [[ "${profile}" == default ]] && profile_arg='' || profile_arg="${profile}"
  queue_arg=()
  [[ -n "${queue:-}" ]] && queue_arg=(--queue-size "${queue}")
  name="$(tr ':/' '__' <<< "${word}")"
  round=1 suffix=''
  while [[ -e "${OUT}/procs_${name}${suffix}.json" ]]; do
    round=$((round + 1)) suffix="_r${round}"
  done
  name="${name}${suffix}"
  echo "== ${word} ($(date -u +%T))" | tee -a "${OUT}/summary.txt"
  timeout "${RUN_TIMEOUT:-150}" env -u FASTDDS_DEFAULT_PROFILES_FILE \
    python -m xfeat_ros.tools.bench node --backend pytorch --images test/data/data/tum_fr2_desk \
    --weights "${XFEAT_ROS_WEIGHTS}" --encoding "${encoding}" --dds-profile "${profile_arg}" \
    --configs "${config}" --node-processes "${procs}" --collector-take "${take:-rcl}" "${queue_arg[@]}" \
    --duration "${DURATION:-8}" --log-dir "${OUT}/logs/${name}" --json "${OUT}/procs_${name}.json" \
    --png "${OUT}/lat_${name}.png" 2>&1 | tail -n 1 | tee -a "${OUT}/summary.txt" || rc=1
done
echo quit | nvidia-cuda-mps-control
tar czf "${OUT}.tar.gz" -C "$(dirname "${OUT}")" "$(basename "${OUT}")"
exit "${rc}"
