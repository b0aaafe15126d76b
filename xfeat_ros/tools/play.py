# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_play``: publish an image folder or a rosbag2 image topic as a camera topic.

Understands plain folders and TUM / EuRoC layouts (see
:mod:`xfeat_ros.tools.image_files`). With timestamps in the layout, messages carry
them and are paced like the recording (``--rate`` overrides the pacing,
``--restamp`` stamps with the current time instead). Images are decoded once
up front, so the publish rate is not limited by disk or PNG decoding.

A rosbag2 bag (a directory with ``metadata.yaml``, or a ``.db3`` / ``.mcap``
file; read with ``rosbags``, see :mod:`xfeat_ros.tools.bag`) plays the images of
``--bag-topic`` (default: its first ``sensor_msgs/msg/Image`` topic) as
recorded: header, encoding and bytes unchanged, paced by the bag's recording
times. Bag images are streamed, not loaded up front. A ``sensor_msgs/msg/CompressedImage``
topic (jpeg, png) plays compressed, as recorded, on image_transport's compressed topic
of ``--topic``: its resolved name + ``/compressed`` (``image/compressed`` by default),
which the node reads with ``input_transport: compressed``.
"""

import argparse
from pathlib import Path
import sys
import time

from builtin_interfaces.msg import Time
import rclpy
from rclpy.duration import Duration
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import CompressedImage, Image

from xfeat_ros.cli import error_line, one_line_errors, stop_on_sigterm
from xfeat_ros.errors import ImageError, ParameterError, XFeatError
from xfeat_ros.features.image_codec import convert_pixels, image_msg
from xfeat_ros.ros import dds
from xfeat_ros.runtime import heap
from xfeat_ros.tools.bag import COMPRESSED_TYPE, image_topic_type, is_bag, read_images
from xfeat_ros.tools.image_files import list_sequence, read_image

ENCODINGS = ('keep', 'rgb8', 'bgr8', 'mono8')
ACK_TIMEOUT_S = 10.0


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
        pixels, enc = convert_pixels(*read_image(path), encoding)
        out.append((stamp, pixels, enc))
    return out


def wait_for_subscribers(publisher, timeout, count=1):
    """
    Wait up to ``timeout`` s until the publisher has matched ``count`` subscribers.

    Returns how many it has matched. Volatile images sent before a subscriber
    is matched never reach it, so a player feeding several subscribers (a node
    and a recorder) waits for all of them before its first image.
    """
    deadline = time.monotonic() + timeout
    while publisher.get_subscription_count() < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return publisher.get_subscription_count()


def wait_for_delivery(node, publisher, timeout=ACK_TIMEOUT_S):
    """
    Wait up to ``timeout`` s until every matched reliable reader acknowledged all samples.

    Destroying the node right after the last ``publish`` discards samples the
    writer still holds for a reader that has not acknowledged them (the last
    image was lost about every other run). Best-effort publishers return at
    once. Returns whether everything was acknowledged; a timeout is logged.
    """
    if publisher.wait_for_all_acked(Duration(nanoseconds=int(timeout * 1e9))):
        return True
    node.get_logger().warning(
        f'{publisher.topic_name}: not every subscriber acknowledged the last images '
        f'within {timeout:g} s')
    return False


def play_messages(node, publisher, source, rate=0.0, loop=False, restamp=False,
                  wait_subscribers=10.0, subscribers=1):
    """
    Publish the messages of ``source()`` on ``publisher``; return how many were published.

    Publishing starts once ``subscribers`` subscribers are matched, or after
    ``wait_subscribers`` s with a warning naming how many were.

    ``source`` returns a fresh iterable of ``(time_ns or None, msg)`` on each
    call (once per pass). ``time_ns`` paces the messages; a message keeps its
    header stamp unless ``restamp`` is set or its ``time_ns`` is None (then it
    is stamped with the current time). Pacing: ``rate`` Hz if > 0, else the
    ``time_ns`` differences, else 10 Hz.
    """
    matched = wait_for_subscribers(publisher, wait_subscribers, subscribers)
    if matched < subscribers:
        node.get_logger().warning(
            f'{publisher.topic_name}: {matched} of {subscribers} subscribers matched within '
            f'{wait_subscribers:g} s; publishing anyway (a subscriber matched later misses the '
            'images sent before)')
    published = 0
    gap = 0.0
    while rclpy.ok():
        start = first_time = None
        for index, (time_ns, msg) in enumerate(source()):
            if start is None:
                start, first_time = time.monotonic() + gap, time_ns
            if rate > 0:
                due = start + index / rate
            elif time_ns is not None and first_time is not None:
                due = start + (time_ns - first_time) / 1e9
            else:
                due = start + index / 10.0
            time.sleep(max(0.0, due - time.monotonic()))
            if restamp or time_ns is None:
                msg.header.stamp = node.get_clock().now().to_msg()
            publisher.publish(msg)
            published += 1
            if published == 1:
                # The writer counts a reader before that reader has matched the writer; a
                # sample sent in between is repaired only at the writer's next heartbeat
                # (seconds later). Acknowledged first image: both sides are matched, and
                # the pacing of the rest starts from there.
                waited = time.monotonic()
                wait_for_delivery(node, publisher)
                start += time.monotonic() - waited
        if not loop or start is None or not rclpy.ok():
            break
        gap = 1.0 / rate if rate > 0 else 0.1
        restamp = True  # a replayed recording must not repeat its stamps
    if published:
        wait_for_delivery(node, publisher)
    return published


def play(node, publisher, frames, rate=0.0, loop=False, restamp=False, frame_id='camera',
         wait_subscribers=10.0, subscribers=1):
    """
    Publish ``frames`` on ``publisher``; returns how many messages were published.

    Pacing: ``rate`` Hz if > 0, else the frames' own stamp differences, else 10 Hz.
    """
    messages = []
    for stamp, pixels, encoding in frames:
        msg = image_msg(pixels, encoding, None if stamp is None else stamp_msg(stamp),
                        frame_id)
        messages.append((stamp, msg))
    return play_messages(node, publisher, lambda: messages, rate, loop, restamp,
                         wait_subscribers, subscribers)


def play_bag(node, publisher, path, topic='', rate=0.0, loop=False, restamp=False, count=0,
             wait_subscribers=10.0, subscribers=1):
    """
    Publish the images of a bag's image ``topic`` (empty: the first one) as recorded.

    Returns how many messages were published. Pacing: ``rate`` Hz if > 0, else
    the bag's recording times.
    """
    def source():
        return ((timestamp, msg) for _, timestamp, msg in read_images(path, topic, count))
    return play_messages(node, publisher, source, rate, loop, restamp, wait_subscribers,
                         subscribers)


@one_line_errors('xfeat_play')
def main(argv=None):
    """Command-line entry point; SIGINT and SIGTERM stop it cleanly (exit 0)."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('folder', metavar='SOURCE',
                        help='image folder, TUM or EuRoC sequence, or rosbag2 bag '
                             '(directory with metadata.yaml, .db3 or .mcap file)')
    parser.add_argument('--bag-topic', default='',
                        help='image topic to play from a bag (default: its first '
                             'sensor_msgs/msg/Image topic, else its first CompressedImage '
                             'one, played compressed on <topic>/compressed)')
    parser.add_argument('--topic', default='image', help='image topic (default: image)')
    parser.add_argument('--rate', type=float, default=0.0,
                        help='Hz; default: the recording pace, else 10 Hz')
    parser.add_argument('--loop', action='store_true', help='play again until interrupted')
    parser.add_argument('--count', type=int, default=0, help='only the first N images')
    parser.add_argument('--encoding', choices=ENCODINGS, default='keep',
                        help='convert folder images (bags are always played as recorded)')
    parser.add_argument('--frame-id', default='camera',
                        help='frame_id of folder images (bags keep theirs)')
    parser.add_argument('--restamp', action='store_true', help='stamp with the current time')
    parser.add_argument('--reliability', choices=('reliable', 'best_effort'),
                        default='reliable')
    parser.add_argument('--depth', type=int, default=10, help='publisher history depth')
    parser.add_argument('--wait-subscribers', type=float, default=10.0,
                        help='seconds to wait for the subscribers before publishing')
    parser.add_argument('--subscribers', type=int, default=1,
                        help='subscribers to wait for before the first image (default 1; '
                             'e.g. 2 for a node and a recorder)')
    dds.add_profile_argument(parser)
    args, ros_args = parser.parse_known_args(argv)
    if args.subscribers < 1:
        raise ParameterError(f'--subscribers must be at least 1, got {args.subscribers}')
    bag = is_bag(args.folder)
    if bag and args.encoding != 'keep':
        parser.error('--encoding applies to image folders only; bags play as recorded')
    if not bag and not Path(args.folder).is_dir():
        what = 'does not exist' if not Path(args.folder).exists() else 'is not a folder'
        raise ImageError(f'{args.folder} {what}: give an image folder (plain, TUM or EuRoC) '
                         'or a rosbag2 bag (a directory with metadata.yaml, .db3 or .mcap)')
    try:  # before rclpy.init: Fast DDS reads its profile once per process
        dds.ros_environment(args.dds_profile, local=False)
    except XFeatError as exc:
        parser.error(str(exc))
    heap.keep_large_buffers()  # every image's buffers reused, not paged in afresh
    # SIGINT and SIGTERM raise KeyboardInterrupt here with the ROS context still
    # valid (rclpy's own handlers would invalidate it under a running publish).
    rclpy.init(args=ros_args, signal_handler_options=SignalHandlerOptions.NO)
    stop_on_sigterm()
    node = rclpy.create_node('xfeat_play')
    try:
        policy = (ReliabilityPolicy.RELIABLE if args.reliability == 'reliable'
                  else ReliabilityPolicy.BEST_EFFORT)
        msg_type, name = Image, args.topic
        if bag and image_topic_type(args.folder, args.bag_topic)[1] == COMPRESSED_TYPE:
            # as image_transport names it: the resolved image topic + /compressed
            msg_type, name = CompressedImage, node.resolve_topic_name(args.topic) + '/compressed'
        publisher = node.create_publisher(msg_type, name,
                                          QoSProfile(depth=args.depth, reliability=policy))
        if bag:
            count = play_bag(node, publisher, args.folder, args.bag_topic, args.rate,
                             args.loop, args.restamp, args.count, args.wait_subscribers,
                             args.subscribers)
        else:
            frames = load_frames(args.folder, args.encoding, args.count)
            count = play(node, publisher, frames, args.rate, args.loop, args.restamp,
                         args.frame_id, args.wait_subscribers, args.subscribers)
        node.get_logger().info(f'published {count} images on {publisher.topic_name}')
    except XFeatError as exc:
        print(error_line('xfeat_play', exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        node.get_logger().info('stopped')
    finally:
        with dds.teardown_guard():
            node.destroy_node()
            if rclpy.ok():
                rclpy.shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
