# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Spread and track-length metrics of a front-end's keypoints over a sequence (NumPy only).

A front-end run is a list of frames, each with its keypoints (float [N, 2]
pixels), their track ids and ages (the age of a keypoint: the frames its
track has lived so far, this one included; 1 for a new track):

* :func:`grid_coverage`: the share of the cells of a ``cols`` x ``rows`` grid
  over the image that hold at least one keypoint (8 x 6 by default);
* :func:`nearest_distances`: per keypoint the distance to its nearest other
  keypoint of the same frame (its minimum is the frame's closest pair);
* :func:`track_lengths`: per track the number of frames it lived (the frames
  its id appears in). Tracks still alive at the last frame are cut there, so
  a short run under-states long tracks alike for every front-end;
* :func:`first_frame_lifetimes`: how long the first frame's keypoints live
  (free of the late-born bias of :func:`track_lengths`);
* :func:`frame_stats` and :func:`summarize`: the per-frame record and the
  per-run summary (median and 90th percentile of track length over tracks,
  median over frames of the median keypoint age of a frame, keypoints, grid
  coverage, closest pair and 1st percentile of nearest distances, cost).
"""

import numpy as np

GRID = (8, 6)  # cells across, cells down


def _points(points):
    points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    return points[np.all(np.isfinite(points), axis=1)]


def grid_coverage(points, width, height, grid=GRID):
    """
    Return the share of non-empty cells of a ``grid`` (cols, rows) over a width x height image.

    A keypoint at x falls in column ``floor(x * cols / width)`` (clipped to the
    grid, so a point on the right or bottom edge counts in the last cell).
    No keypoints give 0.0.
    """
    cols, rows = grid
    if width <= 0 or height <= 0 or cols < 1 or rows < 1:
        raise ValueError(f'grid {grid} over a {width} x {height} image')
    points = _points(points)
    if not len(points):
        return 0.0
    col = np.clip((points[:, 0] * cols / width).astype(np.int64), 0, cols - 1)
    row = np.clip((points[:, 1] * rows / height).astype(np.int64), 0, rows - 1)
    return float(len(np.unique(row * cols + col))) / (cols * rows)


def empty_cells(points, width, height, grid=GRID):
    """Return the ``(col, row)`` cells of the grid that hold no keypoint, in row order."""
    cols, rows = grid
    points = _points(points)
    filled = set()
    if len(points):
        col = np.clip((points[:, 0] * cols / width).astype(np.int64), 0, cols - 1)
        row = np.clip((points[:, 1] * rows / height).astype(np.int64), 0, rows - 1)
        filled = set(zip(col.tolist(), row.tolist()))
    return [(c, r) for r in range(rows) for c in range(cols) if (c, r) not in filled]


def nearest_distances(points, block=1024):
    """
    Return float64 [N]: per keypoint the distance (px) to its nearest other keypoint.

    Fewer than two keypoints give an empty array. Exact (all pairs, in blocks
    of ``block`` rows).
    """
    points = _points(points)
    if len(points) < 2:
        return np.zeros(0)
    out = np.empty(len(points))
    for start in range(0, len(points), block):
        chunk = points[start:start + block]
        d2 = ((chunk[:, None, :] - points[None, :, :]) ** 2).sum(axis=2)
        d2[np.arange(len(chunk)), np.arange(start, start + len(chunk))] = np.inf
        out[start:start + len(chunk)] = np.sqrt(d2.min(axis=1))
    return out


def track_lengths(frames_ids):
    """
    Return int64 [T]: per track the number of frames it lived, in order of first sight.

    ``frames_ids``: per frame the track ids of its keypoints. An id seen twice
    in one frame is counted once for that frame.
    """
    counts = {}
    for ids in frames_ids:
        for track in np.unique(np.asarray(ids).reshape(-1)).tolist():
            counts[track] = counts.get(track, 0) + 1
    return np.fromiter(counts.values(), dtype=np.int64, count=len(counts))


def first_frame_lifetimes(frames_ids):
    """
    Return int64 [N0]: per keypoint of the first frame, the frames its track lived from there.

    Counted until the first frame that lacks the id (a track does not come
    back); a track alive at the last frame counts every frame. Comparable
    across front-ends without the bias of tracks born late in the run.
    """
    if not len(frames_ids):
        return np.zeros(0, np.int64)
    first = np.unique(np.asarray(frames_ids[0]).reshape(-1))
    alive = np.ones(len(first), dtype=bool)
    lifetimes = np.zeros(len(first), dtype=np.int64)
    for ids in frames_ids:
        alive &= np.isin(first, np.asarray(ids).reshape(-1))
        lifetimes += alive
    return lifetimes


def stat(values, fn, *args):
    """Return ``fn(values, *args)`` of the finite values as a float; None where none is."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    return float(fn(values, *args)) if len(values) else None


def frame_stats(points, ages, width, height, cost_ms=None, grid=GRID):
    """
    Return the record of one frame.

    ``keypoints``, ``grid_coverage``, ``min_distance_px`` and
    ``p1_distance_px`` (the closest pair and the 1st percentile of the
    nearest-neighbour distances; None with fewer than two keypoints),
    ``median_age`` (None without keypoints) and ``cost_ms``.
    """
    nearest = nearest_distances(points)
    return {'keypoints': int(len(_points(points))),
            'grid_coverage': grid_coverage(points, width, height, grid),
            'min_distance_px': stat(nearest, np.min),
            'p1_distance_px': stat(nearest, np.percentile, 1),
            'median_age': stat(ages, np.median),
            'cost_ms': None if cost_ms is None else float(cost_ms)}


def summarize(frames, frames_ids, skip_cost=1):
    """
    Return the summary of a run: per-frame records ``frames`` and per-frame ``frames_ids``.

    Track lengths over every track (``tracks``, ``track_length_median``,
    ``track_length_p90``, ``track_length_mean``, and the same median and 90th
    percentile over the tracks that lived two frames or more,
    ``continued_length_*``); the first frame's keypoints followed
    (:func:`first_frame_lifetimes`: ``first_frame_lifetime_median``, and
    ``first_frame_survival`` the share alive at the last frame); medians over
    frames of ``keypoints``, ``grid_coverage`` and ``median_age``; the mean coverage; the smallest
    ``min_distance_px`` of any frame and the median of the frames'
    ``p1_distance_px``; the frame cost (``cost_ms_median``, ``cost_ms_mean``)
    without the first ``skip_cost`` frames (warm-up).
    """
    lengths = track_lengths(frames_ids)
    continued = lengths[lengths >= 2]
    first = first_frame_lifetimes(frames_ids)
    costs = [f['cost_ms'] for f in frames[skip_cost:] if f['cost_ms'] is not None]

    def column(key):
        return [np.nan if f[key] is None else f[key] for f in frames]
    return {
        'frames': len(frames),
        'tracks': int(len(lengths)),
        'track_length_median': stat(lengths, np.median),
        'track_length_p90': stat(lengths, np.percentile, 90),
        'track_length_mean': stat(lengths, np.mean),
        'continued_tracks': int(len(continued)),
        'continued_length_median': stat(continued, np.median),
        'continued_length_p90': stat(continued, np.percentile, 90),
        'first_frame_lifetime_median': stat(first, np.median),
        'first_frame_survival': (float(np.mean(first == len(frames_ids)))
                                 if len(first) else None),
        'median_age': stat(column('median_age'), np.median),
        'keypoints_median': stat(column('keypoints'), np.median),
        'grid_coverage_median': stat(column('grid_coverage'), np.median),
        'grid_coverage_mean': stat(column('grid_coverage'), np.mean),
        'min_distance_px': stat(column('min_distance_px'), np.min),
        'p1_distance_px_median': stat(column('p1_distance_px'), np.median),
        'cost_ms_median': stat(costs, np.median),
        'cost_ms_mean': stat(costs, np.mean),
    }


def continuation_pairs(ids0, ids1):
    """
    Return ``(index0, index1)`` int64: keypoints of two frames on the same track.

    ``ids0`` / ``ids1`` the track ids of the previous and the current frame;
    a track id appears at most once a frame.
    """
    ids0 = np.asarray(ids0).reshape(-1)
    ids1 = np.asarray(ids1).reshape(-1)
    _, index0, index1 = np.intersect1d(ids0, ids1, assume_unique=True, return_indices=True)
    return index0.astype(np.int64), index1.astype(np.int64)


def track_ends(frames_ids, min_frames=5):
    """
    Return ``[(track id, first frame, last frame)]`` of tracks seen in ``min_frames``+ frames.

    The first and last frame index where each id appears.
    """
    first, last, seen = {}, {}, {}
    for index, ids in enumerate(frames_ids):
        for track in np.asarray(ids).reshape(-1).tolist():
            first.setdefault(track, index)
            last[track] = index
            seen[track] = seen.get(track, 0) + 1
    return [(track, first[track], last[track]) for track in first if seen[track] >= min_frames]
