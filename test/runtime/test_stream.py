# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""A camera stream without ROS: receipt checks, counters, tracks; the core's log lines."""

import logging
import time

from core_fakes import features_at, frame_msg, scene
import numpy as np
import pytest
from xfeat_ros.errors import (ImageLayoutError, ImageTooSmallError, StampOrderError,
                              UnsupportedEncodingError)
from xfeat_ros.features.pipeline import ContinuedTracks, MatchResult
from xfeat_ros.features.tracks import next_tracks
from xfeat_ros.ros.transport.cdr import parse_image
from xfeat_ros.runtime.report import reason_key, Reporter
from xfeat_ros.runtime.stream import (CameraStream, check_image, Done, STAGES,
                                      STAMP_JUMP_TOLERANCE_NS, stamp_ns, TRANSPORT_PARTS,
                                      transport_parts)


def test_receipt_checks_and_counters():
    stream = CameraStream('cam')
    first = stream.accept(frame_msg(0, stamp_s=2.0), 5.0)
    assert first.camera == 'cam' and first.received == 5.0 and first.shape == (240, 320)
    assert stream.last_stamp_ns == 2_000_000_000
    with pytest.raises(StampOrderError):
        stream.accept(frame_msg(1, stamp_s=2.0), 6.0)  # repeated stamp
    stream.accept(frame_msg(2, stamp_s=0.0), 7.0)  # unstamped frames are exempt
    tiny = frame_msg(3, stamp_s=3.0, shape=(16, 16))
    with pytest.raises(ImageTooSmallError):
        stream.accept(tiny, 8.0)
    short = frame_msg(4, stamp_s=4.0)
    short.data = short.data[:-1]
    with pytest.raises(ImageLayoutError):
        stream.accept(short, 9.0)
    counts = stream.counts()
    assert counts['received'] == 5 and counts['accepted'] == 2 and counts['rejected'] == 3
    assert counts['rejected_StampOrderError'] == 1 and counts['rejected_ImageTooSmallError'] == 1
    assert stream.reject(ImageLayoutError('x'), late=True) == 2
    assert stream.counts()['rejected_late'] == 1


def test_accept_parses_first_and_counts_a_payload_it_cannot_parse():
    stream = CameraStream('')
    with pytest.raises(ImageLayoutError):
        stream.accept(b'\x00\x01\x00\x00 not an image', 1.0, parse_image)
    good = frame_msg(0, stamp_s=1.0)
    item = stream.accept('payload', 2.0, lambda payload: good)
    assert item.msg is good
    counts = stream.counts()
    assert counts['received'] == 2 and counts['accepted'] == 1
    assert counts['rejected'] == 1 and counts['rejected_ImageLayoutError'] == 1


def test_check_image_returns_the_stamp():
    assert check_image(frame_msg(0, stamp_s=1.5), 0) == 1_500_000_000
    assert stamp_ns(frame_msg(0, stamp_s=1.5).header.stamp) == 1_500_000_000


def test_tracks_continue_through_matches_and_restart_after_a_size_change():
    points, descriptors = scene(120)
    stream = CameraStream('')
    features = [features_at(i, points, descriptors) for i in range(3)]
    identity = MatchResult(np.arange(120), np.arange(120), np.ones(120, np.float32))
    outs = []
    for i, f in enumerate(features):
        item = stream.accept(frame_msg(i), float(i))
        outs.append(stream.advance(Done(item, f, identity if i else None)))
    assert outs[0].previous is None and outs[1].previous is outs[0].frame
    np.testing.assert_array_equal(outs[2].frame.track_ids, outs[0].frame.track_ids)
    assert outs[2].frame.track_ages.tolist() == [3] * 120
    np.testing.assert_array_equal(outs[2].origin, np.arange(120))
    assert outs[2].frame.header.frame_id == '2' and outs[2].frame.stamp.sec == 3
    big = stream.accept(frame_msg(3, shape=(480, 640)), 3.0)
    out = stream.advance(Done(big, features[0], None))
    assert out.size_changed and out.matches is None
    assert out.frame.track_ids.min() == 120 and out.frame.track_ages.max() == 1  # all new
    assert big.frame is out.frame


