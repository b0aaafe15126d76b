#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# The GPU engine's host and device time per frame (bench/host_profile.py), this tree
# against a base tree in .base/ (git archive <commit> xfeat_ros kernels config
# bench/host_profile.py | tar -x -C .base; its weights come from this tree), interleaved:
# ROUNDS rounds (default 2) of every PACES x SIZES pair (default paces "33 0", group sizes
# "1 8"), FRAMES frames each (default 300). One line per run in $OUT/host_ab.txt.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT="${OUT:-/tmp/xfeat_host_ab}"
mkdir -p "${OUT}"
[[ -d .base/xfeat_ros ]] || { echo "gpu_host_ab: no .base/xfeat_ros (see the header)"; exit 2; }
mkdir -p .base/xfeat_ros/data
cp -n xfeat_ros/data/xfeat_backbone.npz .base/xfeat_ros/data/ 2>/dev/null
export PYTHONUNBUFFERED=1
IMAGES="${PWD}/test/data/data/tum_fr2_desk/rgb"
for round in $(seq "${ROUNDS:-2}"); do
  for pace in ${PACES:-33 0}; do
    for group in ${SIZES:-1 8}; do
      for arm in base new; do
        script=bench/host_profile.py
        [[ ${arm} == base ]] && script=.base/bench/host_profile.py
        line=$(PYTHONSAFEPATH=1 timeout 300 python3 "${script}" --images "${IMAGES}" \
          --frames "${FRAMES:-300}" --group "${group}" --pace-ms "${pace}" 2>&1 | tail -n 1)
        echo "round ${round} ${arm}: ${line}" | tee -a "${OUT}/host_ab.txt"
      done
    done
  done
done
