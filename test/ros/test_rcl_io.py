# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""rcl's own serialized take and publish carry rclpy's bytes and info, through our buffers."""

import time
from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.ros


@pytest.fixture
def rig():
    """Make a node with a reliable Image topic, its publisher and two raw subscriptions."""
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('rcl_io_test', context=context)
    qos = QoSProfile(depth=20, reliability=ReliabilityPolicy.RELIABLE)
    subscriptions = [node.create_subscription(Image, 'rcl_io_test/image', lambda _: None, qos,
                                              raw=True) for _ in range(2)]
    publisher = node.create_publisher(Image, 'rcl_io_test/image', qos)
    deadline = time.monotonic() + 10
    while publisher.get_subscription_count() < 2:
        assert time.monotonic() < deadline, 'the subscriptions did not match'
        time.sleep(0.01)
    yield SimpleNamespace(node=node, publisher=publisher, subscriptions=subscriptions)
    node.destroy_node()
    rclpy.shutdown(context=context)


def take_all(taker, count, timeout=10.0):
    """Take ``count`` samples from ``taker``, polling until they have arrived."""
    taken = []
    deadline = time.monotonic() + timeout
    while len(taken) < count:
        sample = taker.take()
        if sample is None:
            assert time.monotonic() < deadline, f'{len(taken)} of {count} samples arrived'
            time.sleep(0.002)
        else:
            taken.append(sample)
    return taken


def image(rows, value):
    """Return a mono8 Image of ``rows`` x 1000 pixels, every byte ``value``."""
    from sensor_msgs.msg import Image
    return Image(height=rows, width=1000, encoding='mono8', step=1000,
                 data=bytes([value]) * (rows * 1000))


def test_load_and_the_rclpy_choice():
    from xfeat_ros.ros.transport import rcl_io
    assert rcl_io.load({rcl_io.ENV: 'rclpy'}) is None
    assert isinstance(rcl_io.load({}), rcl_io.Rcl)
    assert rcl_io.publishing(None) == "rclpy's publish"
    assert rcl_io.publishing(rcl_io.load({})) == "rcl's publish, from kept buffers"


def test_taker_equals_rclpy_take_grows_and_reuses_free_buffers(rig):
    """Sizes 0 -> 1 MB -> 100 B -> 3 MB: rmw grows the buffer through the pool's allocator."""
    from xfeat_ros.ros.transport import rcl_io
    from xfeat_ros.features.gpu.image_pool import ImagePool
    pool = ImagePool(lambda size: np.zeros(size, np.uint8))
    ours = rcl_io.serialized_taker(rig.subscriptions[0], rcl_io.load(), pool.get)
    theirs = rcl_io.serialized_taker(rig.subscriptions[1], rcl_io.load(), None)
    assert isinstance(ours, rcl_io.SerializedTaker)
    assert isinstance(theirs, rcl_io.RclpyTaker)  # no buffers: rclpy's take
    assert ours.take() is None   # nothing yet, and no error
    sent = [image(0, 0), image(1000, 1), image(1, 2), image(3000, 3)]
    for msg in sent:
        rig.publisher.publish(msg)
    got, expected = take_all(ours, len(sent)), take_all(theirs, len(sent))
    for (payload, info), (reference, reference_info), msg in zip(got, expected, sent):
        assert isinstance(payload, np.ndarray) and payload.dtype == np.uint8
        assert payload.tobytes() == reference and pool.owns(payload)
        assert len(reference) > len(msg.data)
        for key in ('source_timestamp', 'publication_sequence_number',
                    'reception_sequence_number', 'publisher_gid'):
            assert info[key] == reference_info[key], key
        assert info['received_timestamp'] >= info['source_timestamp'] > 0
    assert [info['publication_sequence_number'] for _, info in got] == [1, 2, 3, 4]
    # every payload held keeps its buffer: a later take does not overwrite an earlier one
    assert [int(payload[-1]) for payload, _ in got[1:]] == [1, 2, 3]
    buffers, _, in_use = pool.stats()  # the buffers outgrown on the way are free
    assert in_use == len({id(payload.base) for payload, _ in got}) == 4 <= buffers
    # let them go: the next sample is taken into a free buffer, not a new one
    del got, payload
    rig.publisher.publish(image(1000, 5))
    (kept, _), = take_all(ours, 1)
    assert pool.stats()[0] == buffers
    rig.publisher.publish(image(1000, 6))
    (other, _), = take_all(ours, 1)
    assert other.base is not kept.base and (int(kept[-1]), int(other[-1])) == (5, 6)
    assert ours.take() is None