def test_a_stamp_that_jumps_back_beyond_the_tolerance_restarts_the_stream():
    stream = CameraStream('cam')
    live = 1796451675.0  # as in the report: live stamps, then a bag of 2011 replayed
    first = stream.accept(frame_msg(0, stamp_s=live), 1.0)
    assert first.timeline == 0 and not first.restart
    stream.accept(frame_msg(1, stamp_s=live + 0.05), 2.0)
    for stamp_s in (live + 0.05, live):  # repeated; earlier by less than the tolerance
        with pytest.raises(StampOrderError, match='restarts the stream'):
            stream.accept(frame_msg(2, stamp_s=stamp_s), 3.0)
    replayed = stream.accept(frame_msg(3, stamp_s=1311868169.163497984), 4.0)
    assert replayed.restart and replayed.timeline == 1
    assert stream.last_stamp_ns == stamp_ns(replayed.msg.header.stamp)
    later = stream.accept(frame_msg(4, stamp_s=1311868169.263274), 5.0)
    assert later.timeline == 1 and not later.restart
    unstamped = stream.accept(frame_msg(5, stamp_s=0.0), 6.0)  # exempt: no restart
    assert unstamped.timeline == 1 and not unstamped.restart
    counts = stream.counts()
    assert counts['stamp_jumps_back'] == 1 and counts['rejected_StampOrderError'] == 2
    assert counts['accepted'] == 5 and counts['received'] == 7


def test_the_tolerance_is_the_boundary_of_a_restart():
    last = 10_000_000_000
    for back, refused in ((0, True), (STAMP_JUMP_TOLERANCE_NS, True),
                          (STAMP_JUMP_TOLERANCE_NS + 1, False)):
        msg = frame_msg(0, stamp_s=(last - back) / 1e9)
        if refused:
            with pytest.raises(StampOrderError):
                check_image(msg, last)
        else:
            assert check_image(msg, last) == last - back


def test_tracks_end_at_a_jump_back_and_new_ids_keep_increasing():
    points, descriptors = scene(120)
    features = [features_at(i, points, descriptors) for i in range(4)]
    identity = MatchResult(np.arange(120), np.arange(120), np.ones(120, np.float32))
    stream = CameraStream('')
    outs = []
    for i, stamp_s in enumerate((100.0, 100.1, 50.0, 50.1)):  # the third jumps back
        item = stream.accept(frame_msg(i, stamp_s=stamp_s), float(i))
        # an engine that (wrongly) matched across the jump must not carry tracks over it
        matches = identity if i else None
        if i == 2:
            matches = MatchResult(identity.idx0, identity.idx1, identity.similarity, None,
                                  _engine_tracks(stream, features[i], identity))
        outs.append(stream.advance(Done(item, features[i], matches)))
    assert [o.restarted for o in outs] == [False, False, True, False]
    jump = outs[2]
    assert jump.previous is outs[1].frame and jump.matches is None  # an empty Matches
    assert not jump.size_changed and jump.origin.tolist() == [-1] * 120
    assert jump.frame.track_ages.tolist() == [1] * 120
    assert jump.frame.track_ids.min() == 120  # new, never a reused id
    assert stream.counts()['tracks_from_engine'] == 0
    np.testing.assert_array_equal(outs[3].frame.track_ids, jump.frame.track_ids)
    assert outs[3].frame.track_ages.tolist() == [2] * 120  # matching resumes
    assert stream.track_state()[3] is outs[3].frame and stream.next_track_id == 240


def _engine_tracks(stream, features, matches):
    """Return what an engine continuing the tracks returns: next_tracks of the stream's state."""
    previous, next_id = stream.previous, stream.next_track_id
    ids, ages, after, _ = next_tracks(features, next_id, previous, matches, matches.verified)
    return ContinuedTracks(ids, ages, after, (previous, next_id))


