# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Plain rclpy: 2 reliable Image publishers (one process) -> one raw subscriber (another).

Usage (repository root, ROS environment, PYTHONPATH=$PWD, ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST):
  python plain_probe.py sub 6 &  python plain_probe.py pub RATE 6   (RATE 0: as fast as possible)
"""
import sys, time
import numpy as np
import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image
from xfeat_ros import dds, heap

dds.ros_environment(dds.SHIPPED)
heap.keep_large_buffers()
rclpy.init()
node = rclpy.create_node('probe_' + sys.argv[1])
qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
if sys.argv[1] == 'pub':
    rate, seconds = float(sys.argv[2]), float(sys.argv[3])
    pubs = [node.create_publisher(Image, f'cam{i}/image', qos) for i in range(2)]
    while any(p.get_subscription_count() == 0 for p in pubs):
        time.sleep(0.05)
    time.sleep(1.0)
    msg = Image(height=480, width=640, encoding='rgb8', step=1920, data=bytes(921600))
    n = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for p in pubs:
            p.publish(msg)
        n += 1
        if rate > 0:
            due = start + n / rate
            d = due - time.monotonic()
            if d > 0:
                time.sleep(d)
    print('published', 2 * n, 'in', round(time.monotonic() - start, 2), 's', flush=True)
    time.sleep(2)
else:
    seconds = float(sys.argv[2])
    got = [0]
    subs = [node.create_subscription(Image, f'cam{i}/image', lambda m: got.__setitem__(0, got[0] + 1), qos, raw=True) for i in range(2)]
    start = None
    end = time.monotonic() + seconds + 30
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.1)
        if got[0] and start is None:
            start = time.monotonic(); first = got[0]
        if start and time.monotonic() - start > seconds:
            break
    print('received', got[0], 'in', round(time.monotonic() - (start or time.monotonic()), 2), 's', flush=True)
