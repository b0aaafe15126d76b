# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The demo end to end (short), and the pure parts of its synthetic sequence."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from xfeat_ros.tools.demo import (BAD_BGR, camera_path, draw_matches, GOOD_BGR, LEGEND_H,
                                  match_errors, synthetic_sequence)


def test_camera_path_and_errors():
    poses = camera_path(5)
    assert len(poses) == 5 and all(p.shape == (3, 3) for p in poses)
    pts = np.array([[100.0, 100.0], [300.0, 200.0]])
    h01 = poses[1] @ np.linalg.inv(poses[0])
    moved = np.c_[pts, np.ones(2)] @ h01.T
    moved = moved[:, :2] / moved[:, 2:]
    np.testing.assert_allclose(match_errors(pts, moved, poses[0], poses[1]), 0, atol=1e-9)
    assert match_errors(pts, moved + [3.0, 4.0], poses[0], poses[1]) == pytest.approx([5, 5])


def test_synthetic_frames_are_real_photos():
    frames, poses = synthetic_sequence(3)
    assert len(frames) == 3 and frames[0].shape == (480, 640, 3)
    assert frames[0].dtype == np.uint8 and frames[0].std() > 30  # textured, not blank
    import cv2
    for pose in poses:  # the photo covers every frame: no border shows
        covered = cv2.warpPerspective(np.ones((512, 512), np.uint8), pose, (640, 480))
        assert covered.all()


def colour_pixels(image, bgr, tolerance=40):
    return int(np.all(np.abs(image.astype(int) - bgr) <= tolerance, axis=2).sum())


@pytest.mark.parametrize('checked', [True, False])
def test_picture_has_its_legend(tmp_path, checked):
    import cv2
    grey = np.full((120, 160, 3), 128, np.uint8)
    p0 = np.array([[10.0, 10.0], [50.0, 60.0], [100.0, 90.0]])
    good = np.array([True, True, False])
    draw_matches(grey, grey, p0, p0 + [2.0, 1.0], good, tmp_path / 'm.png', checked)
    image = cv2.imread(str(tmp_path / 'm.png'))
    assert image.shape == (120 + LEGEND_H, 320, 3)
    legend = image[120:]
    assert colour_pixels(legend, GOOD_BGR) > 20  # the green swatch
    assert (colour_pixels(legend, BAD_BGR) > 20) == checked  # red only where checked
    assert colour_pixels(legend, (0, 0, 0), 60) > 50  # its text
    assert colour_pixels(image[:120], BAD_BGR) > 0  # the wrong match is drawn red


@pytest.mark.ros
def test_demo_runs(weights_npz, tmp_path):
    out = tmp_path / 'demo'
    result = subprocess.run([sys.executable, '-m', 'xfeat_ros.tools.demo', '--frames', '6',
                             '--rate', '5', '--output', str(out), '--weights', str(weights_npz)],
                            capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((out / 'summary.json').read_text())
    assert summary['keypoints_msgs'] == 6 and summary['matches_msgs'] == 5
    assert summary['mean_keypoints'] > 1000 and summary['mean_matches'] > 500
    assert summary['matches_within_3px'] > 0.7
    assert summary['match_error_median_px'] < 2.0
    assert (out / 'matches.png').stat().st_size > 10000
