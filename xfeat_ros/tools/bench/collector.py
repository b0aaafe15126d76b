# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The benchmark's receiving end: every camera's Keypoints, stamp -> receipt per frame.

The collector is one Python process subscribing to all the cameras, so at
8 cameras as fast as possible it takes ~1,300 messages of 1.15 MB a second:
rclpy's raw take (a new ``bytes`` per message, copied twice) in the
executor's thread then bounds what the benchmark sees, not the node
(docs/design-notes.md). By default (``take='rcl'``) the
Keypoints are taken the way the node takes its images
(:class:`xfeat_ros.ros.transport.image_receiver.ImageReceiver`, rcl's own take): in a
thread of their own, into one kept buffer, as only the header is read;
``take='rclpy'`` keeps rclpy's raw subscriptions in the executor (what the
benchmark did before). The executor serves the node's /diagnostics either way.
"""

import time

import numpy as np

from xfeat_ros.ros import dds
from xfeat_ros.ros.transport import rcl_io

TAKES = ('rcl', 'rclpy')


def header_from_cdr(raw):
    """
    Return ``(stamp_ns, frame_id)`` of a serialized message starting with a std_msgs/Header.

    CDR: 4 bytes encapsulation (byte 1 odd: little endian), int32 sec,
    uint32 nanosec, uint32 length of frame_id (with its NUL), the characters.
    """
    order = '<' if raw[1] & 1 else '>'
    sec, nanosec, length = np.frombuffer(raw, dtype=np.dtype(f'{order}u4'), count=3, offset=4)
    sec = int(np.int32(np.uint32(sec)))
    frame_id = bytes(raw[16:16 + max(int(length) - 1, 0)]).decode('utf-8', 'replace')
    return sec * 1_000_000_000 + int(nanosec), frame_id


class KeptBuffer:
    """``buffers(nbytes)`` for rcl's take: one array, grown when a sample is larger."""

    def __init__(self):
        """Start without memory: the first sample sizes it."""
        self.array = None

    def __call__(self, nbytes):
        """Return the kept array, grown to ``nbytes`` where smaller."""
        if self.array is None or self.array.size < nbytes:
            self.array = np.zeros(nbytes, np.uint8)  # touched once, not on every take
        return self.array


class Collector:
    """Raw Keypoints subscriptions, a row per message received (see the module)."""

    def __init__(self, cameras, take='rcl'):
        """Create a private context, node and one raw subscription per camera."""
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.event_handler import SubscriptionEventCallbacks
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from xfeat_ros.ros.transport.image_receiver import ImageReceiver
        from xfeat_ros.ros.messages import message_types
        if take not in TAKES:
            raise ValueError(f'collector take {take!r}: one of {", ".join(TAKES)}')
        keypoints_type = message_types()[0]
        self.rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node('xfeat_bench_collector', context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.cameras = list(cameras)
        # (camera index, frame_id, stamp_ns, receipt_ns, written_ns, arrived_ns): receipt is
        # when our callback ran; written / arrived the writer's source and our reader's
        # reception timestamps from the DDS layer (the same system clock as the stamps)
        self.received = []
        self.matched = {}   # camera index -> writers our Keypoints reader has matched
        self.node_side = {}  # camera name -> the node's diagnostics values
        self.errors = []    # what a callback on the receiver's thread raised
        rcl = rcl_io.load() if take == 'rcl' else None
        self.receiver = None
        if rcl is not None:
            self.receiver = ImageReceiver(self.node, on_error=self.errors.append, rcl=rcl,
                                          buffers=KeptBuffer())
        self.take = ("rcl's take into a kept buffer, in a thread of its own" if self.receiver
                     else "rclpy's take, in the executor")
        qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        for index, name in enumerate(self.cameras):
            args = (keypoints_type, f'{name}/keypoints',
                    lambda raw, info, i=index: self._on_keypoints(i, raw, info), qos)
            events = SubscriptionEventCallbacks(
                matched=lambda info, i=index: self.matched.__setitem__(i, info.current_count))
            if self.receiver is not None:
                self.receiver.subscribe(*args, event_callbacks=events)
            else:
                self.node.create_subscription(*args, raw=True, event_callbacks=events)
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diagnostics, 10)
        if self.receiver is not None:
            self.receiver.start()

    def _on_diagnostics(self, array):
        from xfeat_ros.ros.messages import camera_status_values
        for name in self.cameras:
            values = camera_status_values(array, f'/{name}/image')
            if values is not None:
                self.node_side[name] = values

    def _on_keypoints(self, index, raw, info):
        now = time.time_ns()
        stamp, frame_id = header_from_cdr(raw)  # copies what it keeps: raw may be reused
        self.received.append((index, frame_id, stamp, now, info['source_timestamp'],
                              info['received_timestamp']))

    def take_rows(self):
        """Return the rows received so far and start a new list (safe beside the receiver)."""
        rows, self.received = self.received, []  # one rebinding: an append lands in either
        return rows

    def spin(self, seconds):
        """Spin for ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=min(0.05, max(deadline - time.monotonic(), 0)))

    def spin_until(self, predicate, timeout, alive=None):
        """Spin until ``predicate()``; False on timeout or when ``alive()`` turns false."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            if alive is not None and not alive():
                return False
            self.executor.spin_once(timeout_sec=0.05)
        return predicate()

    def node_ready(self):
        """
        Tell whether every camera's Keypoints are matched at both ends.

        Our readers have matched the node's writers (their matched events) and
        the node's writers count our readers (its /diagnostics
        ``keypoints_subscribers``; a node too old to report it counts as ready
        once its status arrives). Keypoints written before that would never
        reach us: the warm-up's accounting needs every one.
        """
        return all(self.matched.get(i, 0) > 0
                   and int(self.node_side.get(name, {}).get('keypoints_subscribers', '1')
                           if name in self.node_side else 0) > 0
                   for i, name in enumerate(self.cameras))

    def close(self):
        """Stop the receiver, destroy the node and the context."""
        if self.receiver is not None:
            self.receiver.stop()
        self.executor.shutdown()
        with dds.teardown_guard():
            self.node.destroy_node()
            self.rclpy.shutdown(context=self.context)
