# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
xfeat_ros.ros.transport.cdr against rclpy's own serialization.

Writing: the bytes of :func:`keypoints_cdr` / :func:`matches_cdr` (and
:meth:`CdrWriter.write_into`, into a caller's buffer) equal
``rclpy.serialization.serialize_message`` of the message
:mod:`xfeat_ros.ros.messages` builds from the same arrays, byte for byte outside
the alignment gaps (rclpy leaves those uninitialized; ours are zeros, and the
writer lists where they are), the same length, and rclpy reads them back as an
equal message. Frame ids of every length modulo 8, odd descriptor widths and
counts move every field across alignments. Reading: :func:`parse_image` of a
serialized Image equals ``deserialize_message``, without copying the pixels.
"""

import struct
import time

import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy', reason='rclpy (ROS 2) is not installed')

from builtin_interfaces.msg import Time  # noqa: E402, I100
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from std_msgs.msg import Header  # noqa: E402

from xfeat_ros.errors import ImageLayoutError  # noqa: E402
from xfeat_ros.features.image_codec import decode_image_msg, image_array  # noqa: E402
from xfeat_ros.features.image_codec import image_msg  # noqa: E402
from xfeat_ros.features.pipeline import Features, MatchResult  # noqa: E402
from xfeat_ros.ros.messages import keypoints_msg, matches_msg  # noqa: E402
from xfeat_ros.ros.transport import cdr  # noqa: E402

FRAME_IDS = ('', 'a', 'ab', 'abc', 'abcd', 'cam_5', 'camera', 'ünïcø')  # 0..7 bytes mod 8
ENCODINGS = ('float32', 'float16', 'int8', 'none')


def features(count, dim=64, seed=0, image_hw=(479, 641)):
    """Random Features with unit descriptors."""
    rng = np.random.default_rng(seed)
    descriptors = rng.standard_normal((count, dim)).astype(np.float32)
    descriptors /= np.maximum(np.linalg.norm(descriptors, axis=1, keepdims=True), 1e-6)
    return Features(rng.uniform(0, 640, (count, 2)).astype(np.float32),
                    np.sort(rng.uniform(0, 1, count).astype(np.float32))[::-1].copy(),
                    descriptors, image_hw)


def header(frame_id, sec=1_700_000_000, nanosec=123_456_789):
    """Return a std_msgs/Header."""
    return Header(stamp=Time(sec=sec, nanosec=nanosec), frame_id=frame_id)


def assert_same_cdr(writer, msg):
    """Ours == rclpy's bytes outside our listed padding; padding zero; rclpy reads ours back."""
    ours = writer.to_bytes()
    reference = serialize_message(msg)
    assert ours[:4] == cdr.ENCAPSULATION_LE == reference[:4]
    assert len(ours) == len(reference)
    padding = np.zeros(len(ours), dtype=bool)
    for offset, length in writer.padding:
        assert 1 <= length <= 7
        padding[offset:offset + length] = True
    a = np.frombuffer(ours, dtype=np.uint8)
    b = np.frombuffer(reference, dtype=np.uint8)
    differ = np.flatnonzero(a != b)
    assert padding[differ].all(), f'bytes differ outside padding at {differ[~padding[differ]]}'
    assert not a[padding].any()
    assert deserialize_message(ours, type(msg)) == msg
    # the same bytes into a buffer kept by the caller (rcl_io.SerializedPublisher)
    buffer = np.full(len(ours) + 13, 0xAB, dtype=np.uint8)
    assert writer.write_into(memoryview(buffer)) == writer.size() == len(ours)
    assert buffer[:len(ours)].tobytes() == ours and (buffer[len(ours):] == 0xAB).all()
    with pytest.raises(ValueError, match='cannot hold'):
        writer.write_into(memoryview(buffer[:len(ours) - 1]))
    return ours


@pytest.mark.parametrize('frame_id', FRAME_IDS)
@pytest.mark.parametrize('encoding', ENCODINGS)
@pytest.mark.parametrize('count,dim', [(0, 64), (1, 64), (3, 64), (5, 3), (2, 1)])
@pytest.mark.parametrize('with_tracks', [False, True], ids=['notracks', 'tracks'])
def test_keypoints_bytes_equal_rclpy(frame_id, encoding, count, dim, with_tracks):
    feats = features(count, dim, seed=count + dim)
    tracks = None
    if with_tracks:
        tracks = (np.arange(count, dtype=np.uint64) + np.uint64(2 ** 40 + 3),
                  np.arange(count, dtype=np.uint32) + 1)
    head = header(frame_id)
    msg = keypoints_msg(head, feats, tracks, encoding)
    ours = assert_same_cdr(cdr.write_keypoints(cdr.CdrWriter(), head, feats, tracks, encoding),
                           msg)
    assert cdr.keypoints_cdr(head, feats, tracks, encoding) == ours


def test_keypoints_at_4096_and_own_header_type():
    feats = features(4096, seed=7)
    tracks = (np.arange(4096, dtype=np.uint64) * 3, np.full(4096, 2, dtype=np.uint32))
    head = header('left_camera_optical_frame', sec=-3, nanosec=999_999_999)
    msg = keypoints_msg(head, feats, tracks, 'float32')
    writer = cdr.write_keypoints(cdr.CdrWriter(), head, feats, tracks, 'float32')
    ours = assert_same_cdr(writer, msg)
    assert len(ours) > 1_100_000
    # The plain-Python header of a raw image (cdr.Header) serializes the same.
    own = cdr.Header(cdr.Time(-3, 999_999_999), 'left_camera_optical_frame')
    assert cdr.keypoints_cdr(own, feats, tracks, 'float32') == ours


def test_keypoints_inputs_of_other_dtypes_and_layouts():
    # float64 keypoints, a non-contiguous descriptor view, int64 tracks: converted like
    # keypoints_msg converts them.
    base = features(6, 64, seed=3)
    feats = Features(base.keypoints.astype(np.float64), base.scores,
                     np.asfortranarray(base.descriptors), base.image_hw)
    tracks = (np.arange(6, dtype=np.int64), np.arange(6, dtype=np.int64))
    head = header('x')
    assert_same_cdr(cdr.write_keypoints(cdr.CdrWriter(), head, feats, tracks, 'float32'),
                    keypoints_msg(head, feats, tracks, 'float32'))


@pytest.mark.parametrize('frame_id', FRAME_IDS)
@pytest.mark.parametrize('matched', [None, 0, 1, 7])
def test_matches_bytes_equal_rclpy(frame_id, matched):
    previous, current = features(9, seed=1), features(11, seed=2)
    result = None
    if matched is not None:
        rng = np.random.default_rng(matched)
        result = MatchResult(rng.permutation(9)[:matched].astype(np.int64),
                             rng.permutation(11)[:matched].astype(np.int64),
                             rng.uniform(0.8, 1, matched).astype(np.float32))
    head, previous_stamp = header(frame_id), Time(sec=5, nanosec=6)
    msg = matches_msg(head, previous_stamp, previous, current, result)
    ours = assert_same_cdr(cdr.write_matches(cdr.CdrWriter(), head, previous_stamp, previous,
                                             current, result), msg)
    assert cdr.matches_cdr(head, cdr.Time(5, 6), previous, current, result) == ours


def image(height, width, encoding, step=None, frame_id='cam', big=False, seed=0):
    """Return a sensor_msgs/Image of random bytes (``step`` may pad the rows)."""
    bpp = {'mono8': 1, 'mono16': 2, 'rgb8': 3, 'bgra8': 4, '16UC1': 2, '8UC3': 3}[encoding]
    step = width * bpp if step is None else step
    msg = Image()
    msg.header = header(frame_id)
    msg.height, msg.width, msg.encoding, msg.step = height, width, encoding, step
    msg.is_bigendian = int(big)
    rng = np.random.default_rng(seed)
    msg.data = rng.integers(0, 256, height * step, dtype=np.uint8).tobytes()
    return msg


CASES = [
    {'height': 4, 'width': 5, 'encoding': 'mono8'},
    {'height': 3, 'width': 7, 'encoding': 'rgb8', 'step': 24},
    {'height': 2, 'width': 3, 'encoding': 'mono16', 'big': True},
    {'height': 5, 'width': 2, 'encoding': 'bgra8', 'step': 9},
    {'height': 1, 'width': 1, 'encoding': '16UC1'},
    {'height': 6, 'width': 4, 'encoding': '8UC3'},
]


@pytest.mark.parametrize('frame_id', FRAME_IDS)
@pytest.mark.parametrize('case', range(len(CASES)))
def test_parse_image_equals_deserialize(frame_id, case):
    msg = image(frame_id=frame_id, seed=case, **CASES[case])
    payload = serialize_message(msg)
    reference = deserialize_message(payload, Image)
    view = cdr.parse_image(payload)
    assert view.header.stamp == (reference.header.stamp.sec, reference.header.stamp.nanosec)
    assert view.header.frame_id == reference.header.frame_id
    assert (view.height, view.width, view.encoding, view.is_bigendian, view.step) == (
        reference.height, reference.width, reference.encoding, reference.is_bigendian,
        reference.step)
    assert bytes(view.data) == bytes(reference.data)
    assert view.data.readonly and view.data.obj is payload  # a view, not a copy
    pixels = np.frombuffer(view.data, dtype=np.uint8)
    assert np.shares_memory(pixels, np.frombuffer(payload, dtype=np.uint8))
    assert cdr.header_msg(view.header) == reference.header


@pytest.mark.parametrize('encoding', ['mono8', 'rgb8', 'bgra8', 'mono16'])
def test_raw_image_decodes_like_the_message(encoding):
    rng = np.random.default_rng(4)
    channels = {'mono8': 1, 'rgb8': 3, 'bgra8': 4, 'mono16': 1}[encoding]
    dtype = np.uint16 if encoding == 'mono16' else np.uint8
    pixels = rng.integers(0, np.iinfo(dtype).max, (31, 45, channels)).astype(dtype)
    msg = image_msg(pixels, encoding, frame_id='f')
    view = cdr.parse_image(serialize_message(msg))
    np.testing.assert_array_equal(decode_image_msg(view), decode_image_msg(msg))
    np.testing.assert_array_equal(
        image_array(view.data, view.encoding, view.height, view.width, view.step,
                    view.is_bigendian), pixels)


def test_parse_big_endian_payload():
    # The same Image as a big-endian CDR payload (a big-endian host's writer).
    frame_id, encoding, data = b'be', b'mono8', bytes(range(6))
    body = struct.pack('>iII', 7, 8, len(frame_id) + 1) + frame_id + b'\0'
    body += b'\0' * (-len(body) % 4)
    body += struct.pack('>III', 2, 3, len(encoding) + 1) + encoding + b'\0'
    body += b'\1'  # is_bigendian
    body += b'\0' * (-len(body) % 4)
    body += struct.pack('>II', 3, len(data)) + data
    view = cdr.parse_image(b'\x00\x00\x00\x00' + body)
    assert view.header == cdr.Header(cdr.Time(7, 8), 'be')
    assert (view.height, view.width, view.encoding, view.is_bigendian, view.step) == (
        2, 3, 'mono8', 1, 3)
    assert bytes(view.data) == data


def test_malformed_payloads_raise_typed_errors():
    payload = serialize_message(image(2, 3, 'rgb8', frame_id='abc'))
    for cut in range(len(payload)):
        with pytest.raises(ImageLayoutError):
            cdr.parse_image(payload[:cut])
    with pytest.raises(ImageLayoutError, match='encapsulation'):
        cdr.parse_image(b'\x00\x07\x00\x00' + payload[4:])
    broken = bytearray(payload)
    broken[16 + 3] = ord('x')  # the NUL of frame_id 'abc'
    with pytest.raises(ImageLayoutError, match='NUL'):
        cdr.parse_image(bytes(broken))


def test_padding_and_size_estimate():
    writer = cdr.CdrWriter()
    writer.string('ab')                             # length 0..4, 'ab' NUL 4..7
    writer.sequence(np.zeros(0), np.dtype('<u8'))   # gap 7..8, length 8..12, no elements
    writer.sequence([1], np.dtype('<u4'))           # length 12..16, element 16..20
    data = writer.to_bytes()
    # Fast CDR's size estimate aligns the empty uint64 sequence to 16, so it counts
    # 16..20 and 20..24 for the last sequence: 4 unused bytes at the end.
    assert writer.padding == [(4 + 7, 1), (4 + 20, 4)]
    assert len(data) == 4 + 24
    assert data[4 + 8:4 + 20] == struct.pack('<III', 0, 1, 1)
    assert data[4 + 20:] == bytes(4)


def test_publish_serialized_and_receive_raw():
    """Publish our bytes as Keypoints through rclpy; parse a raw Image subscription."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from xfeat_ros.ros.messages import message_types
    keypoints_type, _ = message_types()
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('cdr_test', context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    got_keypoints, got_images = [], []
    try:
        node.create_subscription(keypoints_type, 'cdr_test/keypoints', got_keypoints.append, qos)
        node.create_subscription(Image, 'cdr_test/image', got_images.append, qos, raw=True)
        keypoints_pub = node.create_publisher(keypoints_type, 'cdr_test/keypoints', qos)
        image_pub = node.create_publisher(Image, 'cdr_test/image', qos)
        feats = features(100, seed=9)
        head = header('published')
        expected = keypoints_msg(head, feats, None, 'int8')
        sent_image = image(3, 4, 'rgb8', frame_id='raw')

        def spin_until(predicate, what):
            deadline = time.monotonic() + 30
            while not predicate():
                assert time.monotonic() < deadline, what
                executor.spin_once(timeout_sec=0.05)
        spin_until(lambda: (keypoints_pub.get_subscription_count() > 0
                            and image_pub.get_subscription_count() > 0),
                   'publishers did not match their subscriptions')
        keypoints_pub.publish(cdr.keypoints_cdr(head, feats, None, 'int8'))
        image_pub.publish(sent_image)
        spin_until(lambda: got_keypoints and got_images, 'nothing received')
        assert got_keypoints == [expected]
        assert len(got_images) == 1 and isinstance(got_images[0], bytes)
        view = cdr.parse_image(got_images[0])
        assert (view.header.frame_id, view.height, view.width, view.encoding, view.step) == (
            'raw', 3, 4, 'rgb8', 12)
        assert bytes(view.data) == bytes(sent_image.data)
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
