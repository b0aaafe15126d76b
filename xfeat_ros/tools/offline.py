# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_offline``: run XFeat over a bag's image topics into a new bag.

Reads the ``sensor_msgs/Image`` messages of one or more topics of a rosbag2
bag (sqlite3 or MCAP, through ``rosbags``), or the ``sensor_msgs/CompressedImage``
ones (jpeg, png) of image_transport's ``<image topic>/compressed`` topics,
decoded as the node decodes them (:mod:`xfeat_ros.features.compressed`), runs
them through the node's front-end core (:mod:`xfeat_ros.runtime`: the same
engine, scheduler, tracks and outputs) and writes, beside each image topic
``<namespace>/image...`` (a compressed one: beside its raw topic,
``/cam/image_raw/compressed`` gives ``/cam/keypoints``), the node's outputs
into a new bag, each at its source image's stamp:
``<namespace>/keypoints`` and ``<namespace>/matches`` always, and as asked
``keypoint_cloud``, ``feature`` (VINS; intrinsics from the bag's
``<namespace>/camera_info``) and, per stereo pair, the left camera's
``stereo_matches``. No node, no transport: every frame is processed, none is
dropped (frames go to the engine in groups of ``--max-frames-in-flight``).

The node's rules hold: a bad image (unknown encoding, header/data mismatch,
under 32 px, a stamp repeated or slightly earlier than the previous image's)
is rejected and counted by reason; a stamp that jumps further back (a bag of
concatenated recordings) restarts the camera's tracks; every accepted image
after the first gives a Matches against the previous accepted one, empty when
the image size changed or the stamp jumped back.
"""

import argparse
from collections import Counter
import logging
from pathlib import Path
import posixpath
import sys
import time

from xfeat_ros.cli import error_line, one_line_errors
from xfeat_ros.errors import BagError, CameraModelError, ImageError, XFeatError
from xfeat_ros.features.compressed import compressed_image_msg
from xfeat_ros.features.descriptor_format import ENCODINGS
from xfeat_ros.features.engine import expect_groups
from xfeat_ros.features.factory import add_engine_args, create_engine, engine_config
from xfeat_ros.logs import package_logger
from xfeat_ros.runtime.frontend import FrontEnd, OutputConfig
from xfeat_ros.runtime.report import reason_key, Reporter
from xfeat_ros.runtime.scheduler import Scheduler, SchedulerConfig
from xfeat_ros.runtime.stereo import StereoPairing
from xfeat_ros.runtime.stream import CameraStream, stamp_ns
from xfeat_ros.runtime.vins import FORMATS as VINS_FORMATS, VELOCITY_UNITS
from xfeat_ros.tools.bag import (COMPRESSED_TYPE, image_message_type, image_topic, is_bag,
                                 read_topics, STORAGES, topic_types, typestore, writer)

LOG = package_logger('xfeat_offline')
COMPRESSED_SUFFIX = '/compressed'
TYPES = {'keypoints': 'xfeat_ros_msgs/msg/Keypoints', 'matches': 'xfeat_ros_msgs/msg/Matches',
         'stereo_matches': 'xfeat_ros_msgs/msg/Matches',
         'keypoint_cloud': 'sensor_msgs/msg/PointCloud2', 'feature': 'sensor_msgs/msg/PointCloud'}


def output_topic(topic, name):
    """
    Return the output ``name`` beside the image ``topic`` (same namespace).

    A compressed topic ``<image>/compressed``: beside ``<image>``.
    """
    return f'{posixpath.dirname(topic.removesuffix(COMPRESSED_SUFFIX)).rstrip("/")}/{name}'


def output_topics(topic):
    """Return ``(keypoints, matches)`` topics beside the image ``topic``."""
    return output_topic(topic, 'keypoints'), output_topic(topic, 'matches')


class BagSink:
    """The front-end's sink into a bag writer: one connection per output topic."""

    def __init__(self, out, cameras, config, counts):
        """Add the connections of ``cameras`` (image topics) to the open writer ``out``."""
        from rclpy.serialization import serialize_message
        self.serialize = serialize_message
        self.out = out
        self.config = config
        self.counts = counts
        self.times = {}  # id(image header) -> bag time, for the images without a stamp
        store = typestore()
        names = ['keypoints', 'matches']
        if config.keypoint_cloud:
            names.append('keypoint_cloud')
        if config.vins_features:
            names.append('feature')
        self.connections = {}
        for camera in cameras:
            for name in names:
                self._connect(camera, name, store)
        for left, _ in config.pairs:
            self._connect(left, 'stereo_matches', store)

    def _connect(self, camera, name, store):
        self.connections[camera, name] = self.out.add_connection(
            output_topic(camera, name), TYPES[name], typestore=store)

    def _write(self, camera, name, header, msg):
        when = stamp_ns(header.stamp) or self.times[id(header)]
        self.out.write(self.connections[camera, name], when, self.serialize(msg))

    def topic_name(self, camera, name):
        """Return the topic of output ``name`` of ``camera`` (its image topic for 'image')."""
        return camera if name == 'image' else output_topic(camera, name)

    def publish_keypoints(self, out):
        """Write a frame's Keypoints."""
        from xfeat_ros.ros.messages import keypoints_msg
        frame = out.frame
        self._write(out.camera, 'keypoints', frame.header, keypoints_msg(
            frame.header, frame.features, (frame.track_ids, frame.track_ages),
            self.config.descriptor_encoding))
        self.counts['frames'] += 1
        self.counts['keypoints'] += len(frame.features)

    def publish_matches(self, out):
        """Write a frame's Matches (none after the camera's first frame)."""
        from xfeat_ros.ros.messages import matches_msg
        frame = out.frame
        if out.previous is not None:
            self._write(out.camera, 'matches', frame.header, matches_msg(
                frame.header, out.previous.stamp, out.previous.features, frame.features,
                out.matches))
            self.counts['matches'] += 1
            self.counts['matched'] += 0 if out.matches is None else len(out.matches)

    def publish_cloud(self, out):
        """Write a frame's keypoint cloud."""
        from xfeat_ros.ros.messages import keypoint_cloud_msg
        frame = out.frame
        self._write(out.camera, 'keypoint_cloud', frame.header, keypoint_cloud_msg(
            frame.header, frame.features, frame.track_ids, frame.track_ages))

    def publish_feature(self, camera, header, columns, camera_ids):
        """Write one VINS feature message."""
        from xfeat_ros.ros.messages import vins_feature_msg
        self._write(camera, 'feature', header,
                    vins_feature_msg(header, *columns, camera_ids=camera_ids))

    def publish_stereo(self, left_camera, left, right, result):
        """Write a stereo pair's matches (stamped with the right image)."""
        from xfeat_ros.ros.messages import matches_msg
        self._write(left_camera, 'stereo_matches', right.header,
                    matches_msg(right.header, left.stamp, left.features, right.features, result))

    def wants_debug(self, camera):
        """Tell whether to render debug pictures: never offline."""
        return False

    def publish_debug(self, out, canvas):
        """Never called (see :meth:`wants_debug`)."""


