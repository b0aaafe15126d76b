# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# Source this file (bash) to use the project's ROS 2 virtual environment:
#
#     source scripts/ros_env.sh
#
# - activates <repo>/.venv (created by scripts/setup_venv.sh),
# - puts the venv prefix on AMENT_PREFIX_PATH (xfeat_ros_msgs and the ros-*
#   wheels are found through the ament index there),
# - keeps DDS on this machine: ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, and a
#   ROS_DOMAIN_ID (an already exported one is kept, else 1..100 at random),
# - exports FASTDDS_DEFAULT_PROFILES_FILE=config/fastdds_shm.xml (large messages
#   through shared memory) unless a profile is exported already,
# - sets LD_LIBRARY_PATH like the ros-wheels-bootstrapper would (venv lib/ and
#   the wheels' ros_*.libs folders) and marks the bootstrap as done. Without
#   this, the bootstrapper's .pth hook re-executes EVERY start of the venv's
#   Python once (os.execve at site import, before any user code) to get
#   LD_LIBRARY_PATH set; rclpy cannot load its libraries without it.

_xfeat_env_src="${BASH_SOURCE[0]:-$0}"
_xfeat_repo="$(cd "$(dirname "${_xfeat_env_src}")/.." && pwd)"
_xfeat_venv="${_xfeat_repo}/.venv"

if [ ! -x "${_xfeat_venv}/bin/python" ]; then
  echo "ros_env.sh: ${_xfeat_venv} is missing; run scripts/setup_venv.sh first" >&2
  unset _xfeat_env_src _xfeat_repo _xfeat_venv
  # shellcheck disable=SC2317
  return 1 2>/dev/null || exit 1
fi

# shellcheck disable=SC1091
. "${_xfeat_venv}/bin/activate"

# Prepend $1 to the colon-separated variable named $2, without duplicates.
_xfeat_prepend() {
  local _dir="$1" _var="$2" _cur
  eval "_cur=\"\${${_var}:-}\""
  case ":${_cur}:" in
    *":${_dir}:"*) ;;
    *) eval "export ${_var}=\"${_dir}\${_cur:+:\${_cur}}\"" ;;
  esac
}

_xfeat_prepend "${_xfeat_venv}" AMENT_PREFIX_PATH

# Libraries of the ros-* wheels (what ros_wheels_bootstrapper computes).
for _xfeat_libs in "${_xfeat_venv}"/lib/python3.*/site-packages/ros_*.libs; do
  [ -d "${_xfeat_libs}" ] && _xfeat_prepend "${_xfeat_libs}" LD_LIBRARY_PATH
done
_xfeat_prepend "${_xfeat_venv}/lib" LD_LIBRARY_PATH
export _ROS_WHEELS_BOOTSTRAP_COMPLETE=1

# DDS must never leave this machine.
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
if [ -z "${ROS_DOMAIN_ID:-}" ]; then
  ROS_DOMAIN_ID=$(( RANDOM % 100 + 1 ))
fi
export ROS_DOMAIN_ID

# Large messages (images, Keypoints) through shared memory: the shipped Fast DDS
# profile (docs/transport.md), unless a profile is exported already.
if [ -z "${FASTDDS_DEFAULT_PROFILES_FILE:-}" ]; then
  export FASTDDS_DEFAULT_PROFILES_FILE="${_xfeat_repo}/config/fastdds_shm.xml"
fi

unset -f _xfeat_prepend
unset _xfeat_env_src _xfeat_repo _xfeat_venv _xfeat_libs
