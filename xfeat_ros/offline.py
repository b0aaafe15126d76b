# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_offline``: run XFeat over a bag's image topic into a new bag.

Reads the ``sensor_msgs/Image`` messages of one topic of a rosbag2 bag
(sqlite3 or MCAP, through ``rosbags``), runs them through the same engine as
the node (:func:`xfeat_ros.node.create_engine`) and writes
``<topic namespace>/keypoints`` and ``<topic namespace>/matches``
(xfeat_ros_msgs/Keypoints and Matches, the node's messages, CDR-serialized by
rclpy) into a new bag, each at its source image's stamp. No node, no
transport: every frame is processed, none is dropped.

The node's rules hold: a bad image (unknown encoding, header/data mismatch,
under 32 px, a stamp not later than the previous image's) is rejected and
counted by reason; every accepted image after the first gives a Matches
against the previous accepted one, empty when the image size changed.
"""

import argparse
from collections import Counter
import logging
from pathlib import Path
import posixpath
import sys

from xfeat_ros.bag import image_topic, is_bag, read_images, STORAGES, typestore, writer
from xfeat_ros.cli import error_line, one_line_errors
from xfeat_ros.encoding import ENCODINGS
from xfeat_ros.errors import BagError, ImageError, XFeatError
from xfeat_ros.messages import keypoints_msg, matches_msg
from xfeat_ros.node import check_image, Frame
from xfeat_ros.tracks import next_tracks

LOG = logging.getLogger('xfeat_offline')
KEYPOINTS_TYPE = 'xfeat_ros_msgs/msg/Keypoints'
MATCHES_TYPE = 'xfeat_ros_msgs/msg/Matches'
BACKENDS = ('auto', 'onnxruntime', 'pytorch', 'tensorrt', 'onnxruntime_cuda')


def output_topics(topic):
    """Return ``(keypoints, matches)`` topics beside the image ``topic`` (same namespace)."""
    namespace = posixpath.dirname(topic).rstrip('/')
    return f'{namespace}/keypoints', f'{namespace}/matches'


def process_bag(engine, input_bag, output_bag, topic='', storage='sqlite3',
                descriptor_encoding='float32'):
    """
    Run ``engine`` over the images of ``topic`` of ``input_bag`` into ``output_bag``.

    One frame at a time on the engine contract (submit, submit_match against
    the previous accepted frame of equal size, synchronize, read back).
    Returns a Counter: ``frames``, ``keypoints``, ``matches`` (messages),
    ``matched`` (pairs), ``matches_empty_size_change``, ``rejected`` and
    ``rejected_<Reason>``, plus the ``topic`` read. ``descriptor_encoding``
    is the node parameter of that name (float32, float16, int8 or none).
    """
    from rclpy.serialization import serialize_message
    counts = Counter()
    slots = [engine.alloc_slot(), engine.alloc_slot()]  # current and previous
    previous = None
    next_id = 0
    last_stamp = 0
    topic = counts['topic'] = image_topic(input_bag, topic)
    store = typestore()
    out = writer(output_bag, storage)
    with out:
        connections = [out.add_connection(name, msgtype, typestore=store)
                       for name, msgtype in zip(output_topics(topic),
                                                (KEYPOINTS_TYPE, MATCHES_TYPE))]
        for _, timestamp, msg in read_images(input_bag, topic):
            counts['received'] += 1
            slot = slots[counts['frames'] % 2]
            try:
                stamp = check_image(msg, last_stamp)
                engine.submit(msg, slot)
            except ImageError as exc:
                counts['rejected'] += 1
                counts[f'rejected_{type(exc).__name__}'] += 1
                LOG.warning('%s: rejected image %d: %s', topic, counts['received'], exc)
                continue
            if stamp:
                last_stamp = stamp
            shape = (msg.height, msg.width)
            comparable = previous is not None and previous.shape == shape
            if comparable:
                engine.submit_match(previous.slot, slot)
            engine.synchronize()
            features = engine.features(slot)
            when = stamp or timestamp
            matched = engine.matches(slot) if comparable else None
            ids, ages, next_id, _ = next_tracks(features, next_id, previous, matched)
            out.write(connections[0], when, serialize_message(
                keypoints_msg(msg.header, features, (ids, ages), descriptor_encoding)))
            counts['frames'] += 1
            counts['keypoints'] += len(features)
            if previous is not None:
                matches = matched
                if not comparable:
                    counts['matches_empty_size_change'] += 1
                    LOG.warning('%s: image size changed from %s to %s; wrote empty matches',
                                topic, previous.shape, shape)
                out.write(connections[1], when, serialize_message(
                    matches_msg(msg.header, previous.stamp, previous.features, features,
                                matches)))
                counts['matches'] += 1
                counts['matched'] += len(matches) if matches is not None else 0
            previous = Frame(msg.header.stamp, features, slot, shape, ids, ages)
    return counts


def summary(counts):
    """Return the one-line summary of :func:`process_bag`'s counts."""
    rejected = ', '.join(f'{k[len("rejected_"):]}: {v}' for k, v in sorted(counts.items())
                         if k.startswith('rejected_'))
    return (f'{counts["topic"]}: {counts["frames"]} frames, '
            f'{counts["keypoints"]} keypoints, {counts["matches"]} matches messages '
            f'({counts["matched"]} matched pairs, {counts["matches_empty_size_change"]} '
            f'empty after a size change), {counts["rejected"]} rejected'
            + (f' ({rejected})' if rejected else ''))