def camera_topics(input_bag, topics):
    """Return the image topics to process (default: the bag's first image topic)."""
    topics = list(topics) or ['']
    chosen = [image_topic(input_bag, topic) for topic in topics]
    if len(set(chosen)) != len(chosen):
        raise BagError(f'an image topic is given twice: {chosen}')
    namespaces = [output_topic(topic, '') for topic in chosen]
    if len(set(namespaces)) != len(namespaces):
        raise BagError(f'image topics {chosen} share a namespace: their outputs would mix')
    return chosen


def process_bag(engine, input_bag, output_bag, topics=(), storage='sqlite3',
                outputs=OutputConfig(), scheduling=SchedulerConfig(), config=None):
    """
    Run ``engine`` over the images of ``topics`` of ``input_bag`` into ``output_bag``.

    ``outputs`` and ``scheduling`` are the node's output and scheduler
    settings (:class:`OutputConfig`, :class:`SchedulerConfig`); ``config`` the
    :class:`xfeat_ros.features.engine.EngineConfig` a CPU fallback is built from.
    Returns a Counter: ``frames``, ``keypoints``, ``matches`` (messages),
    ``matched`` (pairs), ``matches_empty_size_change``, ``rejected`` and
    ``rejected_<Reason>`` (and the other per-camera counters, summed), plus
    ``topic`` (the image topics read).
    """
    from sensor_msgs.msg import CameraInfo
    from xfeat_ros.features.camera import CameraModel
    cameras = camera_topics(input_bag, [topics] if isinstance(topics, str) else topics)
    unknown = {c for pair in outputs.pairs for c in pair} - set(cameras)
    if unknown:
        raise BagError(f'stereo pairs name topics that are not processed: {sorted(unknown)}')
    available = topic_types(input_bag)
    info = {output_topic(c, 'camera_info'): c for c in cameras
            if outputs.needs_camera_model(c)
            and available.get(output_topic(c, 'camera_info')) == 'sensor_msgs/msg/CameraInfo'}
    streams = {camera: CameraStream(camera) for camera in cameras}
    report = Reporter(LOG)
    counts = Counter()
    stereo = None
    if outputs.pairs:
        stereo = StereoPairing(outputs.pairs, outputs.stereo_sync_tolerance_s,
                               lambda camera, key: streams[camera].count(key))
    scheduler = Scheduler(engine, streams, scheduling, config, report, stereo)
    # groups here are max_frames_in_flight frames of the bag, whatever the cameras
    expect_groups(engine, scheduling.max_frames_in_flight)
    scheduler.on_reject = lambda item, exc: _log_reject(report, item.camera, exc)
    out = writer(output_bag, storage)
    with out:
        sink = BagSink(out, cameras, outputs, counts)
        frontend = FrontEnd(streams, outputs, sink, report)
        group = []

        def run(group):
            for done in scheduler.process(group):
                frontend.finish(done)
            group.clear()
        types = {**{c: image_message_type(available[c]) for c in cameras},
                 **{t: CameraInfo for t in info}}
        parse = {c: compressed_image_msg if available[c] == COMPRESSED_TYPE else None
                 for c in cameras}
        for topic, timestamp, msg in read_topics(input_bag, types):
            if topic in info:
                try:
                    streams[info[topic]].camera_model = CameraModel.from_camera_info(msg)
                except CameraModelError as exc:
                    streams[info[topic]].count('camera_info_rejected')
                    report.error(f'{topic}: {exc}', key=(topic, 'camera_info'))
                continue
            try:
                item = streams[topic].accept(msg, time.monotonic(), parse[topic])
            except ImageError as exc:
                _log_reject(report, topic, exc)
                continue
            if not stamp_ns(msg.header.stamp):
                sink.times[id(msg.header)] = timestamp
            group.append(item)
            if len(group) >= scheduling.max_frames_in_flight:
                run(group)
        run(group)
        frontend.flush()
    for stream in streams.values():
        counts.update(stream.counts())
    counts['topic'] = ', '.join(cameras)
    return counts


