# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The protocol of ``xfeat_eval``: which pairs are matched, how each is fitted and scored.

Homography pairs: a robust homography fit, scored by the corner error. Pose
pairs (frame pairs of a sequence or the pairs of a list): the essential
matrix and the recovered pose, scored by rotation and translation-direction
errors. The fixed settings are :class:`Settings`; every fit sees its matches
in a canonical order, and optionally in ``fit_orders`` seeded random orders.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
import os

import numpy as np

from xfeat_ros.errors import DatasetError
from xfeat_ros.features.camera import CameraModel
from xfeat_ros.features.geometry import (essential_pose, estimate_homography, RANSAC_SEED,
                                         relative_pose)
from xfeat_ros.logs import package_logger
from xfeat_ros.tools.evaluation.methods import match_extras
from xfeat_ros.tools.evaluation.metrics import (corner_error, rotation_error_deg,
                                                translation_error_deg)
from xfeat_ros.tools.evaluation.pair_lists import unrotate_points
from xfeat_ros.tools.image_files import read_image

LOG = package_logger('xfeat_eval')

MIN_POSE_MATCHES = 5


@dataclass
class Settings:
    """Hold the fixed settings of the geometric fits (all stated in the output)."""

    homography_method: str = 'ransac'
    homography_threshold_px: float = 3.0
    homography_max_iters: int = 10000
    homography_confidence: float = 0.9999
    pose_threshold_px: float = 1.0
    sign_agnostic: bool = True
    gaps: tuple = (1, 2, 4)
    max_pairs: int = 0
    frames: int = 0
    fit_orders: int = 0

    def describe(self):
        """Return a JSON-ready description, with the OpenCV calls spelled out."""
        flag = 'cv2.RANSAC' if self.homography_method == 'ransac' else 'cv2.USAC_MAGSAC'
        described = {
            'homography_fit': (f'cv2.findHomography({flag}, ransacReprojThreshold='
                               f'{self.homography_threshold_px}, maxIters='
                               f'{self.homography_max_iters}, confidence='
                               f'{self.homography_confidence}); cv2.setRNGSeed({RANSAC_SEED}) '
                               'is called but does not change it'),
            'match_order': ('matches sorted by (x0, y0, x1, y1) before each fit: the fits are '
                            'deterministic for a given match order, not seeded (OpenCV samples '
                            'by match index with its own fixed-state generator; another order '
                            'or one match more or less gives another estimate)'),
            'corner_error': 'mean distance of the 4 pixel-centre corners of image 1 '
                            '(0,0),(w-1,0),(w-1,h-1),(0,h-1) mapped by estimate and truth; '
                            'failed fit = inf',
            'pose_fit': ('undistorted points, cv2.findEssentialMat(RANSAC, prob=0.999, '
                         f'threshold={self.pose_threshold_px} px / mean focal) (not changed '
                         'by cv2.setRNGSeed), cv2.recoverPose; under '
                         f'{MIN_POSE_MATCHES} matches or no inlier = failure (inf)'),
            'translation_error': 'sign-agnostic min(a, 180-a)' if self.sign_agnostic
                                 else 'signed angle',
            'pose_auc': 'SuperGlue/LoFTR error_auc of max(rotation, translation) error',
            'gaps': list(self.gaps), 'max_pairs': self.max_pairs, 'frames': self.frames,
            'fit_orders': self.fit_orders,
        }
        if self.fit_orders:
            described['fit_orders_method'] = (
                f'each pair also fitted {self.fit_orders} times, order k = 0..'
                f'{self.fit_orders - 1} being the canonical order permuted by '
                'np.random.default_rng(k).permutation(matches); *_orders_mean / '
                '*_orders_std: mean and population standard deviation over the orders of '
                'the metric (MHA or AUC) of each order')
        return described


def canonical_order(points0, points1):
    """
    Sort matched pixels float [M, 2] x 2 by (x0, y0, x1, y1); returns both, reordered.

    RANSAC draws its samples by index, so the same matches in another order
    give another estimate. Methods that order tied keypoints differently
    (upstream's unstable sort of equal scores) get the same fit this way.
    """
    order = np.lexsort((points1[:, 1], points1[:, 0], points0[:, 1], points0[:, 0]))
    return points0[order], points1[order]


