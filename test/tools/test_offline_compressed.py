# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Compressed bags: xfeat_offline decodes ``sensor_msgs/CompressedImage``, xfeat_play replays it.

TUM frames go into a bag as image_transport records them
(``/camera/image_raw/compressed``, jpeg and png); offline writes the node's
outputs beside the raw topic, png frames with exactly the raw frames'
features, a corrupt payload counted; play publishes the bag's messages as
recorded on ``<topic>/compressed``.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip('rosbags')
rclpy_serialization = pytest.importorskip('rclpy.serialization')

from rosbags.rosbag2 import StoragePlugin, Writer  # noqa: E402
from rosbags.typesys import get_typestore, Stores  # noqa: E402

from xfeat_ros.features.compressed import encode_compressed  # noqa: E402
from xfeat_ros.features.image_codec import image_msg  # noqa: E402
from xfeat_ros.ros.messages import features_from_msg, message_types  # noqa: E402
from xfeat_ros.runtime.stream import stamp_ns  # noqa: E402
from xfeat_ros.tools.image_files import list_sequence, read_image  # noqa: E402
from xfeat_ros.tools.play import stamp_msg  # noqa: E402

TOPIC = '/camera/image_raw/compressed'
KINDS = ('jpeg', 'png', 'png', 'jpeg')


@pytest.fixture(scope='module')
def frames(data_dir):
    """Return ``[(stamp_ns, rgb8 pixels)]`` of the first TUM frames."""
    return [(stamp, read_image(path)[0])
            for stamp, path in list_sequence(data_dir / 'data' / 'tum_fr2_desk')[:len(KINDS)]]


def compressed_msg(stamp, pixels, kind):
    """Return a ``sensor_msgs/CompressedImage`` of rgb8 ``pixels``."""
    from sensor_msgs.msg import CompressedImage
    fmt, data = encode_compressed(pixels, 'rgb8', kind)
    msg = CompressedImage(format=fmt, data=data)
    msg.header.stamp = stamp_msg(stamp)
    msg.header.frame_id = 'tum_rgb'
    return msg


def write_bag(path, topics):
    """Write ``{topic: (type name, [message])}`` into a new MCAP bag (bag time = stamp)."""
    store = get_typestore(Stores.ROS2_KILTED)
    with Writer(path, version=8, storage_plugin=StoragePlugin.MCAP) as writer:
        for topic, (msgtype, messages) in topics.items():
            connection = writer.add_connection(topic, msgtype, typestore=store)
            for msg in messages:
                writer.write(connection, stamp_ns(msg.header.stamp),
                             rclpy_serialization.serialize_message(msg))
    return path


def read_outputs(path):
    """Return ``{topic: [message]}`` of an output bag."""
    from rosbags.rosbag2 import Reader
    keypoints_type, matches_type = message_types()
    types = {'xfeat_ros_msgs/msg/Keypoints': keypoints_type,
             'xfeat_ros_msgs/msg/Matches': matches_type}
    out = {}
    with Reader(path) as reader:
        for connection, _, raw in reader.messages():
            out.setdefault(connection.topic, []).append(
                rclpy_serialization.deserialize_message(raw, types[connection.msgtype]))
    return out


@pytest.mark.ros
def test_offline_reads_a_compressed_bag(tmp_path, frames, weights_npz, cpu_pipeline, capsys):
    from xfeat_ros.tools.offline import main
    messages = [compressed_msg(*frame, kind) for frame, kind in zip(frames, KINDS)]
    corrupt = compressed_msg(frames[-1][0] + 1000, frames[-1][1], 'jpeg')
    corrupt.data = bytes(corrupt.data)[:len(corrupt.data) // 3]
    source = write_bag(tmp_path / 'in', {
        TOPIC: ('sensor_msgs/msg/CompressedImage', messages + [corrupt])})
    # no --topic: the bag's only image topic, a compressed one
    assert main([str(source), str(tmp_path / 'out'), '--backend', 'onnxruntime',
                 '--weights', str(weights_npz)]) == 0
    line = capsys.readouterr().out
    assert f'{TOPIC}: {len(KINDS)} frames' in line, line
    assert '1 rejected (CompressedImageError: 1)' in line, line
    out = read_outputs(tmp_path / 'out')
    assert set(out) == {'/camera/keypoints', '/camera/matches'}
    keypoints, matches = out['/camera/keypoints'], out['/camera/matches']
    assert [stamp_ns(m.header.stamp) for m in keypoints] == [s for s, _ in frames]
    assert len(matches) == len(KINDS) - 1
    assert all(len(m.current_indices) > 50 for m in matches)
    for msg, (_, pixels), kind in zip(keypoints, frames, KINDS):
        assert msg.header.frame_id == 'tum_rgb' and len(msg.scores) > 100
        if kind == 'png':  # lossless: the raw frame's features
            want = cpu_pipeline.extract_msg(image_msg(pixels, 'rgb8'))
            got = features_from_msg(msg)
            np.testing.assert_allclose(got.keypoints, want.keypoints, atol=1e-4)
            np.testing.assert_allclose(got.descriptors, want.descriptors, atol=1e-4)


def test_image_topic_choice(tmp_path, frames):
    from sensor_msgs.msg import Image
    from xfeat_ros.tools.bag import image_topic, image_topic_type, read_images
    from xfeat_ros.tools.offline import output_topics
    stamp, pixels = frames[0]
    source = write_bag(tmp_path / 'both', {
        '/a/image_raw/compressed': ('sensor_msgs/msg/CompressedImage',
                                    [compressed_msg(stamp, pixels, 'jpeg')]),
        '/b/image_raw': ('sensor_msgs/msg/Image',
                         [image_msg(pixels, 'rgb8', stamp_msg(stamp))])})
    assert image_topic(source) == '/b/image_raw'  # a raw topic first, as before
    assert image_topic_type(source, '/a/image_raw/compressed') == (
        '/a/image_raw/compressed', 'sensor_msgs/msg/CompressedImage')
    [(_, _, msg)] = read_images(source, '/a/image_raw/compressed')
    assert msg.format == 'rgb8; jpeg compressed bgr8' and not isinstance(msg, Image)
    assert output_topics('/a/image_raw/compressed') == ('/a/keypoints', '/a/matches')
    assert output_topics('/compressed') == ('/keypoints', '/matches')


def test_play_compressed_bag(tmp_path, frames):
    from ros_harness import Client, private_topic
    from sensor_msgs.msg import CompressedImage
    messages = [compressed_msg(*frame, kind) for frame, kind in zip(frames, KINDS)]
    source = write_bag(tmp_path / 'in', {TOPIC: ('sensor_msgs/msg/CompressedImage', messages)})
    client = Client()
    received = []
    topic = private_topic('image')
    client.node.create_subscription(CompressedImage, topic + '/compressed', received.append, 10)
    try:
        process = subprocess.Popen(
            [sys.executable, '-m', 'xfeat_ros.tools.play', str(source), '--rate', '20',
             '--topic', topic],
            env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        client.spin_until(lambda: len(received) == len(KINDS) or process.poll() is not None, 60)
        client.spin_until(lambda: len(received) == len(KINDS), 5)
        assert len(received) == len(KINDS), process.stdout.read()
        assert process.wait(30) == 0
        for got, sent in zip(received, messages):
            assert stamp_ns(got.header.stamp) == stamp_ns(sent.header.stamp)
            assert (got.header.frame_id, got.format) == ('tum_rgb', sent.format)
            assert bytes(got.data) == bytes(sent.data)
    finally:
        client.close()
