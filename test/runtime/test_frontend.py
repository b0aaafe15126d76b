# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The front-end's outputs without ROS: what each frame hands its sink, in order.

Frames come from a scripted scene (test/core_fakes.py) through the real
scheduler's engine stage (``Scheduler.process``, no threads), as
``xfeat_offline`` runs them.
"""

from core_fakes import features_at, frame_msg, MODEL, scene, ScriptedEngine
import numpy as np
import pytest
from xfeat_ros.features.camera import undistort_points
from xfeat_ros.features.pipeline import MatchResult
from xfeat_ros.runtime.frontend import FrontEnd, OutputConfig
from xfeat_ros.runtime.report import Reporter
from xfeat_ros.runtime.scheduler import Scheduler, SchedulerConfig
from xfeat_ros.runtime.stereo import (pair_partner, parse_stereo_pairs, STEREO_WINDOW,
                                      StereoPairing, verify_stereo)
from xfeat_ros.runtime.stream import CameraStream
from xfeat_ros.runtime.vins import model_mismatch, vins_columns, VinsPart


class Sink:
    """Records what the front-end sends, as (kind, camera, ...) tuples."""

    def __init__(self, debug=()):
        self.sent = []
        self.debug_cameras = set(debug)

    def topic_name(self, camera, name):
        return f'/{camera}/{name}'

    def publish_keypoints(self, out):
        self.sent.append(('frame', out.camera, out))

    def publish_matches(self, out):
        self.sent.append(('matches', out.camera, out))

    def publish_cloud(self, out):
        self.sent.append(('cloud', out.camera, out))

    def publish_feature(self, camera, header, columns, camera_ids):
        self.sent.append(('feature', camera, header, columns, camera_ids))

    def publish_stereo(self, left_camera, left, right, result):
        self.sent.append(('stereo', left_camera, left, right, result))

    def wants_debug(self, camera):
        return camera in self.debug_cameras

    def publish_debug(self, out, canvas):
        self.sent.append(('debug', out.camera, canvas))

    def of(self, kind, camera=None):
        return [s for s in self.sent if s[0] == kind and (camera is None or s[1] == camera)]


@pytest.fixture(scope='module')
def world():
    points, descriptors = scene(150)
    return points, descriptors, {str(i): features_at(i, points, descriptors)
                                 for i in range(12)}


class Lines:
    """A logger of one-string methods (as rclpy's) that keeps its lines as (level, text)."""

    def __init__(self):
        self.lines = []

    def __getattr__(self, level):
        return lambda text: self.lines.append((level, text))


def run(features, frames, config=OutputConfig(), cameras=('',), debug=(), models=None,
        group=1, logger=None):
    """Finish ``frames`` [(camera, index, stamp_s)] through the core; return (sink, streams)."""
    streams = {name: CameraStream(name) for name in cameras}
    for name, model in (models or {}).items():
        streams[name].camera_model = model
    sink = Sink(debug)
    report = Reporter(logger or __import__('logging').getLogger('test_core_frontend'))
    stereo = None
    if config.pairs:
        stereo = StereoPairing(config.pairs, config.stereo_sync_tolerance_s,
                               lambda camera, key: streams[camera].count(key))
    scheduler = Scheduler(ScriptedEngine(features), streams, SchedulerConfig(), None, report,
                          stereo)
    frontend = FrontEnd(streams, config, sink, report)
    items = [streams[c].accept(frame_msg(i, stamp_s=s), float(i)) for c, i, s in frames]
    for start in range(0, len(items), group):
        for done in scheduler.process(items[start:start + group]):
            frontend.finish(done)
    frontend.flush()
    sink.items = items
    return sink, streams


def test_keypoints_matches_and_tracks(world):
    _, _, features = world
    sink, streams = run(features, [('', i, None) for i in range(3)])
    outs = [s[2] for s in sink.of('frame')]
    assert [o.previous is None for o in outs] == [True, False, False]
    assert all(len(o.matches) == 150 for o in outs[1:])
    np.testing.assert_array_equal(outs[2].frame.track_ids, outs[0].frame.track_ids)
    assert streams[''].counts()['published'] == 3
    assert all(item.msg is None and item.frame.header.frame_id == str(i)
               for i, item in enumerate(sink.items))  # image bytes released once sent
    assert not sink.of('cloud') and not sink.of('feature') and not sink.of('debug')


def test_a_jump_back_warns_once_and_restarts_the_tracks(world):
    _, _, features = world
    logger = Lines()
    stamps = (100.0, 100.1, 50.0, 50.1, 50.2)
    sink, streams = run(features, [('', i, s) for i, s in enumerate(stamps)], logger=logger)
    outs = [s[2] for s in sink.of('frame')]
    matches = [s[2] for s in sink.of('matches')]
    assert len(outs) == 5 and len(matches) == 5  # the first frame's too (previous None)
    jump = outs[2]
    assert jump.restarted and jump.matches is None and jump.previous is outs[1].frame
    assert jump.frame.track_ids.min() > outs[1].frame.track_ids.max()  # new, never reused
    assert jump.frame.track_ages.max() == 1
    np.testing.assert_array_equal(outs[4].frame.track_ids, jump.frame.track_ids)
    assert outs[4].frame.track_ages.min() == 3 and len(outs[3].matches) == 150
    assert [o.restarted for o in outs] == [False, False, True, False, False]
    warnings = [text for level, text in logger.lines if level == 'warning']
    assert len(warnings) == 1, logger.lines
    assert warnings[0].startswith('//image: image stamp jumped back from 100100000000 ns to '
                                  '50000000000 ns') and 'every track ends' in warnings[0]
    counts = streams[''].counts()
    assert counts['stamp_jumps_back'] == 1 and counts['published'] == 5
    assert 'matches_empty_size_change' not in counts


def test_each_jump_back_is_logged_at_most_once_a_second_per_camera(world):
    _, _, features = world
    lines, now = Lines(), [0.0]
    streams = {name: CameraStream(name) for name in ('a', 'b')}
    sink = Sink()
    frontend = FrontEnd(streams, OutputConfig(), sink, Reporter(lines, lambda: now[0]))
    scheduler = Scheduler(ScriptedEngine(features), streams, SchedulerConfig())
    for step, (camera, stamp_s) in enumerate([('a', 10.0), ('b', 10.0), ('a', 5.0), ('b', 5.0),
                                              ('a', 1.0), ('a', 0.5), ('a', 0.1)]):
        now[0] = {5: 2.0, 6: 2.5}.get(step, 0.0)  # a's 2nd and 4th jumps come within a second
        item = streams[camera].accept(frame_msg(step, stamp_s=stamp_s), 0.0)
        for done in scheduler.process([item]):
            frontend.finish(done)
    warned = [text.split(':')[0] for level, text in lines.lines if level == 'warning']
    assert warned == ['/a/image', '/b/image', '/a/image']  # a at 0 s and 2 s; b at 0 s
    assert streams['a'].counts()['stamp_jumps_back'] == 4
    assert [s[2].restarted for s in sink.of('frame', 'a')] == [False] + [True] * 4


def test_cloud_and_debug_only_when_asked(world):
    _, _, features = world
    sink, streams = run(features, [(c, i, None) for i in range(2) for c in ('a', 'b')],
                        OutputConfig(keypoint_cloud=True), cameras=('a', 'b'), debug=('b',))
    assert len(sink.of('cloud', 'a')) == 2 and len(sink.of('cloud', 'b')) == 2
    assert sink.of('debug', 'a') == [] and len(sink.of('debug', 'b')) == 2
    canvas = sink.of('debug', 'b')[0][2]
    assert canvas.shape == (240, 320, 3) and canvas.dtype == np.uint8
    assert streams['b'].counts()['debug_images_rendered'] == 2


def test_vins_features_mono(world):
    _, _, features = world
    config = OutputConfig(vins_features=True)
    sink, _ = run(features, [('', i, 1.0 + 0.1 * i) for i in range(3)], config,
                  models={'': MODEL})
    frames = [s[2] for s in sink.of('frame')]
    messages = sink.of('feature')
    assert len(messages) == 3 and all(m[4] is None for m in messages)  # no camera_id (mono)
    normalized, ids, pixels, velocity = messages[2][3]
    np.testing.assert_array_equal(pixels, frames[2].frame.features.keypoints)
    np.testing.assert_array_equal(ids, frames[2].frame.track_ids)
    np.testing.assert_allclose(normalized, undistort_points(MODEL, pixels))
    moved = frames[2].frame.features.keypoints - frames[1].frame.features.keypoints
    np.testing.assert_allclose(velocity, moved / 0.1, rtol=1e-3, atol=1e-2)
    assert not messages[0][3][3].any()  # no previous frame: zero velocity


def test_vins_features_wait_for_intrinsics(world):
    _, _, features = world
    sink, streams = run(features, [('', i, None) for i in range(2)],
                        OutputConfig(vins_features=True))
    assert sink.of('feature') == []
    assert streams[''].counts()['feature_skipped_no_camera_info'] == 2
    assert model_mismatch(MODEL, (480, 640)) == 'camera_info_size'
    assert model_mismatch(MODEL, (240, 320)) is None


def stereo_frames(count, right_offset_s=0.0):
    frames = []
    for i in range(count):
        frames += [('left', 2 * i, 1.0 + i), ('right', 2 * i + 1, 1.0 + i + right_offset_s)]
    return frames


def test_stereo_matches_and_vins_fusion(world):
    _, _, features = world
    config = OutputConfig(vins_features=True, vins_format='fusion', stereo_pairs=('left:right',))
    sink, streams = run(features, stereo_frames(3), config, cameras=('left', 'right'),
                        models={'left': MODEL, 'right': MODEL}, group=2)
    stereo = sink.of('stereo')
    assert len(stereo) == 3 and all(len(s[4]) == 150 for s in stereo)
    assert stereo[0][3].header.frame_id == '1' and stereo[0][2].header.frame_id == '0'
    messages = sink.of('feature')
    assert [m[1] for m in messages] == ['left'] * 3  # right features ride with the left
    normalized, ids, pixels, velocity = messages[0][3]
    camera_ids = messages[0][4]
    assert len(ids) == 300 and camera_ids.tolist() == [0] * 150 + [1] * 150
    np.testing.assert_array_equal(ids[150:], ids[:150][stereo[0][4].idx0])
    counts = streams['left'].counts()
    assert counts['stereo_matches_published'] == 3 and 'feature_stereo_unpaired' not in counts


def test_unpaired_left_frames_are_sent_alone_in_order(world):
    _, _, features = world
    config = OutputConfig(vins_features=True, vins_format='fusion', stereo_pairs=('left:right',))
    sink, streams = run(features, stereo_frames(3, right_offset_s=0.003), config,
                        cameras=('left', 'right'), models={'left': MODEL, 'right': MODEL})
    assert sink.of('stereo') == []
    messages = sink.of('feature')
    assert [m[2].frame_id for m in messages] == ['0', '2', '4']  # the last one at flush
    assert all(not m[4].any() for m in messages)
    assert streams['left'].counts()['feature_stereo_unpaired'] == 3


def test_a_looping_stereo_pair_sends_the_old_left_frame_alone(world):
    _, _, features = world
    config = OutputConfig(vins_features=True, vins_format='fusion', stereo_pairs=('left:right',))
    # stamps 1, 2, 3 then the loop again; right's frame at 3 s is lost the first time round
    frames = [('left', 0, 1.0), ('right', 1, 1.0), ('left', 2, 2.0), ('right', 3, 2.0),
              ('left', 4, 3.0), ('left', 5, 1.0), ('right', 6, 1.0), ('left', 7, 2.0),
              ('right', 8, 2.0)]
    sink, streams = run(features, frames, config, cameras=('left', 'right'),
                        models={'left': MODEL, 'right': MODEL})
    pairs = [(s[2].header.frame_id, s[3].header.frame_id) for s in sink.of('stereo')]
    assert pairs == [('0', '1'), ('2', '3'), ('5', '6'), ('7', '8')]
    messages = sink.of('feature')
    assert [m[2].frame_id for m in messages] == ['0', '2', '4', '5', '7']  # 4 alone, in order
    assert [int(m[4].sum()) for m in messages] == [150, 150, 0, 150, 150]  # right features
    assert not messages[3][3][3].any()  # the loop's first frame: no velocity (new tracks)
    counts = streams['left'].counts()
    assert counts['feature_stereo_unpaired'] == 1 and counts['stereo_unpaired'] == 1


def test_stereo_tolerance_pairs_close_stamps(world):
    _, _, features = world
    config = OutputConfig(stereo_pairs=('left:right',), stereo_sync_tolerance_s=0.005)
    sink, _ = run(features, stereo_frames(2, right_offset_s=0.003), config,
                  cameras=('left', 'right'))
    assert len(sink.of('stereo')) == 2


def test_stereo_epipolar_check_counts_rejections(world):
    points, descriptors, features = world
    left = features['0']
    right = features_at(3, points, descriptors)
    swapped = np.arange(150)
    swapped[:20] = np.roll(swapped[:20], 1)  # 20 wrong pairs
    result = MatchResult(np.arange(150), swapped, np.ones(150, np.float32))
    kept, rejected = verify_stereo(left, right, result, [None, None], 1.0)
    assert rejected >= 18 and len(kept) == 150 - rejected
    kept_models, _ = verify_stereo(left, right, result, [MODEL, MODEL], 1.0)
    assert len(kept_models) == len(kept)


def test_pair_partner_and_window():
    candidates = [[100, 'a'], [200, None], [205, 'c']]
    assert pair_partner(candidates, 198, 10) == 2  # 200 is paired already
    assert pair_partner(candidates, 150, 10) is None
    counted = []
    pairing = StereoPairing([('l', 'r')], 0.0, lambda camera, key: counted.append((camera, key)))

    class Item:
        def __init__(self, camera, stamp_s):
            self.camera, self.msg, self.timeline = camera, frame_msg(0, stamp_s=stamp_s), 0

    class Done:
        def __init__(self, camera, stamp_s):
            self.item, self.features, self.stereo = Item(camera, stamp_s), None, None
    for i in range(STEREO_WINDOW + 2):
        assert pairing.offer(Done('l', 1.0 + i), lambda a, b: None) is None
    assert counted == [('l', 'stereo_unpaired')] * 2
    assert pairing.offer(Done('x', 1.0), lambda a, b: None) is None  # not in a pair
    assert parse_stereo_pairs(['a:b']) == [('a', 'b')]
    with pytest.raises(ValueError):
        parse_stereo_pairs(['a:a'])


def test_vins_columns_layout():
    part = VinsPart(np.zeros((2, 2)), np.ones((2, 2)), np.zeros((2, 2), np.float32),
                    np.array([7, 8], np.uint64))
    columns, camera_ids = vins_columns(part)
    assert camera_ids is None and columns[1].tolist() == [7, 8]
    right = VinsPart(np.full((3, 2), 5.0), np.full((3, 2), 6.0), np.zeros((3, 2), np.float32),
                     np.array([1, 2, 3], np.uint64))
    result = MatchResult(np.array([1]), np.array([2]), np.ones(1, np.float32))
    columns, camera_ids = vins_columns(part, True, right, result)
    assert camera_ids.tolist() == [0, 0, 1] and columns[1].tolist() == [7, 8, 8]
    assert columns[2][2].tolist() == [6.0, 6.0]