def _log_reject(report, topic, exc):
    report.warning(f'{topic}: rejected image: {exc}', key=(topic, reason_key(exc)), period_s=2.0)


def summary(counts):
    """Return the one-line summary of :func:`process_bag`'s counts."""
    rejected = ', '.join(f'{k[len("rejected_"):]}: {v}' for k, v in sorted(counts.items())
                         if k.startswith('rejected_') and k != 'rejected_late')
    extra = ', '.join(f'{counts[k]} {k.replace("_", " ")}' for k in
                      ('stereo_matches_published', 'feature_skipped_no_camera_info',
                       'stamp_jumps_back')
                      if counts[k])
    return (f'{counts["topic"]}: {counts["frames"]} frames, '
            f'{counts["keypoints"]} keypoints, {counts["matches"]} matches messages '
            f'({counts["matched"]} matched pairs, {counts["matches_empty_size_change"]} '
            f'empty after a size change), {counts["rejected"]} rejected'
            + (f' ({rejected})' if rejected else '') + (f', {extra}' if extra else ''))


def build_parser():
    """Return the command line of ``xfeat_offline``."""
    defaults, scheduling = OutputConfig(), SchedulerConfig()
    parser = argparse.ArgumentParser(prog='xfeat_offline',
                                     description=__doc__.split('\n\n')[0].strip())
    parser.add_argument('input_bag', help='rosbag2 bag: directory, .db3 or .mcap file')
    parser.add_argument('output_bag', help='new bag directory to write (must not exist)')
    parser.add_argument('--topic', action='append', default=[],
                        help='image topic, repeatable: one camera each (default: the first '
                             'sensor_msgs/msg/Image topic, else the first CompressedImage '
                             'one: jpeg, png)')
    parser.add_argument('--storage', choices=STORAGES, default='sqlite3',
                        help='output storage (default: sqlite3)')
    add_engine_args(parser)
    parser.add_argument('--max-frames-in-flight', type=int,
                        default=scheduling.max_frames_in_flight,
                        help='frames per engine group (default %(default)s)')
    outputs = parser.add_argument_group('outputs (the node parameters of the same names)')
    outputs.add_argument('--descriptor-encoding', choices=ENCODINGS + ('none',),
                         default=defaults.descriptor_encoding,
                         help='descriptors in the Keypoints messages (none = '
                              'publish_descriptors false)')
    outputs.add_argument('--keypoint-cloud', action='store_true',
                         help='write <namespace>/keypoint_cloud (PointCloud2)')
    outputs.add_argument('--vins-features', action='store_true',
                         help="write <namespace>/feature (VINS); intrinsics from the bag's "
                              '<namespace>/camera_info')
    outputs.add_argument('--vins-format', choices=VINS_FORMATS, default=defaults.vins_format)
    outputs.add_argument('--vins-velocity-units', choices=VELOCITY_UNITS,
                         default=defaults.vins_velocity_units)
    outputs.add_argument('--stereo', action='append', default=[], metavar='LEFT:RIGHT',
                         help="a stereo pair of image topics, matched into the left's "
                              '<namespace>/stereo_matches (repeatable)')
    outputs.add_argument('--stereo-sync-tolerance-s', type=float,
                         default=defaults.stereo_sync_tolerance_s)
    outputs.add_argument('--stereo-epipolar-check-px', type=float,
                         default=defaults.stereo_epipolar_check_px)
    return parser


