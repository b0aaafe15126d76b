# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Lost tracks carried through the dense descriptor map (xfeat_ros.features.carry)."""

import numpy as np
import pytest
from xfeat_ros.features.carry import (best_in_windows, CARRY_RADIUS_PX, carry_tracks,
                                      DenseMap, lost_tracks, predict_positions,
                                      window_descriptors, with_carried, with_continuations)
from xfeat_ros.features.pipeline import Features, MatchResult
from xfeat_ros.features.postprocess import l2_normalize, sample_descriptors

HW = (240, 320)          # image (height, width); model size equals it (scale 1)
MAP_HW = (30, 40)        # 1/8 of the model size
K = np.array([[300.0, 0.0, 160.0], [0.0, 300.0, 120.0], [0.0, 0.0, 1.0]])


def unit_map(seed=0, shape=MAP_HW, channels=64):
    rng = np.random.default_rng(seed)
    return l2_normalize(rng.standard_normal((channels,) + shape).astype(np.float32), axis=0)


def dense_map(seed=0, scale=(1.0, 1.0)):
    return DenseMap(unit_map(seed), HW, scale)


def project(points, rotation, translation):
    camera = points @ rotation.T + translation
    pixels = camera @ K.T
    return pixels[:, :2] / pixels[:, 2:]


def two_views(count=60, seed=1):
    """Pixels of ``count`` scene points in two views of a small sideways move with a turn."""
    rng = np.random.default_rng(seed)
    points = np.column_stack([rng.uniform(-1.5, 1.5, count), rng.uniform(-1.0, 1.0, count),
                              rng.uniform(3.0, 8.0, count)])
    angle = np.radians(1.0)
    turn = np.array([[np.cos(angle), 0, np.sin(angle)], [0, 1, 0],
                     [-np.sin(angle), 0, np.cos(angle)]])
    moved = project(points, turn, np.array([-0.1, 0.01, 0]))
    return points, project(points, np.eye(3), np.zeros(3)), moved


@pytest.mark.parametrize('scale', [(1.0, 1.0), (1.5, 1.5), (2.0, 1.875)])
def test_window_descriptors_equal_the_detection_sampling(scale):
    dense = DenseMap(unit_map(3), HW, scale)
    rng = np.random.default_rng(5)
    centres = rng.uniform([-6, -6], [HW[1] * scale[0] + 6, HW[0] * scale[1] + 6], (25, 2))
    positions, descriptors = window_descriptors(dense, centres, 4)
    assert positions.shape == (25, 81, 2) and descriptors.shape == (25, 81, 64)
    # row-major offsets: dy outer, dx inner, whole pixels around the centre
    np.testing.assert_allclose(positions[:, 0] - centres, -4, atol=1e-4)
    np.testing.assert_allclose(positions[:, 1, 0] - positions[:, 0, 0], 1, atol=1e-4)
    np.testing.assert_allclose(positions[:, 9, 1] - positions[:, 0, 1], 1, atol=1e-4)
    model = positions.reshape(-1, 2) / np.array(scale, np.float32)
    expected = sample_descriptors(dense.feats, model, HW)
    np.testing.assert_allclose(descriptors.reshape(-1, 64), expected, atol=2e-6)


def test_predict_positions_moves_points_by_their_neighbours_median_flow():
    source = np.array([[10.0, 10], [20, 10], [30, 10], [200, 200], [210, 200], [220, 200]])
    target = source + np.array([[5.0, 0]] * 3 + [[0, -4.0]] * 3)
    points = np.array([[15.0, 12], [205, 198]])
    np.testing.assert_allclose(predict_positions(points, source, target, neighbours=3),
                               [[20, 12], [205, 194]])
    np.testing.assert_allclose(predict_positions(points, source[:0], target[:0]), points)
    # fewer matches than neighbours: all of them
    np.testing.assert_allclose(predict_positions(points[:1], source[:2], target[:2]), [[20, 12]])


