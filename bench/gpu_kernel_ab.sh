#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# A change to kernels/ or xfeat_ros/gpu/ on the GPU machine, checked and timed against a base
# tree in .base/ in one call (the device tool; carry .devshared and .base). .base is
#   git archive <commit> xfeat_ros kernels config $(git ls-tree --name-only <commit> bench/ \
#     | grep '\.py$\|\.sh$') | tar -x -C .base      (its weights come from this tree)
# SECTIONS (default "tests ransac engine"; also "timeline" and "host"):
#   tests     the GPU suite and the NVRTC compile test (bench/gpu_check.sh tests), then
#             test/test_gpu_ransac.py
#   ransac    bench/ransac_timing.py on $XFEAT_ROS_SHARED/matches.npz (its --save-matches),
#             base then new; the device's masks, models and hypotheses of every pair
#             compared bit for bit (ransac_fits.txt)
#   engine    bench/engine_ab.py, variants ENGINE_VARIANTS (default shipped,fused_norm=off),
#             groups ENGINE_GROUPS (default 1,8), ENGINE_ROUNDS rounds (default 3), interleaved in one process (this tree)
#   timeline  bench/device_timeline.py, base then new: groups TIMELINE_GROUPS (default 1),
#             paced TIMELINE_PAUSE_MS (default 33)
#   pipeline  xfeat_bench pipeline at PIPELINE_SIZES (default 640x480), 1, 8, 16 and 32 in
#             flight, base then new, ROUNDS rounds (default 2); pipeline_<arm>_<round>.json
#   host      bench/gpu_host_ab.sh (ROUNDS, PACES, SIZES, FRAMES as there)
#   phases    bench/refine_phases.py on $XFEAT_ROS_SHARED/matches.npz: the check's refinement
#             per phase (clock64 stamps), this tree only
# NEW_ENV (e.g. "CUDA_DEVICE_MAX_CONNECTIONS=32"): extra environment of the new arm only, in
# the timeline and pipeline sections (an A/B of a setting: .base may be this tree's commit).
# BASE (default .base): another base tree of the same form, e.g. BASE=.base2 for a second
# A/B in the same call.
# Everything lands in $OUT; one summary line per step in $OUT/steps.txt.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT="${OUT:-/tmp/xfeat_kernel_ab}"
mkdir -p "${OUT}"
export PYTHONUNBUFFERED=1
export XFEAT_ROS_SHARED="${XFEAT_ROS_SHARED:-${PWD}/.devshared}"
SHARED="${XFEAT_ROS_SHARED}"
BASE="${BASE:-.base}"
[[ -d ${BASE}/xfeat_ros ]] || { echo "gpu_kernel_ab: no ${BASE}/xfeat_ros (see the header)"; exit 2; }
mkdir -p "${BASE}/xfeat_ros/data"
cp -n xfeat_ros/data/xfeat_backbone.npz "${BASE}/xfeat_ros/data/" 2>/dev/null
[[ -e ${BASE}/test ]] || ln -s ../test "${BASE}/test"
rc=0

step() {  # step NAME LOG COMMAND...: run, keep the log, note rc and seconds
  local name=$1 log=$2 start=${SECONDS} status
  shift 2
  "$@" > "${OUT}/${log}" 2>&1
  status=$?
  echo "${name}: rc=${status} $((SECONDS - start)) s, $(tail -n 1 "${OUT}/${log}")" \
    | tee -a "${OUT}/steps.txt"
  [[ ${status} -ne 0 ]] && rc=${status}
  return 0
}