def fit_orders(count, orders):
    """
    Return the match orders of ``--fit-orders``: ``orders`` permutations int64 [count].

    Order k is ``np.random.default_rng(k).permutation(count)``, the same for
    every run (and for every pair with ``count`` matches).
    """
    return [np.random.default_rng(k).permutation(count) for k in range(orders)]


def map_orders(fit, count, orders):
    """
    Return ``[fit(order) for order in fit_orders(count, orders)]``, fitted on all cores.

    OpenCV releases the GIL in its fits, so threads run them in parallel; each
    fit depends only on its order, so the results are those of a serial loop.
    """
    permutations = fit_orders(count, orders)
    if not permutations:
        return []
    with ThreadPoolExecutor(max_workers=min(len(permutations), os.cpu_count() or 1)) as pool:
        return list(pool.map(fit, permutations))


def fit_homography(points0, points1, settings):
    """Fit a homography to float [M, 2] x 2 pixels with ``settings``; see estimate_homography."""
    return estimate_homography(points0, points1, settings.homography_method,
                               settings.homography_threshold_px, settings.homography_max_iters,
                               settings.homography_confidence)


def evaluate_homography(method, dataset, settings):
    """
    Score ``method`` on every pair 1 -> k of a homography dataset.

    Returns one dict per pair: ``pair``, ``keypoints0/1``, ``matches``,
    ``inliers``, ``corner_error_px`` (inf on failure) and, for drawing,
    ``points0/1`` float [M, 2] and ``inlier_mask`` bool [M]. With
    ``settings.fit_orders`` N > 0 also ``corner_error_px_orders``: list of N
    floats, the corner errors of the same matches fitted in the orders of
    :func:`fit_orders` (the canonical fit stays ``corner_error_px``).
    """
    pairs = dataset.pairs[:settings.max_pairs] if settings.max_pairs else dataset.pairs
    pixels0, encoding0 = read_image(pairs[0].path0)
    kp0 = method.extract(0, pixels0, encoding0)
    records = []
    for pair in pairs:
        pixels1, encoding1 = read_image(pair.path1)
        kp1 = method.extract(1, pixels1, encoding1)
        idx0, idx1 = method.match(0, 1)
        points0, points1 = canonical_order(kp0[idx0], kp1[idx1])
        height, width = pixels0.shape[:2]
        estimate, inliers = fit_homography(points0, points1, settings)
        error = corner_error(estimate, pair.homography, width, height)
        orders = {}
        if settings.fit_orders:
            orders['corner_error_px_orders'] = map_orders(
                lambda p: corner_error(fit_homography(points0[p], points1[p], settings)[0],
                                       pair.homography, width, height),
                len(points0), settings.fit_orders)
        records.append({'pair': pair.name, 'image0': pair.path0.name, 'image1': pair.path1.name,
                        'keypoints0': len(kp0), 'keypoints1': len(kp1), 'matches': len(idx0),
                        'inliers': int(inliers.sum()), 'corner_error_px': error, **orders,
                        **match_extras(method),
                        'points0': points0, 'points1': points1, 'inlier_mask': inliers})
        LOG.info('%s %s %s: %d matches, %d inliers, corner error %.2f px', method.name,
                 dataset.name, pair.name, len(idx0), inliers.sum(), error)
    return records


def pose_errors(points0, points1, camera, truth, settings):
    """
    Fit the relative pose to matched pixels and score it against the truth.

    ``points0``/``points1`` float [M, 2] pixels, ``camera`` a
    :class:`~xfeat_ros.features.camera.CameraModel`,
    ``truth`` ``(R float64 3x3, t float64 [3])`` from camera 0 to camera 1.
    Returns ``(rotation error deg, translation error deg, inlier_mask bool
    [M])``; both errors inf when there are under :data:`MIN_POSE_MATCHES`
    matches or no inlier.
    """
    rot_err = trans_err = float('inf')
    inliers = np.zeros(len(points0), dtype=bool)
    if len(points0) >= MIN_POSE_MATCHES:
        rotation, t_unit, inliers = essential_pose(points0, points1, camera.matrix,
                                                   opencv_distortion(camera),
                                                   settings.pose_threshold_px)
        if inliers.any():
            rot_err = rotation_error_deg(rotation, truth[0])
            trans_err = translation_error_deg(t_unit, truth[1], settings.sign_agnostic)
    return rot_err, trans_err, inliers


