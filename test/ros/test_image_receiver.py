# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The image receiver serves its subscriptions on its own thread, not through the executor."""

import threading
import time
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.ros


@pytest.fixture(params=['rclpy', 'rcl'])
def rig(request):
    """Make a node with a receiver (taking through rclpy or rcl), a publisher, an executor."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from xfeat_ros.ros.transport.image_receiver import ImageReceiver
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('receiver_test', context=context)
    errors = []
    rcl = buffers = None
    if request.param == 'rcl':  # as with the GPU engine: into pooled buffers
        import numpy as np
        from xfeat_ros.ros.transport import rcl_io
        from xfeat_ros.features.gpu.image_pool import ImagePool
        rcl = rcl_io.load()
        assert rcl is not None
        buffers = ImagePool(lambda size: np.zeros(size, np.uint8)).get
    receiver = ImageReceiver(node, on_error=errors.append, rcl=rcl, buffers=buffers)
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    publisher = node.create_publisher(Image, 'receiver_test/image', qos)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    rig = SimpleNamespace(node=node, receiver=receiver, publisher=publisher, executor=executor,
                          errors=errors, qos=qos, Image=Image, mode=request.param)
    yield rig
    receiver.stop()
    executor.shutdown()
    node.destroy_node()
    rclpy.shutdown(context=context)


def image(index=0):
    from sensor_msgs.msg import Image
    return Image(height=2, width=2, encoding='mono8', step=2, data=bytes([index] * 4))


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def test_messages_reach_the_callback_on_the_receiver_thread_only(rig):
    from xfeat_ros.ros.transport.cdr import parse_image
    from xfeat_ros.ros.transport.image_receiver import OUTSIDE
    got = []
    subscription = rig.receiver.subscribe(
        rig.Image, 'receiver_test/image',
        lambda payload, info: got.append((parse_image(payload), info,
                                          threading.current_thread().name)), rig.qos)
    assert subscription.callback_group is OUTSIDE
    assert subscription.event_handlers and all(
        handler.callback_group is OUTSIDE for handler in subscription.event_handlers)
    assert wait_for(lambda: rig.publisher.get_subscription_count() == 1)
    rig.publisher.publish(image(1))
    # Not started yet: the executor does not serve the subscription either.
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        rig.executor.spin_once(timeout_sec=0.05)
    assert got == []
    rig.receiver.start()
    rig.publisher.publish(image(2))
    assert wait_for(lambda: len(got) == 2)
    assert [bytes(msg.data) for msg, _, _ in got] == [bytes([1] * 4), bytes([2] * 4)]
    assert [info['publication_sequence_number'] for _, info, _ in got] == [1, 2]
    assert {name for _, _, name in got} == {'xfeat_images'}
    assert rig.errors == []
    assert rig.receiver.take == {'rcl': "rcl's take, into the engine's pinned buffers",
                                 'rclpy': "rclpy's take"}[rig.mode]


def test_unsubscribe_and_subscribe_again(rig):
    first, second = [], []
    subscription = rig.receiver.subscribe(rig.Image, 'receiver_test/image',
                                          lambda payload, info: first.append(payload), rig.qos)
    rig.receiver.start()
    assert wait_for(lambda: rig.publisher.get_subscription_count() == 1)
    rig.publisher.publish(image(1))
    assert wait_for(lambda: len(first) == 1)
    rig.receiver.unsubscribe(subscription)
    assert wait_for(lambda: rig.publisher.get_subscription_count() == 0)
    rig.receiver.subscribe(rig.Image, 'receiver_test/image',
                           lambda payload, info: second.append(payload), rig.qos)
    assert wait_for(lambda: rig.publisher.get_subscription_count() == 1)
    rig.publisher.publish(image(2))
    assert wait_for(lambda: len(second) == 1)
    assert len(first) == 1


def test_a_failing_callback_is_reported_and_the_thread_goes_on(rig):
    got = []

    def callback(payload, info):
        got.append(payload)
        if len(got) == 1:
            raise ValueError('first image')
    rig.receiver.subscribe(rig.Image, 'receiver_test/image', callback, rig.qos)
    rig.receiver.start()
    assert wait_for(lambda: rig.publisher.get_subscription_count() == 1)
    rig.publisher.publish(image(1))
    rig.publisher.publish(image(2))
    assert wait_for(lambda: len(got) == 2)
    assert len(rig.errors) == 1 and 'ValueError: first image' in rig.errors[0]


def test_stop_ends_the_thread(rig):
    rig.receiver.start()
    rig.receiver.stop()
    assert not rig.receiver._thread.is_alive()


def test_a_failing_take_is_reported_and_the_image_still_arrives(rig):
    """A buffer that cannot be had (rcl's take) or any error of a take: said, then retried."""
    from xfeat_ros.ros.transport import rcl_io
    got = []
    fails = [RuntimeError('no buffer')]

    def buffers(nbytes):
        if fails:
            raise fails.pop()
        return rcl_io.new_array(nbytes)

    rig.receiver._buffers = buffers if rig.receiver._rcl is not None else None
    subscription = rig.receiver.subscribe(rig.Image, 'receiver_test/image',
                                          lambda payload, info: got.append(payload), rig.qos)
    if rig.receiver._rcl is None:  # rclpy's take: the same failure from its taker
        taker = rig.receiver._callbacks[subscription][1]
        take = taker.take

        def failing_once():
            if fails:
                raise fails.pop()
            return take()
        taker.take = failing_once
    rig.receiver.start()
    assert wait_for(lambda: rig.publisher.get_subscription_count() == 1)
    rig.publisher.publish(image(1))
    assert wait_for(lambda: len(got) == 1)
    assert bytes(got[0])[-4:] == bytes([1] * 4)
    assert len(rig.errors) == 1 and 'RuntimeError: no buffer' in rig.errors[0]


def test_a_subscription_destroyed_elsewhere_is_let_go_without_spinning(rig):
    """Destroyed past unsubscribe(): let go of once, said, the rest served, no busy loop."""
    got = []
    kept = rig.receiver.subscribe(rig.Image, 'receiver_test/image',
                                  lambda payload, info: got.append(1), rig.qos)
    gone = rig.receiver.subscribe(rig.Image, 'receiver_test/other', lambda *_: None, rig.qos)
    serve, calls = rig.receiver._serve, []

    def counting(callbacks):
        calls.append(len(callbacks))
        return serve(callbacks)
    rig.receiver._serve = counting
    rig.receiver.start()
    assert wait_for(lambda: rig.publisher.get_subscription_count() == 1 and calls)
    rig.node.destroy_subscription(gone)   # not through the receiver
    rig.receiver._wake.trigger()
    time.sleep(0.5)                        # what a busy loop would do meanwhile is counted
    assert len(calls) < 10, f'the receiver rebuilt its wait set {len(calls)} times'
    assert calls[-1] == 1 and kept is not None
    assert any('no longer served' in text for text in rig.errors), rig.errors
    rig.publisher.publish(image(7))
    assert wait_for(lambda: got == [1])


def test_a_node_destroyed_under_the_receiver_ends_it_with_a_message():
    import rclpy
    from xfeat_ros.ros.transport.image_receiver import ImageReceiver
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = rclpy.create_node('receiver_gone_test', context=context)
        errors = []
        receiver = ImageReceiver(node, on_error=errors.append)
        receiver.subscribe(image().__class__, 'receiver_test/gone', lambda *_: None, 10)
        receiver.start()
        node.destroy_node()   # not through a node that stops its receiver first
        receiver._thread.join(5)
        assert not receiver._thread.is_alive()
        assert any('image receipt ends' in text for text in errors), errors
    finally:
        rclpy.shutdown(context=context)


@pytest.mark.parametrize('rig', ['rcl'], indirect=True)
def test_each_image_lands_in_the_buffer_held_for_it_after_the_one_before(rig):
    """
    After each take the receiver holds the pool buffer its next sample will be taken into.

    The GPU engine's armed chain uploads from that buffer (``ImagePool.newest``,
    :func:`xfeat_ros.features.gpu.armed.reserve`), at the offset the previous image's
    pixels had: this is the contract it relies on.
    """
    import numpy as np
    from xfeat_ros.ros.transport.cdr import parse_image

    def pixels(payload):
        return np.frombuffer(parse_image(payload).data, np.uint8)
    pool = rig.receiver._buffers.__self__
    got = []  # payloads kept, as the node keeps an image until its outputs are sent
    rig.receiver.subscribe(rig.Image, 'receiver_test/image',
                           lambda payload, info: got.append(payload), rig.qos)
    assert wait_for(lambda: rig.publisher.get_subscription_count() == 1)
    rig.receiver.start()
    rig.publisher.publish(image(0))
    assert wait_for(lambda: len(got) == 1)
    for i in range(1, 4):
        # the buffer for the next sample, taken right after the last image's
        assert wait_for(lambda: pool.newest() is not None
                        and pool.newest() is not pool.locate(got[-1])[0])
        held = pool.newest()
        rig.publisher.publish(image(i))
        assert wait_for(lambda: len(got) == i + 1)
        buffer, offset = pool.locate(pixels(got[-1]))
        assert buffer is held
        assert offset == pool.locate(pixels(got[-2]))[1]  # same header, same offset
        assert bytes(pixels(got[-1])) == bytes([i] * 4)
    assert rig.errors == []
