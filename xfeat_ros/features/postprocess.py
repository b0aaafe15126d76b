# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
XFeat sparse detection on the backbone outputs (NumPy, CPU).

This is the reference implementation of ``shared/docs/xfeat-spec.md`` section 3
and the oracle for the GPU kernels. Every function is pure and works on host
arrays; shapes are given without the batch dimension:

* ``feats`` float32 [64, h, w], ``logits`` float32 [65, h, w] and
  ``reliability`` float32 [h, w] with ``h = mh / 8``, ``w = mw / 8``;
* keypoints are integer model pixels (x, y) until :func:`detect` scales them.

Sampling follows upstream's convention: a position ``x`` in a model of width
``mw`` is read from a map of width ``Wm`` at ``u = x * Wm / (mw - 1) - 0.5``
(computed in float32 exactly as upstream: normalise to [-1, 1], then
``grid_sample(align_corners=False)``), with zeros outside the map.
"""

import numpy as np

from xfeat_ros.defaults import THRESHOLD, TOP_K

CELL = 8
NMS_RADIUS = 2
BICUBIC_A = np.float32(-0.75)


def l2_normalize(x, axis, eps=1e-12):
    """Divide ``x`` by its L2 norm along ``axis`` (norm clamped below by ``eps``)."""
    norm = np.sqrt(np.sum(np.square(x, dtype=np.float32), axis=axis, keepdims=True))
    return (x / np.maximum(norm, np.float32(eps))).astype(np.float32, copy=False)


def heatmap_from_logits(logits):
    """
    Softmax over 65 logits per cell, drop the dustbin, shuffle 8x8.

    ``logits`` float32 [65, h, w] -> heatmap float32 [8h, 8w]; value ``c`` of
    cell (i, j) lands at row ``8i + c // 8``, column ``8j + c % 8``.
    """
    shifted = logits - logits.max(axis=0, keepdims=True)
    expo = np.exp(shifted, dtype=np.float32)
    prob = expo[:CELL * CELL] / expo.sum(axis=0, keepdims=True)
    _, h, w = logits.shape
    shuffled = prob.reshape(CELL, CELL, h, w).transpose(2, 0, 3, 1)
    return np.ascontiguousarray(shuffled.reshape(h * CELL, w * CELL), dtype=np.float32)


def _window_max(x, radius, axis):
    """Return the running max over ``2 * radius + 1`` neighbours along ``axis`` (clipped)."""
    pad = [(0, 0)] * x.ndim
    pad[axis] = (radius, radius)
    padded = np.pad(x, pad, constant_values=-np.inf)
    n = x.shape[axis]
    window = [slice(None)] * x.ndim

    def shifted(offset):  # a view of the padded array, ``offset`` along ``axis``
        window[axis] = slice(offset, offset + n)
        return padded[tuple(window)]
    out = shifted(0).copy()
    for offset in range(1, 2 * radius + 1):
        np.maximum(out, shifted(offset), out=out)
    return out


def simple_nms(heatmap, threshold, radius=NMS_RADIUS):
    """
    Keypoint mask of a 5x5 non-maximum suppression.

    A pixel survives if it equals the max of its (border-clipped) window, ties
    included, and is strictly greater than ``threshold``. Returns bool [H, W].
    """
    local_max = _window_max(_window_max(heatmap, radius, 0), radius, 1)
    return (heatmap == local_max) & (heatmap > threshold)


def nms_keypoints(heatmap, threshold):
    """Integer model-pixel keypoints (x, y) of the NMS, in row-major order: int64 [N, 2]."""
    ys, xs = np.nonzero(simple_nms(heatmap, threshold))
    return np.stack([xs, ys], axis=1).astype(np.int64)


def sample_coords(keypoints, model_hw, map_hw):
    """
    Map model pixels to continuous map coordinates, upstream's way.

    ``keypoints`` [N, 2] (x, y); ``model_hw`` = (mh, mw); ``map_hw`` = size of
    the sampled map. Returns float32 ``(u, v)``, pixel centres at integers.
    """
    mh, mw = model_hw
    hm, wm = map_hw
    pos = keypoints.astype(np.float32)
    gx = np.float32(2.0) * (pos[:, 0] / np.float32(mw - 1)) - np.float32(1.0)
    gy = np.float32(2.0) * (pos[:, 1] / np.float32(mh - 1)) - np.float32(1.0)
    # grid_sample un-normalises with one fused multiply-add (a single rounding):
    # u = g * Wm / 2 + (Wm - 1) / 2, exact in float64, then rounded to float32.
    u = (gx.astype(np.float64) * (wm / 2.0) + (wm - 1) / 2.0).astype(np.float32)
    v = (gy.astype(np.float64) * (hm / 2.0) + (hm - 1) / 2.0).astype(np.float32)
    return u, v


def _gather(maps, rows, cols):
    """Read ``maps`` [C, H, W] at integer ``rows``/``cols`` [N], zero outside: [N, C]."""
    _, height, width = maps.shape
    inside = (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)
    values = maps[:, np.clip(rows, 0, height - 1), np.clip(cols, 0, width - 1)].T
    return values * inside[:, None].astype(np.float32)


def sample_nearest(maps, keypoints, model_hw):
    """Nearest sample (round half to even) of [C, H, W] maps at keypoints: [N, C]."""
    u, v = sample_coords(keypoints, model_hw, maps.shape[1:])
    cols = np.rint(u).astype(np.int64)
    rows = np.rint(v).astype(np.int64)
    return _gather(maps, rows, cols)


def sample_bilinear(maps, keypoints, model_hw):
    """Bilinear sample of [C, H, W] maps at keypoints, zero padding: [N, C]."""
    u, v = sample_coords(keypoints, model_hw, maps.shape[1:])
    c0 = np.floor(u)
    r0 = np.floor(v)
    tu = (u - c0)[:, None]
    tv = (v - r0)[:, None]
    c0 = c0.astype(np.int64)
    r0 = r0.astype(np.int64)
    one = np.float32(1.0)
    return (_gather(maps, r0, c0) * (one - tu) * (one - tv)
            + _gather(maps, r0, c0 + 1) * tu * (one - tv)
            + _gather(maps, r0 + 1, c0) * (one - tu) * tv
            + _gather(maps, r0 + 1, c0 + 1) * tu * tv).astype(np.float32)


def cubic_weights(t):
    """Cubic-convolution weights (A = -0.75) of the taps at -1, 0, +1, +2: [N, 4]."""
    a = BICUBIC_A

    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    one = np.float32(1.0)
    return np.stack([far(t + one), near(t), near(one - t), far(2 * one - t)], axis=1)


def zero_bordered_hwc(maps):
    """[C, H, W] maps as [H + 2, W + 2, C], with a one-pixel border of zeros."""
    channels, height, width = maps.shape
    out = np.zeros((height + 2, width + 2, channels), dtype=np.float32)
    out[1:-1, 1:-1] = maps.transpose(1, 2, 0)
    return out


def sample_bicubic(maps, keypoints, model_hw):
    """
    Bicubic sample of [C, H, W] maps at keypoints, taps outside are zero: [N, C].

    The taps are read as rows of a channels-last copy of the maps with a zero
    border (any tap outside the map reads that border, clipped), so each is one
    contiguous [N, C] gather; sums run in the same order as a tap-by-tap
    gather with masks would, so the result is the same bit for bit.
    """
    u, v = sample_coords(keypoints, model_hw, maps.shape[1:])
    c0 = np.floor(u)
    r0 = np.floor(v)
    wu = cubic_weights((u - c0).astype(np.float32))
    wv = cubic_weights((v - r0).astype(np.float32))
    bordered = zero_bordered_hwc(maps)
    last_row, last_col = bordered.shape[0] - 1, bordered.shape[1] - 1
    # tap t (0..3) of a keypoint is map pixel floor + t - 1, i.e. bordered pixel floor + t
    cols = [np.clip(c0.astype(np.int64) + t, 0, last_col) for t in range(4)]
    rows = [np.clip(r0.astype(np.int64) + t, 0, last_row) for t in range(4)]
    out = np.zeros((keypoints.shape[0], maps.shape[0]), dtype=np.float32)
    for i in range(4):
        row = np.zeros_like(out)
        for j in range(4):
            row += bordered[rows[i], cols[j]] * wu[:, j:j + 1]
        out += row * wv[:, i:i + 1]
    return out


def keypoint_scores(heatmap, reliability, keypoints):
    """
    Score = nearest(heatmap) x bilinear(reliability); a keypoint at (0, 0) scores -1.

    ``heatmap`` [mh, mw], ``reliability`` [h, w], ``keypoints`` int [N, 2] -> float32 [N].
    """
    model_hw = heatmap.shape
    scores = (sample_nearest(heatmap[None], keypoints, model_hw)[:, 0]
              * sample_bilinear(reliability[None], keypoints, model_hw)[:, 0])
    scores[(keypoints[:, 0] == 0) & (keypoints[:, 1] == 0)] = -1.0
    return scores.astype(np.float32, copy=False)


def top_k_keypoints(keypoints, scores, k):
    """
    Keep the ``k`` best keypoints by descending score, then drop scores <= 0.

    Equal scores keep their input (row-major) order. Returns (keypoints, scores).
    """
    order = np.argsort(-scores, kind='stable')[:k]
    order = order[scores[order] > 0]
    return keypoints[order], scores[order]


def sample_descriptors(feats, keypoints, model_hw):
    """Bicubic descriptors at keypoints, L2-normalised: float32 [N, C]."""
    if keypoints.shape[0] == 0:
        return np.zeros((0, feats.shape[0]), dtype=np.float32)
    return l2_normalize(sample_bicubic(feats, keypoints, model_hw), axis=1)


def detect(feats, logits, reliability, top_k=TOP_K, threshold=THRESHOLD):
    """
    Full sparse detection in model space.

    Returns ``(keypoints float32 [N, 2] model pixels, scores float32 [N],
    descriptors float32 [N, 64])``, sorted by descending score, N <= top_k.
    """
    feats = l2_normalize(feats, axis=0)
    heatmap = heatmap_from_logits(logits)
    candidates = nms_keypoints(heatmap, threshold)
    scores = keypoint_scores(heatmap, reliability, candidates)
    keypoints, scores = top_k_keypoints(candidates, scores, top_k)
    descriptors = sample_descriptors(feats, keypoints, heatmap.shape)
    return keypoints.astype(np.float32), scores, descriptors
