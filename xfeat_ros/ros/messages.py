# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Conversions between pipeline results and ROS messages (host memory)."""

import array

import numpy as np

from xfeat_ros.errors import MessagesMissingError
from xfeat_ros.features.descriptor_format import decode_descriptors, encode_descriptors
from xfeat_ros.features.pipeline import Features

BUILD_HINT = (
    'xfeat_ros_msgs is not built or not sourced. It lives inside this repository '
    '(colcon does not look inside a package), so build both packages with: '
    'colcon build --base-paths src/xfeat_ros src/xfeat_ros/xfeat_ros_msgs '
    '&& source install/setup.bash   (or, without colcon: bash scripts/setup_venv.sh '
    '&& source scripts/ros_env.sh)')


def message_types():
    """Return ``(Keypoints, Matches)`` or raise :class:`MessagesMissingError`."""
    try:
        from xfeat_ros_msgs.msg import Keypoints, Matches
    except ImportError as exc:
        raise MessagesMissingError(BUILD_HINT) from exc
    return Keypoints, Matches


def diagnostic_name(image_topic):
    """Name of the node's ``/diagnostics`` status of a camera, by its resolved image topic."""
    return f'xfeat: {image_topic}'


def status_values(status):
    """Return the key/value pairs of a ``diagnostic_msgs/DiagnosticStatus`` as a dict."""
    return {kv.key: kv.value for kv in status.values}


def camera_status_values(array, image_topic):
    """Values of the status of ``image_topic`` (resolved) in a ``DiagnosticArray``, or None."""
    for status in array.status:
        if status.name == diagnostic_name(image_topic):
            return status_values(status)
    return None


def _typed(values, dtype, typecode):
    """
    Return ``values`` as an ``array.array`` for a ROS array field.

    The generated message setters check NumPy arrays element by element in
    Python (measured here: 19 ms for 4096 x 64 descriptors); an ``array.array``
    of the field's type code is taken as it is (1 ms).
    """
    out = array.array(typecode)
    out.frombytes(np.ascontiguousarray(values, dtype=dtype).tobytes())
    return out


def _f32(values):
    return _typed(values, np.float32, 'f')


U32_CODE = 'I' if array.array('I').itemsize == 4 else 'L'


def _u32(values):
    return _typed(values, np.uint32, U32_CODE)


def keypoints_msg(header, features, tracks=None, encoding='float32'):
    """
    Return the ``xfeat_ros_msgs/Keypoints`` of :class:`Features` for the image ``header``.

    ``tracks`` is ``(track_ids uint64 [N], track_ages uint32 [N])`` from
    :func:`xfeat_ros.features.tracks.next_tracks`, or None (empty track fields).
    ``encoding`` is how the descriptors travel: ``'float32'`` (the float32
    ``descriptors`` field), ``'float16'`` or ``'int8'`` (bytes in
    ``descriptor_data``, see :mod:`xfeat_ros.features.descriptor_format`), or ``'none'``.
    """
    keypoints_type, _ = message_types()
    msg = keypoints_type()
    msg.header = header
    msg.image_height, msg.image_width = (int(v) for v in features.image_hw)
    msg.keypoints = _f32(features.keypoints)
    msg.scores = _f32(features.scores)
    msg.descriptor_size = int(features.descriptors.shape[1])
    msg.descriptor_encoding = encoding
    if encoding == 'float32':
        msg.descriptors = _f32(features.descriptors)
    elif encoding != 'none':
        msg.descriptor_data = _typed(encode_descriptors(features.descriptors, encoding),
                                     np.uint8, 'B')
    if tracks is not None:
        msg.track_ids = _typed(tracks[0], np.uint64, 'Q')
        msg.track_ages = _u32(tracks[1])
    return msg


def matches_msg(header, previous_stamp, previous, current, matches):
    """
    ``xfeat_ros_msgs/Matches`` from the previous to the current frame.

    ``matches`` is a :class:`xfeat_ros.features.pipeline.MatchResult` or None (no
    comparable previous frame: all arrays empty).
    """
    _, matches_type = message_types()
    msg = matches_type()
    msg.header = header
    msg.previous_stamp = previous_stamp
    if matches is None or len(matches) == 0:
        idx0 = idx1 = np.zeros(0, dtype=np.int64)
        sim = np.zeros(0, dtype=np.float32)
    else:
        idx0, idx1, sim = matches.idx0, matches.idx1, matches.similarity
    msg.previous_indices = _u32(idx0)
    msg.current_indices = _u32(idx1)
    msg.similarities = _f32(sim)
    msg.previous_keypoints = _f32(previous.keypoints[idx0]) if len(idx0) else _f32([])
    msg.current_keypoints = _f32(current.keypoints[idx1]) if len(idx1) else _f32([])
    return msg


