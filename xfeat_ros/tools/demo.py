# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_demo``: run the node on a sample sequence and show what it produces.

Without ``--images`` the sequence is made here from real photographs shipped
inside the scikit-image package, seen by a virtual camera moving along a known
path (pan, roll and zoom: a homography per frame), so the true frame-to-frame
motion is known and the matches can be scored. With ``--images DIR`` any image
folder (or TUM / EuRoC layout) is played instead.

The demo starts ``xfeat_node`` as its own process, publishes the frames through
real ROS 2 transport (DDS kept on this machine), collects Keypoints and Matches,
then prints counts, rates and accuracy and writes ``matches.png`` (one frame
pair with its matches drawn) and ``summary.json`` to the output folder.
"""

import argparse
import json
import logging
from pathlib import Path
import sys
import time

import numpy as np

from xfeat_ros.cli import one_line_errors, stop_on_sigterm
from xfeat_ros.defaults import TOP_K
from xfeat_ros.errors import XFeatError
from xfeat_ros.features.engine import BACKENDS
from xfeat_ros.logs import package_logger
from xfeat_ros.ros import dds
from xfeat_ros.runtime import heap
from xfeat_ros.tools.plumbing import start_node, stop_process

LOG = package_logger('xfeat_demo')
FRAME_HW = (480, 640)


def camera_path(count):
    """Homographies (3x3) from the photo to each frame along a smooth path."""
    h, w = FRAME_HW
    poses = []
    for k in range(count):
        s = k / max(count - 1, 1)
        angle = np.radians(6.0 * np.sin(2 * np.pi * s))
        zoom = 1.45 + 0.1 * np.sin(np.pi * s)  # the photo always covers the frame
        tx, ty = -40.0 + 80.0 * s, 20.0 * np.sin(2 * np.pi * s)
        c, si = np.cos(angle) * zoom, np.sin(angle) * zoom
        centre = np.array([[1, 0, -256.0], [0, 1, -256.0], [0, 0, 1]])
        motion = np.array([[c, -si, w / 2 + tx], [si, c, h / 2 + ty], [0, 0, 1]])
        poses.append(motion @ centre)
    return poses


def synthetic_sequence(count=30):
    """``(frames rgb8 [480, 640, 3] list, homographies photo->frame)`` from scikit-image."""
    import cv2
    from skimage import data
    photo = np.ascontiguousarray(data.astronaut())  # 512 x 512 RGB, shipped in the package
    poses = camera_path(count)
    h, w = FRAME_HW
    frames = [cv2.warpPerspective(photo, pose, (w, h), flags=cv2.INTER_LINEAR,
                                  borderMode=cv2.BORDER_CONSTANT) for pose in poses]
    return frames, poses


def match_errors(p0, p1, h0, h1):
    """Reprojection error (px) of matches under the true frame0 -> frame1 homography."""
    if len(p0) == 0:
        return np.zeros(0)
    h01 = h1 @ np.linalg.inv(h0)
    ph = np.c_[p0, np.ones(len(p0))] @ h01.T
    return np.linalg.norm(ph[:, :2] / ph[:, 2:] - p1, axis=1)


GOOD_BGR = (0, 200, 0)
BAD_BGR = (0, 0, 255)
LEGEND_H = 26
DRAWN_MAX = 150


def legend_strip(width, drawn, total, good, checked=True):
    """
    Return the legend below the demo picture: BGR uint8 [:data:`LEGEND_H`, ``width``, 3].

    ``good``: how many of the ``total`` matches lie within 3 px of the true
    motion; ``drawn`` of them are drawn. ``checked`` False (no ground truth):
    every line is green and the legend says so.
    """
    import cv2
    strip = np.full((LEGEND_H, width, 3), 255, np.uint8)
    font, scale, black = cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0)
    y = LEGEND_H // 2
    if checked:
        entries = [(GOOD_BGR, f'within 3 px of the true motion: {good}'),
                   (BAD_BGR, f'farther: {total - good}')]
    else:
        entries = [(GOOD_BGR, f'match (no ground truth to check): {total}')]
    x = 6
    for colour, text in entries:
        cv2.line(strip, (x, y), (x + 24, y), colour, 3, cv2.LINE_AA)
        cv2.putText(strip, text, (x + 30, y + 5), font, scale, black, 1, cv2.LINE_AA)
        x += 40 + cv2.getTextSize(text, font, scale, 1)[0][0]
    cv2.putText(strip, f'{drawn} of {total} matches drawn', (x, y + 5), font, scale,
                (90, 90, 90), 1, cv2.LINE_AA)
    return strip


def draw_matches(img0, img1, p0, p1, good, path, checked=True):
    """
    Write both frames side by side with match lines and a legend strip below.

    Green: the match is within 3 px of the true motion (``good``), red: not;
    at most :data:`DRAWN_MAX` matches are drawn (every k-th).
    """
    import cv2
    canvas = np.concatenate([img0, img1], axis=1)[:, :, ::-1].copy()
    offset = np.array([img0.shape[1], 0])
    step = max(1, -(-len(p0) // DRAWN_MAX))
    drawn = list(zip(p0, p1 + offset, good))[::step]
    for a, b, ok in drawn:
        colour = GOOD_BGR if ok else BAD_BGR
        a = tuple(int(v) for v in a)
        b = tuple(int(v) for v in b)
        cv2.line(canvas, a, b, colour, 1, cv2.LINE_AA)
        cv2.circle(canvas, a, 3, colour, 1, cv2.LINE_AA)
        cv2.circle(canvas, b, 3, colour, 1, cv2.LINE_AA)
    legend = legend_strip(canvas.shape[1], len(drawn), len(p0), int(np.sum(good)), checked)
    cv2.imwrite(str(path), np.concatenate([canvas, legend], axis=0))


def last_error(log_path):
    """Return the node log's last ERROR/FATAL line (without its prefix), or 'no reason logged'."""
    try:
        lines = Path(log_path).read_text(errors='replace').splitlines()
    except OSError:
        return 'no log'
    for line in reversed(lines):
        if '[ERROR]' in line or '[FATAL]' in line:
            return line.split(']: ', 1)[-1]
    return 'no reason logged'