def carry_scene(seed=2):
    """
    Return verified matches of a scene and three lost points whose true places are known.

    The current map is random; each lost point's descriptor in the previous
    frame is the current map's descriptor at its true current place.
    """
    points, pixels0, pixels1 = two_views(seed=seed)
    inside = ((pixels1 > 20) & (pixels1 < np.array(HW[::-1]) - 20)).all(axis=1) & \
        ((pixels0 > 20) & (pixels0 < np.array(HW[::-1]) - 20)).all(axis=1)
    pixels0, pixels1 = pixels0[inside], pixels1[inside]
    # the lost ones: three points with no other within 12 px (detections would claim them)
    gaps = np.linalg.norm(pixels1[:, None] - pixels1[None], axis=2) + np.eye(len(pixels1)) * 1e9
    alone = np.nonzero(gaps.min(axis=1) > 12)[0][:3]
    order = np.r_[np.setdiff1d(np.arange(len(pixels0)), alone), alone]
    pixels0, pixels1 = pixels0[order], pixels1[order]
    matched, lost = slice(0, len(pixels0) - 3), np.arange(len(pixels0) - 3, len(pixels0))
    dense = dense_map(seed)
    descriptors0 = l2_normalize(np.random.default_rng(seed).standard_normal(
        (len(pixels0), 64)).astype(np.float32), axis=1)
    descriptors0[lost] = sample_descriptors(dense.feats, pixels1[lost].astype(np.float32), HW)
    return pixels0, pixels1, matched, lost, dense, descriptors0


def test_lost_points_are_found_at_their_true_place():
    pixels0, pixels1, matched, lost, dense, descriptors0 = carry_scene()
    detections = pixels1[matched]
    carried = carry_tracks(pixels0, descriptors0, lost, pixels0[matched], pixels1[matched],
                           dense, HW, detections, np.ones(len(detections), bool))
    np.testing.assert_array_equal(np.sort(carried.source), lost)
    order = np.argsort(carried.source)
    np.testing.assert_allclose(carried.keypoints[order], pixels1[lost], atol=0.75)
    assert (carried.similarity > 0.99).all()
    # the carried descriptor is the one detection would sample there
    expected = sample_descriptors(dense.feats, carried.keypoints, HW)
    np.testing.assert_allclose(carried.descriptors, expected, atol=2e-6)
    assert len(carried.snapped_source) == 0


def test_a_place_off_the_epipolar_line_is_not_carried():
    pixels0, pixels1, matched, lost, dense, descriptors0 = carry_scene()
    shifted = pixels1[lost] + np.array([0.0, 5.0])  # the look-alike sits 5 px off the line
    descriptors0[lost] = sample_descriptors(dense.feats, shifted.astype(np.float32), HW)
    carried = carry_tracks(pixels0, descriptors0, lost, pixels0[matched], pixels1[matched],
                           dense, HW, pixels1[matched], np.ones(int(matched.stop), bool))
    assert len(carried) == 0


def test_dissimilar_or_unverifiable_points_are_not_carried():
    pixels0, pixels1, matched, lost, dense, descriptors0 = carry_scene()
    unrelated = descriptors0.copy()
    unrelated[lost] = l2_normalize(np.random.default_rng(9).standard_normal(
        (len(lost), 64)).astype(np.float32), axis=1)
    claimed = np.ones(int(matched.stop), bool)
    for descriptors, source, target in ((unrelated, pixels0[matched], pixels1[matched]),
                                        (descriptors0, pixels0[:7], pixels1[:7])):
        carried = carry_tracks(pixels0, descriptors, lost, source, target, dense, HW,
                               pixels1[matched], claimed)
        assert len(carried) == 0 and carried.keypoints.shape == (0, 2)
        assert carried.descriptors.shape == (0, 64) and carried.snapped_source.shape == (0,)


def test_a_track_lands_on_a_free_detection_and_never_beside_a_claimed_one():
    pixels0, pixels1, matched, lost, dense, descriptors0 = carry_scene()
    count = int(matched.stop)
    free = pixels1[lost[0]] + np.array([1.0, 1.0])     # an unclaimed detection 1.4 px away
    claimed_near = pixels1[lost[1]] + np.array([-2.0, 0.0])
    detections = np.vstack([pixels1[matched], free, claimed_near])
    claimed = np.r_[np.ones(count, bool), False, True]
    carried = carry_tracks(pixels0, descriptors0, lost, pixels0[matched], pixels1[matched],
                           dense, HW, detections, claimed)
    np.testing.assert_array_equal(carried.snapped_source, [lost[0]])
    np.testing.assert_array_equal(carried.snapped_target, [count])
    np.testing.assert_array_equal(carried.source, [lost[2]])


