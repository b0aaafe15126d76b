# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Transport latency of plain rclpy publisher -> subscriber, Fast DDS defaults vs a profile.

Each configuration (profile x message x reliability) runs two fresh processes,
a publisher and a subscriber, so that every participant reads its profile at
start-up as a camera driver and the node would. The publisher stamps each
message (``header.stamp`` = wall clock) just before ``publish`` at a fixed
rate (``--burst`` messages back to back per tick); the subscriber (an ordinary
typed subscription, deserialization included; ``--raw``: the serialized bytes
only) records the receipt time. Latency = receipt - stamp (same clock,
same machine). The first ``--warmup`` messages are not counted.

Messages (``--messages``):

* ``rgb``: sensor_msgs/Image 640x480 rgb8 (921,600 data bytes);
* ``mono``: sensor_msgs/Image 640x480 mono8 (307,200 data bytes);
* ``keypoints``: xfeat_ros_msgs/Keypoints, 4096 keypoints, float32
  descriptors and tracks (1,146,9xx bytes serialized, ~1.15 MB);
* ``rgb4k``: Image 3840x2160 rgb8 (24,883,200 bytes) and ``keypoints65k``
  (65,536 keypoints, ~18.4 MB): the large samples the profile is sized for.

Profiles (``--profiles``): ``default`` (Fast DDS defaults: no profile file),
``shipped`` (config/fastdds_shm.xml through :mod:`xfeat_ros.ros.dds`), or paths.
Both ends raise glibc's malloc thresholds (:mod:`xfeat_ros.runtime.heap`) unless
``XFEAT_ROS_MALLOC=default`` is set for the run (the A/B of that setting).
Every process runs with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and one
ROS_DOMAIN_ID.

    python bench/transport.py run --json out.json --md out.md
