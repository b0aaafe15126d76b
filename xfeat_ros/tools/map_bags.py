# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
rosbag2 sources of ``xfeat_map``: an image topic, or an ``xfeat_offline`` bag.

An image bag streams its ``sensor_msgs/Image`` messages (header stamps, which
must increase; the bag's receive time where a header has none). The camera is
the first ``sensor_msgs/CameraInfo`` of the topic's namespace (or the bag's
only CameraInfo topic) unless intrinsics are given.

A bag written by ``xfeat_offline`` streams its ``Keypoints`` messages as
features, exactly as recorded (descriptors decoded from their wire encoding),
and its ``Matches`` (consecutive frames) are kept by stamp pair in
:attr:`Source.bag_matches` to be used as they are.
"""

import posixpath

import numpy as np

from xfeat_ros.errors import BagError, StampOrderError
from xfeat_ros.features.camera import CameraModel
from xfeat_ros.tools.bag import _rosbags
from xfeat_ros.tools.map_sources import (associate, FrameInfo, IMAGE_TYPE, INFO_TYPE, Item,
                                         KEYPOINTS_TYPE, MappingError, MATCHES_TYPE, reject,
                                         Source)


def _ns(stamp):
    """Nanoseconds of a builtin_interfaces/Time."""
    return int(stamp.sec) * 10 ** 9 + int(stamp.nanosec)


def _topics(reader):
    """{msgtype: {topic: [connections]}} of an open reader."""
    found = {}
    for connection in reader.connections:
        found.setdefault(connection.msgtype, {}).setdefault(connection.topic, []).append(
            connection)
    return found


def _near(topics, namespace, leaf):
    """Return the topic ``<namespace>/<leaf>`` of ``topics``, else the only one, else None."""
    wanted = f'{namespace}/{leaf}'
    if wanted in topics:
        return wanted
    return next(iter(topics)) if len(topics) == 1 else None


def choose_topic(found, topic, prefer_features):
    """Return ``(topic, msgtype)`` to read: ``topic`` or the first Keypoints / Image topic."""
    if topic:
        for msgtype in (IMAGE_TYPE, KEYPOINTS_TYPE):
            if topic in found.get(msgtype, {}):
                return topic, msgtype
        known = sorted(t for m in (IMAGE_TYPE, KEYPOINTS_TYPE) for t in found.get(m, {}))
        raise MappingError(f'no image or Keypoints topic {topic!r} in the bag (there are: '
                           f'{", ".join(known) or "none"})')
    order = (KEYPOINTS_TYPE, IMAGE_TYPE) if prefer_features else (IMAGE_TYPE,)
    for msgtype in order:
        if found.get(msgtype):
            return sorted(found[msgtype])[0], msgtype
    if found.get(KEYPOINTS_TYPE):
        raise MappingError('the bag has no sensor_msgs/msg/Image topic: --features sift needs '
                           'images (this bag holds xfeat_ros_msgs Keypoints)')
    raise MappingError('the bag has no sensor_msgs/msg/Image topic'
                       + ('' if not prefer_features else ' and no xfeat_ros_msgs Keypoints'))


def _first(reader, connections, msg_type):
    from rclpy.serialization import deserialize_message
    for _, _, raw in reader.messages(connections):
        return deserialize_message(raw, msg_type)
    return None


def _bag_camera(reader, found, namespace):
    from sensor_msgs.msg import CameraInfo
    infos = found.get(INFO_TYPE, {})
    name = _near(infos, namespace, 'camera_info')
    if name is None:
        return None
    info = _first(reader, infos[name], CameraInfo)
    return None if info is None else CameraModel.from_camera_info(info)


def _read_matches(reader, connections):
    """{(previous_stamp_ns, stamp_ns): (previous idx uint32 [M], current idx uint32 [M])}."""
    from rclpy.serialization import deserialize_message
    from xfeat_ros.ros.messages import message_types
    matches_type = message_types()[1]
    table = {}
    for _, timestamp, raw in reader.messages(connections):
        msg = deserialize_message(raw, matches_type)
        key = (_ns(msg.previous_stamp), _ns(msg.header.stamp) or int(timestamp))
        table[key] = (np.frombuffer(msg.previous_indices, dtype=np.uint32).copy(),
                      np.frombuffer(msg.current_indices, dtype=np.uint32).copy())
    return table


def open_bag(path, topic='', intrinsics=None, truth=None, max_frames=0, prefer_features=True):
    """Open a rosbag2 bag (image topic or xfeat_offline output) as a :class:`Source`."""
    rosbag2 = _rosbags()
    try:
        with rosbag2.Reader(path) as reader:
            found = _topics(reader)
            topic, msgtype = choose_topic(found, topic, prefer_features)
            namespace = posixpath.dirname(topic).rstrip('/')
            camera = intrinsics or _bag_camera(reader, found, namespace)
            count = sum(c.msgcount for c in found[msgtype][topic])
            matches = {}
            if msgtype == KEYPOINTS_TYPE:
                name = _near(found.get(MATCHES_TYPE, {}), namespace, 'matches')
                if name is not None:
                    matches = _read_matches(reader, found[MATCHES_TYPE][name])
    except (rosbag2.ReaderError, OSError, KeyError) as exc:
        raise BagError(f'cannot read bag {path}: {exc}') from exc
    if camera is None:
        raise MappingError(f'{path}: no CameraInfo recorded beside {topic}; give --intrinsics '
                           'FX FY CX CY (and --distortion) or --camera-yaml')
    features = msgtype == KEYPOINTS_TYPE
    kind = 'features-bag' if features else 'image-bag'
    source = Source(kind, path, {'cam0': camera}, 'cam0', None,
                    min(count, max_frames) if max_frames > 0 else count, topic=topic,
                    bag_matches=matches)
    source.produce = lambda s: _produce(s, features, truth, max_frames)
    return source


def _produce(source, features, truth, max_frames):
    """Yield the Items of a bag source (rejecting out-of-order stamps, counted)."""
    from rclpy.serialization import deserialize_message
    if features:
        from xfeat_ros.ros.messages import features_from_msg, message_types
        msg_type = message_types()[0]
    else:
        from sensor_msgs.msg import Image as msg_type
    rosbag2 = _rosbags()
    last = None
    rank = 0
    try:
        with rosbag2.Reader(source.path) as reader:
            connections = [c for c in reader.connections if c.topic == source.topic]
            for index, (_, timestamp, raw) in enumerate(reader.messages(connections)):
                if max_frames > 0 and rank >= max_frames:
                    break
                msg = deserialize_message(raw, msg_type)
                stamp = _ns(msg.header.stamp) or int(timestamp)
                frame = FrameInfo(f'{stamp}.png', 'cam0', stamp, rank, associate(stamp, truth))
                if last is not None and stamp <= last:
                    reject(source, f'#{index}', StampOrderError(
                        f'stamp {stamp} ns is not after the previous {last} ns'))
                    continue
                last = stamp
                rank += 1
                if features:
                    yield Item(frame, features=features_from_msg(msg))
                else:
                    yield Item(frame, image=msg)
    except (rosbag2.ReaderError, OSError) as exc:
        raise BagError(f'cannot read bag {source.path}: {exc}') from exc