def opencv_distortion(camera):
    """
    Return the OpenCV distortion coefficients of a CameraModel (None: no distortion).

    The pose fit undistorts with ``cv2.undistortPoints``, which knows plumb_bob and
    rational_polynomial; an equidistant (fisheye) camera raises :class:`DatasetError`.
    """
    if camera.distortion_model == 'equidistant':
        raise DatasetError('the pose evaluation undistorts with the plumb_bob or '
                           'rational_polynomial model of OpenCV; an equidistant (fisheye) '
                           'camera is not supported')
    return camera.coeffs if camera.coeffs.size else None


def pose_pairs(count, gaps, max_pairs=0):
    """Return the frame pairs ``(i, i + gap)`` for each gap, at most ``max_pairs`` per gap."""
    pairs = []
    for gap in gaps:
        gap_pairs = [(i, i + gap) for i in range(count - gap)]
        pairs += gap_pairs[:max_pairs] if max_pairs else gap_pairs
    return pairs


def evaluate_pose(method, dataset, settings):
    """
    Score ``method`` on frame pairs ``(i, i + gap)`` of a pose dataset.

    Frames are extracted once each (into a ring of ``max(gaps) + 1`` slots)
    and matched against the earlier frame of every pair they close. Returns
    one dict per pair: ``frame0/1`` (indices), ``gap``, ``matches``,
    ``inliers``, ``rotation_error_deg``, ``translation_error_deg``,
    ``pose_error_deg`` (their max; inf on failure), the true motion
    (``gt_rotation_deg``, ``gt_baseline``) and, for drawing, ``points0/1`` and
    ``inlier_mask``. With ``settings.fit_orders`` N > 0 also
    ``rotation_error_deg_orders``, ``translation_error_deg_orders`` and
    ``pose_error_deg_orders``: lists of N floats from the same matches fitted
    in the orders of :func:`fit_orders`.
    """
    frames = dataset.frames[:settings.frames] if settings.frames else dataset.frames
    pairs = pose_pairs(len(frames), settings.gaps, settings.max_pairs)
    closing = {}
    for i, j in pairs:
        closing.setdefault(j, []).append(i)
    ring = max(settings.gaps) + 1
    last = max((j for _, j in pairs), default=-1)
    keypoints = {}
    records = []
    camera = dataset.camera
    for j in range(last + 1):
        pixels, encoding = read_image(frames[j].path)
        keypoints[j] = method.extract(j % ring, pixels, encoding)
        keypoints.pop(j - ring, None)
        for i in sorted(closing.get(j, []), reverse=True):
            idx0, idx1 = method.match(i % ring, j % ring)
            points0, points1 = canonical_order(keypoints[i][idx0], keypoints[j][idx1])
            truth = relative_pose((frames[i].rotation, frames[i].position),
                                  (frames[j].rotation, frames[j].position))
            r_gt, t_gt = truth
            rot_err, trans_err, inliers = pose_errors(points0, points1, camera, truth, settings)
            orders = {}
            if settings.fit_orders:
                errors = np.array(map_orders(
                    lambda p: pose_errors(points0[p], points1[p], camera, truth, settings)[:2],
                    len(points0), settings.fit_orders), dtype=np.float64).reshape(-1, 2)
                orders = {'rotation_error_deg_orders': errors[:, 0].tolist(),
                          'translation_error_deg_orders': errors[:, 1].tolist(),
                          'pose_error_deg_orders': errors.max(axis=1).tolist()}
            records.append({'frame0': i, 'frame1': j, 'image0': frames[i].path.name,
                            'image1': frames[j].path.name, 'gap': j - i,
                            'keypoints0': len(keypoints[i]), 'keypoints1': len(keypoints[j]),
                            'matches': len(idx0), 'inliers': int(inliers.sum()),
                            'rotation_error_deg': rot_err, 'translation_error_deg': trans_err,
                            'pose_error_deg': max(rot_err, trans_err), **orders,
                            'gt_rotation_deg': rotation_error_deg(np.eye(3), r_gt),
                            'gt_baseline': float(np.linalg.norm(t_gt)),
                            **match_extras(method), 'points0': points0,
                            'points1': points1, 'inlier_mask': inliers})
            LOG.info('%s %s %d-%d: %d matches, %d inliers, rotation %.2f, translation %.2f deg',
                     method.name, dataset.name, i, j, len(idx0), inliers.sum(), rot_err,
                     trans_err)
    return records


