# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The spread selection: radius, grid, tracked first (oldest first), score order, the cap."""

import numpy as np
import pytest
from xfeat_ros.errors import ParameterError
from xfeat_ros.features.pipeline import Features, MatchResult
from xfeat_ros.features.spread import (published_index, remap_matches, select_spread,
                                       selection_order, Spread, take_features)


def random_candidates(count, seed=0, size=(640, 480)):
    rng = np.random.default_rng(seed)
    keypoints = (rng.random((count, 2)) * size).astype(np.float32)
    scores = np.sort(rng.random(count).astype(np.float32))[::-1].copy()
    ages = rng.integers(1, 30, count).astype(np.uint32)
    tracked = rng.random(count) < 0.3
    ages[~tracked] = 1
    return keypoints, scores, ages, tracked


def pair_distances(points):
    points = np.asarray(points, dtype=np.float64)
    diff = points[:, None, :] - points[None, :, :]
    distance = np.sqrt((diff ** 2).sum(-1))
    return distance[np.triu_indices(len(points), 1)]


def brute_force(keypoints, scores, ages, tracked, spread):
    """Apply the greedy rule plainly: every kept point checked against every other."""
    kept = []
    cap = spread.top_k or len(scores)
    for index in selection_order(scores, ages, tracked):
        point = keypoints[index].astype(np.float64)
        if spread.min_distance > 0 and any(
                np.hypot(*(point - keypoints[k].astype(np.float64))) < spread.min_distance
                for k in kept):
            continue
        if spread.grid_cell_px > 0:
            cell = tuple(np.floor(point / spread.grid_cell_px).astype(int))
            same = [k for k in kept if tuple(np.floor(
                keypoints[k].astype(np.float64) / spread.grid_cell_px).astype(int)) == cell]
            if len(same) >= spread.max_per_cell:
                continue
        kept.append(int(index))
        if len(kept) == cap:
            break
    return np.asarray(kept, dtype=np.int64)


@pytest.mark.parametrize('min_distance', [5.0, 20.0, 33.3])
def test_no_pair_closer_than_min_distance(min_distance):
    keypoints, scores, ages, tracked = random_candidates(3000)
    kept = select_spread(keypoints, scores, ages, tracked, Spread(min_distance))
    assert len(kept) > 50
    assert pair_distances(keypoints[kept]).min() >= min_distance
    # Maximal: every dropped candidate lies closer than min_distance to a kept one.
    dropped = np.setdiff1d(np.arange(len(scores)), kept)
    diff = keypoints[dropped][:, None, :].astype(np.float64) - keypoints[kept][None]
    assert (np.sqrt((diff ** 2).sum(-1)).min(1) < min_distance).all()


@pytest.mark.parametrize('spread', [Spread(12.0), Spread(12.0, top_k=40), Spread(0.0, 64, 3),
                                    Spread(9.5, 50, 2, top_k=100)])
def test_equals_the_plain_greedy_rule(spread):
    keypoints, scores, ages, tracked = random_candidates(800, seed=3)
    np.testing.assert_array_equal(select_spread(keypoints, scores, ages, tracked, spread),
                                  brute_force(keypoints, scores, ages, tracked, spread))


def test_tracked_first_oldest_first_then_by_score():
    # Three points in a row 10 px apart: with min_distance 15 the middle one conflicts with both.
    keypoints = np.array([[100, 100], [110, 100], [120, 100], [300, 300], [400, 300],
                          [500, 300]], dtype=np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4], dtype=np.float32)
    ages = np.array([1, 7, 1, 3, 9, 1], dtype=np.uint32)
    tracked = np.array([False, True, False, True, True, False])
    kept = select_spread(keypoints, scores, ages, tracked, Spread(15.0))
    # Tracked by age (9, 7, 3), then new by score; 0 and 2 lie within 15 px of the kept 1.
    np.testing.assert_array_equal(kept, [4, 1, 3, 5])
    # Without a radius the order stays: tracked oldest first, then every new one by score.
    np.testing.assert_array_equal(select_spread(keypoints, scores, ages, tracked, Spread()),
                                  [4, 1, 3, 0, 2, 5])


