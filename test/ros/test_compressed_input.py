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
        assert (msg_type, name) == (CompressedImage, '/cam/image_raw/compressed')
        msg = compressed_msg(np.full((40, 48, 3), 70, np.uint8), 'rgb8', 'jpeg')
        got, want = parse(serialize_message(msg)), parse_compressed(serialize_message(msg))
        assert (got.height, got.width, got.encoding) == (want.height, want.width, 'bgr8')
        np.testing.assert_array_equal(np.frombuffer(got.data, np.uint8),
                                      np.frombuffer(want.data, np.uint8))
        assert image_input(node, 'left/image', 'compressed')[1] == \
            '/robot/left/image/compressed'
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


class FakeJpegDecoder:
    """Record what a GPU engine's JPEG decoder is handed; return a marker."""

    def __init__(self):
        self.calls = []

    def decode(self, header, payload):
        self.calls.append((header.frame_id, payload.tobytes()))
        return 'decoded on the device'


def test_jpeg_goes_to_the_engine_decoder_after_the_checks_png_stays_on_the_cpu():
    decoder = FakeJpegDecoder()
    pixels = np.full((40, 48, 3), 70, np.uint8)
    jpeg = compressed_msg(pixels, 'rgb8', 'jpeg', frame_id='left')
    assert parse_compressed(serialize_message(jpeg), decoder) == 'decoded on the device'
    assert decoder.calls == [('left', bytes(jpeg.data))]
    png = parse_compressed(serialize_message(compressed_msg(pixels, 'rgb8', 'png')), decoder)
    assert (png.height, png.width, png.encoding) == (40, 48, 'bgr8') and len(decoder.calls) == 1
    jpeg.data = bytes(jpeg.data)[:len(jpeg.data) // 2]   # checked before any decoder sees it
    with pytest.raises(CompressedImageError, match='truncated'):
        parse_compressed(serialize_message(jpeg), decoder)
    assert len(decoder.calls) == 1


def test_the_node_asks_the_current_engine_for_its_decoder():
    from types import SimpleNamespace
    from xfeat_ros.features.engine import Capabilities
    from xfeat_ros.ros.compressed import engine_jpeg_decoder
    decoder = FakeJpegDecoder()
    gpu = SimpleNamespace(capabilities=Capabilities(jpeg_decoder=True),
                          jpeg_decoder=lambda: decoder)
    cpu = SimpleNamespace(capabilities=Capabilities())
    assert engine_jpeg_decoder(gpu) is decoder and engine_jpeg_decoder(cpu) is None


def test_the_decoder_is_warmed_at_start_where_the_engine_has_one():
    from types import SimpleNamespace
    from xfeat_ros.features.engine import Capabilities
    from xfeat_ros.ros.compressed import warm_jpeg_decoder
    warmed = []
    decoder = SimpleNamespace(warm_up=lambda: warmed.append(True))
    gpu = SimpleNamespace(capabilities=Capabilities(jpeg_decoder=True),
                          jpeg_decoder=lambda: decoder)
    assert warm_jpeg_decoder(gpu) is decoder and warmed == [True]
    assert warm_jpeg_decoder(SimpleNamespace(capabilities=Capabilities())) is None
