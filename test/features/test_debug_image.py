# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The debug image overlay."""

import numpy as np
import pytest
from xfeat_ros.features.debug_image import (CONTINUED_BGR, draw_legend, keypoint_colors,
                                            LEGEND_MIN_WH, REJECTED_BGR, render_debug_image)


def test_colors_follow_the_turbo_map_from_low_to_high():
    colors = keypoint_colors([0.0, 0.5, 1.0, 2.0], 1.0)
    assert colors.shape == (4, 3) and colors.dtype == np.uint8
    assert colors[0, 0] > colors[0, 2]  # low: blue (BGR)
    assert colors[2, 2] > colors[2, 0]  # high: red
    np.testing.assert_array_equal(colors[2], colors[3])  # saturates
    np.testing.assert_array_equal(keypoint_colors([1.0, 3.0], 0.0)[0], colors[0])


@pytest.mark.parametrize('color_by', ['score', 'age'])
def test_render_draws_keypoints_and_match_lines(color_by):
    grey = np.full((120, 160), 0.5, np.float32)
    keypoints = np.array([[20.0, 30.0], [100.0, 60.0]], np.float32)
    out = render_debug_image(grey, keypoints, np.array([0.1, 0.9]), np.array([1, 40]),
                             color_by, previous_points=np.array([[20.0, 100.0], [140.0, 10.0]]),
                             current_points=keypoints, continued=np.array([True, False]))
    assert out.shape == (120, 160, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[5, 5], [128, 128, 128])  # background stays grey
    assert tuple(out[30, 20]) != (128, 128, 128) and tuple(out[60, 100]) != (128, 128, 128)
    assert tuple(out[30, 20]) != tuple(out[60, 100])  # coloured by score / age
    b, g, r = (int(v) for v in out[65, 20])
    assert g > 150 and b < 60 and r < 60  # continued track: green line (anti-aliased)
    mid = np.rint((np.array([140.0, 10.0]) + [100.0, 60.0]) / 2).astype(int)
    b, g, r = (int(v) for v in out[mid[1], mid[0]])
    assert r > 150 and g < 60 and b < 60  # rejected match: red line


def test_render_without_keypoints():
    out = render_debug_image(np.zeros((40, 40)), np.zeros((0, 2)), np.zeros(0), np.zeros(0))
    assert out.shape == (40, 40, 3) and not out.any()


@pytest.mark.parametrize('color_by', ['score', 'age'])
def test_legend_in_the_bottom_left_corner(color_by):
    grey = np.full((LEGEND_MIN_WH[1], LEGEND_MIN_WH[0]), 0.5, np.float32)
    keypoints = np.array([[300.0, 20.0]], np.float32)
    out = render_debug_image(grey, keypoints, np.array([1.0]), np.array([3]), color_by)
    x0, y0, x1, y1 = draw_legend(np.zeros_like(out), color_by)
    assert x0 < 10 and y1 > out.shape[0] - 10 and x1 < out.shape[1] // 2 + 80
    box = out[y0:y1, x0:x1].astype(int)
    turbo = keypoint_colors(np.linspace(0, 1, 80), 1.0).astype(int)
    row = box[13, 48:140]  # the colour bar row: runs from blue to red
    assert any(np.abs(row - turbo[0]).max(axis=1) <= 2) and any(
        np.abs(row - turbo[-1]).max(axis=1) <= 2)
    for bgr in (CONTINUED_BGR, REJECTED_BGR):  # both line colours are explained
        assert np.all(np.abs(box - bgr) <= 40, axis=2).sum() > 10
    assert box.max() == 255  # white text
    outside = out[:y0 - 2, x1 + 2:]
    assert tuple(out[5, 5]) == (128, 128, 128) and outside.shape[0] > 100
    assert tuple(out[20, 300]) != (128, 128, 128)  # keypoints elsewhere still drawn


def test_no_legend_on_small_images():
    assert draw_legend(np.zeros((LEGEND_MIN_WH[1] - 1, 640, 3), np.uint8)) is None
    assert draw_legend(np.zeros((480, LEGEND_MIN_WH[0] - 1, 3), np.uint8)) is None