@pytest.mark.parametrize('state', ['current', 'other frame', 'other next id'])
def test_engine_tracks_taken_when_made_from_the_current_state(state):
    """The engine's ids where made from this state; otherwise the host's (equal either way)."""
    points, descriptors = scene(120)
    features = [features_at(i, points, descriptors) for i in range(3)]
    verified = np.arange(120) % 3 != 0
    host, engine = CameraStream(''), CameraStream('')
    outs = []
    for i, f in enumerate(features):
        matches = MatchResult(np.arange(120), np.arange(120)[::-1].copy(),
                              np.ones(120, np.float32), verified) if i else None
        want = host.advance(Done(host.accept(frame_msg(i), float(i)), f, matches))
        if matches is not None:
            made = _engine_tracks(engine, f, matches)
            if state != 'current':   # stale: the stream must make its own
                made.ids = made.ids + np.uint64(1)
                frame, next_id = made.made_from
                made.made_from = ((object(), next_id) if state == 'other frame'
                                  else (frame, next_id + 1))
            matches = MatchResult(matches.idx0, matches.idx1, matches.similarity, verified, made)
        got = engine.advance(Done(engine.accept(frame_msg(i), float(i)), f, matches))
        if i and state == 'current':
            assert got.frame.track_ids is made.ids and got.known_origin is None
        np.testing.assert_array_equal(got.frame.track_ids, want.frame.track_ids)
        np.testing.assert_array_equal(got.frame.track_ages, want.frame.track_ages)
        np.testing.assert_array_equal(got.origin, want.origin)   # made when asked
        assert engine.next_track_id == host.next_track_id
        outs.append(got)
    assert outs[2].frame.track_ages.max() == 3
    assert engine.counts()['tracks_from_engine'] == (2 if state == 'current' else 0)


def test_track_state_is_the_last_frames():
    stream = CameraStream('')
    assert stream.track_state() is None
    points, descriptors = scene(10)
    out = stream.advance(Done(stream.accept(frame_msg(0), 0.0),
                              features_at(0, points, descriptors), None))
    ids, ages, next_id, frame = stream.track_state()
    assert frame is out.frame and ids is out.frame.track_ids and ages is out.frame.track_ages
    assert next_id == stream.next_track_id == 10


def test_zero_keypoints_are_a_normal_frame():
    stream = CameraStream('')
    points, descriptors = scene(0)
    empty = features_at(0, points, descriptors)
    outs = [stream.advance(Done(stream.accept(frame_msg(i), 0.0), empty,
                                MatchResult(np.zeros(0, int), np.zeros(0, int),
                                            np.zeros(0, np.float32)) if i else None))
            for i in range(2)]
    assert outs[1].frame.track_ids.shape == (0,) and outs[1].origin.shape == (0,)


def test_published_timings_and_stages():
    stream = CameraStream('')
    item = stream.accept(frame_msg(0, stamp_s=time.time() - 0.5), 1.0)
    item.marks.update(queue=1.01, submit=1.02, device=1.1, results=1.11, handoff=1.15,
                      tracks=1.16, keypoints=1.18, publish=1.2)
    stream.published(item, 1.25)
    times, latency = stream.timings()
    assert times == [1.25] and latency == [250.0] and stream.counts()['published'] == 1
    stages = stream.stage_medians()
    assert list(stages) == ['transport', 'queue', 'submit', 'device', 'results', 'handoff',
                            'tracks', 'keypoints', 'publish', 'output']
    assert 500 <= stages['transport'] < 5000  # the stamp was half a second old on receipt
    np.testing.assert_allclose([stages[s] for s in STAGES[1:]],
                               [10, 10, 80, 10, 40, 10, 20, 20, 50], atol=1e-6)
    # The stages after receipt add up to the node's own latency.
    assert sum(stages[s] for s in STAGES[1:]) == pytest.approx(latency[0])
    unstamped = stream.accept(frame_msg(1, stamp_s=0.0), 2.0)
    assert unstamped.transport_ms is None
    replayed = CameraStream('bag').accept(frame_msg(2, stamp_s=1403715273.0), 3.0)
    assert replayed.transport_ms is None  # a stamp of 2014: another clock


