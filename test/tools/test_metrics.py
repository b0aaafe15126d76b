# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Accuracy metrics (corner error, MHA, pose errors, pose AUC) on hand-computed cases."""

import math

import numpy as np
import pytest

from xfeat_ros.features.geometry import quaternion_to_matrix
from xfeat_ros.tools.evaluation.metrics import (accuracy_at, apply_homography, corner_error,
                                                corner_points, pose_auc, rotation_error_deg,
                                                translation_error_deg)


def rotation_z(degrees):
    half = math.radians(degrees) / 2
    return quaternion_to_matrix(0.0, 0.0, math.sin(half), math.cos(half))


def test_corner_points_are_pixel_centres():
    np.testing.assert_array_equal(corner_points(11, 21), [[0, 0], [10, 0], [10, 20], [0, 20]])


def test_corner_error_translation_and_scale():
    shift = np.array([[1.0, 0, 3], [0, 1, 4], [0, 0, 1]])
    assert corner_error(shift, np.eye(3), 640, 480) == pytest.approx(5.0)
    assert corner_error(np.eye(3), shift, 640, 480) == pytest.approx(5.0)  # symmetric
    # x2 scale on an 11 x 21 image: corners move 0, 10, sqrt(10^2 + 20^2), 20 px
    scale = np.diag([2.0, 2.0, 1.0])
    expected = (0 + 10 + math.hypot(10, 20) + 20) / 4
    assert corner_error(scale, np.eye(3), 11, 21) == pytest.approx(expected)
    # the overall scale of a homography does not matter
    assert corner_error(7.0 * shift, shift, 640, 480) == pytest.approx(0.0, abs=1e-9)


def test_corner_error_failures_are_inf():
    assert corner_error(None, np.eye(3), 640, 480) == math.inf
    to_infinity = np.array([[1.0, 0, 0], [0, 1, 0], [0, 0, 0]])  # every corner at infinity
    assert corner_error(to_infinity, np.eye(3), 640, 480) == math.inf


def test_apply_homography():
    h = np.array([[2.0, 0, 1], [0, 1, -1], [0, 0, 2]])
    np.testing.assert_allclose(apply_homography(h, [[1.0, 2.0], [3.0, 0.0]]),
                               [[1.5, 0.5], [3.5, -0.5]])


def test_mha_counts_threshold_inclusively_and_failures_as_misses():
    errors = [0.5, 2.0, 3.0, 4.0, math.inf, math.nan]
    np.testing.assert_allclose(accuracy_at(errors, [1, 3, 5]), [1 / 6, 3 / 6, 4 / 6])
    np.testing.assert_array_equal(accuracy_at([], [1, 3]), [0, 0])


def test_rotation_error():
    assert rotation_error_deg(rotation_z(30), np.eye(3)) == pytest.approx(30.0)
    assert rotation_error_deg(rotation_z(10), rotation_z(-25)) == pytest.approx(35.0)
    assert rotation_error_deg(rotation_z(-25), rotation_z(10)) == pytest.approx(35.0)
    assert rotation_error_deg(rotation_z(180), np.eye(3)) == pytest.approx(180.0)
    r = quaternion_to_matrix(0.3, -0.2, 0.5, 0.8)
    assert rotation_error_deg(r, r) == pytest.approx(0.0, abs=1e-5)


def test_translation_error_sign_agnostic_by_default():
    x, y = [1.0, 0, 0], [0, 1.0, 0]
    assert translation_error_deg(x, y) == pytest.approx(90.0)
    assert translation_error_deg([2.0, 2.0, 0], [0.1, 0, 0]) == pytest.approx(45.0)  # scale-free
    # opposite directions: the same line (an essential matrix cannot tell them apart)
    assert translation_error_deg([-1.0, 0, 0], x) == pytest.approx(0.0)
    assert translation_error_deg([-1.0, 1.0, 0], x) == pytest.approx(45.0)
    # signed: the plain angle
    assert translation_error_deg([-1.0, 0, 0], x, sign_agnostic=False) == pytest.approx(180.0)
    assert translation_error_deg([-1.0, 1.0, 0], x, sign_agnostic=False) == pytest.approx(135.0)


def test_translation_error_without_direction_is_inf():
    assert translation_error_deg([0.0, 0, 0], [1.0, 0, 0]) == math.inf  # failed estimate
    assert translation_error_deg([1.0, 0, 0], [0.0, 0, 0]) == math.inf  # camera did not move


def test_pose_auc_hand_computed():
    # curve (0, 0) -> (2, 0.5) -> (4, 1), flat to the threshold
    # @5: (0.5 * 2 * 0.5 + (0.5 + 1) / 2 * 2 + 1 * 1) / 5 = 3 / 5
    # @3: the curve stops at the last error below 3 and stays flat: (0.5 + 0.5 * 1) / 3
    np.testing.assert_allclose(pose_auc([4.0, 2.0], [5, 3]), [0.6, 1 / 3])
    # a failure counts in N and is never recalled: (0.5 * 2 * 0.5 + 0.5 * 3) / 5
    np.testing.assert_allclose(pose_auc([2.0, math.inf], [5]), [0.4])
    np.testing.assert_allclose(pose_auc([2.0, math.nan], [5]), [0.4])
    np.testing.assert_allclose(pose_auc([0.0, 0.0], [5, 10, 20]), [1, 1, 1])
    np.testing.assert_allclose(pose_auc([30.0], [5, 10, 20]), [0, 0, 0])
    np.testing.assert_array_equal(pose_auc([], [5]), [0])
    # an error exactly at the threshold is not below it: flat at 0 up to it
    np.testing.assert_allclose(pose_auc([5.0], [5]), [0.0])


def test_pose_auc_matches_integral_of_linear_recall_curve():
    rng = np.random.default_rng(3)
    errors = rng.uniform(0, 30, 50)
    x = np.r_[0.0, np.sort(errors)]
    y = np.linspace(0, 1, 51)
    for thr in (5.0, 10.0, 20.0):
        grid = np.linspace(0, thr, 200001)
        below = x[x < thr]
        curve = np.interp(grid, below, y[:len(below)])  # flat after the last point below thr
        area = np.sum(np.diff(grid) * (curve[1:] + curve[:-1]) / 2)  # trapezoids, any NumPy
        assert pose_auc(errors, [thr])[0] == pytest.approx(area / thr, abs=1e-6)
