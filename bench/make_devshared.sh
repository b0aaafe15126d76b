#!/usr/bin/env bash
# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
#
# Build .devshared/ (git-ignored through .git/info/exclude): the part of ../shared that the
# GPU machine's scripts read, small enough to carry with the device tool beside the working
# tree and .upstream/ (64 MiB in all):
#   models/, golden/, docs/, TUM fr2/desk, Oxford graf images 1-3 (the golden ones),
#   EuRoC V1_01 with its first EUROC_FRAMES frames a camera (default 10; the track test that
#   needs 20 then skips there, saying so, and runs on CI with the full data).
# Usage: bash bench/make_devshared.sh [SHARED (default ../shared)] [DEST (default .devshared)]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SHARED="$(cd "${1:-../shared}" && pwd)"
DEST="${2:-.devshared}"
FRAMES="${EUROC_FRAMES:-10}"
if [[ "${DEST}" != /* ]]; then  # inside the checkout: keep git from seeing it
  mkdir -p .git/info
  grep -qx "/${DEST}/" .git/info/exclude 2>/dev/null || echo "/${DEST}/" >> .git/info/exclude
fi
rm -rf "${DEST}"
mkdir -p "${DEST}/data/oxford_graf" "${DEST}/data/euroc_v101_stereo"
cp -r "${SHARED}/models" "${SHARED}/golden" "${SHARED}/docs" "${DEST}/"
cp -r "${SHARED}/data/README.md" "${SHARED}/data/tum_fr2_desk" "${DEST}/data/"
for f in "${SHARED}"/data/oxford_graf/*; do
  case "$(basename "$f")" in img[456].ppm) ;; *) cp "$f" "${DEST}/data/oxford_graf/" ;; esac
done
euroc="${SHARED}/data/euroc_v101_stereo"
find "${euroc}" -maxdepth 1 -type f -exec cp {} "${DEST}/data/euroc_v101_stereo/" \;
for cam in cam0 cam1; do
  mkdir -p "${DEST}/data/euroc_v101_stereo/${cam}"
  find "${euroc}/${cam}" -maxdepth 1 -name '*.png' | sort | head -n "${FRAMES}" \
    | xargs -I{} cp {} "${DEST}/data/euroc_v101_stereo/${cam}/"
done
chmod -R u+w "${DEST}"
du -sh "${DEST}"
