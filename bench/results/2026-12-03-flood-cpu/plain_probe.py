# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Plain rclpy: 2 reliable Image publishers (one process) -> one raw subscriber (another).

From the repository root, in the ROS environment, with PYTHONPATH=$PWD and
ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST:
``python plain_probe.py sub 6 & python plain_probe.py pub RATE 6`` (RATE 0: as
fast as possible).
"""

import sys
import time

import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

from xfeat_ros import dds, heap


def publish(node, qos, rate, seconds):
    """Publish 640x480 rgb8 on cam0 and cam1 at ``rate`` Hz (0: as fast as possible)."""
    pubs = [node.create_publisher(Image, f'cam{i}/image', qos) for i in range(2)]
    while any(p.get_subscription_count() == 0 for p in pubs):
        time.sleep(0.05)
    time.sleep(1.0)
    msg = Image(height=480, width=640, encoding='rgb8', step=1920, data=bytes(921600))
    ticks = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for pub in pubs:
            pub.publish(msg)
        ticks += 1
        if rate > 0:
            pause = start + ticks / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
    print('published', 2 * ticks, 'in', round(time.monotonic() - start, 2), 's', flush=True)
    time.sleep(2)


def receive(node, qos, seconds):
    """Count raw samples of cam0 and cam1 for ``seconds`` from the first one."""
    got = [0]

    def count(_):
        got[0] += 1
    for i in range(2):
        node.create_subscription(Image, f'cam{i}/image', count, qos, raw=True)
    start = None
    end = time.monotonic() + seconds + 30
    while time.monotonic() < end and (start is None or time.monotonic() - start < seconds):
        rclpy.spin_once(node, timeout_sec=0.1)
        if got[0] and start is None:
            start = time.monotonic()
    elapsed = time.monotonic() - start if start is not None else 0.0
    print('received', got[0], 'in', round(elapsed, 2), 's', flush=True)


def main():
    dds.ros_environment(dds.SHIPPED)
    heap.keep_large_buffers()
    rclpy.init()
    node = rclpy.create_node('probe_' + sys.argv[1])
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    if sys.argv[1] == 'pub':
        publish(node, qos, float(sys.argv[2]), float(sys.argv[3]))
    else:
        receive(node, qos, float(sys.argv[2]))


if __name__ == '__main__':
    main()