"""

import argparse
import datetime
import hashlib
import importlib.metadata
import json
import os
from pathlib import Path
import platform
import queue
import subprocess
import sys
import threading
import time

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from xfeat_ros.ros import dds  # noqa: E402
from xfeat_ros.runtime import heap  # noqa: E402

MESSAGES = ('rgb', 'mono', 'keypoints', 'rgb4k', 'keypoints65k')
DEFAULT_MESSAGES = ('rgb', 'mono', 'keypoints')


def build_message(kind, seed=0):
    """Return ``(message type, message)`` of one kind (content: random, fixed seed)."""
    rng = np.random.default_rng(seed)
    if kind in ('rgb', 'mono', 'rgb4k'):
        from xfeat_ros.features.image_codec import image_msg
        height, width = (2160, 3840) if kind == 'rgb4k' else (480, 640)
        channels, encoding = (1, 'mono8') if kind == 'mono' else (3, 'rgb8')
        pixels = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
        msg = image_msg(pixels, encoding)
        return type(msg), msg
    if kind in ('keypoints', 'keypoints65k'):
        from std_msgs.msg import Header
        from xfeat_ros.ros.messages import keypoints_msg
        from xfeat_ros.features.pipeline import Features
        count = 65536 if kind == 'keypoints65k' else 4096
        descriptors = rng.standard_normal((count, 64)).astype(np.float32)
        descriptors /= np.linalg.norm(descriptors, axis=1, keepdims=True)
        features = Features(rng.uniform(0, 640, (count, 2)).astype(np.float32),
                            rng.uniform(0, 1, count).astype(np.float32), descriptors, (480, 640))
        tracks = (np.arange(count, dtype=np.uint64), np.ones(count, dtype=np.uint32))
        msg = keypoints_msg(Header(frame_id='camera'), features, tracks)
        return type(msg), msg
    raise ValueError(f'unknown message kind {kind!r} (choices: {", ".join(MESSAGES)})')


def qos_profile(reliability, depth):
    """Return the QoS of both ends."""
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    policy = (ReliabilityPolicy.RELIABLE if reliability == 'reliable'
              else ReliabilityPolicy.BEST_EFFORT)
    return QoSProfile(depth=depth, reliability=policy)


def _emit(**fields):
    sys.stdout.write(json.dumps(fields) + '\n')
    sys.stdout.flush()


# -- child processes -----------------------------------------------------------------------------

def run_subscriber(args):
    """Receive until stdin closes; print one JSON line of (seq, stamp, receipt) triples."""
    heap.keep_large_buffers()  # XFEAT_ROS_MALLOC=default leaves glibc alone
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.experimental import EventsExecutor
    from xfeat_ros.tools.bench.collector import header_from_cdr
    msg_type, _ = build_message(args.message)
    rclpy.init()
    node = rclpy.create_node('transport_bench_sub')
    received = []

    def on_msg(msg):
        now = time.time_ns()
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        received.append((int(msg.header.frame_id or -1), stamp, now))

    def on_raw(payload):
        now = time.time_ns()
        stamp, frame_id = header_from_cdr(payload)
        received.append((int(frame_id or -1), stamp, now))

    node.create_subscription(msg_type, args.topic, on_raw if args.raw else on_msg,
                             qos_profile(args.reliability, args.depth), raw=args.raw)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    executor = EventsExecutor() if args.executor == 'events' else SingleThreadedExecutor()
    executor.add_node(node)
    _emit(event='ready')
    while not stop.is_set():
        executor.spin_once(timeout_sec=0.05)
    _emit(event='result', received=received)
    executor.shutdown()
    node.destroy_node()
    rclpy.shutdown()
    return 0


def run_publisher(args):
    """Publish ``--count`` stamped messages, ``--burst`` per tick at ``--rate``, once matched."""
    heap.keep_large_buffers()
    import rclpy
    from builtin_interfaces.msg import Time
    from rclpy.duration import Duration
    _, msg = build_message(args.message)
    rclpy.init()
    node = rclpy.create_node('transport_bench_pub')
    publisher = node.create_publisher(type(msg), args.topic,
                                      qos_profile(args.reliability, args.depth))
    deadline = time.monotonic() + 30
    while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    if publisher.get_subscription_count() == 0:
        _emit(event='error', error='no subscriber matched within 30 s')
        return 1
    time.sleep(0.5)  # the writer may not have matched the reader it counted yet
    start = time.monotonic()
    late = 0
    for tick in range(args.count // args.burst):
        due = start + tick / args.rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        else:
            late += now - due > 1.0 / args.rate
        for seq in range(tick * args.burst, (tick + 1) * args.burst):
            msg.header.frame_id = str(seq)
            stamp = time.time_ns()
            msg.header.stamp = Time(sec=stamp // 1_000_000_000, nanosec=stamp % 1_000_000_000)
            publisher.publish(msg)
    acked = True
    if args.reliability == 'reliable':
        acked = publisher.wait_for_all_acked(Duration(seconds=10))
    _emit(event='done', published=args.count, late_ticks=late, acked=bool(acked),
          seconds=time.monotonic() - start)
    node.destroy_node()
    rclpy.shutdown()
    return 0


# -- serialization cost (no transport) ------------------------------------------------------------

def _times(function, repeat):
    """Return per-call wall times (us) of ``function()``, after two warm-up calls."""
    function()
    function()
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        out.append((time.perf_counter() - start) * 1e6)
    return out


def _summary(times_us):
    values = np.array(times_us)
    return {'median_us': round(float(np.median(values)), 1),
            'p90_us': round(float(np.percentile(values, 90)), 1)}


def run_cdr(args):
    """
    Time building + publishing Keypoints/Matches the normal way vs the CDR writer.

    The writer: :mod:`xfeat_ros.ros.transport.cdr`.

    Normal: :func:`xfeat_ros.ros.messages.keypoints_msg` + ``publish(msg)`` (rclpy
    converts the message to C and Fast DDS serializes it). Serialized:
    :func:`xfeat_ros.ros.transport.cdr.keypoints_cdr` + ``publish(bytes)``. The publisher
    has no subscriber, so no transport is timed: only what the node's thread
    spends. Receiving: ``deserialize_message`` of a 640x480 rgb8 Image (what a
    typed subscription does) vs :func:`xfeat_ros.ros.transport.cdr.parse_image` of the raw bytes.
    """
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import Image
    from std_msgs.msg import Header
    from xfeat_ros.ros.transport import cdr
    from xfeat_ros.features.image_codec import decode_image_msg
    from xfeat_ros.ros.messages import keypoints_msg, matches_msg, message_types
    from xfeat_ros.features.pipeline import Features, MatchResult
    dds.ros_environment(args.dds_profile, domain_id=args.domain_id)
    keypoints_type, matches_type = message_types()
    rng = np.random.default_rng(0)
    count = args.keypoints
    descriptors = rng.standard_normal((count, 64)).astype(np.float32)
    descriptors /= np.linalg.norm(descriptors, axis=1, keepdims=True)
    features = Features(rng.uniform(0, 640, (count, 2)).astype(np.float32),
                        rng.uniform(0, 1, count).astype(np.float32), descriptors, (480, 640))
    tracks = (np.arange(count, dtype=np.uint64), np.ones(count, dtype=np.uint32))
    matched = count // 2
    matches = MatchResult(rng.permutation(count)[:matched], rng.permutation(count)[:matched],
                          rng.uniform(0.8, 1, matched).astype(np.float32))
    header = Header(frame_id='camera')
    rclpy.init()
    node = rclpy.create_node('transport_bench_cdr')
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    keypoints_pub = node.create_publisher(keypoints_type, 'transport_bench_cdr/keypoints', qos)
    matches_pub = node.create_publisher(matches_type, 'transport_bench_cdr/matches', qos)
    rows = []
    for encoding in args.encodings:
        msg = keypoints_msg(header, features, tracks, encoding)
        data = cdr.keypoints_cdr(header, features, tracks, encoding)
        rows.append({'what': f'Keypoints {count}, {encoding}, tracks', 'bytes': len(data),
                     'build_msg': _summary(_times(
                         lambda e=encoding: keypoints_msg(header, features, tracks, e),
                         args.repeat)),
                     'serialize_message': _summary(_times(lambda m=msg: serialize_message(m),
                                                          args.repeat)),
                     'build_and_publish_msg': _summary(_times(
                         lambda e=encoding: keypoints_pub.publish(
                             keypoints_msg(header, features, tracks, e)), args.repeat)),
                     'build_cdr': _summary(_times(
                         lambda e=encoding: cdr.keypoints_cdr(header, features, tracks, e),
                         args.repeat)),
                     'build_and_publish_cdr': _summary(_times(
                         lambda e=encoding: keypoints_pub.publish(
                             cdr.keypoints_cdr(header, features, tracks, e)), args.repeat))})
    previous_stamp = header.stamp
    data = cdr.matches_cdr(header, previous_stamp, features, features, matches)
    rows.append({'what': f'Matches {matched}', 'bytes': len(data),
                 'build_and_publish_msg': _summary(_times(
                     lambda: matches_pub.publish(matches_msg(header, previous_stamp, features,
                                                             features, matches)),
                     args.repeat)),
                 'build_and_publish_cdr': _summary(_times(
                     lambda: matches_pub.publish(cdr.matches_cdr(
                         header, previous_stamp, features, features, matches)), args.repeat))})
    _, image = build_message('rgb')
    payload = serialize_message(image)
    rows.append({'what': 'receive Image 640x480 rgb8', 'bytes': len(payload),
                 'deserialize_message': _summary(_times(
                     lambda: deserialize_message(payload, Image), args.repeat)),
                 'parse_image': _summary(_times(lambda: cdr.parse_image(payload), args.repeat)),
                 'deserialize_and_decode': _summary(_times(
                     lambda: decode_image_msg(deserialize_message(payload, Image)),
                     args.repeat)),
                 'parse_and_decode': _summary(_times(
                     lambda: decode_image_msg(cdr.parse_image(payload)), args.repeat))})
    node.destroy_node()
    rclpy.shutdown()
    results = {'environment': environment_record(args), 'repeat': args.repeat, 'rows': rows}
    lines = []
    for row in rows:
        parts = [f'{k} {v["median_us"]:.0f} us (p90 {v["p90_us"]:.0f})'
                 for k, v in row.items() if isinstance(v, dict)]
        lines.append(f'{row["what"]} ({row["bytes"]:,} bytes): ' + '; '.join(parts))
    sys.stdout.write('\n'.join(lines) + '\n')
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + '\n')
    return 0


# -- orchestration -------------------------------------------------------------------------------

def _reader(stream, events):
    for line in stream:
        try:
            events.put(json.loads(line))
        except ValueError:
            continue
    events.put({'event': 'exit'})


def _wait(events, name, timeout):
    deadline = time.monotonic() + timeout
    while True:
        try:
            event = events.get(timeout=max(deadline - time.monotonic(), 0.0))
        except queue.Empty:
            return None
        if event.get('event') in (name, 'error', 'exit'):
            return event


def child_environment(profile, domain_id):
    """Environment of one configuration's processes (an exported profile is dropped first)."""
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    env.pop(dds.PROFILE_ENV, None)
    if profile == 'default':
        used = dds.ros_environment('', domain_id=domain_id, env=env)
    else:
        used = dds.ros_environment(profile, domain_id=domain_id, env=env)
    return env, used['profile']


