# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Carry lost tracks forward through the dense descriptor map (host, NumPy).

XFeat's detections repeat poorly from frame to frame: a frame continues about
a third of the previous frame's keypoints (docs/design-notes.md), so most
tracks end after one or two frames although the point is still in view. The
backbone's descriptor map describes every position, detected or not. With
``carry_frames`` > 0 a keypoint of the previous frame whose track the
verified matches did not continue is looked for in the current frame's map
(:func:`carry_tracks`):

1. its position is predicted by the median flow of its nearest verified
   matches (:func:`predict_positions`);
2. the descriptor is sampled at every whole-pixel offset within
   ``radius`` pixels of the prediction, exactly as detected keypoints are
   described (bicubic, unit length: :func:`window_descriptors`), and the
   best cosine similarity to the keypoint's descriptor wins;
3. the found position is kept when the similarity reaches ``min_cossim``,
   the peak lies inside the window (not on its edge), and it agrees with
   the fundamental matrix of the verified matches within
   ``epipolar_px`` (:func:`xfeat_ros.features.ransac.fundamental_inliers`);
4. the found positions are taken best first, each at least
   ``separation_px`` from the tracked detections and the other carried
   ones; one that lands that close to a detection no track continues hands
   its track to that detection instead (the track is detected again).

A carried keypoint takes the found position and the descriptor sampled
there; the stream counts how many frames in a row a track was carried and
stops at ``carry_frames``.
"""

from dataclasses import dataclass

import numpy as np

from xfeat_ros.features.geometry import fit_fundamental
from xfeat_ros.features.postprocess import cubic_weights, l2_normalize, sample_coords
from xfeat_ros.features.ransac import fundamental_inliers

CARRY_RADIUS_PX = 8          # search window half-size around the predicted position
CARRY_MIN_COSSIM = 0.85      # similarity a carried position must reach
CARRY_EPIPOLAR_PX = 1.5      # distance to the epipolar line of the frame pair's F
CARRY_SEPARATION_PX = 3.0    # from tracked detections and other carried keypoints
FLOW_NEIGHBOURS = 8          # verified matches whose median flow predicts a position
_CHUNK = 128                 # lost keypoints sampled at once (bounds the window arrays)


@dataclass(frozen=True)
class DenseMap:
    """
    A frame's dense descriptor map, to describe any position of the image.

    ``feats`` float32 [C, h, w], unit length per cell (the backbone's
    descriptor map, normalised as detection normalises it); ``model_hw`` the
    model image's (height, width); ``scale`` (rw, rh) original pixels per
    model pixel.
    """

    feats: np.ndarray
    model_hw: tuple
    scale: tuple


@dataclass
class Carried:
    """
    What :func:`carry_tracks` found.

    ``source`` int64 [K]: index in the previous frame of each carried
    keypoint, ``keypoints`` float32 [K, 2] its pixels in the current frame,
    ``descriptors`` float32 [K, C], ``similarity`` float32 [K];
    ``snapped_source`` / ``snapped_target`` int64 [S]: lost keypoints of the
    previous frame found on a current detection that no track continued.
    """

    source: np.ndarray
    keypoints: np.ndarray
    descriptors: np.ndarray
    similarity: np.ndarray
    snapped_source: np.ndarray
    snapped_target: np.ndarray

    @classmethod
    def empty(cls, channels):
        """Nothing carried, arrays shaped for ``channels``-wide descriptors."""
        none = np.zeros(0, dtype=np.int64)
        return cls(none, np.zeros((0, 2), np.float32), np.zeros((0, channels), np.float32),
                   np.zeros(0, np.float32), none, none.copy())

    def __len__(self):
        """Return the number of carried keypoints (snapped ones not included)."""
        return int(self.source.shape[0])


def predict_positions(points, source, target, neighbours=FLOW_NEIGHBOURS):
    """
    Predicted pixels float64 [L, 2] of ``points`` [L, 2]: each moved by its neighbours' flow.

    ``source`` / ``target`` float [M, 2]: the verified matches' previous and
    current pixels; a point moves by the median flow of its ``neighbours``
    nearest sources (all of them where fewer), not at all where M is 0.
    """
    points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    source = np.asarray(source, dtype=np.float64).reshape(-1, 2)
    if not len(source) or not len(points):
        return points.copy()
    flow = np.asarray(target, dtype=np.float64).reshape(-1, 2) - source
    distance = np.linalg.norm(points[:, None, :] - source[None, :, :], axis=2)
    count = min(neighbours, len(source))
    nearest = np.argpartition(distance, count - 1, axis=1)[:, :count]
    return points + np.median(flow[nearest], axis=1)


def _axis_taps(coords, size):
    """
    Bicubic taps of map coordinates along one axis, as a small dense matrix.

    ``coords`` float32 [L, S], increasing along S, on a map of ``size`` cells.
    Returns ``(index int64 [L, T], weights float32 [L, S, T])``: the T cells
    each row reads, as indices into the map with a one-cell zero border
    (:func:`xfeat_ros.features.postprocess.zero_bordered_hwc`), clipped onto
    that border as :func:`~xfeat_ros.features.postprocess.sample_bicubic`
    does, and each sample's weights over them.
    """
    floor = np.floor(coords)
    first = floor[:, :1]
    local = (floor - first).astype(np.int64)
    span = int(local.max()) + 4 if local.size else 4
    taps = cubic_weights((coords - floor).reshape(-1).astype(np.float32))
    weights = np.zeros(coords.shape + (span,), dtype=np.float32)
    np.put_along_axis(weights, local[..., None] + np.arange(4), taps.reshape(coords.shape + (4,)),
                      axis=2)
    # tap k of a sample reads map cell floor - 1 + k, i.e. bordered cell floor + k
    index = np.clip(first.astype(np.int64) + np.arange(span), 0, size + 1)
    return index, weights


def bordered_map(dense):
    """Return the map as [h + 2, w + 2, C], channels last, with a one-cell zero border."""
    channels, height, width = dense.feats.shape
    bordered = np.zeros((height + 2, width + 2, channels), dtype=np.float32)
    bordered[1:-1, 1:-1] = dense.feats.transpose(1, 2, 0)
    return bordered


def window_values(dense, centres, radius, bordered=None):
    """
    Bicubic samples of the map at every whole-pixel offset within ``radius`` of each centre.

    ``centres`` float [L, 2] pixels. Returns ``(positions float32 [L, P, 2],
    values float32 [L, P, C])`` with P = (2 radius + 1)^2, offsets in
    row-major order (dy outer, dx inner), not yet unit length: the same
    values (to float rounding) as :func:`xfeat_ros.features.postprocess.sample_bicubic`
    at those positions, computed as two small matrix products per centre.
    ``bordered``: :func:`bordered_map` of ``dense``, made here when None.
    """
    centres = np.asarray(centres, dtype=np.float64).reshape(-1, 2)
    channels, height, width = dense.feats.shape
    side = 2 * int(radius) + 1
    offsets = np.arange(side, dtype=np.float64) - int(radius)
    xs = (centres[:, :1] + offsets).astype(np.float32)   # [L, S] pixels
    ys = (centres[:, 1:] + offsets).astype(np.float32)
    rw, rh = (np.float32(s) for s in dense.scale)
    model = np.stack([(xs / rw).reshape(-1), (ys / rh).reshape(-1)], axis=1)
    u, v = sample_coords(model, dense.model_hw, (height, width))
    columns, wx = _axis_taps(u.reshape(xs.shape), width)
    rows, wy = _axis_taps(v.reshape(ys.shape), height)
    if bordered is None:
        bordered = bordered_map(dense)
    patch = bordered[rows[:, :, None], columns[:, None, :]]         # [L, Ty, Tx, C]
    count, span_y, span_x = patch.shape[:3]
    along_y = np.matmul(wy, patch.reshape(count, span_y, span_x * channels))
    values = np.matmul(wx[:, None], along_y.reshape(count, side, span_x, channels))
    grid_x = np.broadcast_to(xs[:, None, :], (count, side, side))
    grid_y = np.broadcast_to(ys[:, :, None], (count, side, side))
    positions = np.stack([grid_x, grid_y], axis=3).reshape(count, side * side, 2)
    return positions, values.reshape(count, side * side, channels)


def window_descriptors(dense, centres, radius):
    """
    Descriptors (unit length) at every window position of :func:`window_values`.

    Returns ``(positions float32 [L, P, 2], descriptors float32 [L, P, C])``:
    what :func:`xfeat_ros.features.postprocess.sample_descriptors` gives at
    those positions, to float rounding.
    """
    positions, values = window_values(dense, centres, radius)
    return positions, l2_normalize(values, axis=2).astype(np.float32, copy=False)


def best_in_windows(dense, centres, references, radius, image_hw):
    """
    Return each centre's best window position: ``(positions, descriptors, similarity)``.

    ``positions`` float32 [L, 2], ``descriptors`` float32 [L, C] (unit),
    ``similarity`` float32 [L] to ``references`` float [L, C].

    Positions outside the image, and peaks on the window's edge (the real one
    may lie beyond it), get similarity -inf.
    """
    height, width = image_hw
    side = 2 * int(radius) + 1
    channels = dense.feats.shape[0]
    count = len(centres)
    positions = np.zeros((count, 2), np.float32)
    descriptors = np.zeros((count, channels), np.float32)
    similarity = np.full(count, -np.inf, np.float32)
    bordered = bordered_map(dense)
    for start in range(0, count, _CHUNK):
        chunk = slice(start, start + _CHUNK)
        where, values = window_values(dense, centres[chunk], radius, bordered)
        # cosine similarity without normalising every sample: dot / norm
        dots = np.matmul(values, references[chunk][:, :, None])[..., 0]
        norms = np.sqrt(np.einsum('lpc,lpc->lp', values, values))
        with np.errstate(divide='ignore', invalid='ignore'):
            scores = np.where(norms > 0, dots / norms, -np.inf)
        inside = ((where[..., 0] >= 0) & (where[..., 0] <= width - 1)
                  & (where[..., 1] >= 0) & (where[..., 1] <= height - 1))
        scores = np.where(inside, scores, -np.inf)
        best = np.argmax(scores, axis=1)
        rows = np.arange(len(best))
        row, column = np.divmod(best, side)
        edge = (row == 0) | (row == side - 1) | (column == 0) | (column == side - 1)
        positions[chunk] = where[rows, best]
        descriptors[chunk] = l2_normalize(values[rows, best], axis=1)
        similarity[chunk] = np.where(edge, -np.inf, scores[rows, best])
    return positions, descriptors, similarity


def carry_tracks(points0, descriptors0, lost, source, target, dense, image_hw, detections,
                 claimed, radius=CARRY_RADIUS_PX, min_cossim=CARRY_MIN_COSSIM,
                 epipolar_px=CARRY_EPIPOLAR_PX, separation_px=CARRY_SEPARATION_PX):
    """
    Find the ``lost`` keypoints of the previous frame in the current one (module steps 1-4).

    ``points0`` float [N0, 2] / ``descriptors0`` float [N0, C]: the previous
    frame's keypoints; ``lost`` int [L] the ones to look for; ``source`` /
    ``target`` float [M, 2] the verified matches' pixels (previous,
    current); ``dense`` the current frame's :class:`DenseMap` and
    ``image_hw`` its size; ``detections`` float [N1, 2] its detected
    keypoints, ``claimed`` bool [N1] where a track already continues on one.
    Returns a :class:`Carried`; nothing is carried without a fundamental
    matrix of the verified matches (8 or more: :func:`fit_fundamental`).
    """
    channels = dense.feats.shape[0]
    lost = np.asarray(lost, dtype=np.int64).reshape(-1)
    fundamental = fit_fundamental(source, target) if len(lost) else None
    if fundamental is None:
        return Carried.empty(channels)
    points0 = np.asarray(points0, dtype=np.float64).reshape(-1, 2)
    start = points0[lost]
    centres = predict_positions(start, source, target)
    positions, described, similarity = best_in_windows(
        dense, centres, np.asarray(descriptors0, np.float32)[lost], radius, image_hw)
    good = similarity >= min_cossim
    good &= fundamental_inliers(fundamental, start, positions, epipolar_px)
    candidates = np.nonzero(good)[0]
    candidates = candidates[np.argsort(-similarity[candidates], kind='stable')]
    detections = np.asarray(detections, dtype=np.float64).reshape(-1, 2)
    claimed = np.asarray(claimed, dtype=bool).reshape(-1).copy()
    taken, snapped = [], []
    limit2 = separation_px * separation_px
    for j in candidates.tolist():
        here = positions[j].astype(np.float64)
        if taken and (np.sum((positions[taken] - here) ** 2, axis=1) < limit2).any():
            continue
        near = np.sum((detections - here) ** 2, axis=1) < limit2
        if (near & claimed).any():
            continue
        free = np.nonzero(near)[0]
        if len(free):   # a detection no track continues: it takes this track
            target_index = free[np.argmin(np.sum((detections[free] - here) ** 2, axis=1))]
            claimed[target_index] = True
            snapped.append((lost[j], target_index))
            continue
        taken.append(j)
    taken = np.asarray(taken, dtype=np.int64)
    snapped = np.asarray(snapped, dtype=np.int64).reshape(-1, 2)
    return Carried(lost[taken], positions[taken], described[taken], similarity[taken],
                   snapped[:, 0].copy(), snapped[:, 1].copy())


def lost_tracks(count0, origin, streak0, carry_frames):
    """
    Return the indices (int64) of the previous frame's ``count0`` keypoints to look for.

    Those no current keypoint continues (``origin`` int [N1], -1: new) and
    whose track was carried fewer than ``carry_frames`` frames in a row
    (``streak0`` uint [count0], None: none was).
    """
    continued = np.zeros(count0, dtype=bool)
    origin = np.asarray(origin, dtype=np.int64)
    continued[origin[origin >= 0]] = True
    lost = ~continued
    if streak0 is not None:
        lost &= np.asarray(streak0).reshape(-1) < carry_frames
    return np.nonzero(lost)[0].astype(np.int64)


def with_carried(candidates, carried, scores0):
    """
    Return ``candidates`` (host Features) with the carried keypoints appended.

    A carried keypoint keeps the score of its track's keypoint in the
    previous frame (``scores0``). The result has no spread or dense map.
    """
    return type(candidates)(
        np.concatenate([candidates.keypoints, carried.keypoints]).astype(np.float32),
        np.concatenate([candidates.scores,
                        np.asarray(scores0, np.float32)[carried.source]]).astype(np.float32),
        np.concatenate([candidates.descriptors, carried.descriptors]).astype(np.float32),
        candidates.image_hw)


def with_continuations(matches, origin, descriptors0, descriptors1):
    """
    Add every track continuation missing from ``matches`` and mark the verified ones.

    ``matches`` (a MatchResult between the previous frame's keypoints and the
    current ones, or None), ``origin`` int [N1] per current keypoint the
    previous one its track continues (-1: new). Pairs of ``origin`` that are
    not among the matches (carried keypoints, tracks found on a detection)
    are appended with their cosine similarity; ``verified`` is then true
    exactly for the pairs that continue a track.
    """
    origin = np.asarray(origin, dtype=np.int64)
    idx0, idx1 = matches.idx0, matches.idx1
    listed = np.zeros(len(origin), dtype=bool)
    listed[idx1[origin[idx1] == idx0]] = True
    extra = np.nonzero((origin >= 0) & ~listed)[0]
    similarity = np.einsum('nc,nc->n', np.asarray(descriptors0, np.float32)[origin[extra]],
                           np.asarray(descriptors1, np.float32)[extra])
    idx0 = np.concatenate([idx0, origin[extra]]).astype(np.int64)
    idx1 = np.concatenate([idx1, extra]).astype(np.int64)
    return type(matches)(idx0, idx1,
                         np.concatenate([matches.similarity, similarity]).astype(np.float32),
                         origin[idx1] == idx0)
