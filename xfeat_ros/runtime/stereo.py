# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Stereo pairs: which frames pair up, their matches, and the epipolar check.

Pairing runs where the engine runs (:class:`StereoPairing`, fed every frame
back from the engine, in order); the epipolar check and the outputs run with
the other outputs (:func:`verify_stereo`).
"""

from collections import deque
from dataclasses import dataclass

import numpy as np

from xfeat_ros.features.camera import ideal_pixels
from xfeat_ros.features.geometry import epipolar_inliers
from xfeat_ros.features.pipeline import MatchResult
from xfeat_ros.runtime.stream import stamp_ns

STEREO_WINDOW = 16  # frames per side waiting for a stereo partner


def parse_stereo_pairs(entries):
    """Return ``[(left, right)]`` of entries 'left:right', or raise ValueError."""
    pairs = []
    for entry in entries:
        names = entry.split(':') if isinstance(entry, str) else []
        if len(names) != 2 or not all(names) or names[0] == names[1]:
            raise ValueError(f"entry {entry!r} is not 'left:right' with two different cameras")
        pairs.append(tuple(names))
    used = [name for pair in pairs for name in pair]
    if len(set(used)) != len(used):
        raise ValueError(f'a camera is in more than one pair: {entries}')
    return pairs


def pair_partner(candidates, stamp, tolerance_ns):
    """
    Index of the unpaired candidate closest in time to ``stamp``, or None.

    ``candidates`` is a sequence of ``[stamp_ns, frame]`` (``frame`` None once
    paired); a candidate qualifies when ``|stamp_ns - stamp| <= tolerance_ns``.
    """
    best = None
    for index, (other, frame) in enumerate(candidates):
        gap = abs(other - stamp)
        if frame is not None and gap <= tolerance_ns and (best is None or gap < best[0]):
            best = (gap, index)
    return None if best is None else best[1]


@dataclass(eq=False)
class StereoMatch:
    """A synchronized pair: the left and right :class:`Done` frames and their matches."""

    left: object
    right: object
    result: MatchResult


class StereoPairing:
    """
    Pair frames of configured ``(left, right)`` cameras by stamp and match them.

    :meth:`offer` takes every frame back from the engine, in order: the frame
    pairs with the other side's closest unpaired frame within ``tolerance_s``
    (then :attr:`Done.stereo` of the later one holds the match), or waits in
    its side's window of the last :data:`STEREO_WINDOW` frames; one that
    leaves the window unpaired is counted ``stereo_unpaired`` on its camera.
    A frame of a camera's new timeline (its stamps jumped back) first empties
    that camera's window: its frames of the old timeline, whose stamps may
    come again (a looping bag), never pair with the other camera's new ones.
    """

    def __init__(self, pairs, tolerance_s, count):
        """``count(camera, key)`` adds to a camera's counter."""
        self.tolerance_ns = int(round(tolerance_s * 1e9))
        self.count = count
        self.side = {}    # camera -> (pair, is_left)
        self.recent = {}  # camera -> deque of [stamp_ns, Done or None once paired]
        self.timeline = {}  # camera -> the timeline of its frames in ``recent``
        for left, right in pairs:
            self.side[left] = ((left, right), True)
            self.side[right] = ((left, right), False)
            self.recent[left], self.recent[right] = deque(), deque()

    def offer(self, done, match):
        """
        Pair ``done`` if its camera is in a pair; ``match(left, right)`` matches two Done.

        Returns the :class:`StereoMatch` it completed, or None.
        """
        camera = done.item.camera
        if camera not in self.side:
            return None
        (left, right), is_left = self.side[camera]
        other = right if is_left else left
        timeline = done.item.timeline
        if self.timeline.setdefault(camera, timeline) != timeline:
            self.restart(camera)
            self.timeline[camera] = timeline
        stamp = stamp_ns(done.item.msg.header.stamp)
        waiting = self.recent[other]
        index = pair_partner(waiting, stamp, self.tolerance_ns)
        if index is None:
            mine = self.recent[camera]
            if len(mine) == STEREO_WINDOW and mine.popleft()[1] is not None:
                self.count(camera, 'stereo_unpaired')
            mine.append([stamp, done])
            return None
        partner = waiting[index][1]
        waiting[index][1] = None
        pair = (done, partner) if is_left else (partner, done)
        done.stereo = StereoMatch(*pair, match(*pair))
        return done.stereo

    def restart(self, camera):
        """Drop ``camera``'s waiting frames (its stream restarted); count the unpaired ones."""
        waiting = self.recent[camera]
        for _, frame in waiting:
            if frame is not None:
                self.count(camera, 'stereo_unpaired')
        waiting.clear()


def verify_stereo(left, right, result, models, threshold_px):
    """
    Keep the stereo matches that fit one RANSAC fundamental matrix.

    ``left``/``right`` host Features, ``models`` the two cameras'
    :class:`xfeat_ros.features.camera.CameraModel` or None: with both, the fit runs on
    undistorted pixels (lens distortion bends epipolar lines), else on raw
    pixels. Returns ``(kept MatchResult, number rejected)``.
    """
    points = [left.keypoints[result.idx0], right.keypoints[result.idx1]]
    if all(model is not None for model in models):
        points = [ideal_pixels(model, p) for model, p in zip(models, points)]
    keep = epipolar_inliers(*points, threshold_px)
    return (MatchResult(result.idx0[keep], result.idx1[keep], result.similarity[keep]),
            int(np.sum(~keep)))