def latency_stats(received, warmup, published):
    """Latency percentiles (ms) of the messages after the first ``warmup`` ones."""
    kept = np.array([(r - s) / 1e6 for seq, s, r in received if seq >= warmup])
    counted = max(published - warmup, 0)
    stats = {'published': counted, 'received': int(len(kept)),
             'lost': counted - int(len(kept))}
    if len(kept):
        for name, q in (('p50', 50), ('p90', 90), ('p99', 99)):
            stats[f'{name}_ms'] = round(float(np.percentile(kept, q)), 3)
        stats['max_ms'] = round(float(kept.max()), 3)
        stats['mean_ms'] = round(float(kept.mean()), 3)
    return stats


def run_config(profile, kind, reliability, args, index):
    """One configuration: fresh subscriber and publisher processes; returns its row."""
    env, decision = child_environment(profile, args.domain_id)
    sub_env, sub_decision = env, decision
    if args.sub_profile is not None:  # only the publisher gets ``profile``
        sub_env, sub_decision = child_environment(args.sub_profile, args.domain_id)
    topic = f'transport_bench_{index}'
    common = ['--message', kind, '--reliability', reliability, '--depth', str(args.depth),
              '--topic', topic]
    sub_options = (['--raw'] if args.raw else []) + ['--executor', args.executor]
    me = [sys.executable, str(Path(__file__).resolve())]
    sub = subprocess.Popen(me + ['sub'] + common + sub_options, env=sub_env, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    events = queue.Queue()
    threading.Thread(target=_reader, args=(sub.stdout, events), daemon=True).start()
    row = {'profile': profile, 'profile_file': decision.path,
           'subscriber_profile_file': sub_decision.path, 'raw_subscription': args.raw,
           'subscriber_executor': args.executor,
           'message': kind,
           'reliability': reliability, 'rate_hz': args.rate, 'burst': args.burst,
           'count': args.count, 'warmup': args.warmup}
    try:
        if _wait(events, 'ready', 60) is None:
            row['error'] = 'subscriber did not start'
            return row
        pub = subprocess.run(me + ['pub'] + common + ['--count', str(args.count),
                                                      '--rate', str(args.rate),
                                                      '--burst', str(args.burst)],
                             env=env, capture_output=True, text=True,
                             timeout=60 + 3 * args.count / args.rate)
        done = [json.loads(line) for line in pub.stdout.splitlines() if line.startswith('{')]
        done = done[-1] if done else {'event': 'error', 'error': pub.stderr[-500:]}
        if done.get('event') != 'done':
            row['error'] = done.get('error', 'publisher failed')
            return row
        row.update(late_ticks=done['late_ticks'], acked=done['acked'])
        time.sleep(1.0)  # best effort: anything still in flight arrives or is lost by now
        sub.stdin.close()
        result = _wait(events, 'result', 60)
        if result is None or result.get('event') != 'result':
            row['error'] = 'subscriber gave no result'
            return row
        _, msg = build_message(kind)
        from rclpy.serialization import serialize_message
        row['serialized_bytes'] = len(serialize_message(msg))
        row.update(latency_stats(result['received'], args.warmup, args.count))
        return row
    finally:
        if sub.poll() is None:
            try:
                sub.stdin.close()
            except OSError:
                pass
            try:
                sub.wait(30)
            except subprocess.TimeoutExpired:
                sub.kill()
                sub.wait()


def _version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment_record(args):
    """Machine, versions and profile of this run."""
    from xfeat_ros.tools.plumbing import cpu_model
    cpu = cpu_model()
    profile = dds.shipped_profile()
    return {'date_utc': datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec='seconds'),
            'command': ['python', 'bench/transport.py'] + sys.argv[1:],
            'python': platform.python_version(), 'cpu': cpu, 'cores': os.cpu_count(),
            'load_average_start': list(os.getloadavg()),
            'rclpy': _version('ros-rclpy'), 'fastdds': _version('ros-fastdds'),
            'rmw_fastrtps_cpp': _version('ros-rmw-fastrtps-cpp'),
            'rmw_implementation': os.environ.get('RMW_IMPLEMENTATION',
                                                 'default (rmw_fastrtps_cpp)'),
            'shipped_profile': str(profile),
            'shipped_profile_sha256': hashlib.sha256(profile.read_bytes()).hexdigest(),
            'profile_exported_in_shell_dropped_for_children': os.environ.get(dds.PROFILE_ENV)}


