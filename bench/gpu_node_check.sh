#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# The node end to end on the GPU machine (no ROS, no network there): install the
# cp312 ROS 2 wheels carried in .whl/ into the machine's Python (which has
# torch and cupy), build xfeat_ros_msgs with CMake, then run the GPU node tests.
#
# Here, once:   bash bench/fetch_gpu_wheels.sh   (the wheels into .whl/, git-ignored);
#               the test data travel in .devshared/ (bash bench/make_devshared.sh).
# Device calls (the carry limit is 64 MiB, so wheels and data travel in two calls
# to one warm machine; the installed wheels stay in its Python between calls):
#   run(command="bash bench/gpu_node_check.sh --co -q", carry=[".whl"])   # install
#   run(command="bash bench/gpu_node_check.sh", carry=[".devshared"])     # test
# When .whl and the tracked tree together pass 64 MiB (the wheels are ~51 MB), the wheels
# go in two calls: the first carries part of them as .whl1 and runs
# `mkdir -p /tmp/whl && cp .whl1/* /tmp/whl/`, the second carries the rest as .whl; this
# script merges /tmp/whl into .whl before installing.
# Arguments: test files / pytest arguments (default: every end-to-end node test).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -d /tmp/whl ]]; then  # wheels carried by an earlier call to this warm machine
  mkdir -p .whl
  cp -n /tmp/whl/* .whl/
fi
OUT="${OUT:-/tmp/xfeat_out}"
mkdir -p "${OUT}"
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST   # DDS stays on the machine
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$(( RANDOM % 100 + 1 ))}"
export XFEAT_ROS_SHARED="${XFEAT_ROS_SHARED:-$PWD/.devshared}"

# The machine's python3 is itself a venv (with torch and cupy); a venv made
# from it would not see those packages, so .venv points at it and the ROS
# wheels go into it (the machine is thrown away after the lease).
if [[ -d .venv && ! -L .venv ]]; then
  rm -rf .venv  # a venv left by an earlier call on this (throwaway) machine
fi
if [[ ! -e .venv ]]; then
  ln -s "$(python3 -c 'import sys; print(sys.prefix)')" .venv
fi
XFEAT_SETUP_PROFILE=ros \
  XFEAT_PIP_ARGS="--no-index --find-links $PWD/.whl --no-build-isolation" \
  bash scripts/setup_venv.sh 2>&1 | tee "${OUT}/setup.log"
# shellcheck disable=SC1091
source scripts/ros_env.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G '.whl/rosbags-*.whl' > /dev/null; then  # for the offline (bag) tests
  python -m pip install -q --no-index --find-links "$PWD/.whl" 'rosbags>=0.11' 2>&1 \
    | tee -a "${OUT}/setup.log"
fi
if compgen -G '.gpuwhl/torchvision-*.whl' > /dev/null; then  # nvJPEG for compressed inputs
  python -m pip install -q --no-index --no-deps .gpuwhl/torchvision-*.whl 2>&1 \
    | tee -a "${OUT}/setup.log"
fi
python -c 'import rclpy, cupy, torch, xfeat_ros_msgs.msg; print("ros+gpu ok", torch.__version__)'
# Default: every test that runs the node (or xfeat_offline) end to end; on this
# machine backend auto picks the PyTorch + CUDA engine, so they run the GPU path.
TESTS=(test/integration/test_gpu_node.py test/integration/test_node_outputs.py test/integration/test_node_tracks.py
       test/tools/test_offline.py test/integration/test_node_e2e.py)
if [[ $# -gt 0 ]]; then TESTS=("$@"); fi
python -m pytest -p no:cacheprovider -q -rs "${TESTS[@]}" 2>&1 | tee "${OUT}/gpu_node.log"
