# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Parity metrics against upstream XFeat outputs (../shared/golden, or test/data/golden)."""

from dataclasses import dataclass
import json
import os
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

# Golden file stem -> image path relative to ../shared/data, in golden order.
GOLDEN_IMAGES = {
    'oxford_graf_img1': 'oxford_graf/img1.ppm',
    'oxford_graf_img2': 'oxford_graf/img2.ppm',
    'oxford_graf_img3': 'oxford_graf/img3.ppm',
    'rgb_1311868169.163498': 'tum_fr2_desk/rgb/1311868169.163498.png',
    'rgb_1311868169.263274': 'tum_fr2_desk/rgb/1311868169.263274.png',
    'rgb_1311868169.363470': 'tum_fr2_desk/rgb/1311868169.363470.png',
    'rgb_1311868169.463229': 'tum_fr2_desk/rgb/1311868169.463229.png',
    'cam0_1403715273262142976': 'euroc_v101_stereo/cam0/1403715273262142976.png',
    'cam1_1403715273262142976': 'euroc_v101_stereo/cam1/1403715273262142976.png',
}
GOLDEN_PAIRS = list(zip(list(GOLDEN_IMAGES)[:-1], list(GOLDEN_IMAGES)[1:]))

FOUND_PX = 0.5
# Parity thresholds of every engine against upstream (and of GPU against CPU).
FOUND_MIN = 0.99          # share of golden keypoints with one of ours within FOUND_PX
COSINE_MIN = 0.999        # smallest descriptor cosine over those
SCORE_REL_MAX = 1e-4      # largest relative score difference over those
MATCH_AGREE_MIN = 0.98    # share of golden matches reproduced
REPORT_ENV = 'XFEAT_ROS_REPORT_DIR'


def load_golden(root):
    """
    Golden arrays per image stem and per (stem, stem) pair, from ``root``/golden.

    ``root`` is ../shared (every stem and pair) or the fixtures test/data (a
    few): only the files present are loaded; callers skip the others.
    """
    golden = root / 'golden'
    out = {stem: dict(np.load(golden / f'{stem}.npz')) for stem in GOLDEN_IMAGES
           if (golden / f'{stem}.npz').is_file()}
    for a, b in GOLDEN_PAIRS:
        if (golden / f'{a}__{b}.npz').is_file():
            out[(a, b)] = dict(np.load(golden / f'{a}__{b}.npz'))
    return out


@dataclass
class Parity:
    """How well features reproduce a golden image's features."""

    found: float          # share of golden keypoints with one of ours within 0.5 px
    min_cosine: float     # smallest descriptor cosine over found pairs
    max_score_rel: float  # largest relative score difference over found pairs
    mapping: np.ndarray   # golden index -> our index (-1 where not found)


def parity(golden, keypoints, scores, descriptors):
    """Compare our (keypoints, scores, descriptors) with a golden npz dict."""
    gk = golden['keypoints']
    if len(keypoints) == 0:
        return Parity(0.0, 0.0, np.inf, np.full(len(gk), -1))
    dist, nearest = cKDTree(keypoints).query(gk, k=1)
    ok = dist <= FOUND_PX
    mapping = np.where(ok, nearest, -1)
    gi = np.nonzero(ok)[0]
    oi = nearest[ok]
    cos = np.sum(golden['descriptors'][gi] * descriptors[oi], axis=1)
    rel = np.abs(golden['scores'][gi] - scores[oi]) / np.abs(golden['scores'][gi])
    return Parity(float(ok.mean()), float(cos.min()), float(rel.max()), mapping)


def match_agreement(golden_pair, map0, map1, idx0, idx1, suffix='082'):
    """Share of golden matches that we reproduce (indices mapped through parity)."""
    g0 = golden_pair[f'idx0_{suffix}']
    g1 = golden_pair[f'idx1_{suffix}']
    if len(g0) == 0:
        return 1.0
    ours = set(zip(idx0.tolist(), idx1.tolist()))
    hits = sum((int(map0[a]), int(map1[b])) in ours for a, b in zip(g0, g1))
    return hits / len(g0)


def write_report(name, entries):
    """
    Merge ``entries`` (a dict) into the JSON file ``name`` under $XFEAT_ROS_REPORT_DIR.

    Nothing happens where the variable is unset or ``entries`` is empty; several
    test modules add to one file (the GPU run's ``gpu_parity.json``).
    """
    folder = os.environ.get(REPORT_ENV)
    if not folder or not entries:
        return
    path = Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    merged = json.loads(path.read_text()) if path.is_file() else {}
    merged.update(entries)
    path.write_text(json.dumps(merged, indent=1))
