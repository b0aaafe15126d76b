# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Unit tests of xfeat_ros.features.postprocess against upstream XFeat written in PyTorch.

Every oracle below is written independently in torch, the way upstream
(verlab/accelerated_features, ``modules/xfeat.py`` and
``modules/interpolator.py``) computes it: softmax + pixel shuffle, a 5x5
``MaxPool2d`` NMS, and ``F.grid_sample(align_corners=False)`` after the
normalisation ``2 * (pos / [W - 1, H - 1]) - 1`` of an int64 position tensor.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from xfeat_ros.features.postprocess import (cubic_weights, detect, heatmap_from_logits,
                                            keypoint_scores, l2_normalize, nms_keypoints,
                                            sample_bicubic, sample_bilinear, sample_coords,
                                            sample_descriptors, sample_nearest, simple_nms,
                                            top_k_keypoints)

HEATMAP_ATOL = 1e-7
HEATMAP_RTOL = 1e-5
BILINEAR_ATOL = 1e-6
BICUBIC_ATOL = 2e-6


# ----------------------------------------------------------------------------- oracles

def torch_heatmap(logits):
    """Upstream ``get_kpts_heatmap``: softmax, drop dustbin, 8x8 pixel shuffle."""
    kpts = torch.from_numpy(logits)[None]
    scores = F.softmax(kpts, 1)[:, :64]
    b, _, h, w = scores.shape
    heatmap = scores.permute(0, 2, 3, 1).reshape(b, h, w, 8, 8)
    heatmap = heatmap.permute(0, 1, 3, 2, 4).reshape(b, 1, h * 8, w * 8)
    return heatmap[0, 0].numpy()


def torch_nms_mask(heatmap, threshold):
    """Upstream ``NMS``: equals the 5x5 max pool (padding 2) and above the threshold."""
    x = torch.from_numpy(heatmap)[None, None]
    local_max = torch.nn.MaxPool2d(kernel_size=5, stride=1, padding=2)(x)
    return ((x == local_max) & (x > threshold))[0, 0].numpy()


def torch_sample(maps, keypoints, model_hw, mode):
    """Upstream ``InterpolateSparse2d``: int64 positions, float32 normalisation, grid_sample."""
    mh, mw = model_hw
    x = torch.from_numpy(np.ascontiguousarray(maps))[None]
    pos = torch.from_numpy(keypoints.astype(np.int64))[None]
    grid = 2. * (pos / torch.tensor([mw - 1, mh - 1], dtype=pos.dtype)) - 1.
    assert grid.dtype == torch.float32
    grid = grid.unsqueeze(-2).to(x.dtype)
    out = F.grid_sample(x, grid, mode=mode, align_corners=False)
    return out.permute(0, 2, 3, 1).squeeze(-2)[0].numpy()


def torch_detect(feats, logits, reliability, top_k, threshold):
    """Upstream ``detectAndCompute`` on backbone outputs, in model pixels."""
    m1 = F.normalize(torch.from_numpy(feats)[None], dim=1)
    k1h = torch.from_numpy(torch_heatmap(logits))[None, None]
    h1 = torch.from_numpy(reliability)[None, None]
    mh, mw = k1h.shape[-2:]
    mask = torch_nms_mask(k1h[0, 0].numpy(), threshold)
    mkpts = np.stack(np.nonzero(mask)[::-1], axis=1).astype(np.int64)
    near = torch_sample(k1h[0].numpy(), mkpts, (mh, mw), 'nearest')[:, 0]
    bil = torch_sample(h1[0].numpy(), mkpts, (mh, mw), 'bilinear')[:, 0]
    scores = torch.from_numpy(near * bil)
    scores[torch.from_numpy(np.all(mkpts == 0, axis=-1))] = -1
    idxs = torch.argsort(-scores, stable=True)[:top_k]
    kpts = mkpts[idxs.numpy()]
    scores = scores[idxs].numpy()
    desc = torch_sample(m1[0].numpy(), kpts, (mh, mw), 'bicubic')
    desc = F.normalize(torch.from_numpy(desc), dim=-1).numpy()
    valid = scores > 0
    return kpts[valid], scores[valid], desc[valid]


# ----------------------------------------------------------------------------- helpers

