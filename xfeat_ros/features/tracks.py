# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Persistent track ids across frames of one camera (host, NumPy).

A keypoint matched to the previous frame inherits that keypoint's id and its
age + 1; an unmatched keypoint starts a new track (age 1) with the next id of
the camera's counter, so ids are unique per camera and increase monotonically.
Only matches that agree with the frame pair's epipolar geometry (a RANSAC
fundamental matrix) carry a track on: a wrong match must not make an id jump
across the image. The CPU path fits it with OpenCV
(:func:`xfeat_ros.features.geometry.epipolar_inliers`); the GPU path fits it on the
device right after matching (:class:`xfeat_ros.features.gpu.ransac.EpipolarRansac`,
host reference :mod:`xfeat_ros.features.ransac`) and hands the mask to :func:`next_tracks`.
An armed GPU frame has its ids continued on the device as well
(``kernels/tracks.cu``, this module's :func:`propagate_tracks` its reference):
:func:`continued_tracks` takes them where they were made from the camera's
current state.
"""

import numpy as np

from xfeat_ros.features.geometry import epipolar_inliers


def propagate_tracks(count, next_id, previous_ids=None, previous_ages=None, idx0=None,
                     idx1=None):
    """
    Assign track ids and ages to ``count`` current keypoints.

    ``previous_ids`` uint64 [N0] / ``previous_ages`` uint32 [N0] belong to the
    previous frame (None: no previous frame); ``idx0``/``idx1`` int [M] are the
    matches previous -> current. New ids are taken in keypoint order from
    ``next_id``. Returns ``(ids uint64 [count], ages uint32 [count], next_id)``.
    """
    ids = np.zeros(count, dtype=np.uint64)
    ages = np.ones(count, dtype=np.uint32)
    inherited = np.zeros(count, dtype=bool)
    if previous_ids is not None and idx0 is not None and len(idx0):
        idx0 = np.asarray(idx0, dtype=np.int64)
        idx1 = np.asarray(idx1, dtype=np.int64)
        ids[idx1] = previous_ids[idx0]
        ages[idx1] = previous_ages[idx0] + 1
        inherited[idx1] = True
    fresh = np.nonzero(~inherited)[0]
    ids[fresh] = np.arange(next_id, next_id + len(fresh), dtype=np.uint64)
    return ids, ages, int(next_id + len(fresh))


def next_tracks(features, next_id, previous=None, matches=None, verified=None):
    """
    Track ids and ages of a frame's ``features`` after matching it to ``previous``.

    ``previous`` holds ``features``, ``track_ids`` and ``track_ages`` of the last
    frame (None: none); ``matches`` is its :class:`xfeat_ros.features.pipeline.MatchResult`
    (None: not comparable). Only epipolar-verified matches continue a track:
    ``verified`` bool [M] is the mask of a check already made (the GPU
    engine's), None runs :func:`epipolar_inliers` here.
    Returns ``(ids uint64 [N], ages uint32 [N], next_id, origin int64 [N])``:
    ``origin`` is the index of the keypoint in the previous frame a track comes
    from, -1 for a new track.
    """
    origin = np.full(len(features), -1, dtype=np.int64)
    if previous is None or matches is None:
        return (*propagate_tracks(len(features), next_id), origin)
    if verified is None:
        verified = epipolar_inliers(previous.features.keypoints[matches.idx0],
                                    features.keypoints[matches.idx1])
    else:
        verified = np.asarray(verified, dtype=bool).reshape(-1)
        if len(verified) != len(matches):
            raise ValueError(f'verified mask has {len(verified)} entries for '
                             f'{len(matches)} matches')
    idx0, idx1 = matches.idx0[verified], matches.idx1[verified]
    origin[idx1] = idx0
    return (*propagate_tracks(len(features), next_id, previous.track_ids, previous.track_ages,
                              idx0, idx1), origin)


def continued_tracks(matches, previous, next_id):
    """
    Return the engine's track ids for a frame, where made from this camera's state; else None.

    ``matches.tracks`` (a :class:`xfeat_ros.features.pipeline.ContinuedTracks`) counts
    only if it was made from ``previous`` (the Frame whose tracks the engine
    was given) and ``next_id``: then it equals what :func:`next_tracks` would
    return. Returns ``(ids, ages, next_id)``.
    """
    made = getattr(matches, 'tracks', None)
    if made is None or previous is None or made.made_from[0] is not previous:
        return None
    if made.made_from[1] != next_id:
        return None
    return made.ids, made.ages, made.next_id


def track_origin(count, matches):
    """
    ``origin`` int64 [count] of a frame whose ``matches`` carry their verified mask.

    The index in the previous frame each keypoint's track comes from, -1 for
    a new track (as :func:`next_tracks` returns it).
    """
    origin = np.full(count, -1, dtype=np.int64)
    if matches is not None and matches.verified is not None and len(matches):
        verified = np.asarray(matches.verified, dtype=bool).reshape(-1)
        origin[matches.idx1[verified]] = matches.idx0[verified]
    return origin


def prepare_host_check(engine):
    """
    Load OpenCV now if ``engine`` leaves the tracks' epipolar check to the host.

    An engine without a check of its own (the CPU engine; the GPU engine has
    ``epipolar`` true) has :func:`next_tracks` fit it with OpenCV, whose
    import (~25 ms on the CPU machine, under the interpreter lock) would
    otherwise stall the node at its first matched frame. Returns whether it did.
    """
    if engine.capabilities.epipolar:
        return False
    import cv2  # noqa: F401 - imported for its side effect: loaded before the first frame
    return True


def track_velocity(pixels, previous_pixels, origin, dt_s):
    """
    Image velocity of each tracked keypoint, in (units of ``pixels``) per second.

    ``pixels`` float [N, 2] of the current frame, ``previous_pixels`` float [N0, 2]
    of the previous one, ``origin`` int [N] from :func:`next_tracks`. New tracks
    (origin -1) and a non-positive ``dt_s`` give zero. Returns float32 [N, 2].
    """
    velocity = np.zeros((len(pixels), 2), dtype=np.float32)
    tracked = np.nonzero(np.asarray(origin) >= 0)[0]
    if dt_s > 0 and len(tracked):
        moved = np.asarray(pixels)[tracked] - np.asarray(previous_pixels)[origin[tracked]]
        velocity[tracked] = moved / dt_s
    return velocity
