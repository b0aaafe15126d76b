# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Where an image's receipt goes: the node's ``transport_take`` split into wake, take and parse.

    python bench/take_probe.py [--frames 300] [--rate 30] [--buffers pinned|numpy] [--poll-us N]

Two fresh processes, as a camera driver and the node: a plain rclpy publisher
of 640x480 rgb8 Images at ``--rate`` (stamp set just before ``publish``) and a
subscriber that waits on its subscription alone in one wait set and takes each
sample with rcl's own call (:class:`xfeat_ros.rcl_io.SerializedTaker`) into
rotating buffers (``pinned``: CuPy pinned memory, as the GPU engine's image
pool; ``numpy``: pageable), then parses and checks it as the node does. Per
sample, from the message info and the subscriber's clock (same machine):

* ``camera``: stamp -> the writer's source timestamp (the publisher's own work);
* ``dds``: source timestamp -> the reader's reception timestamp (Fast DDS);
* ``wake``: reception -> the subscriber's wait returned;
* ``take``: rcl's take (rmw's copy of the sample into the buffer);
* ``parse``: :func:`xfeat_ros.cdr.parse_image` and the node's image check.

With ``--poll-us N`` the subscriber blocks only until N us before the next
sample is due (the last reception plus one period) and then polls its wait set
without blocking until a sample is ready or N us after it was due (then blocks
again): the ``wake`` of a thread that is running when the sample lands.

Both processes load the shipped Fast DDS profile and keep discovery on this
machine (its own ROS_DOMAIN_ID). Prints the medians and 90th percentiles (ms)
as one JSON line.
"""

import argparse
import json
from pathlib import Path
import subprocess
import sys
import time

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PARTS = ('camera', 'dds', 'wake', 'take', 'parse')
WARMUP = 20


def publish(frames, rate):
    """Publish ``frames`` rgb8 Images at ``rate`` Hz once the subscriber is matched."""
    import rclpy
    from sensor_msgs.msg import Image
    rclpy.init()
    node = rclpy.create_node('take_probe_camera')
    publisher = node.create_publisher(Image, 'take_probe/image', 10)
    while publisher.get_subscription_count() == 0:
        time.sleep(0.05)
    time.sleep(0.5)
    msg = Image(height=480, width=640, encoding='rgb8', step=1920)
    msg.data = bytes(640 * 480 * 3)
    msg.header.frame_id = 'camera'
    start = time.monotonic()
    for i in range(frames):
        while time.monotonic() < start + i / rate:
            time.sleep(0.0005)
        now = time.time_ns()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(now, 10**9)
        publisher.publish(msg)
    time.sleep(1.0)
    node.destroy_node()
    rclpy.shutdown()


def rotating_buffers(kind, count=4, nbytes=1 << 20):
    """Return ``buffers(nbytes)`` handing out ``count`` buffers in turn."""
    if kind == 'pinned':
        from xfeat_ros.gpu.buffers import PinnedBuffer
        pool = [PinnedBuffer(nbytes).array for _ in range(count)]
    else:
        pool = [np.zeros(nbytes, np.uint8) for _ in range(count)]
    turn = [0]

    def buffers(size):
        turn[0] += 1
        buffer = pool[turn[0] % count]
        return buffer if buffer.size >= size else np.zeros(size, np.uint8)
    return buffers


def _ready(wait_set, subscription, timeout_ns):
    """Wait up to ``timeout_ns`` (0: just look) for ``subscription``; return whether ready."""
    wait_set.clear_entities()
    wait_set.add_subscription(subscription.handle)
    wait_set.wait(timeout_ns)
    return bool(wait_set.get_ready_entities('subscription'))


def _wait(wait_set, subscription, due_ns, poll_ns):
    """Block, or (``poll_ns`` > 0 and a sample ``due_ns``) block then poll around it."""
    if poll_ns and due_ns:
        lead = due_ns - poll_ns - time.time_ns()
        if lead > 0 and _ready(wait_set, subscription, lead):
            return
        while time.time_ns() < due_ns + poll_ns:
            if _ready(wait_set, subscription, 0):
                return
    _ready(wait_set, subscription, 2_000_000_000)


def subscribe(frames, kind, poll_us=0, rate=30.0):
    """Take ``frames`` samples; return the per-part times (ms) after the warm-up."""
    import rclpy
    from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
    from sensor_msgs.msg import Image

    from xfeat_ros.cdr import parse_image
    from xfeat_ros.core.stream import check_image
    from xfeat_ros.rcl_io import load, SerializedTaker
    rclpy.init()
    node = rclpy.create_node('take_probe_node')
    subscription = node.create_subscription(Image, 'take_probe/image', lambda _: None, 10,
                                            raw=True)
    taker = SerializedTaker(subscription, load(), rotating_buffers(kind))
    rows = []
    with subscription.handle, node.context.handle:
        wait_set = _rclpy.WaitSet(1, 0, 0, 0, 0, 0, node.context.handle)
        due = 0
        while len(rows) < frames:
            _wait(wait_set, subscription, due, int(poll_us * 1000))
            woke = time.time_ns()
            while True:
                before = time.time_ns()
                taken = taker.take()
                if taken is None:
                    break
                after = time.time_ns()
                payload, info = taken
                view = parse_image(payload)
                check_image(view, 0)
                parsed = time.time_ns()
                stamp = view.header.stamp.sec * 10**9 + view.header.stamp.nanosec
                source, received = info['source_timestamp'], info['received_timestamp']
                due = received + int(1e9 / rate)
                rows.append((source - stamp, received - source, woke - received,
                             after - before, parsed - after))
                woke = after  # a second sample of this wake: no wait of its own
    node.destroy_node()
    rclpy.shutdown()
    return np.array(rows[WARMUP:], dtype=np.float64) / 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--frames', type=int, default=300)
    parser.add_argument('--rate', type=float, default=30.0)
    parser.add_argument('--buffers', choices=('pinned', 'numpy'), default='pinned')
    parser.add_argument('--poll-us', type=float, default=0.0,
                        help='poll the wait set this long either side of the next sample (us)')
    parser.add_argument('--role', choices=('both', 'camera', 'node'), default='both',
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.frames <= WARMUP or args.rate <= 0 or args.poll_us < 0:
        parser.error(f'--frames must exceed {WARMUP}, --rate be positive, --poll-us not negative')
    if args.role == 'camera':
        publish(args.frames + 10, args.rate)
        return 0
    if args.role == 'node':
        times = subscribe(args.frames, args.buffers, args.poll_us, args.rate)
        print(json.dumps({
            'buffers': args.buffers, 'rate_hz': args.rate, 'poll_us': args.poll_us,
            'samples': len(times),
            'p50_ms': {p: round(float(np.median(times[:, i])), 3) for i, p in enumerate(PARTS)},
            'p90_ms': {p: round(float(np.percentile(times[:, i], 90)), 3)
                       for i, p in enumerate(PARTS)}}))
        return 0
    from xfeat_ros import dds
    dds.ros_environment()
    common = [sys.executable, __file__, '--frames', str(args.frames), '--rate', str(args.rate),
              '--buffers', args.buffers, '--poll-us', str(args.poll_us), '--role']
    node = subprocess.Popen(common + ['node'])
    camera = subprocess.Popen(common + ['camera'])
    try:
        return max(node.wait(timeout=60 + args.frames / args.rate), camera.wait(timeout=30))
    except subprocess.TimeoutExpired:
        node.kill()
        camera.kill()
        print('take_probe: timed out', file=sys.stderr)
        return 1


if __name__ == '__main__':
    sys.exit(main())