def test_tracked_ties_break_by_score_and_new_ones_keep_score_order():
    scores = np.array([0.2, 0.9, 0.5, 0.7], dtype=np.float32)
    ages = np.array([4, 4, 1, 1], dtype=np.uint32)
    tracked = np.array([True, True, False, False])
    np.testing.assert_array_equal(selection_order(scores, ages, tracked), [1, 0, 3, 2])


def test_top_k_caps_the_kept():
    keypoints, scores, ages, tracked = random_candidates(2000, seed=1)
    kept = select_spread(keypoints, scores, ages, tracked, Spread(4.0, top_k=800))
    assert len(kept) == 800
    order = tracked[kept]  # tracked ones all come before the first new one
    assert order[:order.sum()].all() and 0 < order.sum() < len(kept)
    # The cap keeps the first 800 of the uncapped selection.
    uncapped = select_spread(keypoints, scores, ages, tracked, Spread(4.0))
    assert len(uncapped) > 800
    np.testing.assert_array_equal(kept, uncapped[:800])


def test_grid_holds_at_most_max_per_cell():
    keypoints, scores, ages, tracked = random_candidates(3000, seed=2)
    kept = select_spread(keypoints, scores, ages, tracked, Spread(0.0, 80, 4))
    cells = np.floor(keypoints[kept] / 80).astype(int)
    _, counts = np.unique(cells, axis=0, return_counts=True)
    assert counts.max() == 4
    assert len(kept) == 8 * 6 * 4  # 640 x 480 in 80 px cells, each filled by 3000 points


def test_zero_candidates_give_empty_outputs():
    empty = np.zeros((0, 2), np.float32)
    for spread in (Spread(20.0, top_k=10), Spread(0.0, 32, 2), Spread()):
        kept = select_spread(empty, np.zeros(0, np.float32), np.zeros(0, np.uint32),
                             np.zeros(0, bool), spread)
        assert kept.dtype == np.int64 and kept.shape == (0,)
    features = take_features(Features(empty, np.zeros(0, np.float32),
                                      np.zeros((0, 64), np.float32), (480, 640)), kept)
    assert features.keypoints.shape == (0, 2) and features.descriptors.shape == (0, 64)
    assert features.scores.shape == (0,) and features.spread is None
    index = published_index(0, kept)
    assert index.shape == (0,) and index.dtype == np.int64


def test_remap_matches_drops_the_dropped_ends():
    matches = MatchResult(np.array([0, 1, 2, 3]), np.array([3, 2, 1, 0]),
                          np.array([0.9, 0.8, 0.7, 0.6], np.float32),
                          verified=np.array([True, False, True, True]))
    index0 = published_index(4, [2, 0, 3])       # candidate 1 dropped
    index1 = published_index(4, [0, 1, 3])       # candidate 2 dropped
    out = remap_matches(matches, index0, index1)
    np.testing.assert_array_equal(out.idx0, [1, 0, 2])
    np.testing.assert_array_equal(out.idx1, [2, 1, 0])
    np.testing.assert_allclose(out.similarity, [0.9, 0.7, 0.6])
    np.testing.assert_array_equal(out.verified, [True, True, True])
    only0 = remap_matches(matches, index0=index0)
    np.testing.assert_array_equal(only0.idx1, [3, 1, 0])


@pytest.mark.parametrize('settings', [(-1.0, 0, 0), (float('nan'), 0, 0), (0.0, 32, 0),
                                      (0.0, 0, 3), (0.0, -5, 2)])
def test_invalid_settings_are_parameter_errors(settings):
    with pytest.raises(ParameterError):
        Spread(*settings)


def test_inactive_spread():
    assert not Spread().active
    assert Spread(0.5).active and Spread(0.0, 16, 1).active
