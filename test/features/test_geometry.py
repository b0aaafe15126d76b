# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Two-view geometry (xfeat_ros.features.geometry): poses, epipolar distances, robust fits."""

import math

import cv2
import numpy as np
import pytest
from test_camera import euroc_yaml, make_model
from xfeat_ros.errors import CameraModelError
from xfeat_ros.features.camera import CameraModel, distort_normalized, read_euroc_extrinsics
from xfeat_ros.features.geometry import (epipolar_errors, epipolar_inliers, essential_matrix,
                                         essential_pose, estimate_homography, fit_fundamental,
                                         quaternion_to_matrix, relative_pose_from_extrinsics)
from xfeat_ros.features.ransac import fundamental_inliers
from xfeat_ros.tools.evaluation.metrics import apply_homography, corner_error


def rotation_z(degrees):
    half = math.radians(degrees) / 2
    return quaternion_to_matrix(0.0, 0.0, math.sin(half), math.cos(half))


@pytest.mark.parametrize('name', ['tum', 'rational', 'fisheye'])
def test_epipolar_errors_of_no_matches(name):
    model = make_model(name)
    empty = epipolar_errors(model, model, np.eye(3), [1.0, 0, 0], [], np.zeros((0, 2)))
    assert empty.shape == (0,) and empty.dtype == np.float64


def test_euroc_extrinsics_and_baseline():
    transforms = [read_euroc_extrinsics(euroc_yaml(f'cam{i}_sensor.yaml')) for i in (0, 1)]
    for t in transforms:
        assert t.shape == (4, 4) and t.dtype == np.float64
        np.testing.assert_array_equal(t[3], [0.0, 0.0, 0.0, 1.0])
        np.testing.assert_allclose(t[:3, :3].T @ t[:3, :3], np.eye(3), atol=1e-6)
    rotation, t = relative_pose_from_extrinsics(*transforms)
    np.testing.assert_allclose(rotation.T @ rotation, np.eye(3), atol=1e-6)
    baseline = np.linalg.norm(t)
    assert 0.105 < baseline < 0.115, f'EuRoC stereo baseline {baseline:.4f} m'
    assert abs(t[0]) > 0.99 * baseline, f'baseline {t} is not along x'


def test_relative_pose_and_essential_matrix():
    rng = np.random.default_rng(1)
    poses = []
    for _ in range(2):
        pose = np.eye(4)
        pose[:3, :3] = cv2.Rodrigues(rng.normal(size=3))[0]
        pose[:3, 3] = rng.normal(size=3)
        poses.append(pose)
    rotation, t = relative_pose_from_extrinsics(*poses)
    x0 = rng.normal(size=(10, 3))
    body = x0 @ poses[0][:3, :3].T + poses[0][:3, 3]
    x1 = (body - poses[1][:3, 3]) @ poses[1][:3, :3]
    np.testing.assert_allclose(x0 @ rotation.T + t, x1, atol=1e-12)
    e = essential_matrix(rotation, t)
    np.testing.assert_allclose(x0 @ e.T, np.cross(t, x0 @ rotation.T), atol=1e-12)


@pytest.mark.parametrize('names', [('tum', 'rational'), ('fisheye', 'tum'),
                                   ('rational', 'fisheye')])
def test_epipolar_errors_vanish_on_true_matches(names):
    model0, model1 = (make_model(n) for n in names)
    rng = np.random.default_rng(2)
    rotation, t = cv2.Rodrigues(np.array([0.02, -0.05, 0.01]))[0], np.array([-0.3, 0.02, 0.05])
    x0 = rng.uniform((-2.0, -1.5, 3.0), (2.0, 1.5, 8.0), (400, 3))
    x1 = x0 @ rotation.T + t
    p0 = distort_normalized(model0, x0[:, :2] / x0[:, 2:])
    p1 = distort_normalized(model1, x1[:, :2] / x1[:, 2:])
    inside = np.all((p0 >= 0) & (p0 < (640, 480)) & (p1 >= 0) & (p1 < (640, 480)), axis=1)
    assert inside.sum() > 100
    errors = epipolar_errors(model0, model1, rotation, t, p0[inside], p1[inside])
    assert errors.shape == (inside.sum(),) and errors.max() < 1e-6, errors.max()