def features_from_msg(msg):
    """
    :class:`Features` of a received ``Keypoints`` message, descriptors decoded to float32.

    Descriptors are float32 [N, descriptor_size] for every encoding (float16
    and int8 decoded as :func:`xfeat_ros.features.descriptor_format.decode_descriptors` does),
    and float32 [N, 0] when the message carries none (encoding ``'none'``).
    """
    dim = int(msg.descriptor_size)
    keypoints = np.frombuffer(msg.keypoints, dtype=np.float32).reshape(-1, 2)
    scores = np.frombuffer(msg.scores, dtype=np.float32)
    encoding = msg.descriptor_encoding or 'float32'
    if encoding == 'float32':
        descriptors = np.frombuffer(msg.descriptors, dtype=np.float32).reshape(-1, dim)
    elif encoding == 'none':
        descriptors = np.zeros((len(keypoints), 0), dtype=np.float32)
    else:
        descriptors = decode_descriptors(np.frombuffer(msg.descriptor_data, dtype=np.uint8),
                                         encoding, dim)
    return Features(keypoints, scores, descriptors, (msg.image_height, msg.image_width))


# x, y, z (z = 0), score, track_id, track_age: one 32-byte little-endian point.
CLOUD_DTYPE = np.dtype({'names': ['x', 'y', 'z', 'score', 'track_id', 'track_age'],
                        'formats': ['<f4', '<f4', '<f4', '<f4', '<f8', '<u4'],
                        'offsets': [0, 4, 8, 12, 16, 24], 'itemsize': 32})


def keypoint_cloud_msg(header, features, track_ids, track_ages):
    """
    ``sensor_msgs/PointCloud2`` of one frame's keypoints, for RViz.

    One point per keypoint: ``x``, ``y`` = pixel position, ``z`` = 0
    (float32), ``score`` (float32), ``track_id`` (float64: exact up to 2^53,
    PointField has no 64-bit integer) and ``track_age`` (uint32). Unorganized
    (height 1, width N), dense, little-endian, ``header`` = the image's.
    """
    from sensor_msgs.msg import PointCloud2, PointField
    points = np.zeros(len(features), dtype=CLOUD_DTYPE)
    points['x'] = features.keypoints[:, 0]
    points['y'] = features.keypoints[:, 1]
    points['score'] = features.scores
    points['track_id'] = track_ids
    points['track_age'] = track_ages
    kinds = {'<f4': PointField.FLOAT32, '<f8': PointField.FLOAT64, '<u4': PointField.UINT32}
    msg = PointCloud2()
    msg.header = header
    msg.height, msg.width = 1, len(points)
    msg.fields = [PointField(name=name, offset=CLOUD_DTYPE.fields[name][1],
                             datatype=kinds[CLOUD_DTYPE.fields[name][0].str], count=1)
                  for name in CLOUD_DTYPE.names]
    msg.is_bigendian = False
    msg.point_step = CLOUD_DTYPE.itemsize
    msg.row_step = msg.point_step * msg.width
    msg.is_dense = True
    msg.data = _typed(points.view(np.uint8), np.uint8, 'B')
    return msg


def cloud_points(msg):
    """Structured array [N] (:data:`CLOUD_DTYPE`) of a :func:`keypoint_cloud_msg` message."""
    return np.frombuffer(msg.data, dtype=CLOUD_DTYPE)


VINS_CHANNELS = ('id', 'u', 'v', 'velocity_x', 'velocity_y')
VINS_FUSION_CHANNELS = ('id', 'camera_id', 'u', 'v', 'velocity_x', 'velocity_y')


def vins_feature_msg(header, normalized, track_ids, pixels, velocity, camera_ids=None):
    """
    ``sensor_msgs/PointCloud`` in the VINS-Mono / VINS-Fusion feature-tracker format.

    ``normalized`` float [N, 2] undistorted normalized coordinates: points are
    (x, y, 1). Channels, in this order: ``id`` (track id as float32: exact up
    to 2^24), then ``camera_id`` only when ``camera_ids`` uint [N] is given
    (VINS-Fusion's layout; VINS-Mono has no such channel), ``u``, ``v``
    (``pixels`` float [N, 2]) and ``velocity_x``, ``velocity_y`` (``velocity``
    float [N, 2]). ``header`` = the image's.
    """
    from geometry_msgs.msg import Point32
    from sensor_msgs.msg import ChannelFloat32, PointCloud
    msg = PointCloud()
    msg.header = header
    msg.points = [Point32(x=x, y=y, z=1.0)
                  for x, y in np.asarray(normalized, dtype=np.float32).tolist()]
    columns = [np.asarray(track_ids, dtype=np.float64), pixels[:, 0], pixels[:, 1],
               velocity[:, 0], velocity[:, 1]]
    names = VINS_CHANNELS
    if camera_ids is not None:
        columns.insert(1, camera_ids)
        names = VINS_FUSION_CHANNELS
    msg.channels = [ChannelFloat32(name=name, values=_f32(values))
                    for name, values in zip(names, columns)]
    return msg
