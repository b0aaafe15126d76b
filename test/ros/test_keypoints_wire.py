# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""A Keypoints message written around arrays already in place equals the CDR writer's bytes."""

from types import SimpleNamespace

import numpy as np
import pytest
from xfeat_ros.features.pipeline import Features
from xfeat_ros.ros.transport import keypoints_wire
from xfeat_ros.ros.transport.cdr import Header, keypoints_cdr, Time


def placed(frame_id, rows, dim=64, seed=0, slack=24):
    """Return (block, layout, Features whose arrays lie in the block at the layout's places)."""
    rng = np.random.default_rng(seed)
    found = keypoints_wire.layout(frame_id, rows, dim)
    block = np.full(found.size + slack, 0xAB, np.uint8)   # garbage where nothing was placed

    def at(offset, shape):
        count = int(np.prod(shape))
        array = block[offset:offset + 4 * count].view(np.float32).reshape(shape)
        array[...] = rng.random(shape, dtype=np.float32)
        return array
    features = Features(at(found.keypoints, (rows, 2)), at(found.scores, (rows,)),
                        at(found.descriptors, (rows, dim)), (480, 640))
    return block, found, features


@pytest.mark.parametrize('frame_id', ['', 'c', 'camera', 'cam_7', 'kamera_é'])
@pytest.mark.parametrize('rows', [1, 3, 4096])
def test_bytes_equal_the_cdr_writer(frame_id, rows):
    block, found, features = placed(frame_id, rows)
    assert keypoints_wire.fits(block, found, features)
    header = Header(Time(1_700_000_000, 123_456_789), frame_id)
    ids = np.arange(10, 10 + rows, dtype=np.uint64) * 3
    ages = np.arange(rows, dtype=np.uint32) % 7 + 1
    size = keypoints_wire.write_around(block, found, header, features.image_hw, ids, ages)
    want = keypoints_cdr(header, features, (ids, ages), 'float32')
    assert size == found.size == len(want)
    assert bytes(block[:size]) == want


def test_the_rclpy_message_reads_back():
    serialization = pytest.importorskip('rclpy.serialization')
    keypoints_msg = pytest.importorskip('xfeat_ros_msgs.msg').Keypoints
    block, found, features = placed('cam0', 5, seed=1)
    ids, ages = np.arange(5, dtype=np.uint64), np.ones(5, np.uint32)
    size = keypoints_wire.write_around(block, found, Header(Time(3, 4), 'cam0'),
                                       features.image_hw, ids, ages)
    msg = serialization.deserialize_message(bytes(block[:size]), keypoints_msg)
    assert (msg.header.frame_id, msg.image_width, msg.image_height) == ('cam0', 640, 480)
    np.testing.assert_array_equal(np.asarray(msg.descriptors, np.float32),
                                  features.descriptors.reshape(-1))
    np.testing.assert_array_equal(msg.track_ids, ids)


def test_arrays_elsewhere_do_not_fit():
    block, found, features = placed('cam', 8)
    moved = Features(features.keypoints.copy(), features.scores, features.descriptors,
                     features.image_hw)
    assert not keypoints_wire.fits(block, found, moved)
    assert not keypoints_wire.fits(block, keypoints_wire.layout('other', 8, 64), features)
    assert not keypoints_wire.fits(block, keypoints_wire.layout('cam', 7, 64), features)
    assert not keypoints_wire.fits(None, found, features)
    assert not keypoints_wire.fits(block[:found.size - 1], found, features)


def test_placement_gives_the_layouts_offsets():
    place = keypoints_wire.placement('cam')
    found = keypoints_wire.layout('cam', 4096, 64)
    assert place(4096, 64) == (found.size, (found.keypoints, found.scores, found.descriptors,
                                            found.track_ids, found.track_ages))
    assert place(0, 64) is None


@pytest.mark.parametrize('rows', [1, 5, 4096])
def test_tracks_already_in_place_are_kept(rows):
    """Track ids and ages the engine copied to their places equal the CDR writer's bytes."""
    block, found, features = placed('cam_3', rows, seed=2)
    ids = block[found.track_ids:found.track_ids + 8 * rows].view(np.uint64)
    ages = block[found.track_ages:found.track_ages + 4 * rows].view(np.uint32)
    ids[:] = np.arange(rows, dtype=np.uint64) * 11 + 2**40
    ages[:] = np.arange(rows, dtype=np.uint32) % 5 + 1
    header = Header(Time(7, 8), 'cam_3')
    want = keypoints_cdr(header, features, (ids.copy(), ages.copy()), 'float32')
    size = keypoints_wire.write_around(block, found, header, features.image_hw, ids, ages)
    assert bytes(block[:size]) == want


class BlockPublisher:
    """Records the blocks it was asked to publish as they lie."""

    def __init__(self):
        self.sent = []

    def publish_block(self, block, size):
        self.sent.append(bytes(block[:size]))


def frame_of(features, frame_id='cam'):
    rows = len(features)
    return SimpleNamespace(features=features, header=Header(Time(5, 6), frame_id),
                           track_ids=np.arange(rows, dtype=np.uint64),
                           track_ages=np.ones(rows, np.uint32))


def test_publish_in_place_sends_the_cdr_writers_bytes():
    block, _, features = placed('cam', 16)
    features.wire = block
    frame, publisher = frame_of(features), BlockPublisher()
    assert keypoints_wire.publish_in_place(publisher, frame, 'float32')
    assert publisher.sent == [keypoints_cdr(frame.header, features,
                                            (frame.track_ids, frame.track_ages), 'float32')]


@pytest.mark.parametrize('case', ['no block', 'int8', 'other frame_id', 'rclpy publisher',
                                  'copied arrays'])
def test_publish_in_place_leaves_other_frames_to_the_ordinary_way(case):
    block, _, features = placed('cam', 16)
    features.wire = None if case == 'no block' else block
    if case == 'copied arrays':
        features.scores = features.scores.copy()
    frame = frame_of(features, 'other' if case == 'other frame_id' else 'cam')
    publisher = object() if case == 'rclpy publisher' else BlockPublisher()
    before = bytes(block)
    assert not keypoints_wire.publish_in_place(publisher, frame,
                                               'int8' if case == 'int8' else 'float32')
    assert bytes(block) == before   # nothing written
