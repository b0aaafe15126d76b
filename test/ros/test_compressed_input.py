# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
xfeat_ros.ros.compressed: the CompressedImage payload parse and the input topic names.

A serialized ``sensor_msgs/CompressedImage`` (rclpy's serializer) parses into the
header rclpy reads and the pixels OpenCV decodes; the compressed topic follows
image_transport's naming, remappings of the raw topic included.
"""

import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy', reason='rclpy (ROS 2) is not installed')

from builtin_interfaces.msg import Time  # noqa: E402, I100
from rclpy.serialization import serialize_message  # noqa: E402
from sensor_msgs.msg import CompressedImage, Image  # noqa: E402

from xfeat_ros.errors import CompressedImageError, ImageLayoutError  # noqa: E402
from xfeat_ros.errors import UnsupportedCompressionError  # noqa: E402
from xfeat_ros.features.compressed import encode_compressed  # noqa: E402
from xfeat_ros.features.image_codec import decode_image_msg, raw_image  # noqa: E402
from xfeat_ros.ros.compressed import image_input, parse_compressed  # noqa: E402
from xfeat_ros.ros.transport.cdr import parse_image  # noqa: E402


def compressed_msg(pixels, encoding, kind, frame_id='cam_5', stamp=(12, 345)):
    """Return a ``sensor_msgs/CompressedImage`` of ``pixels``."""
    fmt, data = encode_compressed(pixels, encoding, kind)
    msg = CompressedImage(format=fmt, data=data)
    msg.header.stamp = Time(sec=stamp[0], nanosec=stamp[1])
    msg.header.frame_id = frame_id
    return msg


@pytest.mark.parametrize('frame_id', ['', 'a', 'abc', 'camera_left'])
def test_parse_serialized_png(frame_id):
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (37, 45, 3), dtype=np.uint8)
    msg = compressed_msg(pixels, 'rgb8', 'png', frame_id, (-3, 999_999_999))
    view = parse_compressed(serialize_message(msg))
    assert (view.header.stamp.sec, view.header.stamp.nanosec) == (-3, 999_999_999)
    assert view.header.frame_id == frame_id
    assert (view.height, view.width, view.encoding) == (37, 45, 'bgr8')
    np.testing.assert_array_equal(decode_image_msg(view),
                                  decode_image_msg(raw_image(pixels, 'rgb8')))


def test_parse_rejects_with_typed_errors():
    pixels = np.full((40, 40, 1), 90, np.uint8)
    good = compressed_msg(pixels, 'mono8', 'jpeg')
    payload = serialize_message(good)
    with pytest.raises(ImageLayoutError, match='truncated'):
        parse_compressed(payload[:20])
    bad = compressed_msg(pixels, 'mono8', 'jpeg')
    bad.data = bytes(good.data)[:len(good.data) // 2]
    with pytest.raises(CompressedImageError, match='truncated'):
        parse_compressed(serialize_message(bad))
    bad.format = 'tiff'
    with pytest.raises(UnsupportedCompressionError):
        parse_compressed(serialize_message(bad))


def test_input_topic_names_follow_image_transport():
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = rclpy.create_node('xfeat_names', context=context, namespace='/robot',
                                 cli_args=['--ros-args', '-r', 'image:=/cam/image_raw'])
        assert image_input(node, 'image', 'raw') == (Image, 'image', parse_image)
        msg_type, name, parse = image_input(node, 'image', 'compressed')
        assert (msg_type, name, parse) == (CompressedImage, '/cam/image_raw/compressed',
                                           parse_compressed)
        assert image_input(node, 'left/image', 'compressed')[1] == \
            '/robot/left/image/compressed'
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
