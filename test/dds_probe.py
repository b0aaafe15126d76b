# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
A ROS process for test_dds.py: it reports what its DDS participant holds.

``python test/dds_probe.py MODE [--topic T] [--count N] [--size H,W]`` with MODE:

* ``hold``: create a node, report, wait until stdin closes;
* ``pub``: publish ``--count`` rgb8 Images of ``--size`` (reliable) once a
  subscriber matched, wait until all are acknowledged, report;
* ``sub``: receive ``--count`` Images (reliable, 30 s at most), report.

With ``--linger``, ``pub`` and ``sub`` wait after their report until stdin
closes before they destroy their node, so that a caller can end processes one
at a time (see test_dds.py for why).

The report is one JSON line: ``segments`` (the Fast DDS shared-memory
segments mapped into this process: path -> mapped bytes, ports excluded),
``ports`` (``hold`` only: the shared-memory port files mapped here, path -> file bytes),
``udp_ports`` (local ports of this process's UDP sockets) and ``received`` /
``published``. The environment (profile, discovery range, domain) is the
caller's.
"""

import argparse
import faulthandler
import json
import os
import re
import sys
import time


def mapped_segments():
    """Map of /dev/shm/fastdds_* segment paths mapped here -> bytes (ports left out)."""
    sizes = {}
    with open('/proc/self/maps') as maps:
        for line in maps:
            found = re.match(r'([0-9a-f]+)-([0-9a-f]+) .* (/dev/shm/fastdds_[0-9a-f]{16})$',
                             line.strip())
            if found:
                path, size = found.group(3), int(found.group(2), 16) - int(found.group(1), 16)
                sizes[path] = sizes.get(path, 0) + size
    return sizes


def mapped_ports():
    """Map of /dev/shm/fastdds_port<N> files mapped here -> their size in bytes."""
    paths = set()
    with open('/proc/self/maps') as maps:
        for line in maps:
            found = re.search(r' (/dev/shm/fastdds_port[0-9]+)$', line.strip())
            if found:
                paths.add(found.group(1))
    return {path: os.path.getsize(path) for path in sorted(paths)}


def udp_ports():
    """Sorted local ports of this process's IPv4 UDP sockets."""
    inodes = set()
    for fd in os.listdir('/proc/self/fd'):
        try:
            target = os.readlink(f'/proc/self/fd/{fd}')
        except OSError:
            continue
        if target.startswith('socket:['):
            inodes.add(target[8:-1])
    ports = set()
    with open('/proc/net/udp') as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].split(':')[1], 16))
    return sorted(ports)


def main():
    """Run one probe."""
    parser = argparse.ArgumentParser()
    parser.add_argument('mode', choices=('hold', 'pub', 'sub'))
    parser.add_argument('--topic', default='dds_probe')
    parser.add_argument('--count', type=int, default=3)
    parser.add_argument('--size', default='480,640')
    parser.add_argument('--give-up', type=float, default=80.0)
    parser.add_argument('--linger', action='store_true')
    args = parser.parse_args()
    # A probe that outlives its caller's patience says where it stands (every thread's
    # Python stack on stderr) and exits, instead of being killed without a word.
    faulthandler.dump_traceback_later(args.give_up, exit=True)
    import numpy as np
    import rclpy
    from rclpy.duration import Duration
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    rclpy.init()
    node = rclpy.create_node(f'dds_probe_{args.mode}_{os.getpid()}')
    qos = QoSProfile(depth=max(args.count, 1), reliability=ReliabilityPolicy.RELIABLE)
    report = {'pid': os.getpid()}
    if args.mode == 'hold':
        report.update(segments=mapped_segments(), ports=mapped_ports(), udp_ports=udp_ports())
        sys.stdout.write(json.dumps(report) + '\n')
        sys.stdout.flush()
        sys.stdin.read()
    elif args.mode == 'pub':
        height, width = (int(v) for v in args.size.split(','))
        msg = Image(height=height, width=width, encoding='rgb8', step=3 * width)
        msg.data = np.full(height * width * 3, 7, dtype=np.uint8).tobytes()
        publisher = node.create_publisher(Image, args.topic, qos)
        deadline = time.monotonic() + 30
        while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # let the writer match the reader it counted
        for index in range(args.count):
            msg.header.frame_id = str(index)
            publisher.publish(msg)
        report.update(published=args.count,
                      acked=bool(publisher.wait_for_all_acked(Duration(seconds=20))),
                      segments=mapped_segments(), udp_ports=udp_ports())
    else:
        received = []
        node.create_subscription(Image, args.topic, lambda m: received.append(len(m.data)), qos)
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        sys.stdout.write(json.dumps({'event': 'ready'}) + '\n')
        sys.stdout.flush()
        deadline = time.monotonic() + 30
        while len(received) < args.count and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        report.update(received=len(received), sizes=sorted(set(received)),
                      segments=mapped_segments(), udp_ports=udp_ports())
        executor.shutdown()
    sys.stdout.write(json.dumps(report) + '\n')
    sys.stdout.flush()
    if args.linger:
        sys.stdin.read()
    node.destroy_node()
    rclpy.shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