def markdown(results):
    """Return the side-by-side Markdown table of a run."""
    lines = ['| message | bytes | reliability | burst x Hz | profile | received / sent | p50 ms '
             '| p90 ms | p99 ms | max ms |', '|---|---:|---|---|---|---:|---:|---:|---:|---:|']
    for row in results['rows']:
        if row.get('error'):
            lines.append(f'| {row["message"]} | | {row["reliability"]} | | {row["profile"]} '
                         f'| error: {row["error"]} | | | | |')
            continue
        lines.append(
            f'| {row["message"]} | {row["serialized_bytes"]:,} | {row["reliability"]} '
            f'| {row["burst"]} x {row["rate_hz"]:g} | {row["profile"]} '
            f'| {row["received"]} / {row["published"]} '
            f'| {row.get("p50_ms", "-")} | {row.get("p90_ms", "-")} | {row.get("p99_ms", "-")} '
            f'| {row.get("max_ms", "-")} |')
    return '\n'.join(lines) + '\n'


def run(args):
    """Every configuration, interleaved profile by profile; JSON and Markdown."""
    dds.ros_environment('', domain_id=args.domain_id)  # LOCALHOST and one domain for all
    args.domain_id = int(os.environ[dds.DOMAIN_ENV])
    results = {'environment': environment_record(args), 'rows': []}
    index = 0
    for _ in range(args.repeat):
        for kind in args.messages:
            for reliability in args.reliability:
                for profile in args.profiles:
                    row = run_config(profile, kind, reliability, args, index)
                    index += 1
                    results['rows'].append(row)
                    sys.stderr.write(json.dumps(row) + '\n')
                    if args.json:
                        Path(args.json).write_text(json.dumps(results, indent=1) + '\n')
    results['environment']['load_average_end'] = list(os.getloadavg())
    table = markdown(results)
    sys.stdout.write(table)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + '\n')
    if args.md:
        Path(args.md).write_text(table)
    return 0 if not any(r.get('error') for r in results['rows']) else 1


