# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""A camera's stream keeps spread candidates once their tracks are known, tracked first."""

from types import SimpleNamespace

from core_fakes import features_at, frame_msg, scene
import numpy as np
from xfeat_ros.features.pipeline import Features, MatchResult
from xfeat_ros.features.spread import Spread
from xfeat_ros.runtime.frontend import FrontEnd, OutputConfig
from xfeat_ros.runtime.stream import CameraStream, Done

MIN_DISTANCE = 20.0
TOP_K = 60


def candidates_at(step, points, descriptors, spread):
    features = features_at(step, points, descriptors)
    return Features(features.keypoints, features.scores, features.descriptors,
                    features.image_hw, spread=spread)


def min_pair_distance(keypoints):
    diff = keypoints[:, None, :].astype(np.float64) - keypoints[None, :, :]
    distance = np.sqrt((diff ** 2).sum(-1))
    return distance[np.triu_indices(len(keypoints), 1)].min()


def run_frames(count, spread, n_points=300):
    points, descriptors = scene(n_points, seed=4)
    stream = CameraStream('cam')
    identity = MatchResult(np.arange(n_points), np.arange(n_points),
                           np.ones(n_points, np.float32))
    outs = []
    for i in range(count):
        item = stream.accept(frame_msg(i), float(i))
        features = candidates_at(i, points, descriptors, spread)
        outs.append(stream.advance(Done(item, features, identity if i else None)))
    return stream, outs, descriptors


def test_kept_keypoints_are_spread_tracked_first_and_tracks_grow():
    stream, outs, descriptors = run_frames(5, Spread(MIN_DISTANCE, top_k=TOP_K))
    for out in outs:
        frame = out.frame
        assert 10 < len(frame.features) <= TOP_K
        assert min_pair_distance(frame.features.keypoints) >= MIN_DISTANCE
        assert frame.features.spread is None
        ages = frame.track_ages.astype(int)
        tracked = ages > 1
        # Placement order: every continued track before every new one, oldest first.
        assert tracked[:tracked.sum()].all()
        assert (np.diff(ages[:tracked.sum()]) <= 0).all()
        new_scores = frame.features.scores[~tracked]
        assert (np.diff(new_scores) <= 0).all()
        assert len(np.unique(frame.track_ids)) == len(frame.track_ids)
    assert outs[-1].frame.track_ages.max() == 5
    assert (outs[-1].frame.track_ages == 5).sum() > len(outs[0].frame.features) // 2
    assert stream.counts()['spread_dropped'] > 0
    # Matches and origins run between published keypoints: the same scene point on both ends.
    for out in outs[1:]:
        previous, frame, matches = out.previous, out.frame, out.matches
        assert len(matches) > 0
        assert matches.idx0.max() < len(previous.features)
        assert matches.idx1.max() < len(frame.features)
        np.testing.assert_array_equal(previous.features.descriptors[matches.idx0],
                                      frame.features.descriptors[matches.idx1])
        tracked = np.nonzero(out.origin >= 0)[0]
        np.testing.assert_array_equal(frame.track_ids[tracked],
                                      previous.track_ids[out.origin[tracked]])
        np.testing.assert_array_equal(frame.track_ages[tracked],
                                      previous.track_ages[out.origin[tracked]] + 1)


def test_new_ids_are_numbered_after_the_selection():
    stream, outs, _ = run_frames(3, Spread(MIN_DISTANCE, top_k=TOP_K))
    ids = np.concatenate([out.frame.track_ids[out.frame.track_ages == 1] for out in outs])
    # Dropped candidates take no id: the new ids are 0, 1, 2, ... without a gap.
    np.testing.assert_array_equal(np.sort(ids), np.arange(len(ids)))
    assert stream.next_track_id == len(ids)


def test_grid_mode_caps_each_cell():
    _, outs, _ = run_frames(3, Spread(0.0, 64, 2, top_k=TOP_K))
    for out in outs:
        cells = np.floor(out.frame.features.keypoints / 64).astype(int)
        assert np.unique(cells, axis=0, return_counts=True)[1].max() <= 2