def random_keypoints(rng, model_hw, n):
    """Random integer (x, y) plus every corner and points on all four borders."""
    mh, mw = model_hw
    xs = rng.integers(0, mw, size=n)
    ys = rng.integers(0, mh, size=n)
    border = [(0, 0), (mw - 1, 0), (0, mh - 1), (mw - 1, mh - 1),
              (mw - 2, mh - 2), (1, 1), (mw // 2, 0), (mw // 2, mh - 1),
              (0, mh // 2), (mw - 1, mh // 2), (mw - 1, 3), (5, mh - 1)]
    border += [(mw - 1, int(y)) for y in rng.integers(0, mh, size=8)]
    border += [(int(x), mh - 1) for x in rng.integers(0, mw, size=8)]
    pts = np.concatenate([np.stack([xs, ys], axis=1), np.array(border)])
    return pts.astype(np.int64)


def every_keypoint(model_hw):
    """Every integer model pixel of a small model, row-major."""
    mh, mw = model_hw
    ys, xs = np.mgrid[0:mh, 0:mw]
    return np.stack([xs.ravel(), ys.ravel()], axis=1).astype(np.int64)


def random_backbone(rng, model_hw, logit_scale=3.0):
    """Backbone-like outputs for a model size: feats, logits, reliability."""
    mh, mw = model_hw
    h, w = mh // 8, mw // 8
    feats = rng.standard_normal((64, h, w)).astype(np.float32)
    logits = (logit_scale * rng.standard_normal((65, h, w))).astype(np.float32)
    reliability = rng.random((h, w), dtype=np.float32)
    return feats, logits, reliability


MODEL_SIZES = [(32, 32), (64, 96), (96, 64), (160, 224)]


# ----------------------------------------------------------------------------- heatmap

@pytest.mark.parametrize('model_hw', MODEL_SIZES, ids=lambda hw: f'{hw[0]}x{hw[1]}')
@pytest.mark.parametrize('scale', [0.1, 3.0, 30.0])
def test_heatmap_matches_torch(model_hw, scale):
    rng = np.random.default_rng([model_hw[0], model_hw[1], int(scale * 10)])
    _, logits, _ = random_backbone(rng, model_hw, scale)
    got = heatmap_from_logits(logits)
    assert got.shape == model_hw and got.dtype == np.float32
    np.testing.assert_allclose(got, torch_heatmap(logits), rtol=HEATMAP_RTOL,
                               atol=HEATMAP_ATOL)


def test_heatmap_pixel_shuffle_layout():
    """Value c of cell (i, j) lands at row 8i + c // 8, column 8j + c % 8."""
    h, w = 3, 5
    logits = np.full((65, h, w), -50.0, dtype=np.float32)
    for i in range(h):
        for j in range(w):
            logits[(7 * i + 3 * j) % 64, i, j] = 50.0
    heat = heatmap_from_logits(logits)
    for i in range(h):
        for j in range(w):
            c = (7 * i + 3 * j) % 64
            block = heat[8 * i:8 * i + 8, 8 * j:8 * j + 8]
            assert np.unravel_index(np.argmax(block), block.shape) == (c // 8, c % 8)
            assert block[c // 8, c % 8] > 0.999


def test_heatmap_dustbin_dropped_and_large_logits_stable():
    logits = np.zeros((65, 2, 2), dtype=np.float32)
    logits[64] = 1000.0          # everything in the dustbin
    heat = heatmap_from_logits(logits)
    assert np.all(np.isfinite(heat))
    assert heat.max() < 1e-30
    logits[64] = -1000.0
    logits[:64] = 1000.0         # uniform over the 64 pixels, overflow-prone
    np.testing.assert_allclose(heatmap_from_logits(logits), 1.0 / 64, rtol=1e-6, atol=0)


# ----------------------------------------------------------------------------- NMS

@pytest.mark.parametrize('levels', [None, 3, 5])
@pytest.mark.parametrize('hw', [(16, 16), (5, 7), (1, 9), (9, 1), (37, 23), (64, 96)])
def test_simple_nms_matches_maxpool(levels, hw):
    rng = np.random.default_rng([hw[0], hw[1], levels or 0])
    if levels is None:
        heat = rng.random(hw, dtype=np.float32)
    else:  # few distinct values: many plateaus / ties
        heat = (rng.integers(0, levels, size=hw) / levels).astype(np.float32)
    for threshold in (0.0, 0.05, 0.5, 0.99):
        got = simple_nms(heat, threshold)
        assert got.dtype == np.bool_ and got.shape == hw
        np.testing.assert_array_equal(got, torch_nms_mask(heat, threshold))


def test_simple_nms_ties_all_survive():
    heat = np.zeros((10, 10), dtype=np.float32)
    heat[4, 4] = heat[4, 5] = heat[6, 6] = 0.5
    mask = simple_nms(heat, 0.05)
    assert set(zip(*np.nonzero(mask))) == {(4, 4), (4, 5), (6, 6)}


def test_simple_nms_border_window_is_clipped():
    heat = np.zeros((8, 8), dtype=np.float32)
    heat[0, 0] = 0.3
    heat[0, 2] = 0.4     # inside (0, 0)'s window on the right: suppresses it
    heat[7, 7] = 0.2
    heat[4, 7] = 0.1     # 3 rows away from (7, 7): both survive
    mask = simple_nms(heat, 0.05)
    assert set(zip(*np.nonzero(mask))) == {(0, 2), (7, 7), (4, 7)}
    heat[0, 2] = 0.0
    heat[0, 3] = 0.4     # just outside the window: (0, 0) survives too
    mask = simple_nms(heat, 0.05)
    assert set(zip(*np.nonzero(mask))) == {(0, 0), (0, 3), (7, 7), (4, 7)}


def test_simple_nms_threshold_is_strict():
    heat = np.zeros((6, 6), dtype=np.float32)
    heat[2, 2] = np.float32(0.05)
    assert not simple_nms(heat, 0.05).any()
    assert simple_nms(heat, 0.0499).sum() == 1


def test_nms_keypoints_are_xy_row_major():
    heat = np.zeros((16, 24), dtype=np.float32)
    for y, x in [(1, 20), (1, 3), (9, 7), (14, 0)]:
        heat[y, x] = 0.9
    kpts = nms_keypoints(heat, 0.05)
    assert kpts.dtype == np.int64
    np.testing.assert_array_equal(kpts, [[3, 1], [20, 1], [7, 9], [0, 14]])
    empty = nms_keypoints(np.zeros((16, 24), dtype=np.float32), 0.05)
    assert empty.shape == (0, 2) and empty.dtype == np.int64


# ----------------------------------------------------------------------------- sampling

SAMPLERS = {'nearest': sample_nearest, 'bilinear': sample_bilinear, 'bicubic': sample_bicubic}
SAMPLE_TOL = {'nearest': 0.0, 'bilinear': BILINEAR_ATOL, 'bicubic': BICUBIC_ATOL}


@pytest.mark.parametrize('mode', list(SAMPLERS))
@pytest.mark.parametrize('model_hw,div', [
    ((32, 32), 1), ((32, 32), 8), ((64, 96), 1), ((64, 96), 8), ((96, 64), 8),
    ((480, 640), 8), ((480, 640), 1), ((224, 160), 4), ((256, 384), 8)],
    ids=lambda v: f'{v[0]}x{v[1]}' if isinstance(v, tuple) else f'div{v}')
def test_sampling_matches_grid_sample(mode, model_hw, div):
    rng = np.random.default_rng([model_hw[0], model_hw[1], div, len(mode)])
    mh, mw = model_hw
    maps = rng.standard_normal((3, mh // div, mw // div)).astype(np.float32)
    kpts = random_keypoints(rng, model_hw, 300)
    got = SAMPLERS[mode](maps, kpts, model_hw)
    assert got.shape == (len(kpts), 3) and got.dtype == np.float32
    np.testing.assert_allclose(got, torch_sample(maps, kpts, model_hw, mode), rtol=0,
                               atol=SAMPLE_TOL[mode])


@pytest.mark.parametrize('mode', list(SAMPLERS))
@pytest.mark.parametrize('model_hw,div', [((32, 32), 1), ((32, 64), 8), ((64, 32), 8),
                                          ((32, 96), 1), ((64, 64), 4)],
                         ids=lambda v: f'{v[0]}x{v[1]}' if isinstance(v, tuple) else f'div{v}')
def test_sampling_every_pixel_matches_grid_sample(mode, model_hw, div):
    rng = np.random.default_rng([model_hw[0], model_hw[1], div, 7])
    mh, mw = model_hw
    maps = rng.standard_normal((2, mh // div, mw // div)).astype(np.float32)
    kpts = every_keypoint(model_hw)
    np.testing.assert_allclose(SAMPLERS[mode](maps, kpts, model_hw),
                               torch_sample(maps, kpts, model_hw, mode), rtol=0,
                               atol=SAMPLE_TOL[mode])


def masked_tap_bicubic(maps, kpts, model_hw):
    """Bicubic sampling tap by tap from [C, H, W] with an inside mask (the earlier form)."""
    u, v = sample_coords(kpts, model_hw, maps.shape[1:])
    c0, r0 = np.floor(u), np.floor(v)
    wu = cubic_weights((u - c0).astype(np.float32))
    wv = cubic_weights((v - r0).astype(np.float32))
    c0, r0 = c0.astype(np.int64), r0.astype(np.int64)
    _, height, width = maps.shape

    def tap(rows, cols):
        inside = (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)
        values = maps[:, np.clip(rows, 0, height - 1), np.clip(cols, 0, width - 1)].T
        return values * inside[:, None].astype(np.float32)
    out = np.zeros((len(kpts), maps.shape[0]), dtype=np.float32)
    for i in range(4):
        row = np.zeros_like(out)
        for j in range(4):
            row += tap(r0 + i - 1, c0 + j - 1) * wu[:, j:j + 1]
        out += row * wv[:, i:i + 1]
    return out


@pytest.mark.parametrize('model_hw,div', [((32, 32), 1), ((64, 96), 8), ((480, 640), 8),
                                          ((240, 320), 8), ((64, 64), 4)],
                         ids=lambda v: f'{v[0]}x{v[1]}' if isinstance(v, tuple) else f'div{v}')
def test_bicubic_equals_the_masked_tap_form_bit_for_bit(model_hw, div):
    """The channels-last gather changes the memory walk, not one rounding."""
    rng = np.random.default_rng([model_hw[0], div, 11])
    mh, mw = model_hw
    maps = rng.standard_normal((64, mh // div, mw // div)).astype(np.float32)
    kpts = np.concatenate([every_keypoint(model_hw), random_keypoints(rng, model_hw, 500)])
    got = sample_bicubic(maps, kpts, model_hw)
    want = masked_tap_bicubic(maps, kpts, model_hw)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert sample_bicubic(maps, kpts[:0], model_hw).shape == (0, 64)


def test_nearest_last_column_and_row_read_outside():
    """At x = mw - 1, u = mw - 0.5 rounds (half to even) to mw: outside, so zero."""
    mh, mw = 32, 64
    heat = np.ones((1, mh, mw), dtype=np.float32)
    kpts = np.array([[mw - 1, 5], [7, mh - 1], [mw - 1, mh - 1], [0, 0], [mw - 2, mh - 2]])
    got = sample_nearest(heat, kpts, (mh, mw))[:, 0]
    np.testing.assert_array_equal(got, [0.0, 0.0, 0.0, 1.0, 1.0])
    np.testing.assert_array_equal(got, torch_sample(heat, kpts, (mh, mw), 'nearest')[:, 0])


@pytest.mark.parametrize('model_hw,div', [((64, 96), 1), ((64, 96), 8), ((480, 640), 8),
                                          ((256, 384), 8)],
                         ids=lambda v: f'{v[0]}x{v[1]}' if isinstance(v, tuple) else f'div{v}')
def test_sample_coords_rounded_once_like_grid_sample(model_hw, div):
    """
    Upstream's unnormalisation ``u = (g + 1) * Wm / 2 - 0.5`` is rounded ONCE.

    grid_sample evaluates it as one fused multiply-add (the AVX2 CPU kernel's
    ``(g + 1) * (Wm / 2) - 0.5`` and CUDA's ``((g + 1) * Wm - 1) / 2`` are both
    contracted to an FMA), so u is the float32 rounding of the exact value of
    ``float32(g + 1) * Wm / 2 - 0.5``. Rounding the product first moves u by one
    ulp for some keypoints, which shifts bilinear/bicubic samples by ~1e-5.
    """
    mh, mw = model_hw
    kpts = every_keypoint(model_hw)
    pos = torch.from_numpy(kpts)
    g = (2. * (pos / torch.tensor([mw - 1, mh - 1], dtype=pos.dtype)) - 1.).numpy()
    hm, wm = mh // div, mw // div
    u_ref = ((g[:, 0] + np.float32(1)).astype(np.float64) * (wm / 2) - 0.5).astype(np.float32)
    v_ref = ((g[:, 1] + np.float32(1)).astype(np.float64) * (hm / 2) - 0.5).astype(np.float32)
    u, v = sample_coords(kpts, model_hw, (hm, wm))
    bad = np.nonzero((u != u_ref) | (v != v_ref))[0]
    assert bad.size == 0, (
        f'{bad.size} of {len(kpts)} coordinates differ, e.g. keypoint {kpts[bad[0]]}: '
        f'u {u[bad[0]]!r} vs {u_ref[bad[0]]!r}, v {v[bad[0]]!r} vs {v_ref[bad[0]]!r}')


def test_sample_coords_formula():
    kpts = np.array([[0, 0], [63, 31], [10, 20]], dtype=np.int64)
    u, v = sample_coords(kpts, (32, 64), (4, 8))
    assert u.dtype == np.float32 and v.dtype == np.float32
    np.testing.assert_allclose(u, np.array([0, 63, 10]) * 8 / 63 - 0.5, rtol=0, atol=1e-6)
    np.testing.assert_allclose(v, np.array([0, 31, 20]) * 4 / 31 - 0.5, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- scores, top-k

def test_keypoint_scores_origin_is_minus_one_and_rest_is_product():
    rng = np.random.default_rng(4)
    model_hw = (64, 96)
    _, logits, rel = random_backbone(rng, model_hw)
    heat = heatmap_from_logits(logits)
    kpts = random_keypoints(rng, model_hw, 200)
    scores = keypoint_scores(heat, rel, kpts)
    assert scores.dtype == np.float32 and scores.shape == (len(kpts),)
    origin = (kpts[:, 0] == 0) & (kpts[:, 1] == 0)
    assert origin.sum() == 1
    np.testing.assert_array_equal(scores[origin], [-1.0])
    expected = (torch_sample(heat[None], kpts, model_hw, 'nearest')[:, 0]
                * torch_sample(rel[None], kpts, model_hw, 'bilinear')[:, 0])
    np.testing.assert_allclose(scores[~origin], expected[~origin], rtol=1e-6, atol=1e-9)
    # Points at (0, y) or (x, 0) are not the origin.
    edge = np.array([[0, 5], [5, 0]], dtype=np.int64)
    assert np.all(keypoint_scores(heat, rel, edge) >= 0)


def test_keypoint_scores_empty():
    heat = np.zeros((32, 32), dtype=np.float32)
    rel = np.zeros((4, 4), dtype=np.float32)
    scores = keypoint_scores(heat, rel, np.zeros((0, 2), dtype=np.int64))
    assert scores.shape == (0,) and scores.dtype == np.float32


def test_top_k_orders_descending_and_keeps_ties_stable():
    kpts = np.arange(20, dtype=np.int64).reshape(10, 2)
    scores = np.array([0.5, 0.9, 0.5, -1.0, 0.0, 0.7, 0.5, 0.9, 1e-9, 0.7], dtype=np.float32)
    k, s = top_k_keypoints(kpts, scores, 100)
    np.testing.assert_array_equal(s, np.array([0.9, 0.9, 0.7, 0.7, 0.5, 0.5, 0.5, 1e-9],
                                              dtype=np.float32))
    np.testing.assert_array_equal(k[:, 0] // 2, [1, 7, 5, 9, 0, 2, 6, 8])
    k3, s3 = top_k_keypoints(kpts, scores, 3)
    np.testing.assert_array_equal(k3[:, 0] // 2, [1, 7, 5])
    np.testing.assert_array_equal(s3, s[:3])


def test_top_k_cut_before_dropping_non_positive():
    """K first, then drop: with k=3 and only 2 positives, 2 remain."""
    kpts = np.arange(10, dtype=np.int64).reshape(5, 2)
    scores = np.array([0.0, 0.3, -1.0, 0.2, 0.0], dtype=np.float32)
    k, s = top_k_keypoints(kpts, scores, 3)
    np.testing.assert_array_equal(s, scores[[1, 3]])
    np.testing.assert_array_equal(k, [[2, 3], [6, 7]])
    k1, s1 = top_k_keypoints(kpts, scores, 1)
    np.testing.assert_array_equal(s1, scores[[1]])


def test_top_k_all_non_positive_and_empty():
    kpts = np.zeros((3, 2), dtype=np.int64)
    k, s = top_k_keypoints(kpts, np.array([0.0, -1.0, 0.0], dtype=np.float32), 10)
    assert k.shape == (0, 2) and s.shape == (0,)
    k, s = top_k_keypoints(np.zeros((0, 2), np.int64), np.zeros(0, np.float32), 10)
    assert k.shape == (0, 2) and s.shape == (0,)
    k, s = top_k_keypoints(np.zeros((4, 2), np.int64), np.ones(4, np.float32), 0)
    assert k.shape == (0, 2) and s.shape == (0,)


# ----------------------------------------------------------------------------- descriptors

def test_sample_descriptors_unit_length_and_bicubic():
    rng = np.random.default_rng(8)
    model_hw = (96, 128)
    feats = l2_normalize(rng.standard_normal((64, 12, 16)).astype(np.float32), axis=0)
    kpts = random_keypoints(rng, model_hw, 150)
    desc = sample_descriptors(feats, kpts, model_hw)
    assert desc.shape == (len(kpts), 64) and desc.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(desc, axis=1), 1.0, rtol=0, atol=1e-6)
    ref = torch_sample(feats, kpts, model_hw, 'bicubic')
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(desc, ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize('channels', [64, 32, 1])
def test_sample_descriptors_empty(channels):
    feats = np.ones((channels, 4, 4), dtype=np.float32)
    desc = sample_descriptors(feats, np.zeros((0, 2), dtype=np.int64), (32, 32))
    assert desc.shape == (0, channels) and desc.dtype == np.float32


def test_l2_normalize_zero_vector_stays_finite():
    x = np.zeros((3, 4), dtype=np.float32)
    x[1] = [3, 4, 0, 0]
    out = l2_normalize(x, axis=1)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out[1], [0.6, 0.8, 0, 0], rtol=0, atol=1e-7)
    np.testing.assert_array_equal(out[0], 0.0)


# ----------------------------------------------------------------------------- detect

@pytest.mark.parametrize('model_hw', [(32, 32), (64, 96), (96, 64)])
def test_detect_no_keypoints_gives_empty_shapes(model_hw):
    rng = np.random.default_rng(list(model_hw))
    feats, logits, rel = random_backbone(rng, model_hw)
    kpts, scores, desc = detect(feats, logits, rel, top_k=4096, threshold=1.0)
    assert kpts.shape == (0, 2) and kpts.dtype == np.float32
    assert scores.shape == (0,) and scores.dtype == np.float32
    assert desc.shape == (0, 64) and desc.dtype == np.float32


@pytest.mark.parametrize('model_hw', [(32, 32), (64, 96), (160, 224), (480, 640)])
@pytest.mark.parametrize('top_k', [4096, 50])
def test_detect_matches_upstream_oracle(model_hw, top_k):
    rng = np.random.default_rng([model_hw[0], model_hw[1], top_k])
    feats, logits, rel = random_backbone(rng, model_hw)
    kpts, scores, desc = detect(feats, logits, rel, top_k=top_k, threshold=0.05)
    ref_k, ref_s, ref_d = torch_detect(feats, logits, rel, top_k, 0.05)
    assert len(ref_k) > 0
    assert kpts.shape == (len(ref_k), 2) and kpts.dtype == np.float32
    np.testing.assert_array_equal(kpts, ref_k.astype(np.float32))
    np.testing.assert_allclose(scores, ref_s, rtol=1e-5, atol=1e-9)
    assert np.all(np.diff(scores) <= 0) and np.all(scores > 0)
    np.testing.assert_allclose(desc, ref_d, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(desc, axis=1), 1.0, rtol=0, atol=1e-6)


def test_detect_origin_keypoint_is_dropped():
    feats = np.ones((64, 4, 4), dtype=np.float32)
    logits = np.full((65, 4, 4), -20.0, dtype=np.float32)
    logits[0, 0, 0] = 20.0      # pixel (0, 0) of cell (0, 0): a clear peak at the origin
    logits[9, 1, 1] = 20.0      # pixel (9, 9)
    rel = np.ones((4, 4), dtype=np.float32)
    kpts, scores, _ = detect(feats, logits, rel, top_k=10, threshold=0.05)
    np.testing.assert_array_equal(kpts, [[9.0, 9.0]])
    assert scores.shape == (1,) and scores[0] > 0.9
