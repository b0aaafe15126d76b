# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Spread keypoints over the image, keypoints that continue a track first (host, NumPy).

With :class:`Spread` active the CPU engine detects more candidates than
``top_k`` (:data:`CANDIDATE_FACTOR` times), describes and matches them all;
once the camera's tracks are continued through the verified matches
(:meth:`xfeat_ros.runtime.stream.CameraStream.advance`), :func:`select_spread`
keeps the frame's published keypoints: first the candidates that continue a
track, oldest track first, then the new ones by descending score, each only
if no kept keypoint lies closer than ``min_distance`` pixels (and, in grid
mode, its cell of ``grid_cell_px`` pixels holds fewer than ``max_per_cell``
kept ones), up to ``top_k``. :func:`published_index` and :func:`remap_matches`
carry a frame's matches from candidate indices to published ones.
``carry_frames`` > 0 adds the keypoints of lost tracks found again in the
frame's dense descriptor map (:mod:`xfeat_ros.features.carry`) to the
candidates, as tracked ones, before the selection.
An inactive :class:`Spread` (the default) changes nothing.
"""

from dataclasses import dataclass, replace

import numpy as np

from xfeat_ros.errors import ParameterError

CANDIDATE_FACTOR = 2  # candidates detected per kept keypoint while the spread is active


@dataclass(frozen=True)
class Spread:
    """
    How a frame's keypoints are spread (the node parameters of the same names).

    ``min_distance`` pixels between any two kept keypoints (0: no radius);
    ``grid_cell_px`` / ``max_per_cell``: at most that many kept keypoints per
    square cell of that size (0: no grid; both or neither); ``carry_frames``:
    how many frames in a row a lost track may be carried through the dense
    descriptor map (0: never); ``top_k`` the cap of kept keypoints (0: none)
    and ``min_cossim`` the matching threshold, the engine's of the frame.
    """

    min_distance: float = 0.0
    grid_cell_px: int = 0
    max_per_cell: int = 0
    carry_frames: int = 0
    top_k: int = 0
    min_cossim: float = 0.0

    def __post_init__(self):
        """Refuse negative values and a grid with only one of its two settings."""
        if not self.min_distance >= 0 or self.grid_cell_px < 0 or self.max_per_cell < 0 \
                or self.carry_frames < 0 or self.top_k < 0:
            raise ParameterError(f'spread settings must be >= 0, got {self}')
        if (self.grid_cell_px > 0) != (self.max_per_cell > 0):
            raise ParameterError('grid_cell_px and max_per_cell go together: set both > 0 for '
                                 f'the grid mode, or both 0 (got {self.grid_cell_px} and '
                                 f'{self.max_per_cell})')

    @property
    def spreads(self):
        """Tell whether kept keypoints are spread out (a radius or a grid)."""
        return self.min_distance > 0 or self.grid_cell_px > 0

    @property
    def active(self):
        """Tell whether the selection changes anything (a radius, a grid or carried tracks)."""
        return self.spreads or self.carry_frames > 0

    def candidates(self, top_k):
        """Keypoints to detect for a cap of ``top_k``: more than it only when spreading."""
        return top_k * CANDIDATE_FACTOR if self.spreads else top_k

    def for_frame(self, top_k, min_cossim):
        """Return this selection with the engine's ``top_k`` and ``min_cossim`` of a frame."""
        return replace(self, top_k=int(top_k), min_cossim=float(min_cossim))


NO_SPREAD = Spread()


@dataclass(frozen=True)
class Selected:
    """
    A spread selection an engine made on its device (:mod:`xfeat_ros.features.gpu.spread`).

    ``kept`` int64 [K]: the kept candidates in placement order, as
    :func:`select_spread` returns them; ``ages`` uint32 [N]: the track age of
    each candidate it was made with, 0 for a candidate that starts a track.
    """

    kept: np.ndarray
    ages: np.ndarray

    def made_with(self, ages, tracked):
        """Tell whether it was made with these ``ages`` of the ``tracked`` candidates."""
        return np.array_equal(self.ages.astype(np.int64),
                              np.where(np.asarray(tracked, dtype=bool),
                                       np.asarray(ages, dtype=np.int64), 0))


