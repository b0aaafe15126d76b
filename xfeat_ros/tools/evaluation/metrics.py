# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Accuracy metrics of two-view geometry (pure NumPy, no I/O).

Conventions, used by ``xfeat_eval`` and stated in its output:

* Homographies map image-1 pixels (x, y, 1) to image-k pixels. The corner
  error compares the four pixel-centre corners ``(0, 0), (w-1, 0), (w-1, h-1),
  (0, h-1)`` of image 1 mapped by the estimate and by the ground truth.
* A failed estimate has error ``inf``: it counts as a miss in every accuracy
  and AUC, never as a dropped pair.
* Translation-direction error is sign-agnostic by default,
  ``min(angle, 180 - angle)``, as in the standard relative-pose protocol
  (SuperGlue, LoFTR, upstream XFeat's MegaDepth-1500 evaluation): an
  essential matrix fixes ``t`` only up to sign, and the cheirality vote that
  picks the sign is not what is being measured. ``sign_agnostic=False`` gives
  the signed angle in [0, 180].
* Pose AUC is the standard one (SuperGlue / LoFTR ``error_auc``): the recall
  curve through ``(0, 0)`` and ``(e_i, i / N)`` for the sorted errors, linear
  between those points and flat from the last error below the threshold up to
  the threshold, integrated up to the threshold and divided by it.
"""

import numpy as np

from xfeat_ros.features.geometry import rotation_angle_deg


def corner_points(width, height):
    """Return the four pixel-centre corners of a ``width x height`` image, float64 [4, 2]."""
    w, h = float(width) - 1.0, float(height) - 1.0
    return np.array([[0.0, 0.0], [w, 0.0], [w, h], [0.0, h]])


def apply_homography(homography, points):
    """Map float [N, 2] pixels by a 3x3 homography; returns float64 [N, 2]."""
    points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    mapped = np.c_[points, np.ones(len(points))] @ np.asarray(homography, np.float64).T
    return mapped[:, :2] / mapped[:, 2:]


def corner_error(h_est, h_gt, width, height):
    """
    Return the mean distance (px) between image 1's corners mapped by ``h_est`` and by ``h_gt``.

    ``h_est``/``h_gt``: 3x3 image-1 -> image-k homographies; ``width``/``height``:
    image 1's size. ``h_est`` None (estimation failed) or a non-finite result
    gives ``inf``.
    """
    if h_est is None:
        return float('inf')
    corners = corner_points(width, height)
    with np.errstate(all='ignore'):
        error = np.linalg.norm(apply_homography(h_est, corners)
                               - apply_homography(h_gt, corners), axis=1).mean()
    return float(error) if np.isfinite(error) else float('inf')


def accuracy_at(errors, thresholds):
    """
    Return the share of errors at or below each threshold: float64 [T] in [0, 1].

    With corner errors this is the mean homography accuracy (MHA) at each
    threshold. ``errors``: float [N] (``inf``/``nan`` never count as correct);
    no errors gives zeros.
    """
    errors = np.asarray(errors, dtype=np.float64).reshape(-1)
    thresholds = np.asarray(thresholds, dtype=np.float64).reshape(-1)
    if errors.size == 0:
        return np.zeros(thresholds.shape)
    with np.errstate(invalid='ignore'):
        return (errors[None, :] <= thresholds[:, None]).mean(axis=1)


def rotation_error_deg(r_est, r_gt):
    """Return the angle (degrees) of ``r_est^T r_gt``, both 3x3 rotations; in [0, 180]."""
    return rotation_angle_deg(np.asarray(r_est, dtype=np.float64).T
                              @ np.asarray(r_gt, dtype=np.float64))


def translation_error_deg(t_est, t_gt, sign_agnostic=True):
    """
    Return the angle (degrees) between translation directions ``t_est`` and ``t_gt`` (float [3]).

    Sign-agnostic by default (``min(a, 180 - a)``, in [0, 90]); ``inf`` when
    either vector is (near) zero (no direction: a failed estimate, or a camera
    that did not move).
    """
    t_est = np.asarray(t_est, dtype=np.float64).reshape(3)
    t_gt = np.asarray(t_gt, dtype=np.float64).reshape(3)
    norm = np.linalg.norm(t_est) * np.linalg.norm(t_gt)
    if not np.isfinite(norm) or norm < 1e-12:
        return float('inf')
    angle = float(np.degrees(np.arccos(np.clip(t_est @ t_gt / norm, -1.0, 1.0))))
    return min(angle, 180.0 - angle) if sign_agnostic else angle


def pose_auc(errors, thresholds=(5.0, 10.0, 20.0)):
    """
    Compute the standard pose AUC of float [N] errors (degrees) per threshold: float64 [T].

    See the module docstring for the curve; non-finite errors are failures
    (counted in N, never recalled). No errors gives zeros.
    """
    errors = np.asarray(errors, dtype=np.float64).reshape(-1)
    thresholds = np.asarray(thresholds, dtype=np.float64).reshape(-1)
    if errors.size == 0:
        return np.zeros(thresholds.shape)
    errors = np.where(np.isfinite(errors), errors, np.inf)
    curve_e = np.r_[0.0, np.sort(errors)]
    curve_r = np.linspace(0.0, 1.0, errors.size + 1)
    aucs = []
    for thr in thresholds:
        last = int(np.searchsorted(curve_e, thr))  # points strictly below thr
        x = np.r_[curve_e[:last], thr]
        y = np.r_[curve_r[:last], curve_r[last - 1]]
        aucs.append(float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2.0)) / thr)
    return np.array(aucs)
