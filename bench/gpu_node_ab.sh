#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# Node benchmarks of one GPU call, after bench/gpu_node_check.sh has installed the ROS
# wheels on the (warm) machine:
#
#   run(command="bash bench/gpu_node_ab.sh", carry=[".base"])
#
# 1. A/B of the node's image receipt: .base/xfeat_ros (an earlier commit's package, made
#    with `git archive <commit> xfeat_ros kernels config | tar -x -C .base`; ignored by git) against the
#    working tree, at 1x30 and 8x120 (rgb8, shipped DDS profile; AB_CONFIGS picks others),
#    interleaved twice;
# 2. the working tree at 1x30 mono8 (MONO_AB=1: .base first, MONO_ROUNDS rounds);
# 3. several node processes with and without CUDA MPS (nvidia-cuda-mps-control), at 8x120
#    over 4 processes (with MPS also with queue_size 2) and 8xmax over 8 processes (rgb8).
# 4. (section malloc) glibc's default heap against xfeat_ros.heap's thresholds
#    (XFEAT_ROS_MALLOC=default in every process, or not), 1x30 rgb8 and mono8, twice;
# 5. (section gc, with MPS) 8x120 over 4 node processes, .base against the working tree,
#    every node under bench/gc_probe.py (its collections in the node logs), twice.
# 6. (section heapload) 8x120 with XFEAT_ROS_MALLOC=default against the tuned heap: over 4
#    node processes with MPS (HEAPLOAD_ROUNDS times, default 2), then one node (unless
#    HEAPLOAD_MPS_ONLY is set).
# 7. (section hostprof) the GPU engine's host and device time per frame as the node drives
#    it (bench/host_profile.py), groups of 1 and 8, back to back and paced at 30 Hz, with
#    the SM clock sampled every 200 ms ($OUT/clocks.csv).
# 8. (section pubmode) rmw_fastrtps' publication mode of the node only (the publishers and
#    the collector keep rmw's default, SYNCHRONOUS: sent within publish):
#    RMW_FASTRTPS_PUBLICATION_MODE SYNCHRONOUS against ASYNCHRONOUS (a Fast DDS thread sends
#    each sample), rgb8, configurations PUBMODE_CONFIGS (default "1x30 8x120"), interleaved,
#    PUBMODE_ROUNDS rounds (default 2).
# 9. (section pubmode4) the same two modes at 8x120 over 4 node processes with CUDA MPS,
#    interleaved, PUBMODE_ROUNDS rounds.
# 10. (section procs) .base against the working tree at 8x120 over 4 node processes with CUDA
#    MPS, interleaved, PROCS_ROUNDS rounds (default 2).
# SECTIONS picks some of 'ab mono mps malloc gc heapload hostprof pubmode pubmode4 procs' (default 'ab mono
# mps'); MPS_ONLY=1 leaves out the 8xmax runs.
# Every result: $OUT/node_ab.tar.gz (JSON and node logs); one line each in $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT="${OUT:-/tmp/xfeat_ab}"
mkdir -p "${OUT}" /tmp/ab
export PYTHONUNBUFFERED=1
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST   # DDS stays on the machine
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$(( RANDOM % 100 + 1 ))}"
# shellcheck disable=SC1091
source scripts/ros_env.sh
export PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}"
IMAGES="${PWD}/test/data/data/tum_fr2_desk"
WEIGHTS="${PWD}/xfeat_ros/data/xfeat_backbone.npz"
DURATION="${DURATION:-8}"

summary() {  # summary NAME: one line per configuration of /tmp/ab/NAME.json
  python3 - "$1" <<'EOF' | tee -a "${OUT}/summary.txt"
import json, sys
name = sys.argv[1]
result = json.load(open(f'/tmp/ab/{name}.json'))
for c in result['configs']:
    lat = c.get('latency') or {}
    stages = c.get('node_stage_medians_ms') or {}
    first = next(iter(stages.values()), {})
    print(f"{name} {c['label']} procs {c.get('node_processes')}: out {c.get('output_hz') or 0:.1f}/s, "
          f"dropped {c.get('dropped')} of {c.get('published')} "
          f"(not sent: {c.get('publish_failed')}), p50 {lat.get('median_ms')}, "
          f"p99 {lat.get('p99_ms')} ms, cpu {c.get('node_cpu_percent') or 0:.0f} %, "
          f"stages {first}, error {c.get('error')}")
EOF
}

