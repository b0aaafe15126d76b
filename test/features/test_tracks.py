# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Track ids: propagation rule and epipolar verification."""

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from xfeat_ros.features.pipeline import MatchResult
from xfeat_ros.features.tracks import next_tracks, propagate_tracks, track_velocity


def test_first_frame_gets_fresh_ids():
    ids, ages, next_id = propagate_tracks(4, 10)
    assert ids.tolist() == [10, 11, 12, 13] and ages.tolist() == [1, 1, 1, 1]
    assert next_id == 14 and ids.dtype == np.uint64 and ages.dtype == np.uint32


def test_matched_keypoints_inherit_unmatched_start_new():
    prev_ids = np.array([5, 6, 7], np.uint64)
    prev_ages = np.array([3, 1, 9], np.uint32)
    ids, ages, next_id = propagate_tracks(5, 8, prev_ids, prev_ages, idx0=[2, 0], idx1=[0, 3])
    assert ids.tolist() == [7, 8, 9, 5, 10]
    assert ages.tolist() == [10, 1, 1, 4, 1]
    assert next_id == 11


def test_empty_frames_and_no_matches():
    ids, ages, next_id = propagate_tracks(0, 3, np.zeros(0, np.uint64), np.zeros(0, np.uint32),
                                          [], [])
    assert ids.shape == (0,) and ages.shape == (0,) and next_id == 3
    ids, _, next_id = propagate_tracks(2, 3, np.array([1], np.uint64), np.array([1], np.uint32),
                                       np.zeros(0, int), np.zeros(0, int))
    assert ids.tolist() == [3, 4] and next_id == 5


def test_next_tracks_origin_and_velocity():
    rng = np.random.default_rng(3)
    prev_points = rng.uniform(0, 600, (40, 2)).astype(np.float32)
    shift = np.array([4.0, -2.0], np.float32)
    order = rng.permutation(40)
    points = prev_points[order] + shift  # a pure translation: every match is epipolar-consistent
    previous = SimpleNamespace(features=SimpleNamespace(keypoints=prev_points),
                               track_ids=np.arange(100, 140, dtype=np.uint64),
                               track_ages=np.full(40, 3, np.uint32))
    features = Features41(np.vstack([points, [[5.0, 5.0]]]).astype(np.float32))
    matches = MatchResult(order[:30], np.arange(30), np.ones(30, np.float32))
    ids, ages, next_id, origin = next_tracks(features, 500, previous, matches)
    np.testing.assert_array_equal(origin[:30], order[:30])
    assert np.all(origin[30:] == -1)
    np.testing.assert_array_equal(ids[:30], 100 + order[:30])
    assert np.all(ages[:30] == 4) and np.all(ages[30:] == 1)
    assert next_id == 500 + 11
    velocity = track_velocity(features.keypoints, prev_points, origin, 0.5)
    np.testing.assert_allclose(velocity[:30], np.tile(shift / 0.5, (30, 1)), atol=1e-4)
    assert not velocity[30:].any()
    assert not track_velocity(features.keypoints, prev_points, origin, 0.0).any()
    ids, ages, next_id, origin = next_tracks(features, 7)
    assert np.all(origin == -1) and next_id == 7 + 41


def test_next_tracks_uses_a_given_verified_mask():
    """The GPU path hands its device mask over: no host fit, only those matches continue."""
    prev_points = np.array([[10.0, 10.0], [50.0, 20.0], [90.0, 80.0]], np.float32)
    previous = SimpleNamespace(features=SimpleNamespace(keypoints=prev_points),
                               track_ids=np.array([7, 8, 9], np.uint64),
                               track_ages=np.array([2, 5, 1], np.uint32))
    features = Features41(prev_points[::-1] + 300.0)  # far too few matches for a host fit
    matches = MatchResult(np.array([2, 1, 0]), np.array([0, 1, 2]), np.ones(3, np.float32))
    ids, ages, next_id, origin = next_tracks(features, 20, previous, matches,
                                             verified=np.array([True, False, True]))
    assert origin.tolist() == [2, -1, 0]
    assert ids.tolist() == [9, 20, 7] and ages.tolist() == [2, 1, 3] and next_id == 21
    ids, _, _, origin = next_tracks(features, 20, previous, matches)  # host check: < 8 matches
    assert origin.tolist() == [-1, -1, -1] and ids.tolist() == [20, 21, 22]
    empty = MatchResult(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
    _, _, next_id, origin = next_tracks(features, 20, previous, empty, verified=np.zeros(0, bool))
    assert origin.tolist() == [-1, -1, -1] and next_id == 23
    with pytest.raises(ValueError, match='2 entries for 3 matches'):
        next_tracks(features, 20, previous, matches, verified=[True, False])


class Features41:
    """Minimal stand-in of pipeline.Features: keypoints and a length."""

    def __init__(self, keypoints):
        self.keypoints = keypoints

    def __len__(self):
        return len(self.keypoints)


def test_opencv_is_loaded_up_front_only_for_a_host_check():
    code = ('import sys\n'
            'from types import SimpleNamespace\n'
            'from xfeat_ros.features.engine import Capabilities\n'
            'from xfeat_ros.features.tracks import prepare_host_check\n'
            'assert "cv2" not in sys.modules\n'
            'checked = Capabilities(epipolar=True)\n'
            'assert not prepare_host_check(SimpleNamespace(capabilities=checked))\n'
            'assert "cv2" not in sys.modules  # a GPU engine checks on the device\n'
            'assert prepare_host_check(SimpleNamespace(capabilities=Capabilities()))\n'
            'assert "cv2" in sys.modules\n')
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
