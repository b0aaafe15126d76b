# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Every CUDA kernel against the NumPy oracle.

The oracle: xfeat_ros.features' image_codec, preprocess, postprocess and match.

GPU tests carry ``@pytest.mark.gpu`` and are skipped, with the reason, where
CuPy or a CUDA device is missing; output buffers are poisoned (NaN or a
sentinel) before every launch, so a result that was never written shows.
The typed matcher rejections are checked on the host too (they happen before
any device work), so CI runs them without a GPU.

Tolerances: decode + resize and the scores use the oracle's exact float32
operation order (--fmad=false), so they are held to 1e-6 absolute / 1e-6
relative; the heatmap differs from NumPy only through expf (<= 2 ulp); the
descriptors differ only in the final norm's summation order.
"""

from types import SimpleNamespace
import zlib

import numpy as np
import pytest

from xfeat_ros.errors import DescriptorLayoutError
from xfeat_ros.features.gpu import kernels, matching, ops
from xfeat_ros.features.image_codec import decode_image, encoding_info, ENCODINGS
from xfeat_ros.features.postprocess import (detect, heatmap_from_logits, keypoint_scores,
                                            l2_normalize, nms_keypoints, sample_descriptors,
                                            top_k_keypoints)
from xfeat_ros.features.preprocess import model_size, to_model_space
from xfeat_ros.tools.image_files import read_image


# (height, width) of originals: tiny, odd (not multiples of 32), VGA, large.
SIZES = [(32, 32), (33, 47), (480, 640), (481, 643), (1536, 2048)]
REAL_IMAGES = ['oxford_graf/img1.ppm', 'tum_fr2_desk/rgb/1311868169.163498.png',
               'euroc_v101_stereo/cam0/1403715273262142976.png']
RESIZE_ATOL = 1e-6
HEATMAP_RTOL = 1e-5
SCORE_RTOL = 1e-6
DESC_ATOL = 2e-6


def poison(cp, shape, dtype):
    """Device array filled with NaN (floats) or a sentinel (ints)."""
    dtype = np.dtype(dtype)
    fill = np.nan if dtype.kind == 'f' else (0x7F7F7F7F if dtype.itemsize >= 4 else 0x7F)
    return cp.full(shape, fill, dtype=dtype)


def random_image(rng, encoding, height, width, pad=0, bigendian=False):
    """Raw bytes of a random image and its step (``pad`` garbage bytes per row)."""
    info = encoding_info(encoding)
    dtype = np.uint16 if info.bytes_per_channel == 2 else np.uint8
    pixels = rng.integers(0, np.iinfo(dtype).max + 1, size=(height, width, info.channels),
                          dtype=dtype)
    stored = pixels.astype('>u2' if bigendian else '<u2') if dtype == np.uint16 else pixels
    rows = np.ascontiguousarray(stored).reshape(height, -1).view(np.uint8)
    garbage = rng.integers(0, 256, size=(height, pad), dtype=np.uint8)
    data = np.concatenate([rows, garbage], axis=1).tobytes()
    return data, width * info.pixel_bytes + pad


def gpu_decode_resize(cp, stream, data, encoding, height, width, step, bigendian=False):
    """Run the decode + resize kernel; return the host model image."""
    mh, mw = model_size(height, width)
    raw = cp.asarray(np.frombuffer(data, dtype=np.uint8))
    out = poison(cp, (mh, mw), np.float32)
    ops.decode_resize(raw, ENCODINGS[encoding], height, width, step, bigendian, out, stream)
    stream.synchronize()
    return out.get()


# -- decode + resize ----------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize('size', SIZES, ids=lambda s: f'{s[1]}x{s[0]}')
@pytest.mark.parametrize('encoding,bigendian', [(e, False) for e in ENCODINGS]
                         + [('mono16', True)])
def test_decode_resize_random(cp, stream, encoding, bigendian, size):
    rng = np.random.default_rng(zlib.crc32(f'{encoding}{bigendian}{size}'.encode()))
    height, width = size
    data, step = random_image(rng, encoding, height, width, pad=3, bigendian=bigendian)
    got = gpu_decode_resize(cp, stream, data, encoding, height, width, step, bigendian)
    want, _ = to_model_space(decode_image(data, encoding, height, width, step, bigendian))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=RESIZE_ATOL)


@pytest.mark.gpu
@pytest.mark.parametrize('rel', REAL_IMAGES)
def test_decode_resize_real(cp, stream, shared_dir, rel):
    pixels, encoding = read_image(shared_dir / 'data' / rel)
    height, width = pixels.shape[:2]
    step = width * ENCODINGS[encoding].pixel_bytes
    data = pixels.tobytes()
    got = gpu_decode_resize(cp, stream, data, encoding, height, width, step)
    want, _ = to_model_space(decode_image(data, encoding, height, width, step))
    np.testing.assert_allclose(got, want, rtol=0, atol=RESIZE_ATOL)


# -- heatmap, NMS, scores, top-K ----------------------------------------------------------------

def random_maps(rng, mh, mw, scale=3.0):
    """Backbone-like random outputs: logits [65, h, w], reliability [h, w] in (0, 1)."""
    h, w = mh // 8, mw // 8
    logits = (rng.standard_normal((65, h, w)) * scale).astype(np.float32)
    reliability = rng.random((h, w)).astype(np.float32)
    return logits, reliability


def cpu_backbone_maps(cpu_pipeline, shared_dir, rel):
    """Real backbone outputs (ONNX Runtime on the CPU) of an image: model image + maps."""
    from xfeat_ros.tools.image_files import read_grey
    model_image, scale = to_model_space(read_grey(shared_dir / 'data' / rel))
    feats, logits, reliability = cpu_pipeline.backbone.run(model_image)
    return model_image.shape, scale, feats, logits, reliability


def gpu_candidates(cp, stream, heatmap, reliability, threshold):
    """Run nms_score on a given heatmap; return host (positions, scores) sorted by position."""
    mh, mw = heatmap.shape
    bufs = ops.alloc_detect_buffers(mh, mw, 16)
    bufs.heatmap.set(heatmap)
    bufs.keys[:] = cp.uint64(0xDEADBEEF)
    ops.nms_score(cp.asarray(reliability), threshold, bufs, stream)
    stream.synchronize()
    n = int(bufs.count.get()[0])
    keys = bufs.keys[:n].get()
    pos = (np.uint64(0xFFFFFFFF) - (keys & np.uint64(0xFFFFFFFF))).astype(np.int64)
    scores = (keys >> np.uint64(32)).astype(np.uint32).view(np.float32)
    order = np.argsort(pos)
    hist = bufs.hist.get()
    return pos[order], scores[order], hist, keys


def cpu_candidates(heatmap, reliability, threshold):
    """Oracle: NMS keypoints and scores, those with score > 0, by row-major position."""
    kps = nms_keypoints(heatmap, threshold)
    scores = keypoint_scores(heatmap, reliability, kps)
    keep = scores > 0
    mw = heatmap.shape[1]
    return kps[keep, 1] * mw + kps[keep, 0], scores[keep]


@pytest.mark.gpu
@pytest.mark.parametrize('size', [(32, 32), (480, 640), (1536, 2048)],
                         ids=lambda s: f'{s[1]}x{s[0]}')
def test_heatmap_random(cp, stream, size):
    rng = np.random.default_rng(size[0])
    logits, _ = random_maps(rng, *size)
    out = poison(cp, size, np.float32)
    ops.heatmap(cp.asarray(logits), out, stream)
    stream.synchronize()
    np.testing.assert_allclose(out.get(), heatmap_from_logits(logits), rtol=HEATMAP_RTOL,
                               atol=1e-9)


@pytest.mark.gpu
@pytest.mark.parametrize('size', [(32, 32), (480, 640), (1536, 2048)],
                         ids=lambda s: f'{s[1]}x{s[0]}')
def test_nms_scores_random(cp, stream, size):
    rng = np.random.default_rng(size[1])
    logits, reliability = random_maps(rng, *size)
    heat = heatmap_from_logits(logits)
    pos, scores, hist, keys = gpu_candidates(cp, stream, heat, reliability, 0.05)
    want_pos, want_scores = cpu_candidates(heat, reliability, 0.05)
    assert len(want_pos) > 0
    np.testing.assert_array_equal(pos, want_pos)
    np.testing.assert_allclose(scores, want_scores, rtol=SCORE_RTOL, atol=0)
    # the fused pass-0 histogram counts every candidate once, by its top 16 bits
    np.testing.assert_array_equal(hist, np.bincount((keys >> np.uint64(48)).astype(np.int64),
                                                    minlength=1 << 16))


def plateau_heatmap(rng, mh, mw, levels=5):
    """Heatmap of isolated peaks on a few levels (many exact ties), plus flat plateaus."""
    heat = np.zeros((mh, mw), dtype=np.float32)
    ys, xs = np.meshgrid(np.arange(0, mh, 3), np.arange(0, mw, 3), indexing='ij')
    values = (rng.integers(1, levels + 1, size=ys.shape) / (levels + 1)).astype(np.float32)
    heat[ys, xs] = values
    heat[:4, :4] = 0.5  # a plateau: ties inside one NMS window all survive
    return heat


@pytest.mark.gpu
@pytest.mark.parametrize('size', [(32, 32), (480, 640)], ids=lambda s: f'{s[1]}x{s[0]}')
def test_nms_scores_ties(cp, stream, size):
    rng = np.random.default_rng(7)
    heat = plateau_heatmap(rng, *size)
    reliability = np.full((size[0] // 8, size[1] // 8), 0.5, dtype=np.float32)
    pos, scores, _, _ = gpu_candidates(cp, stream, heat, reliability, 0.05)
    want_pos, want_scores = cpu_candidates(heat, reliability, 0.05)
    np.testing.assert_array_equal(pos, want_pos)
    np.testing.assert_array_equal(scores, want_scores)


def gpu_top_k(cp, stream, heat, reliability, threshold, k, capacity=None, scale=(1.0, 1.0)):
    """nms_score + top_k on a given heatmap; host (positions, keypoints, scores, count)."""
    mh, mw = heat.shape
    capacity = k if capacity is None else capacity
    bufs = ops.alloc_detect_buffers(mh, mw, capacity)
    bufs.heatmap.set(heat)
    count = poison(cp, 1, np.int32)
    keypoints = poison(cp, (max(capacity, 1), 2), np.float32)
    scores = poison(cp, max(capacity, 1), np.float32)
    bufs.positions[:] = -1
    ops.nms_score(cp.asarray(reliability), threshold, bufs, stream)
    ops.top_k(bufs, k, mw, scale[0], scale[1], count, keypoints, scores, stream)
    stream.synchronize()
    n = int(count.get()[0])
    return bufs.positions[:n].get(), keypoints[:n].get(), scores[:n].get(), n


@pytest.mark.gpu
@pytest.mark.parametrize('k', [1, 7, 100, 4096, 100000])
@pytest.mark.parametrize('kind', ['random', 'ties'])
def test_top_k_equals_stable_sort(cp, stream, kind, k):
    rng = np.random.default_rng(k)
    mh, mw = 480, 640
    if kind == 'random':
        logits, reliability = random_maps(rng, mh, mw)
        heat = heatmap_from_logits(logits)
    else:
        heat = plateau_heatmap(rng, mh, mw)
        reliability = np.full((mh // 8, mw // 8), 0.5, dtype=np.float32)
    cap = min(k, mh * mw)
    pos, kp, scores, n = gpu_top_k(cp, stream, heat, reliability, 0.05, k, cap, (1.25, 0.75))
    kps = nms_keypoints(heat, 0.05)
    want_kp, want_scores = top_k_keypoints(kps, keypoint_scores(heat, reliability, kps), k)
    assert n == len(want_kp)
    np.testing.assert_array_equal(pos, want_kp[:, 1] * mw + want_kp[:, 0])
    np.testing.assert_array_equal(scores, want_scores)
    np.testing.assert_array_equal(
        kp, want_kp.astype(np.float32) * np.array([1.25, 0.75], dtype=np.float32))


@pytest.mark.gpu
def test_top_k_all_tied_and_empty(cp, stream):
    # 1) every candidate has the same score: the first k in row-major order win
    mh, mw = 480, 640
    heat = np.zeros((mh, mw), dtype=np.float32)
    heat[1::3, 1::3] = 0.25
    reliability = np.full((mh // 8, mw // 8), 0.5, dtype=np.float32)
    pos, _, scores, n = gpu_top_k(cp, stream, heat, reliability, 0.05, 4096)
    kps = nms_keypoints(heat, 0.05)
    want_kp, want_scores = top_k_keypoints(kps, keypoint_scores(heat, reliability, kps), 4096)
    assert n == len(want_kp) == 4096
    np.testing.assert_array_equal(pos, want_kp[:, 1] * mw + want_kp[:, 0])
    # 2) nothing above the threshold: count 0, nothing written
    pos, kp, scores, n = gpu_top_k(cp, stream, np.full((mh, mw), 0.01, np.float32),
                                   reliability, 0.05, 4096)
    assert n == 0 and kp.shape == (0, 2) and scores.shape == (0,)
    # 3) k = 0
    pos, kp, scores, n = gpu_top_k(cp, stream, heat, reliability, 0.05, 0, 4)
    assert n == 0


# -- descriptors -------------------------------------------------------------------------------

def border_and_random_keypoints(rng, mh, mw, n):
    """Integer model pixels: every corner and edge midpoint plus ``n`` random ones."""
    fixed = [(0, 0), (mw - 1, 0), (0, mh - 1), (mw - 1, mh - 1), (mw // 2, 0), (0, mh // 2),
             (mw - 1, mh // 2), (mw // 2, mh - 1), (1, 1), (mw - 2, mh - 2)]
    rand = np.stack([rng.integers(0, mw, n), rng.integers(0, mh, n)], axis=1)
    return np.concatenate([np.array(fixed, dtype=np.int64), rand]).astype(np.int64)


@pytest.mark.gpu
@pytest.mark.parametrize('size', [(32, 32), (480, 640), (1536, 2048)],
                         ids=lambda s: f'{s[1]}x{s[0]}')
@pytest.mark.parametrize('device_count', [False, True], ids=['host_count', 'device_count'])
def test_descriptors_random(cp, stream, size, device_count):
    rng = np.random.default_rng(size[0] + device_count)
    mh, mw = size
    h, w = mh // 8, mw // 8
    feats = rng.standard_normal((64, h, w)).astype(np.float32)
    kps = border_and_random_keypoints(rng, mh, mw, 500)
    feats_hwc = poison(cp, (h, w, 64), np.float32)
    ops.normalize_feats(cp.asarray(feats), feats_hwc, stream)
    positions = cp.asarray((kps[:, 1] * mw + kps[:, 0]).astype(np.int32))
    capacity = len(kps) + 5
    out = poison(cp, (capacity, 64), np.float32)
    count = (ops.DeviceCount(cp.asarray(np.array([len(kps)], np.int32)), capacity)
             if device_count else len(kps))
    ops.sample_descriptors(feats_hwc, (mh, mw), positions, count, out, stream)
    stream.synchronize()
    unit = l2_normalize(feats, axis=0)
    np.testing.assert_allclose(feats_hwc.get(), unit.transpose(1, 2, 0), rtol=0, atol=1e-7)
    got = out.get()
    want = sample_descriptors(unit, kps, (mh, mw))
    np.testing.assert_allclose(got[:len(kps)], want, rtol=0, atol=DESC_ATOL)
    assert np.all(np.isnan(got[len(kps):])), 'rows past the count must stay untouched'
    assert np.min(np.sum(got[:len(kps)] * want, axis=1)) >= 0.99999


@pytest.mark.gpu
def test_descriptors_zero_count_launches_nothing(cp, stream, monkeypatch):
    def no_module(*args, **kwargs):
        raise AssertionError('a kernel module was requested for a zero count')
    out = poison(cp, (4, 64), np.float32)
    monkeypatch.setattr(kernels, 'describe_module', no_module)
    ops.sample_descriptors(cp.zeros((4, 4, 64), np.float32), (32, 32),
                           cp.zeros(4, np.int32), 0, out, stream)
    stream.synchronize()
    assert np.all(np.isnan(out.get()))


# -- the whole detection chain on real backbone outputs -----------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize('rel', REAL_IMAGES)
def test_detect_chain_real(cp, stream, cpu_pipeline, shared_dir, rel):
    """
    GPU heatmap -> NMS -> scores -> top-K -> descriptors vs postprocess.detect.

    Both sides get the same (CPU ONNX Runtime) backbone outputs; only expf
    differs in the heatmap, so nearly every keypoint and score is identical.
    """
    (mh, mw), _, feats, logits, reliability = cpu_backbone_maps(cpu_pipeline, shared_dir, rel)
    want_kp, want_scores, want_desc = detect(feats, logits, reliability, 4096, 0.05)
    bufs = ops.alloc_detect_buffers(mh, mw, 4096)
    count = poison(cp, 1, np.int32)
    kp = poison(cp, (4096, 2), np.float32)
    scores = poison(cp, 4096, np.float32)
    desc = poison(cp, (4096, 64), np.float32)
    feats_hwc = poison(cp, (mh // 8, mw // 8, 64), np.float32)
    ops.heatmap_nms_score(cp.asarray(logits), cp.asarray(reliability), 0.05, bufs, stream)
    ops.top_k(bufs, 4096, mw, 1.0, 1.0, count, kp, scores, stream)
    ops.normalize_feats(cp.asarray(feats), feats_hwc, stream)
    ops.sample_descriptors(feats_hwc, (mh, mw), bufs.positions, ops.DeviceCount(count, 4096),
                           desc, stream)
    stream.synchronize()
    n = int(count.get()[0])
    got_kp, got_scores, got_desc = kp[:n].get(), scores[:n].get(), desc[:n].get()
    assert abs(n - len(want_kp)) <= max(2, 0.001 * len(want_kp))
    want_index = {tuple(p): i for i, p in enumerate(want_kp.astype(np.int64).tolist())}
    pairs = [(i, want_index[tuple(p)]) for i, p in enumerate(got_kp.astype(np.int64).tolist())
             if tuple(p) in want_index]
    assert len(pairs) >= 0.999 * len(want_kp)
    gi, wi = np.array(pairs).T
    np.testing.assert_allclose(got_scores[gi], want_scores[wi], rtol=1e-5)
    assert np.min(np.sum(got_desc[gi] * want_desc[wi], axis=1)) >= 0.99999
    assert np.all(np.diff(got_scores) <= 0)
    # relative order of the shared keypoints (a missing one must not shift every rank)
    in_order = np.mean(np.diff(gi[np.argsort(wi)]) > 0)
    assert in_order >= 0.99, f'only {in_order:.4f} of neighbours in the same order'


# -- matching ----------------------------------------------------------------------------------

def unit_rows(rng, n, width):
    """Random unit-length float32 rows."""
    x = rng.standard_normal((n, width)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def correspondences(rng, n0, n1, width, noise=0.3):
    """Two sets where part of set 1 is a noisy permutation of set 0 (real matches exist)."""
    d0 = unit_rows(rng, n0, width)
    d1 = unit_rows(rng, n1, width)
    shared = min(n0, n1) // 2
    perm = rng.permutation(n1)[:shared]
    d1[perm] = d0[:shared] + noise * unit_rows(rng, shared, width) / np.sqrt(width) * 4
    d1 /= np.linalg.norm(d1, axis=1, keepdims=True)
    return d0, d1.astype(np.float32)


def oracle_mnn(d0, d1, min_cossim):
    """Independent float64 oracle: (set of (i, j) matches, sim float64, gaps for near-ties)."""
    sim = d0.astype(np.float64) @ d1.astype(np.float64).T
    best1 = np.argmax(sim, axis=1)
    best0 = np.argmax(sim, axis=0)
    i = np.arange(len(d0))
    keep = best0[best1] == i
    if min_cossim > 0:
        keep &= sim[i, best1].astype(np.float32) > np.float32(min_cossim)
    return set(zip(i[keep].tolist(), best1[keep].tolist())), sim


def near_tie(sim, i, j, tol=1e-5):
    """Tell whether row i or column j has a runner-up within ``tol`` of its best."""
    row = np.sort(sim[i])[-2:] if sim.shape[1] > 1 else np.array([0.0, 1.0])
    col = np.sort(sim[:, j])[-2:] if sim.shape[0] > 1 else np.array([0.0, 1.0])
    return (row[1] - row[0] < tol) or (col[1] - col[0] < tol)


def gpu_match(cp, stream, d0, d1, width, min_cossim, capacity=None, device_counts=False,
              extra_rows=0):
    """Run the matcher; return host (idx0, idx1, sim)."""
    def upload(d):
        padded = np.concatenate([d, np.full((extra_rows, width), np.nan, np.float32)])
        return cp.asarray(padded.reshape(-1))
    b0, b1 = upload(d0), upload(d1)
    if device_counts:
        c0 = ops.DeviceCount(cp.asarray(np.array([len(d0)], np.int32)), len(d0) + extra_rows)
        c1 = ops.DeviceCount(cp.asarray(np.array([len(d1)], np.int32)), len(d1) + extra_rows)
    else:
        c0, c1 = len(d0), len(d1)
    capacity = capacity or max(len(d0) + extra_rows, 1)
    out = matching.MatchOutput(poison(cp, capacity, np.int32), poison(cp, capacity, np.int32),
                               poison(cp, capacity, np.float32), poison(cp, 1, np.int32))
    matching.mutual_nn_match(matching.DescriptorSet(b0, c0, width),
                             matching.DescriptorSet(b1, c1, width), out, matching.MatchScratch(),
                             min_cossim, stream, width=width)
    stream.synchronize()
    m = int(out.count.get()[0])
    return out.idx0[:m].get(), out.idx1[:m].get(), out.similarity[:m].get()


@pytest.mark.gpu
@pytest.mark.parametrize('width', [64, 128])
@pytest.mark.parametrize('n0,n1', [(1, 1), (1, 300), (257, 300), (1000, 1200), (4096, 4096)])
@pytest.mark.parametrize('min_cossim', [0.82, -1.0])
def test_match_against_float64_oracle(cp, stream, width, n0, n1, min_cossim):
    rng = np.random.default_rng(n0 * 7 + n1 + width)
    d0, d1 = correspondences(rng, n0, n1, width)
    idx0, idx1, sim = gpu_match(cp, stream, d0, d1, width, min_cossim)
    want, sim64 = oracle_mnn(d0, d1, min_cossim)
    got = set(zip(idx0.tolist(), idx1.tolist()))
    assert np.all(np.diff(idx0) > 0), 'matches must be ordered by idx0'
    for i, j in got ^ want:
        assert near_tie(sim64, i, j) or abs(sim64[i, j] - min_cossim) < 1e-5, (i, j)
    assert len(got ^ want) <= max(1, 0.001 * len(want))
    if len(idx0):
        np.testing.assert_allclose(sim, sim64[idx0, idx1], atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize('width', [64, 128])
def test_match_device_counts_and_spare_capacity(cp, stream, width):
    rng = np.random.default_rng(width)
    d0, d1 = correspondences(rng, 700, 900, width)
    host = gpu_match(cp, stream, d0, d1, width, 0.82)
    device = gpu_match(cp, stream, d0, d1, width, 0.82, device_counts=True, extra_rows=77)
    for a, b in zip(host, device):
        np.testing.assert_array_equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize('width', [64, 128])
def test_match_min_cossim_is_strict(cp, stream, width):
    eye = np.eye(width, dtype=np.float32)
    d = eye[:2]
    assert len(gpu_match(cp, stream, d, d, width, 1.0)[0]) == 0  # sim == 1.0 is not > 1.0
    idx0, idx1, sim = gpu_match(cp, stream, d, d, width, 0.999)
    assert idx0.tolist() == [0, 1] and idx1.tolist() == [0, 1] and np.all(sim == 1.0)
    # min_cossim <= 0: no filter at all, even a similarity of -1 matches
    for threshold in (-1.0, 0.0):
        idx0, idx1, sim = gpu_match(cp, stream, eye[:1], -eye[:1], width, threshold)
        assert idx0.tolist() == [0] and sim.tolist() == [-1.0]
    assert len(gpu_match(cp, stream, eye[:1], -eye[:1], width, 0.5)[0]) == 0


@pytest.mark.gpu
def test_match_empty_side_launches_nothing(cp, stream, monkeypatch):
    def no_module(*args, **kwargs):
        raise AssertionError('a kernel module was requested for an empty side')
    monkeypatch.setattr(kernels, 'match_module', no_module)
    monkeypatch.setattr(kernels, 'match_tc_module', no_module)
    monkeypatch.setattr(kernels, 'match_refine_module', no_module)
    d = cp.asarray(unit_rows(np.random.default_rng(0), 10, 64).reshape(-1))
    for c0, c1 in ((0, 10), (10, 0), (0, 0)):
        out = matching.alloc_match_output(10)
        out.count[:] = 99
        matching.mutual_nn_match(matching.DescriptorSet(d, c0, 64),
                                 matching.DescriptorSet(d, c1, 64), out, matching.MatchScratch(),
                                 0.82, stream)
        stream.synchronize()
        assert int(out.count.get()[0]) == 0


def typed_rejections(array_module, stream):
    """Check the three typed rejections (raised before any device work)."""
    nn_match, dset = matching.mutual_nn_match, matching.DescriptorSet
    buf = array_module.zeros(10 * 64, dtype=np.float32)
    out = matching.MatchOutput(np.zeros(5, np.int32), np.zeros(5, np.int32),
                               np.zeros(5, np.float32), np.zeros(1, np.int32))
    big_out = matching.MatchOutput(np.zeros(64, np.int32), np.zeros(64, np.int32),
                                   np.zeros(64, np.float32), np.zeros(1, np.int32))
    scratch = matching.MatchScratch()
    # wrong width: a 128-wide set given to the 64-wide matcher (and the reverse)
    with pytest.raises(DescriptorLayoutError, match='width'):
        nn_match(dset(buf, 5, 128), dset(buf, 5, 64),
                 big_out, scratch, 0.82, stream, width=64)
    with pytest.raises(DescriptorLayoutError, match='width'):
        nn_match(dset(buf, 5, 64), dset(buf, 5, 64),
                 big_out, scratch, 0.82, stream, width=128)
    # buffer shorter than count x width
    with pytest.raises(DescriptorLayoutError, match='needs 11 x 64'):
        nn_match(dset(buf, 11, 64), dset(buf, 5, 64),
                 big_out, scratch, 0.82, stream)
    # count above the output capacity
    with pytest.raises(DescriptorLayoutError, match='output holds 5'):
        nn_match(dset(buf, 10, 64), dset(buf, 10, 64),
                 out, scratch, 0.82, stream)


@pytest.mark.parametrize('rows,cols', [(1, 1), (1, 65), (64, 64), (65, 200), (4096, 4096)])
@pytest.mark.parametrize('width', [64, 128])
def test_match_scratch_layout(rows, cols, width):
    """Runs on CI: keys and maxima zeroed, the tile tables, then the FP16 rows; 16-byte aligned."""
    zeroed, total = matching.scratch_layout(rows, cols, width)
    assert zeroed == -(-12 * (rows + cols) // 16) * 16
    row_tiles, col_tiles = -(-rows // 64), -(-cols // 64)
    entries = matching.tile_entries(rows, cols)
    assert entries == col_tiles * rows + row_tiles * cols
    tables = -(-8 * entries // 16) * 16
    assert total == zeroed + tables + 2 * width * (rows + cols)
    # the eight parts, back to back: keys of rows and columns, their maxima, the tables, halves
    parts = matching.scratch_parts(0, zeroed, rows, cols, width)
    assert parts == (0, 8 * rows, 8 * (rows + cols), 12 * rows + 8 * cols, zeroed,
                     zeroed + 4 * entries, zeroed + tables, zeroed + tables + 2 * width * rows)
    assert all(at % 16 == 0 for at in (zeroed, total) + parts[6:])
    # monotone, so a buffer sized for the largest pair of a flush fits every pair in it
    assert matching.scratch_layout(rows + 1, cols, width)[1] >= total
    assert matching.scratch_layout(rows, cols + 1, width)[1] >= total


def test_match_typed_rejections_on_host(monkeypatch):
    """Runs on CI: validation happens before CuPy is touched."""
    def no_module(*args, **kwargs):
        raise AssertionError('a kernel module was requested for a rejected layout')
    monkeypatch.setattr(kernels, 'match_module', no_module)
    monkeypatch.setattr(kernels, 'match_tc_module', no_module)
    monkeypatch.setattr(kernels, 'match_refine_module', no_module)
    typed_rejections(np, SimpleNamespace(ptr=0))


@pytest.mark.gpu
def test_match_typed_rejections_on_device(cp, stream, monkeypatch):
    def no_module(*args, **kwargs):
        raise AssertionError('a kernel module was requested for a rejected layout')
    monkeypatch.setattr(kernels, 'match_module', no_module)
    monkeypatch.setattr(kernels, 'match_tc_module', no_module)
    monkeypatch.setattr(kernels, 'match_refine_module', no_module)
    typed_rejections(cp, stream)


def test_kernel_lookup_keeps_its_module():
    """ops.function caches by id(module): the cache holds the module, so its id stays unique."""
    import gc
    import weakref

    class FakeModule:
        def get_function(self, name):
            return (id(self), name)

    module = FakeModule()
    alive = weakref.ref(module)
    first = ops.function(module, 'k')
    assert ops.function(module, 'k') is first  # looked up once
    del module
    gc.collect()
    assert alive() is not None
    other = FakeModule()  # cannot take the cached module's id while that module lives
    assert ops.function(other, 'k') == (id(other), 'k') != first


def test_every_kernel_loader_is_memoized():
    """Each loader returns one module per arguments (a fresh one would compile again)."""
    loaders = [name for name in dir(kernels) if name.endswith('_module') and name[0] != '_']
    assert {'backbone_module', 'ransac_module', 'refine_module', 'match_tc_module',
            'match_refine_module'} <= set(loaders)
    for name in loaders:
        assert hasattr(getattr(kernels, name), 'cache_clear'), f'{name} is not memoized'
