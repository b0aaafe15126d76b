# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_bench's collector: Keypoints headers, the kept buffer, both ways of taking."""

import numpy as np
import pytest

from xfeat_ros.tools.bench import collector


def test_header_from_cdr():
    # CDR little endian: encapsulation, sec, nanosec, frame_id length (with NUL), chars
    raw = (b'\x00\x01\x00\x00' + (1234).to_bytes(4, 'little') + (5678).to_bytes(4, 'little')
           + (4).to_bytes(4, 'little') + b'w17\x00' + b'\x00' * 8)
    assert collector.header_from_cdr(raw) == (1234 * 10 ** 9 + 5678, 'w17')
    big = (b'\x00\x00\x00\x00' + (-2).to_bytes(4, 'big', signed=True)
           + (9).to_bytes(4, 'big') + (2).to_bytes(4, 'big') + b'5\x00')
    assert collector.header_from_cdr(big) == (-2 * 10 ** 9 + 9, '5')


def test_kept_buffer_is_one_array_grown_when_needed():
    kept = collector.KeptBuffer()
    first = kept(100)
    assert first.size == 100 and first.dtype == np.uint8
    assert kept(50) is first and kept(100) is first   # reused, not shrunk
    grown = kept(1000)
    assert grown.size == 1000 and grown is not first
    assert kept(10) is grown


@pytest.mark.ros
def test_header_from_cdr_of_a_real_message():
    from rclpy.serialization import serialize_message
    from xfeat_ros.ros.messages import message_types
    msg = message_types()[0]()
    msg.header.stamp.sec, msg.header.stamp.nanosec = 1795974504, 918648329
    msg.header.frame_id = '1234'
    assert collector.header_from_cdr(serialize_message(msg)) == (1795974504918648329, '1234')


def test_unknown_take_is_refused():
    pytest.importorskip('rclpy')
    with pytest.raises(ValueError, match='collector take'):
        collector.Collector(['cam0'], take='zero-copy')


@pytest.mark.ros
@pytest.mark.parametrize('take', collector.TAKES)
def test_collector_records_every_message_in_order(take):
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from xfeat_ros.ros.messages import message_types
    keypoints_type = message_types()[0]
    got = collector.Collector(['camA', 'camB'], take=take)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('collector_test_camera', context=context)
    try:
        assert got.take.startswith(f"{take}'s take")
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        publishers = [node.create_publisher(keypoints_type, f'{name}/keypoints', qos)
                      for name in ('camA', 'camB')]
        # matched at both ends: a volatile writer sends nothing to a reader it has not seen
        assert got.spin_until(lambda: all(got.matched.get(i, 0) > 0
                                          and publishers[i].get_subscription_count() > 0
                                          for i in (0, 1)), 30.0)
        sent = []
        for k in range(12):
            msg = keypoints_type()
            msg.header.stamp.sec, msg.header.stamp.nanosec = 1000 + k, 7 * k
            msg.header.frame_id = f'f{k}'
            # sizes up and down: the kept buffer grows, and is read only for the header
            msg.descriptors = np.full((k % 4) * 20000, k, np.float32)
            publishers[k % 2].publish(msg)
            sent.append((k % 2, f'f{k}', (1000 + k) * 10 ** 9 + 7 * k))
        assert got.spin_until(lambda: len(got.received) == len(sent), 30.0), got.received
        rows = got.take_rows()
        assert got.received == [] and not got.errors
        for camera in (0, 1):
            mine = [row for row in rows if row[0] == camera]
            assert [row[1:3] for row in mine] == [s[1:] for s in sent if s[0] == camera]
        for _, _, stamp, receipt, written, arrived in rows:
            assert written <= arrived <= receipt   # the DDS layer's timestamps, then ours
    finally:
        got.close()
        node.destroy_node()
        rclpy.shutdown(context=context)
