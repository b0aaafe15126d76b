# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_play``: publish an image folder as a camera topic.

Understands plain folders and TUM / EuRoC layouts (see
:mod:`xfeat_ros.image_files`). With timestamps in the layout, messages carry
them and are paced like the recording (``--rate`` overrides the pacing,
``--restamp`` stamps with the current time instead). Images are decoded once
up front, so the publish rate is not limited by disk or PNG decoding.
"""

import argparse
import sys
import time

from builtin_interfaces.msg import Time
import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

from xfeat_ros.errors import XFeatError
from xfeat_ros.image_files import list_sequence, read_image
from xfeat_ros.messages import image_msg

ENCODINGS = ('keep', 'rgb8', 'bgr8', 'mono8')
SETTLE_S = 0.5


def convert(pixels, encoding, target):
    """Convert ``rgb8``/``mono8`` pixels to ``target`` (``keep``: unchanged)."""
    if target in ('keep', encoding):
        return pixels, encoding
    if encoding == 'mono8':
        pixels = pixels.repeat(3, axis=2)
    if target == 'bgr8':
        return pixels[:, :, ::-1].copy(), target
    if target == 'mono8':
        return pixels.mean(axis=2, keepdims=True).round().astype('uint8'), target
    return pixels, 'rgb8'


def stamp_msg(ns):
    """``builtin_interfaces/Time`` of integer nanoseconds."""
    return Time(sec=int(ns // 10 ** 9), nanosec=int(ns % 10 ** 9))


def load_frames(folder, encoding='keep', count=0):
    """``[(stamp_ns or None, pixels, encoding)]`` of a sequence folder."""
    frames = list_sequence(folder)
    if count:
        frames = frames[:count]
    out = []
    for stamp, path in frames:
        pixels, enc = convert(*read_image(path), encoding)
        out.append((stamp, pixels, enc))
    return out


def play(node, publisher, frames, rate=0.0, loop=False, restamp=False, frame_id='camera',
         wait_subscribers=10.0):
    """
    Publish ``frames`` on ``publisher``; returns how many messages were published.

    Pacing: ``rate`` Hz if > 0, else the frames' own stamp differences, else 10 Hz.
    """
    deadline = time.monotonic() + wait_subscribers
    while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if publisher.get_subscription_count():
        # A reader counted here may not be matched on the writer's side yet; a
        # first message sent at once can miss it.
        time.sleep(SETTLE_S)
    messages = []
    for stamp, pixels, encoding in frames:
        messages.append((stamp, image_msg(pixels, encoding, None, frame_id)))
    published = 0
    start = time.monotonic()
    offset = 0.0
    first_stamp = messages[0][0] if messages else None
    while rclpy.ok():
        for index, (stamp, msg) in enumerate(messages):
            if rate > 0:
                due = start + offset + index / rate
            elif stamp is not None and first_stamp is not None:
                due = start + offset + (stamp - first_stamp) / 1e9
            else:
                due = start + offset + index / 10.0
            time.sleep(max(0.0, due - time.monotonic()))
            if restamp or stamp is None:
                msg.header.stamp = node.get_clock().now().to_msg()
            else:
                msg.header.stamp = stamp_msg(stamp)
            publisher.publish(msg)
            published += 1
        if not loop:
            break
        offset = time.monotonic() - start + (1.0 / rate if rate > 0 else 0.1)
        restamp = True  # a replayed recording must not repeat its stamps
    return published


def main(argv=None):
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('folder', help='image folder, TUM or EuRoC sequence')
    parser.add_argument('--topic', default='image', help='image topic (default: image)')
    parser.add_argument('--rate', type=float, default=0.0,
                        help='Hz; default: the recording pace, else 10 Hz')
    parser.add_argument('--loop', action='store_true', help='play again until interrupted')
    parser.add_argument('--count', type=int, default=0, help='only the first N images')
    parser.add_argument('--encoding', choices=ENCODINGS, default='keep')
    parser.add_argument('--frame-id', default='camera')
    parser.add_argument('--restamp', action='store_true', help='stamp with the current time')
    parser.add_argument('--reliability', choices=('reliable', 'best_effort'),
                        default='reliable')
    parser.add_argument('--depth', type=int, default=10, help='publisher history depth')
    parser.add_argument('--wait-subscribers', type=float, default=10.0,
                        help='seconds to wait for a subscriber before publishing')
    args, ros_args = parser.parse_known_args(argv)
    rclpy.init(args=ros_args)
    node = rclpy.create_node('xfeat_play')
    try:
        frames = load_frames(args.folder, args.encoding, args.count)
        policy = (ReliabilityPolicy.RELIABLE if args.reliability == 'reliable'
                  else ReliabilityPolicy.BEST_EFFORT)
        publisher = node.create_publisher(Image, args.topic,
                                          QoSProfile(depth=args.depth, reliability=policy))
        count = play(node, publisher, frames, args.rate, args.loop, args.restamp,
                     args.frame_id, args.wait_subscribers)
        node.get_logger().info(f'published {count} images on {publisher.topic_name}')
    except XFeatError as exc:
        node.get_logger().error(str(exc))
        return 1
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