def _csv(choices=None):
    def parse(text):
        items = [t for t in text.split(',') if t]
        for item in items:
            if choices and item not in choices:
                raise argparse.ArgumentTypeError(f'{item!r} is not one of {", ".join(choices)}')
        return items
    return parse


def main(argv=None):
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    sub = parser.add_subparsers(dest='mode', required=True)
    top = sub.add_parser('run', help='every configuration, side by side')
    top.add_argument('--profiles', type=_csv(), default=['default', 'shipped'],
                     help='comma list: default, shipped, or XML paths')
    top.add_argument('--sub-profile', help='profile of the subscriber process only '
                     '(default: the same as the publisher)')
    top.add_argument('--messages', type=_csv(MESSAGES), default=list(DEFAULT_MESSAGES))
    top.add_argument('--reliability', type=_csv(('reliable', 'best_effort')),
                     default=['reliable', 'best_effort'])
    top.add_argument('--rate', type=float, default=30.0, help='Hz (default 30)')
    top.add_argument('--count', type=int, default=300, help='messages per configuration')
    top.add_argument('--raw', action='store_true',
                     help='raw subscription (bytes, no deserialization: transport only)')
    top.add_argument('--executor', choices=('single', 'events'), default='single',
                     help="the subscriber's executor: rclpy's SingleThreadedExecutor "
                          "(default) or rclpy.experimental's EventsExecutor")
    top.add_argument('--burst', type=int, default=1,
                     help='messages published back to back per tick (several cameras)')
    top.add_argument('--warmup', type=int, default=10, help='first messages not counted')
    top.add_argument('--depth', type=int, default=10, help='history depth of both ends')
    top.add_argument('--repeat', type=int, default=1, help='run every configuration N times')
    top.add_argument('--domain-id', type=int, help='ROS_DOMAIN_ID (default: kept, else '
                                                   'from the PID)')
    top.add_argument('--json', help='write the results here')
    top.add_argument('--md', help='write the table here')
    cost = sub.add_parser('cdr', help='serialization cost: normal build+publish vs '
                          'xfeat_ros.ros.transport.cdr')
    cost.add_argument('--keypoints', type=int, default=4096)
    cost.add_argument('--encodings', type=_csv(('float32', 'float16', 'int8', 'none')),
                      default=['float32', 'int8'])
    cost.add_argument('--repeat', type=int, default=200)
    dds.add_profile_argument(cost)
    cost.add_argument('--domain-id', type=int)
    cost.add_argument('--json', help='write the results here')
    for name in ('sub', 'pub'):
        child = sub.add_parser(name, help=f'({name} process of one configuration)')
        child.add_argument('--message', choices=MESSAGES, required=True)
        child.add_argument('--reliability', choices=('reliable', 'best_effort'), required=True)
        child.add_argument('--depth', type=int, default=10)
        child.add_argument('--topic', required=True)
        child.add_argument('--count', type=int, default=300)
        child.add_argument('--rate', type=float, default=30.0)
        child.add_argument('--burst', type=int, default=1)
        child.add_argument('--raw', action='store_true')
        child.add_argument('--executor', choices=('single', 'events'), default='single')
    args = parser.parse_args(argv)
    if args.mode == 'sub':
        return run_subscriber(args)
    if args.mode == 'pub':
        return run_publisher(args)
    if args.mode == 'cdr':
        return run_cdr(args)
    return run(args)


if __name__ == '__main__':
    sys.exit(main())