def selection_order(scores, ages, tracked):
    """
    Candidate indices in the order they are placed (int64 [N]).

    Tracked candidates first, by descending track age (oldest first), ties by
    descending score; then the new ones by descending score. Ties left after
    that keep the candidates' order (a stable sort).
    """
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    ages = np.asarray(ages, dtype=np.float64).reshape(-1)
    tracked = np.asarray(tracked, dtype=bool).reshape(-1)
    # np.lexsort sorts by the last key first; negated keys give descending order.
    return np.lexsort((-scores, -np.where(tracked, ages, 0.0), ~tracked)).astype(np.int64)


def select_spread(keypoints, scores, ages, tracked, spread):
    """
    Return the indices (int64 [K], placement order) of the candidates a frame keeps.

    ``keypoints`` float [N, 2] (x, y) pixels, ``scores`` float [N], ``ages``
    int [N] track ages, ``tracked`` bool [N]: the candidate continues a
    verified track. Greedy in :func:`selection_order`: a candidate is kept when
    no kept one lies closer than ``spread.min_distance`` (Euclidean, strict:
    two exactly that far apart may both stay) and its grid cell is not full,
    until ``spread.top_k`` are kept.
    """
    keypoints = np.asarray(keypoints, dtype=np.float64).reshape(-1, 2)
    order = selection_order(scores, ages, tracked)
    cap = spread.top_k if spread.top_k > 0 else len(order)
    if not spread.spreads:
        return order[:cap]
    radius = float(spread.min_distance)
    grid, per_cell = spread.grid_cell_px, spread.max_per_cell
    # Python scalars in the greedy loop (NumPy scalar indexing costs more than the test).
    points = keypoints.tolist()
    near = np.floor(keypoints / radius).astype(np.int64).tolist() if radius > 0 else None
    cells = np.floor(keypoints / grid).astype(np.int64).tolist() if grid > 0 else None
    buckets = {}      # kept points by a cell of side `radius`: conflicts lie in the 3x3 around
    cell_counts = {}  # kept points by grid cell
    radius2 = radius * radius
    kept = []
    for index in order.tolist():
        if grid > 0:
            cell = tuple(cells[index])
            if cell_counts.get(cell, 0) >= per_cell:
                continue
        if radius > 0:
            x, y = points[index]
            cx, cy = near[index]
            if _conflicts(buckets, cx, cy, x, y, radius2):
                continue
            buckets.setdefault((cx, cy), []).append((x, y))
        if grid > 0:
            cell_counts[cell] = cell_counts.get(cell, 0) + 1
        kept.append(index)
        if len(kept) >= cap:
            break
    return np.asarray(kept, dtype=np.int64)


def _conflicts(buckets, cx, cy, x, y, radius2):
    """Tell whether a kept point in the 3x3 buckets around (cx, cy) is closer than the radius."""
    for bx in (cx - 1, cx, cx + 1):
        for by in (cy - 1, cy, cy + 1):
            for px, py in buckets.get((bx, by), ()):
                if (x - px) * (x - px) + (y - py) * (y - py) < radius2:
                    return True
    return False


def published_index(count, kept):
    """Map int64 [count]: each candidate's index among the kept ones, -1 where dropped."""
    index = np.full(count, -1, dtype=np.int64)
    index[np.asarray(kept, dtype=np.int64)] = np.arange(len(kept), dtype=np.int64)
    return index


def remap_matches(matches, index0=None, index1=None):
    """
    Carry a :class:`~xfeat_ros.features.pipeline.MatchResult` to kept keypoints.

    ``index0`` / ``index1`` (from :func:`published_index`, None: unchanged)
    map its first / second side; matches with a dropped end go. Returns a new
    MatchResult (its ``verified`` mask, if any, kept alongside; no engine tracks).
    """
    idx0, idx1 = matches.idx0, matches.idx1
    new0 = idx0 if index0 is None else index0[idx0]
    new1 = idx1 if index1 is None else index1[idx1]
    keep = (new0 >= 0) & (new1 >= 0)
    verified = None if matches.verified is None else np.asarray(matches.verified,
                                                                dtype=bool)[keep]
    return type(matches)(new0[keep].astype(np.int64), new1[keep].astype(np.int64),
                         matches.similarity[keep], verified)


def take_features(features, kept):
    """Return the :class:`~xfeat_ros.features.pipeline.Features` of the kept candidates."""
    kept = np.asarray(kept, dtype=np.int64)
    return type(features)(features.keypoints[kept], features.scores[kept],
                          features.descriptors[kept], features.image_hw)
