# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""rcl's own serialized take and publish carry rclpy's bytes and message info."""

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
    yield SimpleNamespace(node=node, publisher=publisher, subscriptions=subscriptions,
                          Image=Image)
    node.destroy_node()
    rclpy.shutdown(context=context)


def take_all(taker, count, timeout=10.0):
    """Take ``count`` samples from ``taker``, waiting for them to arrive."""
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
    from xfeat_ros import rcl_io
    assert rcl_io.load({rcl_io.ENV: 'rclpy'}) is None
    assert isinstance(rcl_io.load({}), rcl_io.Rcl)


def test_taker_equals_rclpy_take_and_grows(rig):
    """Sizes 0 -> 1 MB -> 100 B -> 3 MB: rmw grows the array through our allocator."""
    from xfeat_ros import rcl_io
    rcl = rcl_io.load()
    ours = rcl_io.serialized_taker(rig.subscriptions[0], rcl)
    theirs = rcl_io.serialized_taker(rig.subscriptions[1], None)
    assert isinstance(ours, rcl_io.SerializedTaker)
    assert isinstance(theirs, rcl_io.RclpyTaker)
    assert ours.take() is None   # nothing yet, and no error
    sent = [image(0, 0), image(1000, 1), image(1, 2), image(3000, 3)]
    for msg in sent:
        rig.publisher.publish(msg)
    got, expected = take_all(ours, len(sent)), take_all(theirs, len(sent))
    for (payload, info), (reference, reference_info), msg in zip(got, expected, sent):
        assert isinstance(payload, np.ndarray) and payload.dtype == np.uint8
        assert payload.tobytes() == reference
        assert len(reference) > len(msg.data)
        for key in ('source_timestamp', 'publication_sequence_number',
                    'reception_sequence_number', 'publisher_gid'):
            assert info[key] == reference_info[key], key
        assert info['received_timestamp'] >= info['source_timestamp'] > 0
    assert [info['publication_sequence_number'] for _, info in got] == [1, 2, 3, 4]
    # each payload is an array of its own: a later take does not overwrite an earlier one
    assert [int(payload[-1]) for payload, _ in got[1:]] == [1, 2, 3]
    assert ours.take() is None


def keypoints_writer(count, seed):
    from xfeat_ros.cdr import CdrWriter, Header, Time, write_keypoints
    from xfeat_ros.pipeline import Features
    rng = np.random.default_rng(seed)
    features = Features(rng.uniform(0, 640, (count, 2)).astype(np.float32),
                        rng.uniform(0, 1, count).astype(np.float32),
                        rng.standard_normal((count, 64)).astype(np.float32), (480, 640))
    return write_keypoints(CdrWriter(), Header(Time(5, seed), f'cam{seed}'), features,
                           (np.arange(count, dtype=np.uint64), np.ones(count, np.uint32)))


def test_publisher_sends_the_writers_bytes():
    """Large, small, larger: each received message is exactly its writer's bytes."""
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rclpy.serialization import deserialize_message
    from xfeat_ros import rcl_io
    from xfeat_ros.messages import message_types
    keypoints_type, _ = message_types()
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('rcl_io_pub_test', context=context)
    try:
        qos = QoSProfile(depth=20, reliability=ReliabilityPolicy.RELIABLE)
        subscription = node.create_subscription(keypoints_type, 'rcl_io_test/keypoints',
                                                lambda _: None, qos, raw=True)
        publisher = node.create_publisher(keypoints_type, 'rcl_io_test/keypoints', qos)
        ours = rcl_io.serialized_publisher(publisher, rcl_io.load())
        theirs = rcl_io.serialized_publisher(publisher, None)
        assert isinstance(ours, rcl_io.SerializedPublisher)
        assert isinstance(theirs, rcl_io.RclpyPublisher)
        deadline = time.monotonic() + 10
        while publisher.get_subscription_count() < 1:
            assert time.monotonic() < deadline, 'the subscription did not match'
            time.sleep(0.01)
        writers = [keypoints_writer(count, seed)
                   for seed, count in enumerate([4096, 3, 0, 8192, 17])]
        for index, writer in enumerate(writers):
            (ours if index % 2 == 0 else theirs).publish(writer)
        got = take_all(rcl_io.RclpyTaker(subscription), len(writers))
        for (payload, _), writer in zip(got, writers):
            assert payload == writer.to_bytes()
            message = deserialize_message(payload, keypoints_type)
            assert message.header.frame_id == f'cam{writers.index(writer)}'
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def test_refusals_are_typed_errors():
    """An rcl failure becomes a TransportError carrying rcl's return code and message."""
    from xfeat_ros import rcl_io
    from xfeat_ros.errors import TransportError, XFeatError

    class Handle:
        pointer = 1234

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class Refusing:
        def publish(self, *args):
            return 1

        def take(self, *args):
            return 1

        def error(self):
            return 'publisher is invalid'

    entity = SimpleNamespace(handle=Handle(), topic_name='/t', msg_type=None)
    with pytest.raises(TransportError, match=r'publishing on /t failed \(1\): publisher is'):
        rcl_io.SerializedPublisher(entity, Refusing()).publish(keypoints_writer(2, 0))
    with pytest.raises(TransportError, match=r'taking from /t failed \(1\)'):
        rcl_io.SerializedTaker(entity, Refusing()).take()
    assert issubclass(TransportError, XFeatError)
