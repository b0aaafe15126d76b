# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The camera processes of the node mode: ``xfeat_bench publisher`` and its driver.

:func:`run_publisher` is the child: N cameras at R Hz, driven by lines on
stdin, answering JSON lines; :class:`PublisherProcess` starts one from the
benchmark and talks to it.
"""

import json
import os
import subprocess
import sys
import time

from xfeat_ros.ros import dds
from xfeat_ros.runtime import heap
from xfeat_ros.tools.bench.frames import fit_resolution, load_images, parse_resolutions

ENCODINGS = ('rgb8', 'mono8', 'jpeg', 'png')  # camera images of the node mode
COMPRESSED = ('jpeg', 'png')  # rgb8 frames sent as sensor_msgs/CompressedImage (q90, level 3)
NODE_SETTLE_S = 0.5  # the collector's last look for straggling warm-up outputs
RELIABLE_DEPTH = 10
ACK_TIMEOUT_S = 5.0


def ros_environment(domain_id=None, profile=dds.SHIPPED):
    """Keep DDS on this machine, apply the Fast DDS profile (ros.dds); return the domain."""
    return dds.ros_environment(profile, domain_id=domain_id)['domain_id']


def _emit(event, **fields):
    sys.stdout.write(json.dumps(dict(event=event, **fields)) + '\n')
    sys.stdout.flush()


def _publish_loop(pubs, msgs, rate, duration=None, frames=None, prefix=''):
    """
    Publish one frame per camera per tick; returns (published per camera, stats).

    A sample the middleware refuses (rclpy's ``RCLError``: seen at 8 cameras as
    fast as possible, "cannot publish data") is counted in ``stats['failed']``
    (per camera, with the first message) and the loop goes on: it was never
    sent, so it is neither published nor dropped by the node.
    """
    from builtin_interfaces.msg import Time
    from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
    counts = [0] * len(pubs)
    failed = [0] * len(pubs)
    first_error = None
    late = 0
    max_late = 0.0
    start = time.monotonic()
    start_ns = time.time_ns()
    tick = 0
    while True:
        if frames is not None and tick >= frames:
            break
        due = start + tick / rate if rate > 0 else time.monotonic()
        if duration is not None and due - start >= duration:
            break
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        elif rate > 0:
            lag = now - due
            max_late = max(max_late, lag)
            late += lag > 1.0 / rate
        for c, pub in enumerate(pubs):
            msg = msgs[c][(tick + c) % len(msgs[c])]
            msg.header.frame_id = f'{prefix}{tick}'
            stamp = time.time_ns()
            msg.header.stamp = Time(sec=stamp // 1_000_000_000, nanosec=stamp % 1_000_000_000)
            try:
                pub.publish(msg)
            except _rclpy.RCLError as exc:
                failed[c] += 1
                first_error = first_error or str(exc).splitlines()[0]
                continue
            counts[c] += 1
        tick += 1
    return counts, {'start_ns': start_ns, 'end_ns': time.time_ns(), 'ticks': tick,
                    'late_ticks': late, 'max_late_ms': 1e3 * max_late, 'failed': failed,
                    'first_error': first_error}


def run_publisher(args):
    """
    Publish cameras at a rate, driven by stdin (``warmup N HZ``, ``go HZ SECONDS``).

    Answers JSON lines on stdout (ready, warmup_done once the warm-up frames
    are acknowledged by every matched reader, report) and keeps its writers
    alive until stdin closes, so that reliable samples still in flight reach
    the node.
    """
    ros_environment(args.domain_id, args.dds_profile)
    malloc = heap.keep_large_buffers()  # what a C++ camera driver's reused buffers give
    import rclpy
    from rclpy.duration import Duration
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import CompressedImage, Image
    from xfeat_ros.features.compressed import encode_compressed
    from xfeat_ros.features.image_codec import image_msg
    width, height = parse_resolutions(args.resolution)[0]
    images = [fit_resolution(img, width, height)
              for img in load_images(args.images, args.num_images)]
    cameras = [c for c in args.cameras.split(',') if c]
    rclpy.init()
    node = rclpy.create_node('xfeat_bench_camera')
    qos = QoSProfile(depth=args.depth, reliability=ReliabilityPolicy.RELIABLE)
    if args.encoding in COMPRESSED:   # image_transport's compressed topic and format
        pubs = [node.create_publisher(CompressedImage, f'{c}/image/compressed', qos)
                for c in cameras]
        payloads = [encode_compressed(img, 'rgb8', args.encoding) for img in images]
        msgs = [[CompressedImage(format=fmt, data=data) for fmt, data in payloads]
                for _ in cameras]
    else:
        pubs = [node.create_publisher(Image, f'{c}/image', qos) for c in cameras]
        if args.encoding == 'mono8':
            import cv2
            images = [cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)[..., None] for img in images]
        msgs = [[image_msg(img, args.encoding, None, '') for img in images] for _ in cameras]
    try:
        deadline = time.monotonic() + args.wait_subscribers
        while (any(p.get_subscription_count() == 0 for p in pubs)
               and time.monotonic() < deadline):
            time.sleep(0.05)
        # A counted reader may not have matched this writer yet: a sample sent in that
        # gap waits for the next heartbeat (~3 s). The warm-up below ends only when its
        # frames are acknowledged, so the measured frames never meet that gap.
        heap.freeze_startup_objects()
        _emit('ready', cameras=cameras, heap=malloc,
              subscribers=[p.get_subscription_count() for p in pubs])
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == 'warmup':
                counts, stats = _publish_loop(pubs, msgs, float(words[2]),
                                              frames=int(words[1]), prefix='w')
                acked = all(p.wait_for_all_acked(Duration(seconds=ACK_TIMEOUT_S)) for p in pubs)
                _emit('warmup_done', published=counts, all_acked=acked, **stats)
            elif words[0] == 'go':
                counts, stats = _publish_loop(pubs, msgs, float(words[1]),
                                              duration=float(words[2]))
                # Reliable: the last images are delivered only while this writer lives.
                acked = all(p.wait_for_all_acked(Duration(seconds=ACK_TIMEOUT_S)) for p in pubs)
                _emit('report', cameras=cameras, published=counts, all_acked=acked, **stats)
    except KeyboardInterrupt:
        pass
    finally:
        with dds.teardown_guard():
            node.destroy_node()
            if rclpy.ok():
                rclpy.shutdown()
    return 0


class PublisherProcess:
    """A ``xfeat_bench publisher`` child, driven by lines on stdin, answering JSON lines."""

    def __init__(self, cameras, args, log):
        """Start the process for camera names ``cameras``; a thread reads its answers."""
        import queue
        import threading
        cmd = [sys.executable, '-m', 'xfeat_ros.tools.bench', 'publisher',
               '--cameras', ','.join(cameras), '--images', str(args.images),
               '--num-images', str(args.num_images), '--resolution', args.resolution,
               '--dds-profile', args.dds_profile, '--encoding', args.encoding]
        self.process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=log, text=True, bufsize=1,
                                        env=dict(os.environ, PYTHONUNBUFFERED='1'))
        self.events = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                self.events.put(event)
        self.events.put({'event': 'exit'})

    def send(self, line):
        """Send one command line."""
        self.process.stdin.write(line + '\n')
        self.process.stdin.flush()

    def wait_event(self, name, timeout):
        """Return the next event ``name`` within ``timeout`` s; None on timeout or exit."""
        import queue
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = self.events.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return None
            if event.get('event') == name:
                return event
            if event.get('event') == 'exit':
                self.events.put(event)
                return None

    def stop(self):
        """Close stdin (the child exits) and reap it."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