def test_reason_key_ignores_numbers_but_not_reasons():
    a = UnsupportedEncodingError('32FC1', ('mono8',))
    b = UnsupportedEncodingError('bayer_rggb8', ('mono8',))
    assert reason_key(a) != reason_key(b)
    assert reason_key(StampOrderError('stamp 5 ns is not later than 7 ns')) == \
        reason_key(StampOrderError('stamp 9 ns is not later than 11 ns'))


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_reporter_logs_each_new_reason_at_once_and_throttles_repeats(caplog):
    clock = Clock()
    logger = logging.getLogger('test_core_stream')
    logger.propagate = True  # caplog listens at the root; launch makes loggers without it
    report = Reporter(logger, clock)
    with caplog.at_level(logging.WARNING, logger='test_core_stream'):
        for name in ('32FC1', 'bayer_rggb8', '32FC1'):
            exc = UnsupportedEncodingError(name, ('mono8',))
            report.error(str(exc), key=reason_key(exc), period_s=2.0)
        clock.now = 2.5
        report.error('32FC1 again', key=reason_key(UnsupportedEncodingError('32FC1', ('mono8',))),
                     period_s=2.0)
        report.warning('always')
        report.warning('always')
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if '32FC1' in m]) == 2  # first, then after the period
    assert len([m for m in messages if 'bayer_rggb8' in m]) == 1
    assert messages.count('always') == 2
    assert not report.seen('x') and report.seen('x')


def test_the_core_imports_without_rclpy():
    """The core, the engine factory and the offline tool's core side need no rclpy."""
    import subprocess
    import sys
    code = ('import sys; sys.modules["rclpy"] = None\n'
            'import xfeat_ros.runtime.frontend, xfeat_ros.runtime.scheduler\n'
            'import xfeat_ros.runtime.stereo\n'
            'import xfeat_ros.runtime.stream, xfeat_ros.runtime.vins, xfeat_ros.features.engine\n'
            'print("ok")')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.strip() == 'ok', result.stderr


def test_transport_split_by_the_dds_timestamps():
    stream = CameraStream('')
    stamp = time.time_ns() - 3_000_000
    info = {'source_timestamp': stamp + 1_000_000, 'received_timestamp': stamp + 1_500_000}
    item = stream.accept(frame_msg(0, stamp_s=stamp / 1e9), 1.0, info=info)
    camera, dds, take = item.transport_parts
    assert camera == pytest.approx(1.0, abs=1e-3) and dds == pytest.approx(0.5, abs=1e-3)
    assert take >= 1.5 and camera + dds + take == pytest.approx(item.transport_ms, abs=1e-3)
    item.marks.update(queue=1.001)
    stream.published(item, 1.002)
    stages = stream.stage_medians()
    assert list(stages)[:4] == ['transport', *TRANSPORT_PARTS]
    assert stages['transport_dds'] == pytest.approx(0.5, abs=1e-3)
    # No DDS timestamps, or times out of order (another machine's clock): not split.
    assert stream.accept(frame_msg(1, stamp_s=time.time()), 2.0).transport_parts is None
    late_writer = {'source_timestamp': 1, 'received_timestamp': 2}
    assert transport_parts(stamp, late_writer, time.time_ns()) is None
    assert transport_parts(stamp, {'source_timestamp': stamp, 'received_timestamp': 0},
                           time.time_ns()) is None


@pytest.mark.parametrize('count', [1, 2, 3, 199, 200])
def test_stage_medians_are_numpys(count):
    rng = np.random.default_rng(count)
    stream = CameraStream('cam')
    values = list(rng.normal(3.0, 1.0, count))
    stream.stage_ms['queue'].extend(values)
    stream.stage_ms['publish'].extend([2.0] * count)
    stages = stream.stage_medians()
    assert set(stages) == {'queue', 'publish'}
    assert stages['queue'] == pytest.approx(float(np.median(values)), abs=1e-12)
    assert stages['publish'] == 2.0 and isinstance(stages['queue'], float)
