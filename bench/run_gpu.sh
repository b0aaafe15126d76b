#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# xfeat_bench on the GPU machine: the pipeline table (against upstream XFeat) and the
# one-node matrix of docs/performance.md:
#
#   XFEAT_BENCH_DATA=$PWD/.devshared bash bench/run_gpu.sh [all|pipeline|node]
#
# with upstream's modules/ in .upstream/, the data in .devshared/ (bench/make_devshared.sh)
# and, for node mode, the ROS wheels in .whl/ (bench/fetch_gpu_wheels.sh).
#
# 1. gpu.txt: date, GPU, driver, Python / PyTorch / CUDA / CuPy versions;
# 2. pipeline mode (no ROS needed): our GPU engine at 1, 2, 4, 8, 16 frames in
#    flight next to the PyTorch reference and upstream XFeat (.upstream/modules)
#    at 640x480, 1280x720, 1920x1080 -> bench_pipeline.json;
# 3. the carried cp312 ROS 2 wheels (.whl/) into the machine's Python and the
#    message build (through bench/gpu_node_check.sh), then node mode at 1x30,
#    4x60, 8x120 Hz and as fast as possible, one run per NODE_VARIANTS word
#    (ENCODING:PROFILE[:NAME=VALUE], default rgb8:shipped; e.g. jpeg:shipped for compressed
#    cameras, rgb8:shipped:min_distance=20 for a node parameter)
#    -> bench_node_<ENCODING>_<PROFILE>[_<NAME><VALUE>].json,
#    node_extra.tar.gz (latency histograms, node and publisher logs);
# 4. run.log: everything printed.
#
# Data: $XFEAT_BENCH_DATA (default .devbench/, else the test fixtures) holds
# models/xfeat_backbone.npz and data/tum_fr2_desk/ (ignored by git). Knobs:
# PIPELINE_ARGS, NODE_ARGS (extra xfeat_bench options), BACKEND, PIPELINE_TIMEOUT,
# NODE_TIMEOUT (seconds), NODE_VARIANTS.
# Usage: bash bench/run_gpu.sh [all|pipeline|node]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT="${OUT:-/tmp/xfeat_bench}"
mkdir -p "${OUT}"
WHAT="${1:-all}"
DATA="${XFEAT_BENCH_DATA:-${PWD}/.devbench}"
[[ -d "${DATA}" ]] || DATA="${PWD}/test/data"   # the fixtures of a fresh clone
BACKEND="${BACKEND:-pytorch}"
IMAGES="${DATA}/data/tum_fr2_desk"
WEIGHTS="${DATA}/models/xfeat_backbone.npz"
[[ -f "${WEIGHTS}" ]] || WEIGHTS="${PWD}/xfeat_ros/data/xfeat_backbone.npz"   # packaged copy
export PYTHONUNBUFFERED=1
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST   # DDS stays on the machine
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$(( RANDOM % 100 + 1 ))}"
export XFEAT_ROS_WEIGHTS="${WEIGHTS}"
exec > >(tee -a "${OUT}/run.log") 2>&1

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import sys, numpy, torch, cupy, onnxruntime; print("python", sys.version.split()[0], "numpy", numpy.__version__, "torch", torch.__version__, "cuda", torch.version.cuda, "cupy", cupy.__version__, "onnxruntime", onnxruntime.__version__)'
  nproc
} 2>&1 | tee "${OUT}/gpu.txt"

rc_pipeline=0
rc_node=0
if [[ "${WHAT}" == all || "${WHAT}" == pipeline ]]; then
  echo "== pipeline mode ($(date -u +%T))"
  # shellcheck disable=SC2086
  PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}" timeout "${PIPELINE_TIMEOUT:-240}" python3 -m xfeat_ros.tools.bench \
    pipeline --backend "${BACKEND}" --images "${IMAGES}" --weights "${WEIGHTS}" \
    --upstream .upstream --json "${OUT}/bench_pipeline.json" ${PIPELINE_ARGS:-}
  rc_pipeline=$?
fi
if [[ "${WHAT}" == all || "${WHAT}" == node ]]; then
  echo "== ROS set-up ($(date -u +%T))"
  # the ROS wheels installed and the messages built by bench/gpu_node_check.sh (collection
  # of one test only), as bench/procs_matrix.sh does
  if ! OUT="${OUT}" bash bench/gpu_node_check.sh --co -q test/ros/test_rcl_io.py \
      > "${OUT}/setup_check.log" 2>&1; then
    tail -n 40 "${OUT}/setup_check.log"
    echo "run_gpu: ROS set-up failed"
    exit 3
  fi
  # shellcheck disable=SC1091
  source scripts/ros_env.sh
  export PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}"
  # NODE_VARIANTS: ENCODING:PROFILE[:NAME=VALUE] words (profile 'shipped' or 'default' =
  # Fast DDS defaults; encoding jpeg/png: compressed cameras; NAME=VALUE: a node parameter),
  # one node-mode run each -> bench_node_ENCODING_PROFILE[_NAMEVALUE].json;
  # latency histograms and logs -> node_extra.tar.gz.
  mkdir -p /tmp/xfeat_bench_extra
  for variant in ${NODE_VARIANTS:-rgb8:shipped}; do
    IFS=: read -r encoding profile param <<< "${variant}"
    [[ "${profile}" == default ]] && profile_arg='' || profile_arg="${profile}"
    name="${encoding}_${profile}"
    param_args=()
    if [[ -n "${param}" ]]; then  # NAME=VALUE: one node parameter of this run
      param_args=(--node-param "${param%%=*}:=${param#*=}")
      name="${name}_${param%%=*}${param#*=}"
    fi
    echo "== node mode ${encoding}, DDS profile ${profile} ${param} ($(date -u +%T))"
    # shellcheck disable=SC2086
    timeout "${NODE_TIMEOUT:-300}" env -u FASTDDS_DEFAULT_PROFILES_FILE \
      python -m xfeat_ros.tools.bench node --backend "${BACKEND}" --images "${IMAGES}" \
      --weights "${WEIGHTS}" --encoding "${encoding}" --dds-profile "${profile_arg}" \
      --log-dir "/tmp/xfeat_bench_logs/${name}" --json "${OUT}/bench_node_${name}.json" \
      --png "/tmp/xfeat_bench_extra/bench_node_latency_${name}.png" "${param_args[@]}" \
      ${NODE_ARGS:-} || rc_node=$?
  done
  tar czf "${OUT}/node_extra.tar.gz" -C /tmp xfeat_bench_logs xfeat_bench_extra
fi
echo "run_gpu: pipeline rc=${rc_pipeline} node rc=${rc_node} ($(date -u +%T))"
exit $(( rc_pipeline != 0 ? rc_pipeline : rc_node ))