def normalized_points(points, matrix):
    """Return pixels float [M, 2] in normalized camera coordinates of intrinsics ``matrix``."""
    homogeneous = np.c_[np.asarray(points, np.float64).reshape(-1, 2), np.ones(len(points))]
    rays = homogeneous @ np.linalg.inv(matrix).T
    return rays[:, :2] / rays[:, 2:]


def pair_pose_errors(points0, points1, pair, settings):
    """
    :func:`pose_errors` for a listed pair: each image has its own intrinsics.

    Points are normalized with ``pair.K0`` / ``pair.K1`` and the RANSAC
    threshold is ``settings.pose_threshold_px`` over the mean of the four focal
    lengths (the LoFTR / SuperGlue convention).
    """
    focal = np.mean([pair.K0[0, 0], pair.K0[1, 1], pair.K1[0, 0], pair.K1[1, 1]])
    unit = Settings(**{**settings.__dict__, 'pose_threshold_px': settings.pose_threshold_px
                       / focal})
    return pose_errors(normalized_points(points0, pair.K0), normalized_points(points1, pair.K1),
                       CameraModel(np.eye(3)), (pair.rotation, pair.t), unit)


def read_upright(path, rot):
    """Return ``(pixels, encoding, stored (h, w))`` of an image turned by ``np.rot90(rot)``."""
    pixels, encoding = read_image(path)
    return np.ascontiguousarray(np.rot90(pixels, rot)), encoding, pixels.shape[:2]


def evaluate_pair_list(method, dataset, settings):
    """
    Score ``method`` on every pair of a pose pair list (``settings.max_pairs``: the first N).

    Each image is turned upright (``rot0``/``rot1``) for extraction and its
    keypoints mapped back to the stored image, whose intrinsics and pose the
    list gives. Returns pose records as :func:`evaluate_pose` does (``pair``
    names the pair, ``gap`` is 0).
    """
    pairs = dataset.pairs[:settings.max_pairs] if settings.max_pairs else dataset.pairs
    records = []
    for pair in pairs:
        keypoints = []
        for slot, (path, rot) in enumerate(((pair.path0, pair.rot0), (pair.path1, pair.rot1))):
            pixels, encoding, stored_hw = read_upright(path, rot)
            keypoints.append(unrotate_points(method.extract(slot, pixels, encoding), rot,
                                             stored_hw))
        idx0, idx1 = method.match(0, 1)
        points0, points1 = canonical_order(keypoints[0][idx0], keypoints[1][idx1])
        rot_err, trans_err, inliers = pair_pose_errors(points0, points1, pair, settings)
        records.append({'pair': pair.name, 'image0': pair.path0.name,
                        'image1': pair.path1.name, 'gap': 0, 'keypoints0': len(keypoints[0]),
                        'keypoints1': len(keypoints[1]), 'matches': len(idx0),
                        'inliers': int(inliers.sum()), 'rotation_error_deg': rot_err,
                        'translation_error_deg': trans_err,
                        'pose_error_deg': max(rot_err, trans_err),
                        'gt_rotation_deg': rotation_error_deg(np.eye(3), pair.rotation),
                        'gt_baseline': float(np.linalg.norm(pair.t)), **match_extras(method),
                        'points0': points0, 'points1': points1, 'inlier_mask': inliers})
        LOG.info('%s %s %s: %d matches, %d inliers, rotation %.2f, translation %.2f deg',
                 method.name, dataset.name, pair.name, len(idx0), inliers.sum(), rot_err,
                 trans_err)
    return records