def test_carried_points_keep_their_distance_from_each_other():
    pixels0, pixels1, matched, lost, dense, descriptors0 = carry_scene()
    # two lost points that both belong at one place: only the better one is carried
    pixels0 = np.vstack([pixels0, pixels0[lost[0]] + 0.5])
    descriptors0 = np.vstack([descriptors0, descriptors0[lost[0]]])
    lost = np.r_[lost, len(pixels0) - 1]
    carried = carry_tracks(pixels0, descriptors0, lost, pixels0[matched], pixels1[matched],
                           dense, HW, pixels1[matched], np.ones(int(matched.stop), bool))
    assert len(carried) == 3
    distance = np.linalg.norm(carried.keypoints[:, None] - carried.keypoints[None], axis=2)
    assert distance[np.triu_indices(3, 1)].min() >= 3.0


def test_peaks_on_the_window_edge_or_outside_the_image_do_not_count():
    dense = dense_map(4)
    target = np.array([[100.0, 100.0]])
    reference = sample_descriptors(dense.feats, target.astype(np.float32), HW)
    _, _, inside = best_in_windows(dense, target, reference, CARRY_RADIUS_PX, HW)
    assert inside[0] > 0.999
    # the best place lies exactly on the window's edge: not trusted
    edge_centre = target + np.array([[CARRY_RADIUS_PX, 0.0]])
    _, _, edge = best_in_windows(dense, edge_centre, reference, CARRY_RADIUS_PX, HW)
    assert edge[0] == -np.inf
    corner = np.array([[-30.0, -30.0]])
    _, _, outside = best_in_windows(dense, corner, reference, CARRY_RADIUS_PX, HW)
    assert outside[0] == -np.inf


def test_lost_tracks_respect_the_carry_limit():
    origin = np.array([2, -1, 0])
    np.testing.assert_array_equal(lost_tracks(5, origin, None, 3), [1, 3, 4])
    streak = np.array([0, 3, 0, 2, 5], np.uint32)
    np.testing.assert_array_equal(lost_tracks(5, origin, streak, 3), [3])
    np.testing.assert_array_equal(lost_tracks(0, origin[:0], None, 3), np.zeros(0, np.int64))


def test_carried_keypoints_join_the_candidates_with_their_tracks_score():
    candidates = Features(np.zeros((2, 2), np.float32), np.array([0.9, 0.8], np.float32),
                          np.eye(2, 64, dtype=np.float32), HW, spread=object(), dense=object())
    pixels0, pixels1, matched, lost, dense, descriptors0 = carry_scene()
    carried = carry_tracks(pixels0, descriptors0, lost, pixels0[matched], pixels1[matched],
                           dense, HW, pixels1[matched], np.ones(int(matched.stop), bool))
    scores0 = np.linspace(1.0, 0.1, len(pixels0)).astype(np.float32)
    joined = with_carried(candidates, carried, scores0)
    assert len(joined) == 2 + len(carried) and joined.spread is None and joined.dense is None
    np.testing.assert_array_equal(joined.scores[2:], scores0[carried.source])
    np.testing.assert_array_equal(joined.keypoints[2:], carried.keypoints)
    np.testing.assert_array_equal(joined.descriptors[2:], carried.descriptors)


def test_continuations_missing_from_the_matches_are_added_and_verified():
    rng = np.random.default_rng(0)
    descriptors0 = l2_normalize(rng.standard_normal((4, 64)).astype(np.float32), axis=1)
    descriptors1 = l2_normalize(rng.standard_normal((5, 64)).astype(np.float32), axis=1)
    # mutual matches 0->0 (continues a track), 1->2 (failed the epipolar check)
    matches = MatchResult(np.array([0, 1]), np.array([0, 2]), np.array([0.9, 0.85], np.float32))
    origin = np.array([0, -1, -1, 3, 2])  # keypoints 3 and 4 were carried from 3 and 2
    out = with_continuations(matches, origin, descriptors0, descriptors1)
    np.testing.assert_array_equal(out.idx0, [0, 1, 3, 2])
    np.testing.assert_array_equal(out.idx1, [0, 2, 3, 4])
    np.testing.assert_array_equal(out.verified, [True, False, True, True])
    np.testing.assert_allclose(out.similarity[2:], [descriptors0[3] @ descriptors1[3],
                                                    descriptors0[2] @ descriptors1[4]],
                               rtol=1e-6)
