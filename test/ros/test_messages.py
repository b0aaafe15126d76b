# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Message builders: Keypoints encodings, the keypoint cloud and the VINS feature cloud."""

import numpy as np
import pytest
from xfeat_ros.features.descriptor_format import decode_descriptors
from xfeat_ros.features.pipeline import Features
from xfeat_ros.ros.messages import (cloud_points, features_from_msg, keypoint_cloud_msg,
                                    keypoints_msg, vins_feature_msg)

pytestmark = pytest.mark.ros


def features(n, seed=0):
    rng = np.random.default_rng(seed)
    desc = rng.normal(size=(n, 64)).astype(np.float32)
    desc /= np.maximum(np.linalg.norm(desc, axis=1, keepdims=True), 1e-9)
    return Features(rng.uniform(0, 640, (n, 2)).astype(np.float32),
                    rng.uniform(0, 1, n).astype(np.float32), desc, (480, 640))


def header():
    from std_msgs.msg import Header
    return Header(frame_id='cam')


@pytest.mark.parametrize('encoding, nbytes', [('float32', 0), ('float16', 2), ('int8', 1),
                                              ('none', 0)])
@pytest.mark.parametrize('n', [0, 1, 300])
def test_keypoints_descriptor_encodings(encoding, nbytes, n):
    f = features(n)
    tracks = (np.arange(n, dtype=np.uint64) + 2 ** 40, np.ones(n, np.uint32))
    msg = keypoints_msg(header(), f, tracks, encoding)
    assert msg.descriptor_encoding == encoding and msg.descriptor_size == 64
    assert len(msg.descriptor_data) == n * 64 * nbytes
    assert len(msg.descriptors) == (n * 64 if encoding == 'float32' else 0)
    got = features_from_msg(msg)
    np.testing.assert_array_equal(got.keypoints, f.keypoints)
    if encoding == 'none':
        assert got.descriptors.shape == (n, 0)
    elif encoding == 'float32':
        np.testing.assert_array_equal(got.descriptors, f.descriptors)
    else:
        assert got.descriptors.shape == (n, 64)
        np.testing.assert_array_equal(
            got.descriptors, decode_descriptors(msg.descriptor_data, encoding, 64))
        np.testing.assert_allclose(got.descriptors, f.descriptors,
                                   atol=2 ** -11 if encoding == 'float16' else 1.0 / 127)
    np.testing.assert_array_equal(np.frombuffer(msg.track_ids, np.uint64), tracks[0])


@pytest.mark.parametrize('n', [0, 5])
def test_keypoint_cloud_layout(n):
    f = features(n)
    ids = np.arange(n, dtype=np.uint64) + 2 ** 50 + 1  # exact in float64, not in float32
    ages = np.arange(n, dtype=np.uint32) + 1
    msg = keypoint_cloud_msg(header(), f, ids, ages)
    assert (msg.height, msg.width, msg.point_step) == (1, n, 32)
    assert msg.row_step == 32 * n and len(msg.data) == 32 * n and not msg.is_bigendian
    assert [(x.name, x.offset, x.datatype) for x in msg.fields] == [
        ('x', 0, 7), ('y', 4, 7), ('z', 8, 7), ('score', 12, 7), ('track_id', 16, 8),
        ('track_age', 24, 6)]
    points = cloud_points(msg)
    np.testing.assert_array_equal(points['x'], f.keypoints[:, 0])
    np.testing.assert_array_equal(points['score'], f.scores)
    np.testing.assert_array_equal(points['track_id'].astype(np.uint64), ids)
    np.testing.assert_array_equal(points['track_age'], ages)


def test_vins_feature_cloud():
    pixels = np.array([[10.0, 20.0], [30.5, 40.25]], np.float32)
    normalized = np.array([[-0.5, -0.25], [0.1, 0.2]])
    velocity = np.array([[0.0, 0.0], [3.0, -4.0]], np.float32)
    msg = vins_feature_msg(header(), normalized, np.array([7, 9], np.uint64), pixels, velocity)
    points = np.array([(p.x, p.y, p.z) for p in msg.points])
    np.testing.assert_allclose(points, [[-0.5, -0.25, 1.0], [0.1, 0.2, 1.0]], atol=1e-7)
    channels = {c.name: list(c.values) for c in msg.channels}
    assert list(channels) == ['id', 'u', 'v', 'velocity_x', 'velocity_y']
    assert channels['id'] == [7.0, 9.0]
    assert channels['u'] == [10.0, 30.5] and channels['v'] == [20.0, 40.25]
    assert channels['velocity_x'] == [0.0, 3.0] and channels['velocity_y'] == [0.0, -4.0]
    empty = vins_feature_msg(header(), np.zeros((0, 2)), np.zeros(0, np.uint64),
                             np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32))
    assert len(empty.points) == 0 and all(len(c.values) == 0 for c in empty.channels)


def test_vins_fusion_layout_has_camera_ids():
    pixels = np.array([[10.0, 20.0], [30.0, 40.0]], np.float32)
    msg = vins_feature_msg(header(), np.zeros((2, 2)), np.array([5, 5], np.uint64), pixels,
                           np.zeros((2, 2), np.float32), camera_ids=np.array([0, 1], np.uint8))
    channels = {c.name: list(c.values) for c in msg.channels}
    assert list(channels) == ['id', 'camera_id', 'u', 'v', 'velocity_x', 'velocity_y']
    assert channels['camera_id'] == [0.0, 1.0] and channels['id'] == [5.0, 5.0]
    assert channels['u'] == [10.0, 30.0]


def test_camera_status_values_by_the_nodes_status_name():
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
    from xfeat_ros.ros.messages import camera_status_values, diagnostic_name, status_values
    array = DiagnosticArray(status=[
        DiagnosticStatus(name=diagnostic_name('/cam0/image'),
                         values=[KeyValue(key='image_publishers', value='1')]),
        DiagnosticStatus(name=diagnostic_name('/x/cam0/image'),
                         values=[KeyValue(key='image_publishers', value='2')])])
    assert diagnostic_name('/cam0/image') == 'xfeat: /cam0/image'
    assert camera_status_values(array, '/cam0/image') == {'image_publishers': '1'}
    assert camera_status_values(array, '/x/cam0/image') == status_values(array.status[1])
    assert camera_status_values(array, '/cam1/image') is None