for section in ${SECTIONS:-tests ransac engine}; do
  case ${section} in
    tests)
      step gpu_suite gpu_check.log env OUT="${OUT}/check" timeout 300 bash bench/gpu_check.sh tests
      step gpu_ransac_tests gpu_ransac.log env PYTHONPATH="${PWD}" timeout 200 \
        python3 -m pytest -q -rs -p no:cacheprovider test/test_gpu_ransac.py
      ;;
    ransac)
      for arm in base new; do
        tree="${PWD}"
        [[ ${arm} == base ]] && tree="${PWD}/${BASE}"
        step "ransac_${arm}" "ransac_${arm}.log" env PYTHONPATH="${tree}" timeout 240 \
          python3 bench/ransac_timing.py --shared "${SHARED}" --matches "${SHARED}/matches.npz" \
          --no-reference --reps 30 --out "${OUT}/ransac_${arm}.json" \
          --save-fits "${OUT}/fits_${arm}.npz"
      done
      step ransac_fits ransac_fits.txt python3 -c '
import sys
import numpy as np
base, new = np.load(sys.argv[1]), np.load(sys.argv[2])
keys = sorted(base.files)
same = [k for k in keys if k in new.files and np.array_equal(base[k], new[k], equal_nan=True)]
for k in keys:
    if k not in same:
        print("differs:", k)
print(f"{len(same)} of {len(keys)} arrays equal bit for bit ({len(new.files)} in new)")
sys.exit(0 if len(same) == len(keys) == len(new.files) else 1)
' "${OUT}/fits_base.npz" "${OUT}/fits_new.npz"
      ;;
    engine)
      step engine_ab engine_ab.log timeout 400 python3 bench/engine_ab.py --shared "${SHARED}" \
        --variants "${ENGINE_VARIANTS:-shipped,fused_norm=off}" --groups "${ENGINE_GROUPS:-1,8}" \
        --rounds "${ENGINE_ROUNDS:-3}" --out "${OUT}/engine_ab.json"
      ;;
    timeline)
      for arm in base new; do
        script=bench/device_timeline.py
        [[ ${arm} == base ]] && script=${BASE}/bench/device_timeline.py
        extra=()
        [[ ${arm} == new ]] && read -r -a extra <<< "${NEW_ENV:-}"
        step "timeline_${arm}" "timeline_${arm}.log" env "${extra[@]}" timeout 200 python3 "${script}" \
          --shared "${SHARED}" --groups "${TIMELINE_GROUPS:-1}" \
          --pause-ms "${TIMELINE_PAUSE_MS:-33}" --out "${OUT}/timeline_${arm}.json"
      done
      ;;
    pipeline)
      for round in $(seq "${ROUNDS:-2}"); do
        for arm in base new; do
          tree="${PWD}"
          extra=()
          [[ ${arm} == base ]] && tree="${PWD}/${BASE}"
          [[ ${arm} == new ]] && read -r -a extra <<< "${NEW_ENV:-}"
          step "pipeline_${arm}_${round}" "pipeline_${arm}_${round}.log" \
            env "${extra[@]}" PYTHONSAFEPATH=1 PYTHONPATH="${tree}" timeout 300 python3 -m xfeat_ros.tools.bench \
            pipeline --backend pytorch --images "${SHARED}/data/tum_fr2_desk" \
            --weights "${PWD}/xfeat_ros/data/xfeat_backbone.npz" \
            --resolutions "${PIPELINE_SIZES:-640x480}" --in-flight 1,8,16,32 \
            --baseline-in-flight 1 --no-machine-rates \
            --json "${OUT}/pipeline_${arm}_${round}.json"
        done
      done
      ;;
    host)
      step host_ab host_ab.log env OUT="${OUT}" bash bench/gpu_host_ab.sh
      ;;
    phases)
      step refine_phases refine_phases.log env PYTHONPATH="${PWD}" timeout 200 \
        python3 bench/refine_phases.py --matches "${SHARED}/matches.npz" \
        --out "${OUT}/refine_phases.json"
      ;;
    *)
      echo "gpu_kernel_ab: unknown section ${section}"
      exit 2
      ;;
  esac
done
echo "gpu_kernel_ab: rc=${rc}"
exit "${rc}"
