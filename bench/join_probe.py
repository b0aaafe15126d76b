# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
How long a publisher's publish() takes when subscribers join, per Fast DDS profile.

The question (docs/transport.md, Limits): the first write into a new
participant's shared-memory port runs Fast DDS's port health check, which can wait
a third of ``healthy_check_timeout_ms`` (333 ms by default). Here one writer process
publishes a 4096-keypoint Keypoints at ``--rate`` Hz (reliable, depth 10, as the
node) and times every publish(); the parent starts ``--joins`` subscriber processes
one after another (each waits for its first message, stays ``--stay`` s, ends) and
prints the writer's slowest publish() calls. Every process loads the profile.

    python bench/join_probe.py --profiles shipped --joins 12 --json out.json
"""

import argparse
import json
import os
from pathlib import Path
import subprocess
import sys
import time

from fanin_probe import children_env, keypoints_message
import numpy as np


def run_writer(args):
    """Publish until stdin closes; print the publish() times over 10 ms as one JSON line."""
    import threading
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from xfeat_ros.ros.messages import message_types
    rclpy.init()
    node = rclpy.create_node('join_probe_writer')
    pub = node.create_publisher(message_types()[0], args.topic,
                                QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    msg = keypoints_message(4096)
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    print('ready', flush=True)
    period, sent, slow, times = 1.0 / args.rate, 0, [], []
    start = time.monotonic()
    while not done.is_set():
        t0 = time.monotonic()
        pub.publish(msg)
        took = 1e3 * (time.monotonic() - t0)
        times.append(took)
        if took > 10:
            slow.append((round(t0 - start, 2), round(took, 1)))
        sent += 1
        time.sleep(max(0.0, start + sent * period - time.monotonic()))
    print(json.dumps({'sent': sent, 'p50_ms': float(np.median(times)),
                      'max_ms': float(max(times)), 'slow': slow}), flush=True)
    node.destroy_node()
    rclpy.shutdown()
    return 0


def run_subscriber(args):
    """Wait for the first message, stay ``args.stay`` s, print how many came."""
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from xfeat_ros.ros.messages import message_types
    rclpy.init()
    node = rclpy.create_node(f'join_probe_sub_{os.getpid()}')
    got = []
    node.create_subscription(message_types()[0], args.topic, lambda m: got.append(1),
                             QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    until = time.monotonic() + args.stay
    while time.monotonic() < until:
        rclpy.spin_once(node, timeout_sec=0.05)
    print(len(got), flush=True)
    node.destroy_node()
    rclpy.shutdown()
    return 0


def run_parent(args):
    """Every profile in turn: a writer, subscribers joining one by one, the slow publishes."""
    me = [sys.executable, str(Path(__file__).resolve())]
    common = ['--topic', args.topic, '--rate', str(args.rate), '--stay', str(args.stay)]
    results = []
    for profile in args.profiles.split(','):
        env = children_env(profile, args.domain_id)
        writer = subprocess.Popen(me + ['writer'] + common, env=env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert writer.stdout.readline().strip() == 'ready'
        received = []
        for _ in range(args.joins):
            sub = subprocess.run(me + ['sub'] + common, env=env, text=True,
                                 capture_output=True, timeout=60)
            received.append(int(sub.stdout.split()[-1]))
        out, _ = writer.communicate('', timeout=60)
        row = dict(json.loads(out.splitlines()[-1]), profile=profile, joins=len(received),
                   received=received)
        results.append(row)
        print(f'{profile}: {row["joins"]} subscribers joined, publish() p50 {row["p50_ms"]:.2f} '
              f'max {row["max_ms"]:.1f} ms, over 10 ms: {row["slow"]}', flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({'args': vars(args), 'results': results}, indent=1))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('role', nargs='?', default='run', choices=('run', 'writer', 'sub'))
    parser.add_argument('--profiles', default='shipped')
    parser.add_argument('--joins', type=int, default=5)
    parser.add_argument('--rate', type=float, default=30.0)
    parser.add_argument('--stay', type=float, default=1.0)
    parser.add_argument('--topic', default='join_probe/keypoints')
    parser.add_argument('--domain-id', type=int, default=os.getpid() % 100 + 101)
    parser.add_argument('--json')
    args = parser.parse_args()
    return {'run': run_parent, 'writer': run_writer, 'sub': run_subscriber}[args.role](args)


if __name__ == '__main__':
    sys.exit(main())