@one_line_errors('xfeat_offline')
def main(argv=None):
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip())
    parser.add_argument('input_bag', help='rosbag2 bag: directory, .db3 or .mcap file')
    parser.add_argument('output_bag', help='new bag directory to write (must not exist)')
    parser.add_argument('--topic', default='',
                        help='image topic (default: the first sensor_msgs/msg/Image topic)')
    parser.add_argument('--storage', choices=STORAGES, default='sqlite3',
                        help='output storage (default: sqlite3)')
    parser.add_argument('--backend', choices=BACKENDS, default='auto',
                        help='as the node: auto tries the GPU engines, then the CPU')
    parser.add_argument('--weights', default='',
                        help='weights .pt/.npz (default: $XFEAT_ROS_WEIGHTS, cache, packaged)')
    parser.add_argument('--gpu', type=int, default=0, help='CUDA device for GPU backends')
    parser.add_argument('--num-threads', type=int, default=0,
                        help='ONNX Runtime CPU threads (0: its default)')
    parser.add_argument('--top-k', type=int, default=4096, help='keypoints per image')
    parser.add_argument('--threshold', type=float, default=0.05,
                        help='heatmap detection threshold')
    parser.add_argument('--min-cossim', type=float, default=0.82,
                        help='matches need cosine above this (<= 0: no filter)')
    parser.add_argument('--descriptor-encoding', choices=ENCODINGS + ('none',),
                        default='float32',
                        help='descriptors in the Keypoints messages (node parameter '
                             'descriptor_encoding; none = publish_descriptors false)')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='[%(name)s] %(levelname)s: %(message)s')
    from xfeat_ros.node import create_engine
    try:
        if not is_bag(args.input_bag):
            raise BagError(f'{args.input_bag} is not a rosbag2 bag (a directory with '
                           'metadata.yaml, a .db3 or an .mcap file)')
        if Path(args.output_bag).exists():
            raise BagError(f'{args.output_bag} exists already; give a new path')
        engine = create_engine(args.backend, args.weights, args.gpu, args.num_threads,
                               args.top_k, args.threshold, args.min_cossim, LOG)
        LOG.info('engine %s on %s', engine.name, getattr(engine, 'device', 'cpu'))
        counts = process_bag(engine, args.input_bag, args.output_bag, args.topic,
                             args.storage, args.descriptor_encoding)
    except (XFeatError, ImportError) as exc:
        print(error_line('xfeat_offline', exc), file=sys.stderr)  # no logging: may not propagate
        return 1
    sys.stdout.write(summary(counts) + f' -> {args.output_bag}\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
