#!/bin/bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
# Issue 10's CPU case on this 2-core machine (third session, image receiver): the second
# session's script, writing here.
cd "$(dirname "$0")" && OUT=bench/results/2026-12-01-node-cpu-4 LOGS=/tmp/cpu4_logs \
  ROS_DOMAIN_ID=24 exec bash ../2026-12-01-node-cpu-2/run.sh
