# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Two-view geometry (host: NumPy, OpenCV for the robust fits).

The one home of what relates two views: rotations and relative poses
(:func:`quaternion_to_matrix`, :func:`rotation_angle_deg`, :func:`relative_pose`,
:func:`relative_pose_from_extrinsics`), the essential matrix and the epipolar
distance of matches under a known pose (:func:`essential_matrix`,
:func:`epipolar_errors`), and the robust fits of matches: the fundamental-matrix
check that tracks and stereo pairs rely on (:func:`epipolar_inliers`), the
relative pose by essential-matrix RANSAC (:func:`essential_pose`) and homographies
(:func:`estimate_homography`). Calibrations (K, lens distortion, YAML files)
are :mod:`xfeat_ros.features.camera`'s; the GPU's own fundamental-matrix RANSAC has its
host reference, in the kernel's operation order, in :mod:`xfeat_ros.features.ransac`.

The robust fits here are deterministic for a given order of the matches, but
not seeded: OpenCV's ``findHomography`` (RANSAC, RHO, LMEDS and the USAC
methods, MAGSAC included), ``findEssentialMat`` and ``findFundamentalMat``
(``FM_RANSAC``, ``FM_LMEDS``, USAC) draw their samples by match index from
their own generator with a fixed state; ``cv2.setRNGSeed`` (which seeds
``cv::theRNG()``, used by e.g. ``cv2.kmeans``) does not change them (checked
with OpenCV 5.0.0: 8 seeds gave one result, 8 orders of the same matches 4-8
results). The same matches in another order give another estimate.
"""

import numpy as np

from xfeat_ros.errors import CameraModelError
from xfeat_ros.features.camera import check_rigid_transform, undistort_points
from xfeat_ros.features.ransac import MIN_MATCHES as MIN_VERIFY_MATCHES

# Epipolar distance (px) within which a match may carry a track id across frames;
# the one value of the host check (OpenCV) and the GPU engine's device check.
EPIPOLAR_THRESHOLD_PX = 3.0

# Passed to cv2.setRNGSeed before each fit; no fit of this module reads it (see above).
RANSAC_SEED = 0


def quaternion_to_matrix(qx, qy, qz, qw):
    """Rotation matrix of a unit quaternion (x, y, z, w)."""
    q = np.array([qw, qx, qy, qz], dtype=np.float64)
    w, x, y, z = q / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def rotation_angle_deg(rotation):
    """Angle of a rotation matrix in degrees."""
    cos = np.clip((np.trace(rotation) - 1.0) / 2.0, -1.0, 1.0)
    return float(np.degrees(np.arccos(cos)))


def relative_pose(pose0, pose1):
    """``(R, t)`` taking points from camera 0 to camera 1, from world poses (R_wc, t_wc)."""
    r0, t0 = pose0
    r1, t1 = pose1
    rotation = r1.T @ r0
    return rotation, r1.T @ (t0 - t1)


def relative_pose_from_extrinsics(T_B_c0, T_B_c1):
    """(R float64 [3, 3], t float64 [3]) with X1 = R X0 + t, from camera-to-body 4x4 poses."""
    t0, t1 = (np.asarray(t, dtype=np.float64) for t in (T_B_c0, T_B_c1))
    check_rigid_transform(t0, 'T_B_c0')
    check_rigid_transform(t1, 'T_B_c1')
    r1t = t1[:3, :3].T
    return r1t @ t0[:3, :3], r1t @ (t0[:3, 3] - t1[:3, 3])


def essential_matrix(R, t):
    """Essential matrix [t]x R (float64 [3, 3]) of R float [3, 3] and t float [3]."""
    tx, ty, tz = np.asarray(t, dtype=np.float64).reshape(3)
    skew = np.array([[0.0, -tz, ty], [tz, 0.0, -tx], [-ty, tx, 0.0]])
    return skew @ np.asarray(R, dtype=np.float64).reshape(3, 3)


def epipolar_errors(model0, model1, R, t, pixels0, pixels1):
    """
    Symmetric epipolar distance in pixels, float64 [M], of matched pixels float [M, 2].

    ``model0``/``model1`` are the cameras' :class:`xfeat_ros.features.camera.CameraModel`.
    Distance of x1 to the line E x0 times camera 1's mean focal length, and of x0 to E^T x1
    times camera 0's, averaged (normalized, undistorted coordinates). ``R``, ``t`` take camera
    0 points to camera 1. NaN where a point cannot be undistorted or lies on the epipole.
    Raises :class:`CameraModelError` on pixel arrays that are not [M, 2] of one length.
    """
    n0 = undistort_points(model0, pixels0)
    n1 = undistort_points(model1, pixels1)
    if len(n0) != len(n1):
        raise CameraModelError(f'{len(n0)} pixels0 but {len(n1)} pixels1')
    x0 = np.hstack([n0, np.ones((len(n0), 1))])
    x1 = np.hstack([n1, np.ones((len(n1), 1))])
    e = essential_matrix(R, t)
    line1, line0 = x0 @ e.T, x1 @ e
    algebraic = np.abs(np.sum(x1 * line1, axis=1))
    with np.errstate(divide='ignore', invalid='ignore'):
        d1 = algebraic / np.hypot(line1[:, 0], line1[:, 1])
        d0 = algebraic / np.hypot(line0[:, 0], line0[:, 1])
    f0 = (model0.matrix[0, 0] + model0.matrix[1, 1]) / 2
    f1 = (model1.matrix[0, 0] + model1.matrix[1, 1]) / 2
    return 0.5 * (d0 * f0 + d1 * f1)


def epipolar_inliers(points0, points1, threshold_px=EPIPOLAR_THRESHOLD_PX):
    """
    Return a bool [M] mask of matches consistent with one fundamental matrix.

    ``points0``/``points1`` float [M, 2] pixels. RANSAC (deterministic for a
    given match order: OpenCV samples from its own fixed-state generator) with a
    ``threshold_px`` epipolar distance; with fewer than 8 matches nothing can be
    verified and no match is kept.
    """
    count = len(points0)
    if count < MIN_VERIFY_MATCHES:
        return np.zeros(count, dtype=bool)
    import cv2
    _, mask = cv2.findFundamentalMat(np.asarray(points0, np.float64),
                                     np.asarray(points1, np.float64), cv2.FM_RANSAC,
                                     threshold_px, 0.999)
    return np.zeros(count, dtype=bool) if mask is None else mask.reshape(-1) > 0


def fit_fundamental(points0, points1):
    """
    Least-squares fundamental matrix (float64 [3, 3], x1^T F x0 = 0) of verified matches.

    ``points0`` / ``points1`` float [M, 2] that already passed a robust check
    (:func:`epipolar_inliers`, the GPU engine's): the normalised 8-point fit of
    all of them. None with fewer than 8 matches or a degenerate fit.
    """
    if len(points0) < MIN_VERIFY_MATCHES:
        return None
    import cv2
    fundamental, _ = cv2.findFundamentalMat(np.asarray(points0, np.float64),
                                            np.asarray(points1, np.float64), cv2.FM_8POINT)
    if fundamental is None or fundamental.shape != (3, 3) or not np.isfinite(fundamental).all():
        return None
    return fundamental


def essential_pose(points0, points1, camera_matrix, dist_coeffs=None, threshold_px=1.0):
    """
    Relative pose from matched pixels by essential-matrix RANSAC.

    ``points0``/``points1``: float [M, 2] pixels. Returns ``(R float64 3x3,
    t_unit float64 [3], inlier_mask bool [M])`` (the RANSAC inliers); points
    are undistorted first and ``threshold_px`` is the RANSAC epipolar distance.
    ``R``/``t`` take points from camera 0 to camera 1. Needs at least 5 matches.
    Deterministic for a given order of the matches; another order gives
    another sample sequence (``cv2.setRNGSeed`` does not change it).
    """
    import cv2
    cv2.setRNGSeed(RANSAC_SEED)
    k = np.asarray(camera_matrix, dtype=np.float64)
    dist = None if dist_coeffs is None else np.asarray(dist_coeffs, dtype=np.float64)
    n0 = cv2.undistortPoints(points0.reshape(-1, 1, 2).astype(np.float64), k, dist)
    n1 = cv2.undistortPoints(points1.reshape(-1, 1, 2).astype(np.float64), k, dist)
    focal = (k[0, 0] + k[1, 1]) / 2.0
    essential, mask = cv2.findEssentialMat(n0, n1, np.eye(3), cv2.RANSAC, 0.999,
                                           threshold_px / focal)
    if essential is None:
        return np.eye(3), np.zeros(3), np.zeros(len(points0), dtype=bool)
    inliers = mask.reshape(-1) > 0
    # A far distance limit: with a short baseline most scene points lie beyond
    # OpenCV's default of 50 baselines and would be left out of the cheirality vote.
    result = cv2.recoverPose(essential[:3], n0, n1, np.eye(3), 1e9, mask=mask.copy())
    rotation, t = result[1], result[2]
    return rotation, t.reshape(3), inliers


HOMOGRAPHY_METHODS = ('ransac', 'magsac')


def estimate_homography(points0, points1, method='ransac', threshold_px=3.0, max_iters=10000,
                        confidence=0.9999, seed=RANSAC_SEED):
    """
    Fit a homography to matched pixels by robust fitting (OpenCV), deterministic per match order.

    ``points0``/``points1``: float [M, 2] pixels of image 0 and image 1.
    ``method``: ``'ransac'`` (cv2.RANSAC, then OpenCV's least-squares refinement
    on the inliers) or ``'magsac'`` (cv2.USAC_MAGSAC). Returns ``(H float64
    3x3 mapping image 0 to image 1, or None, inlier_mask bool [M])``; None when
    there are fewer than 4 matches or the fit fails. Both methods sample by
    match index from OpenCV's own fixed-state generator: the same points in
    the same order give the same result, another order another one. ``seed``
    goes to ``cv2.setRNGSeed``, which neither method reads (OpenCV 5.0.0); it
    only matters to OpenCV code drawing from ``cv::theRNG()``.
    """
    import cv2
    if method not in HOMOGRAPHY_METHODS:
        raise ValueError(f'unknown homography method {method!r} '
                         f'(choose from {HOMOGRAPHY_METHODS})')
    m = len(points0)
    if m < 4:
        return None, np.zeros(m, dtype=bool)
    cv2.setRNGSeed(int(seed))
    flag = cv2.RANSAC if method == 'ransac' else cv2.USAC_MAGSAC
    homography, mask = cv2.findHomography(
        np.asarray(points0, np.float64).reshape(-1, 1, 2),
        np.asarray(points1, np.float64).reshape(-1, 1, 2), flag, float(threshold_px),
        maxIters=int(max_iters), confidence=float(confidence))
    if homography is None or mask is None:
        return None, np.zeros(m, dtype=bool)
    return homography, mask.reshape(-1) > 0
