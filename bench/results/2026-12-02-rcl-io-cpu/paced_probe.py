# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Paced take/publish cost: rcl_io vs rclpy, alternating order, real classes."""
import sys, time, json
import numpy as np
import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy, HistoryPolicy
from sensor_msgs.msg import Image
from builtin_interfaces.msg import Time
sys.path.insert(0, __file__.rsplit('/bench/', 1)[0])
from xfeat_ros import heap, rcl_io
from xfeat_ros.messages import message_types
heap.keep_large_buffers()
QOS = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

def cam(n, w, h, enc, ch):
    rclpy.init(); node = rclpy.create_node('p2cam')
    pub = node.create_publisher(Image, 'p2/image', QOS)
    msg = Image(height=h, width=w, encoding=enc, step=w * ch)
    msg.data = np.random.randint(0, 255, w * h * ch, dtype=np.uint8).tobytes()
    while pub.get_subscription_count() < 2: time.sleep(0.1)
    time.sleep(1.0)
    for i in range(n):
        time.sleep(1 / 30)
        pub.publish(msg)
    time.sleep(1)

def sink():
    rclpy.init(); node = rclpy.create_node('p2sink')
    kt, _ = message_types()
    subs = [node.create_subscription(kt, f'p2/out{i}', lambda m: None, QOS, raw=True) for i in range(2)]
    while True: rclpy.spin_once(node, timeout_sec=0.1)

def main(n, k):
    rclpy.init(); node = rclpy.create_node('p2node')
    rcl = rcl_io.load()
    subs = [node.create_subscription(Image, 'p2/image', lambda m: None, QOS, raw=True) for _ in range(2)]
    kt, _ = message_types()
    pubs = [node.create_publisher(kt, f'p2/out{i}', QOS) for i in range(2)]
    takers = {'rcl': rcl_io.serialized_taker(subs[0], rcl), 'rclpy': rcl_io.serialized_taker(subs[1], None)}
    outs = {'rcl': rcl_io.serialized_publisher(pubs[0], rcl), 'rclpy': rcl_io.serialized_publisher(pubs[1], None)}
    from xfeat_ros.cdr import CdrWriter, Header, Time as T, write_keypoints
    from xfeat_ros.pipeline import Features
    rng = np.random.default_rng(0)
    f = Features(rng.uniform(0, 640, (k, 2)).astype(np.float32), rng.uniform(0, 1, k).astype(np.float32), rng.standard_normal((k, 64)).astype(np.float32), (480, 640))
    tr = (np.arange(k, dtype=np.uint64), np.ones(k, np.uint32))
    times = {f'{w}_{m}': [] for w in ('take', 'publish') for m in ('rcl', 'rclpy')}
    while min(p.get_subscription_count() for p in pubs) < 1: time.sleep(0.05)
    with subs[0].handle, subs[1].handle, node.context.handle:
        ws = _rclpy.WaitSet(2, 0, 0, 0, 0, 0, node.context.handle)
        for i in range(n):
            order = ('rcl', 'rclpy') if i % 2 else ('rclpy', 'rcl')
            ready = set()
            while len(ready) < 2:
                ws.clear_entities(); [ws.add_subscription(s.handle) for s in subs]; ws.wait(2_000_000_000)
                ready |= set(ws.get_ready_entities('subscription'))
            for m in order:
                t0 = time.perf_counter(); got = takers[m].take(); times[f'take_{m}'].append(time.perf_counter() - t0)
                assert got is not None
            for m in order:
                t0 = time.perf_counter()
                outs[m].publish(write_keypoints(CdrWriter(), Header(T(1, 2), 'c'), f, tr, 'float32'))
                times[f'publish_{m}'].append(time.perf_counter() - t0)
    print(json.dumps({k2: round(float(np.median(v[10:])) * 1e3, 3) for k2, v in times.items()}))

if __name__ == '__main__':
    role = sys.argv[1]
    if role == 'cam': cam(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
    elif role == 'sink': sink()
    else: main(int(sys.argv[2]), int(sys.argv[3]))
