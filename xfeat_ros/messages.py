# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Conversions between pipeline results and ROS messages (host memory)."""

import array

import numpy as np

from xfeat_ros.errors import MessagesMissingError
from xfeat_ros.pipeline import Features

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


def keypoints_msg(header, features, tracks=None):
    """
    Return the ``xfeat_ros_msgs/Keypoints`` of :class:`Features` for the image ``header``.

    ``tracks`` is ``(track_ids uint64 [N], track_ages uint32 [N])`` from
    :func:`xfeat_ros.tracks.propagate_tracks`, or None (empty track fields).
    """
    keypoints_type, _ = message_types()
    msg = keypoints_type()
    msg.header = header
    msg.image_height, msg.image_width = (int(v) for v in features.image_hw)
    msg.keypoints = _f32(features.keypoints)
    msg.scores = _f32(features.scores)
    msg.descriptor_size = int(features.descriptors.shape[1])
    msg.descriptors = _f32(features.descriptors)
    if tracks is not None:
        msg.track_ids = _typed(tracks[0], np.uint64, 'Q')
        msg.track_ages = _u32(tracks[1])
    return msg


def matches_msg(header, previous_stamp, previous, current, matches):
    """
    ``xfeat_ros_msgs/Matches`` from the previous to the current frame.

    ``matches`` is a :class:`xfeat_ros.pipeline.MatchResult` or None (no
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
    """:class:`Features` of a received ``Keypoints`` message (copies nothing it need not)."""
    dim = int(msg.descriptor_size)
    keypoints = np.frombuffer(msg.keypoints, dtype=np.float32).reshape(-1, 2)
    descriptors = np.frombuffer(msg.descriptors, dtype=np.float32).reshape(-1, dim)
    scores = np.frombuffer(msg.scores, dtype=np.float32)
    return Features(keypoints, scores, descriptors, (msg.image_height, msg.image_width))


def image_msg(pixels, encoding, stamp=None, frame_id=''):
    """``sensor_msgs/Image`` from an [H, W, C] uint8/uint16 array (little-endian)."""
    from sensor_msgs.msg import Image
    msg = Image()
    if stamp is not None:
        msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(pixels.shape[0]), int(pixels.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = int(pixels.shape[1] * pixels.shape[2] * pixels.dtype.itemsize)
    little = np.ascontiguousarray(pixels).astype(pixels.dtype.newbyteorder('<'), copy=False)
    msg.data = _typed(little.view(np.uint8), np.uint8, 'B')
    return msg