def test_refusals_are_typed_errors():
    """An rcl failure becomes a TransportError carrying rcl's return code and message."""
    from xfeat_ros.ros.transport import rcl_io
    from xfeat_ros.errors import TransportError, XFeatError

    class Handle:
        pointer = 1234

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class Refusing:
        def take(self, *args):
            return 1

        def error(self):
            return 'subscription is invalid'

    entity = SimpleNamespace(handle=Handle(), topic_name='/t', msg_type=None)
    with pytest.raises(TransportError, match=r'taking from /t failed \(1\): subscription is'):
        rcl_io.SerializedTaker(entity, Refusing(), rcl_io.new_array).take()
    assert issubclass(TransportError, XFeatError)

    class RefusingPublish(Refusing):
        def publish(self, *args):
            return 1

    from xfeat_ros.ros.transport.cdr import CdrWriter
    writer = CdrWriter()
    writer.uint32(7)
    with pytest.raises(TransportError, match=r'publishing on /t failed \(1\): subscription is'):
        rcl_io.SerializedPublisher(entity, RefusingPublish()).publish(writer)


def test_publisher_sends_the_writers_bytes_and_grows_its_buffer(rig):
    """Keypoints of 0 -> 4096 -> 10 -> 8192 keypoints arrive as the writer's bytes, in order."""
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from xfeat_ros.ros.transport import rcl_io
    from xfeat_ros.ros.transport.cdr import CdrWriter, Header, Time, write_keypoints
    from xfeat_ros.ros.messages import message_types
    from xfeat_ros.features.pipeline import Features
    keypoints_type, _ = message_types()
    node = rig.node
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    subscription = node.create_subscription(keypoints_type, 'rcl_io_test/keypoints',
                                            lambda _: None, qos, raw=True)
    ours = rcl_io.serialized_publisher(
        node.create_publisher(keypoints_type, 'rcl_io_test/keypoints', qos), rcl_io.load())
    theirs = rcl_io.serialized_publisher(
        node.create_publisher(keypoints_type, 'rcl_io_test/keypoints', qos), None)
    assert isinstance(ours, rcl_io.SerializedPublisher)
    assert isinstance(theirs, rcl_io.RclpyPublisher)
    deadline = time.monotonic() + 10
    while subscription.get_publisher_count() < 2 or \
            ours.publisher.get_subscription_count() < 1:
        assert time.monotonic() < deadline, 'the publishers did not match'
        time.sleep(0.01)
    rng = np.random.default_rng(3)
    sent = []
    for number, count in enumerate((0, 4096, 10, 8192)):
        features = Features(rng.uniform(0, 640, (count, 2)).astype(np.float32),
                            rng.uniform(0, 1, count).astype(np.float32),
                            rng.standard_normal((count, 64)).astype(np.float32), (480, 640))
        tracks = (np.arange(count, dtype=np.uint64), np.ones(count, np.uint32))
        head = Header(Time(number, 7), 'cam')
        for publisher in (ours, theirs):
            writer = write_keypoints(CdrWriter(), head, features, tracks)
            sent.append(writer.to_bytes())
            publisher.publish(writer)
        if count == 4096:
            first = ours._buffer   # grown to hold 1.15 MB; kept for the 10 keypoints
        if count == 10:
            assert ours._buffer is first
    got = take_all(rcl_io.RclpyTaker(subscription), len(sent))
    by_writer = {}
    for payload, info in got:
        by_writer.setdefault(bytes(info['publisher_gid']['data']), []).append(payload)
    assert sorted(map(len, by_writer.values())) == [4, 4]
    for payloads in by_writer.values():   # each publisher's samples, in order
        assert payloads == sent[0::2] == sent[1::2]
    assert len(sent[2]) > 1_140_000 and ours._buffer.size >= len(sent[6])
