# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Several writers of large Keypoints into one subscriber process, per Fast DDS profile.

What a subscriber of several cameras' Keypoints sees when publishers join: the
~0.3 s reception pause of docs/transport.md (Limits), made by Fast DDS's shared-
memory port health check. Here ``--writers`` publisher processes
each write a Keypoints message of ``--keypoints`` keypoints at ``--rate`` Hz
for ``--seconds`` (reliable, depth 10, as the node's), and one subscriber
process (xfeat_bench's collector, rcl's take into a kept buffer) counts what
arrives and how late; every process loads the profile under test.

    python bench/fanin_probe.py --profiles shipped --writers 4 --rate 30 --seconds 5 \
        --repeat 5 --json out.json

The runs behind the published figures are in bench/results/cpu-2vcpu/join_pause.json.
"""

import argparse
import json
import os
from pathlib import Path
import subprocess
import sys
import time

import numpy as np

from xfeat_ros.ros import dds


def children_env(profile, domain):
    """Return the children's environment for ``profile`` (shipped, a path, default)."""
    env = {k: v for k, v in os.environ.items() if k != dds.PROFILE_ENV}
    dds.ros_environment('' if profile == 'default' else profile, domain_id=domain, env=env)
    return env


def keypoints_message(n):
    """Return a Keypoints message of ``n`` keypoints (float32 descriptors, track ids)."""
    from xfeat_ros.ros.messages import message_types
    msg = message_types()[0]()
    msg.keypoints = np.zeros(2 * n, np.float32)
    msg.scores = np.zeros(n, np.float32)
    msg.descriptor_size = 64
    msg.descriptor_encoding = 'float32'
    msg.descriptors = np.ones(64 * n, np.float32)
    msg.track_ids = np.arange(n, dtype=np.uint64)
    msg.track_ages = np.zeros(n, np.uint32)
    return msg


def run_subscriber(args):
    """Collect from every writer's topic until told to stop on stdin, then print a JSON line."""
    from xfeat_ros.tools.bench.collector import Collector
    names = [f'w{i}' for i in range(args.writers)]
    got = Collector(names, take='rcl')
    got.spin_until(lambda: all(got.matched.get(i, 0) > 0 for i in range(len(names))), 60.0)
    print('ready', flush=True)
    sys.stdin.readline()            # the writers are done
    last, since = -1, time.monotonic()
    while time.monotonic() - since < 2.0:
        got.spin(0.1)
        if len(got.received) != last:
            last, since = len(got.received), time.monotonic()
    rows = got.take_rows()
    got.close()
    lag = np.array([(row[5] - row[4]) / 1e6 for row in rows]) if rows else np.zeros(1)
    first = min((row[4] for row in rows), default=0)
    print(json.dumps({'received': len(rows),
                      'per_writer': [sum(1 for r in rows if r[0] == i) for i in range(len(names))],
                      'lag_p50_ms': float(np.percentile(lag, 50)),
                      'lag_p90_ms': float(np.percentile(lag, 90)),
                      'lag_p99_ms': float(np.percentile(lag, 99)),
                      'lag_max_ms': float(lag.max()),
                      'late_10ms': int((lag > 10).sum()),
                      # the late ones: (writer, its message number, written ms after the
                      # first message written, ms late at our reader)
                      'late': [(r[0], int(r[1]), round((r[4] - first) / 1e6, 1),
                                round((r[5] - r[4]) / 1e6, 1))
                               for r in rows if (r[5] - r[4]) > 10e6]}), flush=True)
    return 0


def run_publisher(args):
    """Publish Keypoints on ``args.topic`` at ``args.rate`` Hz for a while; print the count."""
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from xfeat_ros.ros.messages import message_types
    rclpy.init()
    node = rclpy.create_node(f'fanin_{args.topic.strip("/").replace("/", "_")}')
    pub = node.create_publisher(message_types()[0], args.topic,
                                QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    msg = keypoints_message(args.keypoints)
    deadline = time.monotonic() + 60
    while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    period, sent = 1.0 / args.rate, 0
    start = time.monotonic()
    while time.monotonic() - start < args.seconds:
        now = time.time_ns()
        msg.header.stamp.sec, msg.header.stamp.nanosec = now // 10 ** 9, now % 10 ** 9
        msg.header.frame_id = str(sent)
        pub.publish(msg)
        sent += 1
        time.sleep(max(0.0, start + sent * period - time.monotonic()))
    print(sent, flush=True)
    node.destroy_node()
    rclpy.shutdown()
    return 0


def run_parent(args):
    """Every profile in turn: subscriber, writers, counts; print a line each, JSON if asked."""
    me = [sys.executable, str(Path(__file__).resolve())]
    common = ['--writers', str(args.writers), '--rate', str(args.rate),
              '--seconds', str(args.seconds), '--keypoints', str(args.keypoints)]
    results = []
    for repeat in range(args.repeat):
        for profile in args.profiles.split(','):
            env = children_env(profile, args.domain_id)
            wrap = args.sub_wrapper.split() if args.sub_wrapper else []
            sub = subprocess.Popen(wrap + me + ['sub'] + common, env=env, text=True,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            assert sub.stdout.readline().strip() == 'ready'
            pubs = [subprocess.Popen(me + ['pub', '--topic', f'w{i}/keypoints'] + common,
                                     env=env, text=True, stdout=subprocess.PIPE)
                    for i in range(args.writers)]
            sent = [int(p.communicate()[0].split()[-1]) for p in pubs]
            out, _ = sub.communicate('done\n', timeout=120)
            row = dict(json.loads(out.splitlines()[-1]), profile=profile, repeat=repeat,
                       sent=sum(sent))
            results.append(row)
            lags = ' / '.join(f'{row[f"lag_{q}_ms"]:.2f}' for q in ('p50', 'p90', 'p99', 'max'))
            print(f'{profile}: sent {row["sent"]}, received {row["received"]} '
                  f'{row["per_writer"]}, reader lag p50 / p90 / p99 / max {lags} ms, '
                  f'{row["late_10ms"]} later than 10 ms', flush=True)
            if row['late']:
                print(f'  late (writer, number, written at ms, late ms): {row["late"]}',
                      flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({'args': vars(args), 'results': results}, indent=1))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('role', nargs='?', default='run', choices=('run', 'sub', 'pub'))
    parser.add_argument('--profiles', default='shipped,default')
    parser.add_argument('--writers', type=int, default=4)
    parser.add_argument('--rate', type=float, default=60.0)
    parser.add_argument('--seconds', type=float, default=5.0)
    parser.add_argument('--keypoints', type=int, default=4096)
    parser.add_argument('--repeat', type=int, default=1)
    parser.add_argument('--topic')
    parser.add_argument('--domain-id', type=int, default=os.getpid() % 100 + 101)
    parser.add_argument('--json')
    parser.add_argument('--sub-wrapper', help='command prefix of the subscriber, e.g. strace')
    args = parser.parse_args()
    return {'run': run_parent, 'sub': run_subscriber, 'pub': run_publisher}[args.role](args)


if __name__ == '__main__':
    sys.exit(main())
