# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
VINS feature clouds (VINS-Mono / VINS-Fusion ``feature`` format), as arrays.

:func:`vins_part` computes a frame's undistorted points and track
velocities; :func:`vins_columns` lays out the columns of one message, with
a stereo partner's matched right features joined in VINS-Fusion's way.
:func:`xfeat_ros.ros.messages.vins_feature_msg` turns the columns into a message.
"""

from dataclasses import dataclass

import numpy as np

from xfeat_ros.features.camera import undistort_points
from xfeat_ros.features.tracks import track_velocity
from xfeat_ros.runtime.stream import stamp_ns

VELOCITY_UNITS = ('pixels', 'normalized')
FORMATS = ('mono', 'fusion')


@dataclass
class VinsPart:
    """The feature content of one frame: float [N, 2] arrays and uint64 [N] ids."""

    normalized: object
    pixels: object
    velocity: object
    ids: object


def model_mismatch(model, shape):
    """
    Why ``model`` cannot serve an image of ``shape`` (height, width), or None.

    Returns ``'no_camera_info'`` without a model and ``'camera_info_size'``
    when the model is for another image size (a model of size 0 fits any).
    """
    if model is None:
        return 'no_camera_info'
    if model.width and (model.width, model.height) != (shape[1], shape[0]):
        return 'camera_info_size'
    return None


def vins_part(model, frame, previous, origin, units='pixels'):
    """
    Return the :class:`VinsPart` of ``frame`` (a finished Frame with track ids).

    ``previous`` the camera's previous Frame or None, ``origin`` the track
    origins of :func:`xfeat_ros.features.tracks.next_tracks`; ``units`` of the
    velocity: ``pixels`` or ``normalized`` (undistorted image coordinates) per
    second. The previous frame's undistorted points are reused when it has them.
    """
    pixels = frame.features.keypoints
    normalized = undistort_points(model, pixels)
    dt_s = 0.0
    if previous is not None:
        dt_s = (stamp_ns(frame.stamp) - stamp_ns(previous.stamp)) / 1e9
    in_pixels = units == 'pixels'
    current = pixels if in_pixels else normalized
    if previous is None:
        before = current[:0]
    elif in_pixels:
        before = previous.features.keypoints
    elif previous.vins is not None:
        before = previous.vins.normalized
    else:
        before = undistort_points(model, previous.features.keypoints)
    velocity = track_velocity(current, before, origin, dt_s)
    return VinsPart(normalized, pixels, velocity, frame.track_ids)


def vins_columns(part, fusion=False, right=None, result=None):
    """
    Lay out one feature message: ``([normalized, ids, pixels, velocity], camera_ids)``.

    ``fusion`` adds the camera_id channel (uint8 0, else None). With a stereo
    partner's :class:`VinsPart` ``right`` and the matches ``result`` left ->
    right, the matched right features join as camera 1 with the left's track
    ids (VINS-Fusion's stereo layout).
    """
    columns = [part.normalized, part.ids, part.pixels, part.velocity]
    if not fusion:
        return columns, None
    camera_ids = np.zeros(len(part.ids), dtype=np.uint8)
    if right is not None and result is not None and len(result):
        joined = [right.normalized[result.idx1], part.ids[result.idx0],
                  right.pixels[result.idx1], right.velocity[result.idx1]]
        columns = [np.concatenate([a, b]) for a, b in zip(columns, joined)]
        camera_ids = np.concatenate([camera_ids, np.ones(len(result), np.uint8)])
    return columns, camera_ids
