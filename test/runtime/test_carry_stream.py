# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""A camera's stream carries lost tracks through the dense descriptor map (real frames, CPU)."""

from types import SimpleNamespace

from conftest import DATA_ROOT
import numpy as np
import pytest
from xfeat_ros.features.engine import CpuEngine
from xfeat_ros.features.spread import Spread
from xfeat_ros.runtime.stream import CameraStream, Done
from xfeat_ros.tools.image_files import list_sequence, read_image

TOP_K = 150
FRAMES = 6


@pytest.fixture(scope='module')
def messages():
    from xfeat_ros.features.image_codec import raw_image
    listed = list_sequence(DATA_ROOT / 'data' / 'tum_fr2_desk')[:FRAMES]
    out = []
    for index, (_, path) in enumerate(listed):
        msg = raw_image(*read_image(path))
        msg.header = SimpleNamespace(stamp=SimpleNamespace(sec=index + 1, nanosec=0),
                                     frame_id='camera')
        out.append(msg)
    return out


def run(cpu_pipeline, messages, spread):
    engine = CpuEngine(cpu_pipeline.backbone, TOP_K, spread=spread)
    stream = CameraStream('camera')
    outs, previous = [], None
    for msg in messages:
        item = stream.accept(msg, 0.0)
        slot = engine.alloc_slot()
        engine.submit(msg, slot)
        if previous is not None:
            engine.submit_match(previous, slot)
        outs.append(stream.advance(Done(item, slot.features, slot.matches)))
        previous = slot
    return stream, outs


@pytest.fixture(scope='module')
def carried_run(cpu_pipeline, messages):
    return run(cpu_pipeline, messages, Spread(carry_frames=2))


def test_carried_tracks_live_longer(cpu_pipeline, messages, carried_run):
    _, plain = run(cpu_pipeline, messages, Spread())
    stream, carried = carried_run
    counts = stream.counts()
    assert counts['tracks_carried'] > 50
    plain_age = np.mean([out.frame.track_ages.mean() for out in plain[1:]])
    carried_age = np.mean([out.frame.track_ages.mean() for out in carried[1:]])
    assert carried_age > 1.3 * plain_age
    assert plain[-1].frame.track_carried is None


def test_carried_frames_keep_the_rules(carried_run):
    _, outs = carried_run
    for out in outs:
        frame = out.frame
        count = len(frame.features)
        assert 0 < count <= TOP_K and frame.features.dense is None
        assert frame.track_carried.shape == (count,) and frame.track_carried.max() <= 2
        assert len(np.unique(frame.track_ids)) == count
        ages = frame.track_ages.astype(int)
        tracked = ages > 1
        assert tracked[:tracked.sum()].all()         # continued tracks placed first
        assert (ages[frame.track_carried > 0] > 1).all()
    assert max(out.frame.track_carried.max() for out in outs) == 2


def test_matches_list_every_continuation_verified(carried_run):
    _, outs = carried_run
    for out in outs[1:]:
        previous, frame, matches = out.previous, out.frame, out.matches
        origin = out.origin
        np.testing.assert_array_equal(matches.verified, origin[matches.idx1] == matches.idx0)
        continued = np.nonzero(origin >= 0)[0]
        listed = set(zip(matches.idx0[matches.verified].tolist(),
                         matches.idx1[matches.verified].tolist()))
        assert listed == set(zip(origin[continued].tolist(), continued.tolist()))
        np.testing.assert_array_equal(frame.track_ids[continued],
                                      previous.track_ids[origin[continued]])
        np.testing.assert_array_equal(frame.track_ages[continued],
                                      previous.track_ages[origin[continued]] + 1)
        carried = np.nonzero(frame.track_carried > 0)[0]
        np.testing.assert_array_equal(frame.track_carried[carried],
                                      previous.track_carried[origin[carried]] + 1)
        # a carried keypoint stays near its track's previous place, its descriptor alike
        moved = np.linalg.norm(frame.features.keypoints[carried]
                               - previous.features.keypoints[origin[carried]], axis=1)
        assert moved.max() < 40
        similar = np.einsum('nc,nc->n', frame.features.descriptors[carried],
                            previous.features.descriptors[origin[carried]])
        assert similar.min() >= 0.85