bench() {  # bench NAME ARGS...: one xfeat_bench node run into /tmp/ab/NAME.json
  local name="$1"
  shift
  echo "== ${name} ($(date -u +%T))"
  timeout 240 python3 -m xfeat_ros.tools.bench node --backend pytorch --images "${IMAGES}" \
    --weights "${WEIGHTS}" --duration "${DURATION}" --log-dir "/tmp/ab/logs_${name}" \
    --json "/tmp/ab/${name}.json" "$@" > "/tmp/ab/${name}.txt" 2>&1
  summary "${name}"
}

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import sys, torch, cupy, rclpy; print("python", sys.version.split()[0], "torch", torch.__version__, "cupy", cupy.__version__)'
  nproc
} > "${OUT}/summary.txt" 2>&1
cat "${OUT}/summary.txt"

# PYTHONSAFEPATH: `python3 -m xfeat_ros.node` must not put the working directory (this
# checkout) before .base on sys.path (Python >= 3.11).
BASE_WRAPPER="env PYTHONSAFEPATH=1 PYTHONPATH=${PWD}/.base:${PYTHONPATH}"
${BASE_WRAPPER} python3 -c \
  'import xfeat_ros.node as n; print("base node:", n.__file__)' | tee -a "${OUT}/summary.txt"
SECTIONS="${SECTIONS:-ab mono mps}"
if [[ " ${SECTIONS} " == *" ab "* ]]; then
  for round in 1 2; do
    bench "base_${round}" --configs "${AB_CONFIGS:-1x30,8x120}" --node-wrapper "${BASE_WRAPPER}"
    bench "new_${round}" --configs "${AB_CONFIGS:-1x30,8x120}"
  done
fi
if [[ " ${SECTIONS} " == *" mono "* ]]; then
  for round in $(seq "${MONO_ROUNDS:-1}"); do
    [[ -z "${MONO_AB:-}" ]] || bench "base_mono8_${round}" --configs 1x30 --encoding mono8 \
      --node-wrapper "${BASE_WRAPPER}"
    bench "new_mono8${MONO_AB:+_${round}}" --configs 1x30 --encoding mono8
  done
fi
if [[ " ${SECTIONS} " == *" malloc "* ]]; then
  for round in 1 2; do
    for encoding in rgb8 mono8; do
      XFEAT_ROS_MALLOC=default bench "malloc_default_${encoding}_${round}" --configs 1x30 \
        --encoding "${encoding}"
      bench "malloc_tuned_${encoding}_${round}" --configs 1x30 --encoding "${encoding}"
    done
  done
fi
if [[ " ${SECTIONS} " == *" hostprof "* ]]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,utilization.gpu --format=csv -lms 200 \
    > "${OUT}/clocks.csv" 2>&1 &
  clocks=$!
  for pace in 0 33; do
    for group in 1 8; do
      echo "start $(date -u +%T.%N) pace ${pace} group ${group}" >> "${OUT}/clocks_marks.txt"
      python3 bench/host_profile.py --frames 480 --group "${group}" --pace-ms "${pace}" 2>&1 \
        | tail -n 1 | tee -a "${OUT}/summary.txt"
    done
  done
  kill "${clocks}"
fi
if [[ " ${SECTIONS} " == *" pubmode "* ]]; then
  for round in $(seq "${PUBMODE_ROUNDS:-2}"); do
    for config in ${PUBMODE_CONFIGS:-1x30 8x120}; do
      for mode in SYNCHRONOUS ASYNCHRONOUS; do
        bench "pubmode_${mode}_${config}_${round}" --configs "${config}" \
          --node-wrapper "env RMW_FASTRTPS_PUBLICATION_MODE=${mode}"
      done
    done
  done