def test_without_a_spread_the_candidates_are_the_frame():
    _, outs, _ = run_frames(2, None, n_points=120)
    assert len(outs[1].frame.features) == 120 and outs[1].frame.candidate_index is None
    assert outs[1].frame.track_ages.tolist() == [2] * 120


class StereoSink:
    """A sink that records the stereo matches it is given."""

    def __init__(self):
        self.stereo = []

    def topic_name(self, camera, name):
        return f'{camera}/{name}'

    def publish_keypoints(self, out):
        pass

    def publish_matches(self, out):
        pass

    def wants_debug(self, camera):
        return False

    def publish_stereo(self, left_camera, left, right, result):
        self.stereo.append((left, right, result))


def test_stereo_matches_are_carried_to_the_published_keypoints():
    points, descriptors = scene(300, seed=5)
    spread = Spread(MIN_DISTANCE, top_k=TOP_K)
    streams = {name: CameraStream(name) for name in ('left', 'right')}
    sink = StereoSink()
    front = FrontEnd(streams, OutputConfig(stereo_pairs=('left:right',)), sink,
                     SimpleNamespace(warning=lambda *a, **k: None))
    left = Done(streams['left'].accept(frame_msg(0), 0.0),
                candidates_at(0, points, descriptors, spread))
    right = Done(streams['right'].accept(frame_msg(0), 0.0),
                 candidates_at(1, points, descriptors, spread))
    front.finish(left)
    right.stereo = SimpleNamespace(left=left, right=right, result=MatchResult(
        np.arange(300), np.arange(300), np.ones(300, np.float32)))
    front.finish(right)
    (left_frame, right_frame, result), = sink.stereo
    assert 0 < len(result) <= TOP_K
    assert result.idx0.max() < len(left_frame.features)
    assert result.idx1.max() < len(right_frame.features)
    np.testing.assert_array_equal(left_frame.features.descriptors[result.idx0],
                                  right_frame.features.descriptors[result.idx1])


def test_a_frame_without_candidates_and_a_restart():
    spread = Spread(MIN_DISTANCE, top_k=TOP_K)
    stream = CameraStream('cam')
    empty = Features(np.zeros((0, 2), np.float32), np.zeros(0, np.float32),
                     np.zeros((0, 64), np.float32), (240, 320), spread=spread)
    out = stream.advance(Done(stream.accept(frame_msg(0), 0.0), empty))
    assert len(out.frame.features) == 0 and out.frame.track_ids.shape == (0,)
    assert out.frame.candidate_index.shape == (0,)
    points, descriptors = scene(100, seed=6)
    nothing = MatchResult(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
    out = stream.advance(Done(stream.accept(frame_msg(1), 1.0),
                              candidates_at(0, points, descriptors, spread), nothing))
    assert len(out.matches) == 0 and (out.frame.track_ages == 1).all()
    issued = int(out.frame.track_ids.max())
    # A stamp that jumps back: every kept keypoint starts a track, none takes an old id.
    jump = stream.accept(frame_msg(0, stamp_s=0.5), 2.0)
    out = stream.advance(Done(jump, candidates_at(1, points, descriptors, spread), nothing))
    assert out.restarted and out.matches is None and (out.frame.track_ages == 1).all()
    assert int(out.frame.track_ids.min()) == issued + 1
    assert min_pair_distance(out.frame.features.keypoints) >= MIN_DISTANCE


def test_an_engine_continues_no_tracks_after_a_spread_selection():
    """The ids of a spread frame follow its published keypoints, not the engine's candidates."""
    stream, _, _ = run_frames(2, Spread(MIN_DISTANCE, top_k=TOP_K))
    assert stream.track_state() is None
    plain, _, _ = run_frames(2, None)
    ids, ages, next_id, frame = plain.track_state()
    assert frame is plain.previous and len(ids) == len(ages) == len(frame.features)
    assert next_id == plain.next_track_id
