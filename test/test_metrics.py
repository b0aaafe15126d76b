# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Accuracy metrics (corner error, MHA, pose errors, pose AUC) on hand-computed cases."""

import math

import numpy as np
import pytest

from xfeat_ros.geometry import essential_pose, estimate_homography, quaternion_to_matrix
from xfeat_ros.metrics import (accuracy_at, apply_homography, corner_error, corner_points,
                               pose_auc, rotation_error_deg, translation_error_deg)


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


def test_estimate_homography_recovers_truth_deterministically():
    rng = np.random.default_rng(0)
    truth = np.array([[0.9, 0.1, 20.0], [-0.05, 1.1, -10.0], [1e-4, 2e-4, 1.0]])
    points0 = rng.uniform(0, 640, (200, 2))
    points1 = apply_homography(truth, points0)
    points1[:60] = rng.uniform(0, 640, (60, 2))  # 30 % outliers
    for method in ('ransac', 'magsac'):
        h, inliers = estimate_homography(points0, points1, method, 3.0)
        assert corner_error(h, truth, 640, 480) < 1e-3
        assert inliers[60:].all() and inliers[:60].sum() <= 2
        h2, inliers2 = estimate_homography(points0, points1, method, 3.0)
        np.testing.assert_array_equal(h, h2)
        np.testing.assert_array_equal(inliers, inliers2)
    h, inliers = estimate_homography(points0[:3], points1[:3])
    assert h is None and inliers.shape == (3,) and not inliers.any()
    with pytest.raises(ValueError):
        estimate_homography(points0, points1, 'lmeds')


def hard_matches(seed=5, n=300):
    """
    Return noisy matches with 70 % outliers, for a homography and for two views.

    Returns ``((points0, points1), (pixels0, pixels1), K)``: float64 [n, 2]
    pixels related by a homography, float64 [n, 2] pixels of two views of 3D
    points, and the float64 3x3 camera matrix of the views.

    With this much noise and so few inliers the robust fits depend on the
    samples they draw, so another sample sequence gives another estimate.
    """
    rng = np.random.default_rng(seed)
    truth = np.array([[1.1, 0.05, 10.0], [0.02, 0.95, -5.0], [1e-4, 2e-5, 1.0]])
    points0 = rng.uniform(0, 640, (n, 2))
    points1 = apply_homography(truth, points0) + rng.normal(0, 3.0, (n, 2))
    outliers = rng.random(n) < 0.7
    points1[outliers] = rng.uniform(0, 640, (outliers.sum(), 2))
    k = np.array([[500.0, 0, 320], [0, 500, 240], [0, 0, 1]])
    world = np.c_[rng.uniform(-2, 2, (n, 2)), rng.uniform(4, 8, n)]
    rotation = rotation_z(3.0)
    pixels0 = world @ k.T
    pixels1 = (world @ rotation.T + [0.3, 0.02, 0.05]) @ k.T
    pixels0 = pixels0[:, :2] / pixels0[:, 2:] + rng.normal(0, 2.0, (n, 2))
    pixels1 = pixels1[:, :2] / pixels1[:, 2:] + rng.normal(0, 2.0, (n, 2))
    pixels1[outliers] = rng.uniform(0, 640, (outliers.sum(), 2))
    return (points0, points1), (pixels0, pixels1), k


def test_robust_fits_follow_the_match_order_not_the_opencv_seed():
    import cv2
    (points0, points1), (pixels0, pixels1), k = hard_matches()
    for method in ('ransac', 'magsac'):
        by_seed = [estimate_homography(points0, points1, method, 3.0, seed=seed)[0]
                   for seed in (0, 1, 12345)]
        for h in by_seed[1:]:
            np.testing.assert_array_equal(h, by_seed[0])  # cv2.setRNGSeed changes nothing
        by_order = []
        for k_order in range(4):
            order = np.random.default_rng(k_order).permutation(len(points0))
            by_order.append(estimate_homography(points0[order], points1[order], method, 3.0)[0])
        assert len({h.round(9).tobytes() for h in by_order}) > 1, method
    order = np.random.default_rng(0).permutation(len(pixels0))
    for fit in (lambda a, b: cv2.findEssentialMat(a, b, k, cv2.RANSAC, 0.999, 1.0)[0],
                lambda a, b: cv2.findFundamentalMat(a, b, cv2.FM_RANSAC, 1.0, 0.999)[0]):
        by_seed = []
        for seed in (0, 1, 12345):
            cv2.setRNGSeed(seed)
            by_seed.append(fit(pixels0, pixels1))
        for matrix in by_seed[1:]:
            np.testing.assert_array_equal(matrix, by_seed[0])
        assert not np.array_equal(fit(pixels0[order], pixels1[order]), by_seed[0])
    rotation = essential_pose(pixels0, pixels1, k, None, 1.0)[0]
    np.testing.assert_array_equal(essential_pose(pixels0, pixels1, k, None, 1.0)[0], rotation)
    assert not np.array_equal(essential_pose(pixels0[order], pixels1[order], k, None, 1.0)[0],
                              rotation)