fi
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps_pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps_log
mps_start() {  # start the CUDA MPS control daemon; fails where the machine has none
  mkdir -p "${CUDA_MPS_PIPE_DIRECTORY}" "${CUDA_MPS_LOG_DIRECTORY}"
  command -v nvidia-cuda-mps-control > /dev/null && nvidia-cuda-mps-control -d
}
mps_stop() {
  echo quit | nvidia-cuda-mps-control
}
if [[ " ${SECTIONS} " == *" pubmode4 "* ]]; then
  mps_start && echo "MPS daemon started" | tee -a "${OUT}/summary.txt"
  for round in $(seq "${PUBMODE_ROUNDS:-2}"); do
    for mode in SYNCHRONOUS ASYNCHRONOUS; do
      bench "pubmode4_${mode}_8x120_${round}" --configs 8x120 --node-processes 4 \
        --node-wrapper "env RMW_FASTRTPS_PUBLICATION_MODE=${mode}"
    done
  done
  mps_stop
fi
if [[ " ${SECTIONS} " == *" procs "* ]]; then
  mps_start && echo "MPS daemon started" | tee -a "${OUT}/summary.txt"
  for round in $(seq "${PROCS_ROUNDS:-2}"); do
    bench "procs_base_${round}" --configs 8x120 --node-processes 4 --node-wrapper "${BASE_WRAPPER}"
    bench "procs_new_${round}" --configs 8x120 --node-processes 4
  done
  mps_stop
fi
if [[ " ${SECTIONS} " == *" gc "* ]]; then
  if mps_start; then
    for round in 1 2; do
      bench "gc_base_${round}" --configs 8x120 --node-processes 4 \
        --node-wrapper "${BASE_WRAPPER} python3 ${PWD}/bench/gc_probe.py"
      bench "gc_new_${round}" --configs 8x120 --node-processes 4 \
        --node-wrapper "python3 ${PWD}/bench/gc_probe.py"
    done
    mps_stop
    grep -h 'gc_probe:' /tmp/ab/logs_gc_*/node* > "${OUT}/gc_probe.txt" 2>/dev/null
  else
    echo "no MPS daemon on this machine" | tee -a "${OUT}/summary.txt"
  fi
fi
if [[ " ${SECTIONS} " == *" heapload "* ]]; then
  mps_start && echo "MPS daemon started" | tee -a "${OUT}/summary.txt"
  for round in $(seq "${HEAPLOAD_ROUNDS:-2}"); do
    XFEAT_ROS_MALLOC=default bench "heapload_default_${round}" --configs 8x120 --node-processes 4
    bench "heapload_tuned_${round}" --configs 8x120 --node-processes 4
  done
  mps_stop
  if [[ -z "${HEAPLOAD_MPS_ONLY:-}" ]]; then
    XFEAT_ROS_MALLOC=default bench heapload_default_1node --configs 8x120
    bench heapload_tuned_1node --configs 8x120
  fi
fi
[[ " ${SECTIONS} " == *" mps "* ]] || { tar czf "${OUT}/node_ab.tar.gz" -C /tmp ab; exit 0; }

bench procs_no_mps --configs 8x120 --node-processes 4
[[ -n "${MPS_ONLY:-}" ]] || bench procs8_no_mps --configs 8xmax --node-processes 8
if mps_start; then
  echo "MPS daemon started" | tee -a "${OUT}/summary.txt"
  bench procs_mps --configs 8x120 --node-processes 4
  bench procs_mps_queue2 --configs 8x120 --node-processes 4 --queue-size 2
  [[ -n "${MPS_ONLY:-}" ]] || bench procs8_mps --configs 8xmax --node-processes 8
  mps_stop
else
  echo "no MPS daemon on this machine" | tee -a "${OUT}/summary.txt"
fi
tar czf "${OUT}/node_ab.tar.gz" -C /tmp ab
echo "gpu_node_ab: done ($(date -u +%T))"
