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
# Since the seventeenth session this runs bench/node_ab.sh, which does the same for any trees
# (the sixteenth session ran the equivalent loop written out here).
TREES="base mid new" OUT="${OUT:-/tmp/xfeat_ab3}" \
  exec bash "$(dirname "${BASH_SOURCE[0]}")/../../node_ab.sh"
