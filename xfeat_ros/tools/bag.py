# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
rosbag2 files (sqlite3 and MCAP) through the pure-Python ``rosbags`` library.

A bag is a rosbag2 directory (with ``metadata.yaml``) or a single ``.db3`` /
``.mcap`` file. Images are read as their recorded CDR bytes and deserialized
into the rclpy ``sensor_msgs/Image`` type, so header, encoding, step,
endianness and pixel bytes are exactly what was recorded (nothing is
re-encoded). An image topic may also be ``sensor_msgs/msg/CompressedImage``
(jpeg or png, image_transport's ``.../compressed`` topics): its messages are
read as recorded, still compressed. No ROS node or transport is involved.
"""

from pathlib import Path

from xfeat_ros.errors import BagError

IMAGE_TYPE = 'sensor_msgs/msg/Image'
COMPRESSED_TYPE = 'sensor_msgs/msg/CompressedImage'
IMAGE_TYPES = (IMAGE_TYPE, COMPRESSED_TYPE)
MESSAGE_TYPES = ('Keypoints', 'Matches')
BAG_SUFFIXES = ('.db3', '.mcap')
STORAGES = ('sqlite3', 'mcap')


def is_bag(path):
    """Return True if ``path`` is a rosbag2 directory or a ``.db3`` / ``.mcap`` file."""
    path = Path(path)
    if path.is_dir():
        return (path / 'metadata.yaml').is_file()
    return path.is_file() and path.suffix in BAG_SUFFIXES


def _rosbags():
    try:
        from rosbags import rosbag2
    except ImportError as exc:
        raise BagError('reading and writing bags needs the rosbags package: '
                       'pip install rosbags') from exc
    return rosbag2


def image_connections(reader, topic=''):
    """
    Return the connections of the image topic ``topic`` of an open reader.

    An empty ``topic`` picks the first ``sensor_msgs/msg/Image`` topic (by
    name), else the first ``sensor_msgs/msg/CompressedImage`` one. Raises
    :class:`BagError` when there is no such topic.
    """
    images = {}
    for connection in reader.connections:
        if connection.msgtype in IMAGE_TYPES:
            images.setdefault(connection.topic, []).append(connection)
    if not images:
        raise BagError(f'{reader.path}: no {IMAGE_TYPE} or {COMPRESSED_TYPE} topic in the bag')
    if not topic:
        topic = min(images, key=lambda t: (images[t][0].msgtype != IMAGE_TYPE, t))
    if topic not in images:
        raise BagError(f'{reader.path}: no {IMAGE_TYPE} topic {topic!r}, nor a '
                       f'CompressedImage one (image topics: {", ".join(sorted(images))})')
    return topic, images[topic]


def image_topic(path, topic=''):
    """Return the image topic ``read_images(path, topic)`` reads (checks it exists)."""
    rosbag2 = _rosbags()
    try:
        with rosbag2.Reader(path) as reader:
            return image_connections(reader, topic)[0]
    except (rosbag2.ReaderError, OSError) as exc:
        raise BagError(f'cannot read bag {path}: {exc}') from exc


def image_topic_type(path, topic=''):
    """Return ``(topic, type name)`` of the image topic ``read_images(path, topic)`` reads."""
    rosbag2 = _rosbags()
    try:
        with rosbag2.Reader(path) as reader:
            topic, connections = image_connections(reader, topic)
            return topic, connections[0].msgtype
    except (rosbag2.ReaderError, OSError) as exc:
        raise BagError(f'cannot read bag {path}: {exc}') from exc


def image_message_type(msgtype):
    """Return the rclpy class of an image type name (Image or CompressedImage)."""
    from sensor_msgs.msg import CompressedImage, Image
    return CompressedImage if msgtype == COMPRESSED_TYPE else Image


def read_images(path, topic='', count=0):
    """
    Yield ``(topic, bag_timestamp_ns, message)`` of a bag's image topic.

    ``message`` a ``sensor_msgs.msg.Image``, or a ``CompressedImage`` as
    recorded on a compressed topic. In recording order; ``count`` > 0 stops
    after that many images.
    """
    from rclpy.serialization import deserialize_message
    rosbag2 = _rosbags()
    try:
        with rosbag2.Reader(path) as reader:
            topic, connections = image_connections(reader, topic)
            msg_type = image_message_type(connections[0].msgtype)
            for index, (_, timestamp, raw) in enumerate(reader.messages(connections)):
                if count and index >= count:
                    break
                yield topic, timestamp, deserialize_message(raw, msg_type)
    except (rosbag2.ReaderError, OSError) as exc:
        raise BagError(f'cannot read bag {path}: {exc}') from exc


def read_topics(path, types):
    """
    Yield ``(topic, bag_timestamp_ns, message)`` of the topics in ``types`` (topic -> rclpy type).

    In recording order, across the topics; a topic missing from the bag is
    simply never yielded.
    """
    from rclpy.serialization import deserialize_message
    rosbag2 = _rosbags()
    try:
        with rosbag2.Reader(path) as reader:
            connections = [c for c in reader.connections if c.topic in types]
            for connection, timestamp, raw in reader.messages(connections):
                yield connection.topic, timestamp, deserialize_message(raw,
                                                                       types[connection.topic])
    except (rosbag2.ReaderError, OSError) as exc:
        raise BagError(f'cannot read bag {path}: {exc}') from exc


def topic_types(path):
    """Return ``{topic: message type name}`` of a bag."""
    rosbag2 = _rosbags()
    try:
        with rosbag2.Reader(path) as reader:
            return {c.topic: c.msgtype for c in reader.connections}
    except (rosbag2.ReaderError, OSError) as exc:
        raise BagError(f'cannot read bag {path}: {exc}') from exc


def message_definitions():
    """Return ``{'xfeat_ros_msgs/msg/Keypoints': text, ...}`` of the .msg files."""
    folders = []
    try:
        from ament_index_python.packages import get_package_share_directory
        folders.append(Path(get_package_share_directory('xfeat_ros_msgs')) / 'msg')
    except (ImportError, LookupError, ValueError, OSError):
        pass  # OSError: ROS installed but not sourced (AMENT_PREFIX_PATH unset)
    folders.append(Path(__file__).resolve().parents[1] / 'xfeat_ros_msgs' / 'msg')
    for folder in folders:
        files = [folder / f'{name}.msg' for name in MESSAGE_TYPES]
        if all(f.is_file() for f in files):
            return {f'xfeat_ros_msgs/msg/{f.stem}': f.read_text() for f in files}
    raise BagError('the xfeat_ros_msgs .msg files were not found (looked in '
                   f'{", ".join(str(f) for f in folders)})')


def typestore():
    """Return the rosbags type store of ROS 2 kilted, with xfeat_ros_msgs registered."""
    _rosbags()
    from rosbags.typesys import get_types_from_msg, get_typestore, Stores
    store = get_typestore(Stores.ROS2_KILTED)
    types = {}
    for name, text in message_definitions().items():
        types.update(get_types_from_msg(text, name))
    store.register(types)
    return store


def writer(path, storage='sqlite3'):
    """Return a new (not yet opened) rosbags ``Writer`` for ``path`` in ``storage``."""
    rosbag2 = _rosbags()
    if storage not in STORAGES:
        raise BagError(f'unknown storage {storage!r} (choose from {", ".join(STORAGES)})')
    plugin = (rosbag2.StoragePlugin.MCAP if storage == 'mcap'
              else rosbag2.StoragePlugin.SQLITE3)
    try:
        return rosbag2.Writer(path, version=8, storage_plugin=plugin)
    except rosbag2.WriterError as exc:
        raise BagError(str(exc)) from exc