def test_epipolar_error_of_vertical_offset():
    model0 = CameraModel.from_parameters([500.0, 510.0, 320.0, 240.0])
    model1 = CameraModel.from_parameters([520.0, 530.0, 300.0, 250.0])
    rotation, t = np.eye(3), np.array([-0.11, 0.0, 0.0])
    x0 = np.random.default_rng(3).uniform((-1.0, -0.8, 2.0), (1.0, 0.8, 6.0), (50, 3))
    x1 = x0 + t
    p0 = distort_normalized(model0, x0[:, :2] / x0[:, 2:])
    p1 = distort_normalized(model1, x1[:, :2] / x1[:, 2:]) + (0.0, 1.5)
    errors = epipolar_errors(model0, model1, rotation, t, p0, p1)
    # 1.5 px in image 1 is 1.5 / fy1 normalized, seen by both cameras' mean focal lengths.
    expected = 0.5 * 1.5 / 530.0 * ((500.0 + 510.0) / 2 + (520.0 + 530.0) / 2)
    np.testing.assert_allclose(errors, expected, rtol=1e-9)
    with pytest.raises(CameraModelError, match='pixels1'):
        epipolar_errors(model0, model1, rotation, t, p0, p1[:-1])


def test_epipolar_inliers_reject_planted_outliers():
    rng = np.random.default_rng(3)
    points = rng.uniform([0, 0, 2], [640, 480, 6], (300, 3))  # x, y pixels and depth
    k = np.array([[500.0, 0, 320], [0, 500.0, 240], [0, 0, 1]])
    rays = np.c_[(points[:, 0] - 320) / 500, (points[:, 1] - 240) / 500, np.ones(300)]
    world = rays * points[:, 2:3]
    angle = np.radians(3.0)
    rotation = np.array([[np.cos(angle), 0, np.sin(angle)], [0, 1, 0],
                         [-np.sin(angle), 0, np.cos(angle)]])
    moved = world @ rotation.T + [0.2, 0.05, 0.0]
    image1 = moved @ k.T
    p0 = points[:, :2]
    p1 = image1[:, :2] / image1[:, 2:]
    outliers = rng.choice(300, 30, replace=False)
    p1[outliers] += rng.uniform(60, 150, (30, 2))
    keep = epipolar_inliers(p0, p1)
    assert not keep[outliers].any()
    assert keep[np.setdiff1d(np.arange(300), outliers)].mean() > 0.95
    assert not epipolar_inliers(p0[:7], p1[:7]).any()  # too few to verify


def test_fundamental_fit_and_its_epipolar_check():
    """The 8-point fit of exact matches, and the RANSAC test for one known F."""
    rng = np.random.default_rng(1)
    scene = np.column_stack([rng.uniform(-1.5, 1.5, 60), rng.uniform(-1.0, 1.0, 60),
                             rng.uniform(3.0, 8.0, 60)])
    turn = rotation_z(1.0)
    k = np.array([[300.0, 0.0, 160.0], [0.0, 300.0, 120.0], [0.0, 0.0, 1.0]])

    def project(points):
        pixels = points @ k.T
        return pixels[:, :2] / pixels[:, 2:]
    pixels0 = project(scene)
    pixels1 = project(scene @ turn.T + np.array([-0.1, 0.01, 0.0]))
    fundamental = fit_fundamental(pixels0, pixels1)
    assert fundamental is not None
    assert fundamental_inliers(fundamental, pixels0, pixels1, 1e-3).all()
    off_line = pixels1 + np.array([0.0, 6.0])  # the epipolar lines run about sideways
    assert not fundamental_inliers(fundamental, pixels0, off_line, 3.0).any()
    assert fit_fundamental(pixels0[:7], pixels1[:7]) is None


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
