# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# Sourced, from the repository root, by the node benchmark scripts that run on the GPU
# machine (bench/node_ab.sh, the fifteenth session's arm_ab.sh): the ROS environment of this
# checkout (.venv pointing at the machine's Python, where bench/gpu_node_check.sh installed
# the ROS wheels), the checkout on PYTHONPATH, DDS kept on this machine in a domain of its own.
[[ -e .venv ]] || ln -s "$(python3 -c 'import sys; print(sys.prefix)')" .venv
# shellcheck disable=SC1091
source scripts/ros_env.sh
export PYTHONPATH="${PWD}" PYTHONUNBUFFERED=1 ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$(( RANDOM % 100 + 1 ))}"