@one_line_errors('xfeat_offline')
def main(argv=None):
    """Command-line entry point."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='[%(name)s] %(levelname)s: %(message)s')
    try:
        outputs = OutputConfig(args.descriptor_encoding, args.keypoint_cloud,
                               args.vins_features, args.vins_format, args.vins_velocity_units,
                               tuple(args.stereo), args.stereo_sync_tolerance_s,
                               args.stereo_epipolar_check_px)
        try:
            outputs.pairs
        except ValueError as exc:
            raise BagError(f'--stereo: {exc}') from exc
        if not is_bag(args.input_bag):
            raise BagError(f'{args.input_bag} is not a rosbag2 bag (a directory with '
                           'metadata.yaml, a .db3 or an .mcap file)')
        if Path(args.output_bag).exists():
            raise BagError(f'{args.output_bag} exists already; give a new path')
        config = engine_config(args)
        engine = create_engine(config, LOG)
        LOG.info('engine %s on %s', engine.name, engine.device)
        counts = process_bag(engine, args.input_bag, args.output_bag, args.topic, args.storage,
                             outputs, SchedulerConfig(args.max_frames_in_flight), config)
    except (XFeatError, ImportError) as exc:
        print(error_line('xfeat_offline', exc), file=sys.stderr)  # no logging: may not propagate
        return 1
    sys.stdout.write(summary(counts) + f' -> {args.output_bag}\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
