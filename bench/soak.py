# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Soak test: push many frames through xfeat_node and watch memory and losses.

Starts ``xfeat_node`` as its own process, publishes textured frames (a real
photo from scikit-image, moving) at a fixed rate through real rclpy transport,
samples the node's resident memory (and GPU memory, where nvidia-smi exists)
every second, and at the end compares published, received and processed
counts and fits the memory slope after warm-up. Not a CI test (CI runs a short
version in test/bench/test_soak.py)::

    python bench/soak.py --frames 100000 --rate 150 --out soak.json
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def rss_kib(pid):
    """Resident set size of a process in KiB (from /proc)."""
    with open(f'/proc/{pid}/status') as handle:
        for line in handle:
            if line.startswith('VmRSS:'):
                return int(line.split()[1])
    return 0


def gpu_mib(pid):
    """GPU memory of a process in MiB via nvidia-smi, or None where unavailable."""
    try:
        out = subprocess.run(['nvidia-smi', '--query-compute-apps=pid,used_memory',
                              '--format=csv,noheader,nounits'], capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(',')]
        if len(fields) == 2 and fields[0] == str(pid):
            return float(fields[1])
    return 0.0


def slope_per_10k(frames, values):
    """Least-squares slope of ``values`` per 10,000 frames (None with < 3 samples)."""
    if len(frames) < 3 or np.ptp(frames) == 0:
        return None
    return float(np.polyfit(np.asarray(frames, float), np.asarray(values, float), 1)[0] * 1e4)


def make_frames(height, width, count=16):
    """Textured mono8 frames cut from a real photo along a slow pan."""
    from skimage import data
    photo = data.camera()  # 512 x 512 grey, shipped with scikit-image
    tiles = []
    for i in range(count):
        y, x = (i * 7) % (512 - height), (i * 11) % (512 - width)
        tiles.append(np.ascontiguousarray(photo[y:y + height, x:x + width, None]))
    return tiles


def main(argv=None):
    """Run the soak and print/write the summary."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip())
    parser.add_argument('--frames', type=int, default=100000)
    parser.add_argument('--rate', type=float, default=150.0, help='publish rate, Hz')
    parser.add_argument('--size', default='160x120', help='WIDTHxHEIGHT of the frames')
    parser.add_argument('--backend', default='onnxruntime')
    parser.add_argument('--weights', default=os.environ.get('XFEAT_ROS_WEIGHTS', ''))
    parser.add_argument('--top-k', type=int, default=1024)
    parser.add_argument('--warmup', type=int, default=1000, help='frames before the fit')
    parser.add_argument('--out', help='JSON summary file')
    args = parser.parse_args(argv)
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image

    from xfeat_ros.features.image_codec import image_msg
    from xfeat_ros.ros.messages import message_types
    from xfeat_ros.tools.play import stamp_msg
    from xfeat_ros.tools.plumbing import parse_final_counts, start_node, stop_process
    width, height = (int(v) for v in args.size.split('x'))
    tiles = make_frames(height, width)
    params = {'backend': args.backend, 'top_k': args.top_k, 'input_qos_reliability': 'reliable',
              'input_qos_depth': 100, 'queue_size': 100}
    if args.weights:
        params['weights'] = args.weights
    log_path = (args.out or 'soak') + '.node.log'
    node_process = start_node(params, log_path)
    rclpy.init()
    node = rclpy.create_node('xfeat_soak')
    qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    keypoints_type, matches_type = message_types()
    received = {'keypoints': 0, 'matches': 0}
    node.create_subscription(keypoints_type, 'keypoints',
                             lambda m: received.__setitem__('keypoints',
                                                            received['keypoints'] + 1), qos)
    node.create_subscription(matches_type, 'matches',
                             lambda m: received.__setitem__('matches', received['matches'] + 1),
                             qos)
    publisher = node.create_publisher(Image, 'image', qos)
    samples = []
    try:
        while publisher.get_subscription_count() == 0 or node.count_publishers('/keypoints') == 0:
            if node_process.poll() is not None:
                raise RuntimeError(f'xfeat_node exited; see {log_path}')
            rclpy.spin_once(node, timeout_sec=0.1)
        settle = time.monotonic() + 0.5
        while time.monotonic() < settle:
            rclpy.spin_once(node, timeout_sec=0.05)
        start = time.monotonic()
        next_sample = start
        for i in range(args.frames):
            due = start + i / args.rate
            while True:
                now = time.monotonic()
                if now >= next_sample:
                    samples.append((i, received['keypoints'], now - start,
                                    rss_kib(node_process.pid), gpu_mib(node_process.pid)))
                    next_sample += 1.0
                if now >= due:
                    break
                rclpy.spin_once(node, timeout_sec=min(due - now, 0.005))
            publisher.publish(image_msg(tiles[i % len(tiles)], 'mono8',
                                        stamp_msg(10 ** 9 + i * 10 ** 6)))
        # Drain: wait until everything arrived, or nothing new came for 3 s (dropped
        # frames never arrive; the node's counts say why).
        last_change, last_seen = time.monotonic(), -1
        while ((received['keypoints'] < args.frames or received['matches'] < args.frames - 1)
               and time.monotonic() - last_change < 3.0):
            if received['keypoints'] != last_seen:
                last_seen, last_change = received['keypoints'], time.monotonic()
            rclpy.spin_once(node, timeout_sec=0.05)
        elapsed = last_change - start
        samples.append((args.frames, received['keypoints'], elapsed, rss_kib(node_process.pid),
                        gpu_mib(node_process.pid)))
    finally:
        node.destroy_node()
        rclpy.shutdown()
        stop_process(node_process, timeout=60.0)
    counts = (parse_final_counts(open(log_path).read()) or {}).get('', {})
    after = [s for s in samples if s[1] >= args.warmup]
    done = [s[1] for s in after]
    rss_slope = slope_per_10k(done, [s[3] for s in after])
    gpu_slope = (slope_per_10k(done, [s[4] for s in after])
                 if after and after[0][4] is not None else None)
    summary = {
        'frames_published': args.frames, 'keypoints_received': received['keypoints'],
        'matches_received': received['matches'], 'node_counts': counts,
        'seconds': elapsed, 'achieved_rate_hz': received['keypoints'] / elapsed,
        'size': args.size, 'backend': args.backend, 'rate_hz': args.rate,
        'rss_kib_first': samples[0][3], 'rss_kib_after_warmup': after[0][3] if after else None,
        'rss_kib_end': samples[-1][3],
        'rss_kib_slope_per_10k_frames': rss_slope,
        'gpu_mib_end': samples[-1][4], 'gpu_mib_slope_per_10k_frames': gpu_slope,
        'samples': samples}
    lost = args.frames - received['keypoints']
    sys.stdout.write(json.dumps({k: v for k, v in summary.items() if k != 'samples'},
                                indent=1) + '\n')
    if args.out:
        with open(args.out, 'w') as handle:
            json.dump(summary, handle, indent=1)
    return 0 if lost == 0 and counts.get('published') == args.frames else 1


if __name__ == '__main__':
    sys.exit(main())