def run_node_and_play(frames, stamps, args, log_path):
    """Start xfeat_node, publish frames, return (keypoints msgs, matches msgs, seconds)."""
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rclpy.signals import SignalHandlerOptions
    from sensor_msgs.msg import Image

    from xfeat_ros.features.image_codec import image_msg
    from xfeat_ros.ros.messages import message_types
    from xfeat_ros.tools.play import stamp_msg
    keypoints_type, matches_type = message_types()
    params = {'input_qos_reliability': 'reliable', 'queue_size': 1000, 'top_k': args.top_k,
              'backend': args.backend}
    if args.weights:
        params['weights'] = args.weights
    qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    node_process = start_node(params, log_path)
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)  # Ctrl-C: KeyboardInterrupt
    node = rclpy.create_node('xfeat_demo')
    keypoints, matches = [], []
    node.create_subscription(keypoints_type, 'keypoints', keypoints.append, qos)
    node.create_subscription(matches_type, 'matches', matches.append, qos)
    publisher = node.create_publisher(Image, 'image', qos)
    try:
        deadline = time.monotonic() + 120
        while publisher.get_subscription_count() == 0 or node.count_publishers(
                '/keypoints') == 0:
            if node_process.poll() is not None or time.monotonic() > deadline:
                raise XFeatError(f'xfeat_node did not start ({last_error(log_path)}); '
                                 f'see {log_path}')
            rclpy.spin_once(node, timeout_sec=0.1)
        settle = time.monotonic() + 0.5  # let the writer match the reader it counted
        while time.monotonic() < settle:
            rclpy.spin_once(node, timeout_sec=0.1)
        LOG.info('node ready: publishing')
        start = time.monotonic()
        for i, (frame, encoding) in enumerate(frames):
            due = start + i / args.rate
            while time.monotonic() < due:
                rclpy.spin_once(node, timeout_sec=max(0.0, due - time.monotonic()))
            publisher.publish(image_msg(frame, encoding, stamp_msg(stamps[i]), 'demo_camera'))
        deadline = time.monotonic() + 60 + 2 * len(frames)
        while len(keypoints) < len(frames) or len(matches) < len(frames) - 1:
            if node_process.poll() is not None or time.monotonic() > deadline:
                break
            rclpy.spin_once(node, timeout_sec=0.1)
        elapsed = time.monotonic() - start
    finally:
        # The node process first, then this one's participant: ending both at once is what
        # can make Fast DDS spin (xfeat_ros.ros.dds.teardown_guard).
        stop_process(node_process, timeout=30.0)
        with dds.teardown_guard():
            node.destroy_node()
            rclpy.shutdown()
    return keypoints, matches, elapsed


@one_line_errors('xfeat_demo')
def main(argv=None):
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip())
    parser.add_argument('--images', help='image folder / TUM / EuRoC sequence to play instead')
    parser.add_argument('--frames', type=int, default=30, help='frames to play')
    parser.add_argument('--rate', type=float, default=10.0, help='publish rate, Hz')
    parser.add_argument('--top-k', type=int, default=TOP_K)
    parser.add_argument('--backend', default='auto', choices=BACKENDS)
    parser.add_argument('--weights', default='',
                        help='weights file (default: $XFEAT_ROS_WEIGHTS, cache, packaged copy)')
    parser.add_argument('--output', default='demo_output', help='folder for the results')
    dds.add_profile_argument(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')
    stop_on_sigterm()
    try:  # LOCALHOST, a domain and the Fast DDS profile, for the demo and its node process
        dds.ros_environment(args.dds_profile)
    except XFeatError as exc:
        parser.error(str(exc))
    heap.keep_large_buffers()  # the demo's Keypoints subscription takes ~1 MB messages
    from xfeat_ros.ros.messages import features_from_msg
    from xfeat_ros.features.weights import find_weights, load_weights
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    weights, origin = find_weights(args.weights)
    load_weights(weights)  # a wrong file is one line here, not a node that cannot start
    args.weights = str(weights)
    LOG.info('weights: %s (%s)', weights, origin)
    if args.images:
        from xfeat_ros.tools.play import load_frames
        loaded = load_frames(args.images, 'keep', args.frames)
        frames = [(pixels, enc) for _, pixels, enc in loaded]
        stamps = [s if s is not None else int(i * 1e9 / args.rate)
                  for i, (s, _, _) in enumerate(loaded)]
        poses = None
        source = args.images
    else:
        images, poses = synthetic_sequence(args.frames)
        frames = [(img, 'rgb8') for img in images]
        stamps = [int(1e9 + i * 1e9 / args.rate) for i in range(len(frames))]
        source = 'scikit-image astronaut photo along a known camera path'
    LOG.info('playing %d frames (%s) at %.1f Hz', len(frames), source, args.rate)
    keypoints, matches, elapsed = run_node_and_play(frames, stamps, args, out / 'node.log')
    counts = [len(m.scores) for m in keypoints]
    match_counts = [len(m.current_indices) for m in matches]
    summary = {'source': source, 'frames_sent': len(frames), 'keypoints_msgs': len(keypoints),
               'matches_msgs': len(matches), 'mean_keypoints': float(np.mean(counts or [0])),
               'mean_matches': float(np.mean(match_counts or [0])),
               'output_rate_hz': len(keypoints) / elapsed if elapsed > 0 else 0.0}
    pair = max(range(len(matches)), key=lambda i: match_counts[i], default=None)
    if poses is not None and matches:
        errors = [match_errors(np.frombuffer(m.previous_keypoints, np.float32).reshape(-1, 2),
                               np.frombuffer(m.current_keypoints, np.float32).reshape(-1, 2),
                               poses[i], poses[i + 1]) for i, m in enumerate(matches)]
        allerr = np.concatenate(errors)
        summary['match_error_median_px'] = float(np.median(allerr))
        summary['matches_within_3px'] = float(np.mean(allerr < 3.0))
    if pair is not None:
        m = matches[pair]
        p0 = np.frombuffer(m.previous_keypoints, np.float32).reshape(-1, 2)
        p1 = np.frombuffer(m.current_keypoints, np.float32).reshape(-1, 2)
        good = (match_errors(p0, p1, poses[pair], poses[pair + 1]) < 3.0 if poses is not None
                else np.ones(len(p0), bool))
        rgb = [f if e != 'mono8' else f.repeat(3, axis=2) for f, e in frames[pair:pair + 2]]
        draw_matches(rgb[0], rgb[1], p0, p1, good, out / 'matches.png', poses is not None)
        summary['picture'] = str(out / 'matches.png')
        summary['picture_pair'] = [pair, pair + 1]
    (out / 'summary.json').write_text(json.dumps(summary, indent=2))
    for key, value in summary.items():
        LOG.info('%s: %s', key, f'{value:.3f}' if isinstance(value, float) else value)
    ok = len(keypoints) == len(frames) and len(matches) == len(frames) - 1
    if not ok:
        LOG.error('expected %d Keypoints and %d Matches; see %s', len(frames),
                  len(frames) - 1, out / 'node.log')
    if keypoints:
        features_from_msg(keypoints[-1])  # the messages decode as documented
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
