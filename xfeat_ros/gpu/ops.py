# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Small launch wrappers around the CUDA kernels (CuPy arrays, one stream, no sync).

Every function enqueues work on the given ``cupy.cuda.Stream`` of the current
CuPy device and returns at once; nothing here synchronizes or copies to the
host. Counts that only the device knows (the number of keypoints of a frame)
travel as :class:`DeviceCount` (an int32 [1] device array plus a host-side
upper bound); kernels read them on the device and grids are sized by the
bound, so a count of zero needs no host round trip. A launch is never made
with zero blocks; a side whose count is zero *on the host* launches nothing.

Shapes below omit a leading batch dimension of 1 where the backbone has one;
all arrays are C-contiguous device arrays.
"""

from dataclasses import dataclass
import math

import numpy as np

from xfeat_ros.errors import DescriptorLayoutError
from xfeat_ros.gpu import kernels

BLOCK_2D = (32, 8)
BLOCK_1D = 256
GRID_STRIDE_BLOCKS = 264  # 2 per SM on an H200; grid-stride loops cover any count
SELECT_THREADS = 1024
RANK_THREADS = 128
DESCRIBE_WARPS = 8
NORM_PIXELS = 32  # must equal describe.cu
NORM_THREADS = 256  # must equal describe.cu
MATCH_TILE = 64
MATCH_THREADS = 256
COLLECT_THREADS = 1024
RADIX_BINS = 1 << 16
RADIX_PASSES = 4


def _cupy():
    import cupy
    return cupy


def blocks(n, per_block):
    """Blocks needed for ``n`` items, at least one (never a zero-size launch)."""
    return max(1, math.ceil(n / per_block))


def _device_id():
    return _cupy().cuda.Device().id


_FUNCTIONS = {}


def function(module, name):
    """Kernel ``name`` of a loaded module, looked up once (launch-path overhead)."""
    key = (id(module), name)
    kernel = _FUNCTIONS.get(key)
    if kernel is None:
        kernel = _FUNCTIONS[key] = module.get_function(name)
    return kernel


def memset_async(array, value, stream):
    """Fill ``array``'s bytes with ``value`` on ``stream`` (a memset, not a kernel)."""
    if array.nbytes:
        _cupy().cuda.runtime.memsetAsync(array.data.ptr, value, array.nbytes, stream.ptr)


@dataclass(frozen=True)
class DeviceCount:
    """A count held on the device: ``array`` int32 [1] and its host-side ``bound``."""

    array: object
    bound: int


def count_bound(count):
    """Host-side upper bound of an int or :class:`DeviceCount`."""
    return int(count.bound if isinstance(count, DeviceCount) else count)


def count_args(count):
    """Kernel arguments ``(pointer or null, bound)`` of an int or :class:`DeviceCount`."""
    if isinstance(count, DeviceCount):
        return count.array, np.int32(count.bound)
    return np.uint64(0), np.int32(count)


# -- preprocess -----------------------------------------------------------------------------

def decode_resize(raw, info, height, width, step, big_endian, out, stream):
    """
    Decode raw image bytes and resize to model size.

    ``raw`` uint8 device bytes (at least ``step * height``), ``info`` the
    :class:`xfeat_ros.decode.EncodingInfo` of the encoding, ``out`` float32
    [mh, mw] (or [1, 1, mh, mw]) device array receiving grey in [0, 1].
    """
    mh, mw = out.shape[-2:]
    colour = 1 if info.colour else 0
    offsets = info.colour if info.colour else (0, 0, 0)
    kernel = function(kernels.preprocess_module(_device_id()), 'decode_resize')
    grid = (blocks(mw, BLOCK_2D[0]), blocks(mh, BLOCK_2D[1]))
    args = (raw, np.int32(height), np.int32(width), np.int32(step),
            np.int32(info.pixel_bytes), np.int32(info.bytes_per_channel == 2),
            np.int32(colour), np.int32(offsets[0]), np.int32(offsets[1]),
            np.int32(offsets[2]), np.int32(bool(big_endian)), np.int32(mh), np.int32(mw),
            np.float32(height / mh), np.float32(width / mw), out)
    with stream:
        kernel(grid, BLOCK_2D, args)


# -- detection ------------------------------------------------------------------------------

@dataclass
class DetectBuffers:
    """
    Device scratch of one model size (reused frame after frame, in stream order).

    ``heatmap`` float32 [mh, mw]; ``keys`` uint64 [mh * mw] candidate keys and
    ``count`` int32 [1]; ``hist`` uint32 [65536] radix histogram (kept zero
    between frames by the kernels); ``sel64`` uint64 [2] / ``sel32`` int32 [4]
    selection state; ``selected`` uint64 [capacity]; ``positions`` int32
    [capacity] sorted model-space positions ``y * mw + x``.
    """

    heatmap: object
    keys: object
    count: object
    hist: object
    sel64: object
    sel32: object
    selected: object
    positions: object

    @property
    def capacity(self):
        """Largest top_k these buffers hold."""
        return int(self.selected.shape[0])


def alloc_detect_buffers(mh, mw, capacity):
    """Allocate :class:`DetectBuffers` for model size ``mh x mw`` and ``capacity`` keypoints."""
    cp = _cupy()
    return DetectBuffers(
        heatmap=cp.empty((mh, mw), dtype=cp.float32),
        keys=cp.empty(mh * mw, dtype=cp.uint64),
        count=cp.zeros(1, dtype=cp.int32),
        hist=cp.zeros(RADIX_BINS, dtype=cp.uint32),
        sel64=cp.zeros(2, dtype=cp.uint64),
        sel32=cp.zeros(4, dtype=cp.int32),
        selected=cp.empty(max(int(capacity), 0), dtype=cp.uint64),
        positions=cp.empty(max(int(capacity), 0), dtype=cp.int32))


def heatmap(logits, out, stream):
    """Softmax over 65 logits + pixel shuffle: logits [65, h, w] -> ``out`` [8h, 8w]."""
    h, w = logits.shape[-2:]
    kernel = function(kernels.detect_module(_device_id()), 'heatmap_softmax')
    with stream:
        kernel((blocks(w, BLOCK_2D[0]), blocks(h, BLOCK_2D[1])), BLOCK_2D,
               (logits, np.int32(h), np.int32(w), out))


def nms_score(reliability, threshold, bufs, stream):
    """
    5x5 NMS on ``bufs.heatmap`` and scores; candidates (score > 0) to ``bufs.keys``.

    ``reliability`` float32 [h, w] (any leading ones). Also fills the pass-0
    radix histogram. The candidate count is reset first.
    """
    mh, mw = bufs.heatmap.shape
    memset_async(bufs.count, 0, stream)
    kernel = function(kernels.detect_module(_device_id()), 'nms_score')
    with stream:
        kernel((blocks(mw, 32), blocks(mh, 8)), (32, 8),
               (bufs.heatmap, reliability, np.int32(mh), np.int32(mw), np.float32(threshold),
                bufs.keys, bufs.count, np.int32(bufs.keys.shape[0]), bufs.hist))


def heatmap_nms_score(logits, reliability, threshold, bufs, stream):
    """:func:`heatmap` then :func:`nms_score` into ``bufs``."""
    heatmap(logits, bufs.heatmap, stream)
    nms_score(reliability, threshold, bufs, stream)


def top_k(bufs, k, model_w, scale_w, scale_h, count_out, keypoints, scores, stream):
    """
    Exact top-``k`` of the candidates in ``bufs``, sorted by score, then position.

    Writes ``count_out`` int32 [1] (kept), ``keypoints`` float32 [>= k, 2] in
    original pixels (x * scale_w, y * scale_h), ``scores`` float32 [>= k] and
    ``bufs.positions``. No host round trip: a radix select on the device.
    """
    k = min(int(k), bufs.capacity)
    if k <= 0:
        memset_async(count_out, 0, stream)
        return
    module = kernels.detect_module(_device_id())
    select = function(module, 'radix_select')
    hist = function(module, 'radix_hist')
    capacity = np.int32(bufs.keys.shape[0])
    with stream:
        for rpass in range(RADIX_PASSES):
            if rpass:
                hist((GRID_STRIDE_BLOCKS,), (BLOCK_1D,),
                     (bufs.keys, bufs.count, capacity, np.int32(rpass), bufs.sel64, bufs.sel32,
                      bufs.hist))
            select((1,), (SELECT_THREADS,),
                   (bufs.hist, bufs.count, capacity, np.int32(rpass), np.int32(k), bufs.sel64,
                    bufs.sel32))
        function(module, 'gather_selected')(
            (GRID_STRIDE_BLOCKS,), (BLOCK_1D,),
            (bufs.keys, bufs.count, capacity, bufs.sel64, bufs.sel32, np.int32(k),
             bufs.selected))
        function(module, 'rank_sorted')(
            (blocks(k, RANK_THREADS),), (RANK_THREADS,),
            (bufs.selected, bufs.sel32, np.int32(k), np.int32(model_w), np.float32(scale_w),
             np.float32(scale_h), count_out, keypoints, scores, bufs.positions))


# -- descriptors ----------------------------------------------------------------------------

def normalize_feats(feats, feats_hwc, stream):
    """L2-normalise feats [C, h, w] over channels into channel-last ``feats_hwc`` [h, w, C]."""
    channels, h, w = feats.shape[-3:]
    kernel = function(kernels.describe_module(_device_id(), channels), 'normalize_feats')
    with stream:
        kernel((blocks(h * w, NORM_PIXELS),), (NORM_THREADS,),
               (feats, np.int32(h), np.int32(w), feats_hwc))


def sample_descriptors(feats_hwc, model_hw, positions, count, out, stream):
    """
    Bicubic, L2-normalised descriptors at sorted keypoint positions.

    ``feats_hwc`` float32 [h, w, C] unit-length features, ``model_hw`` (mh, mw),
    ``positions`` int32 [>= n] model pixels ``y * mw + x``, ``count`` an int or
    :class:`DeviceCount`, ``out`` float32 [>= n, C].
    """
    bound = count_bound(count)
    if bound <= 0:
        return
    h, w, channels = feats_hwc.shape
    mh, mw = model_hw
    count_ptr, count_cap = count_args(count)
    kernel = function(kernels.describe_module(_device_id(), channels), 'describe')
    with stream:
        kernel((blocks(bound, DESCRIBE_WARPS),), (32 * DESCRIBE_WARPS,),
               (feats_hwc, np.int32(h), np.int32(w), np.int32(mh), np.int32(mw), positions,
                count_ptr, count_cap, out))


# -- matching -------------------------------------------------------------------------------

@dataclass(frozen=True)
class DescriptorSet:
    """
    Descriptors as ``(buffer, count, width)``: ``buffer`` float32 device, row-major.

    ``count`` is an int (host) or a :class:`DeviceCount`. The width cannot be
    recovered from a buffer whose capacity exceeds ``count * width``, so it is
    always stated.
    """

    buffer: object
    count: object
    width: int


@dataclass
class MatchOutput:
    """Match results: ``idx0``/``idx1`` int32 [capacity], ``similarity`` float32, ``count``."""

    idx0: object
    idx1: object
    similarity: object
    count: object

    @property
    def capacity(self):
        """Most matches the output holds."""
        return int(self.idx0.shape[0])


def alloc_match_output(capacity):
    """Device :class:`MatchOutput` for up to ``capacity`` matches."""
    cp = _cupy()
    capacity = max(int(capacity), 0)
    return MatchOutput(cp.empty(capacity, dtype=cp.int32), cp.empty(capacity, dtype=cp.int32),
                       cp.empty(capacity, dtype=cp.float32), cp.zeros(1, dtype=cp.int32))


class MatchScratch:
    """Per-row / per-column best keys (uint64), grown on demand, reused otherwise."""

    def __init__(self):
        """Start empty."""
        self.best_row = None
        self.best_col = None

    def ensure(self, rows, cols):
        """Return ``(best_row, best_col)`` holding at least ``rows`` / ``cols`` entries."""
        cp = _cupy()
        if self.best_row is None or self.best_row.shape[0] < rows:
            self.best_row = cp.empty(max(rows, 1), dtype=cp.uint64)
        if self.best_col is None or self.best_col.shape[0] < cols:
            self.best_col = cp.empty(max(cols, 1), dtype=cp.uint64)
        return self.best_row[:rows], self.best_col[:cols]


def check_descriptor_set(side, width, label):
    """
    Validate a :class:`DescriptorSet` for a ``width``-wide matcher; return its bound.

    Raises :class:`DescriptorLayoutError` for a wrong width, a non-float32 or
    non-contiguous buffer, a negative count, or a buffer shorter than
    ``count * width``.
    """
    if int(side.width) != int(width):
        raise DescriptorLayoutError(
            f'{label}: descriptor width {side.width} does not match the {width}-wide matcher')
    buffer = side.buffer
    if getattr(buffer, 'dtype', None) != np.float32 or not buffer.flags.c_contiguous:
        raise DescriptorLayoutError(f'{label}: descriptors must be a C-contiguous float32 buffer')
    bound = count_bound(side.count)
    if bound < 0:
        raise DescriptorLayoutError(f'{label}: negative descriptor count {bound}')
    if buffer.size < bound * width:
        raise DescriptorLayoutError(
            f'{label}: descriptor buffer holds {buffer.size} values, needs {bound} x {width}')
    return bound


def check_match_capacity(bound0, bound1, out):
    """Check that a match output holds ``min(count0, count1)`` matches (typed error if not)."""
    needed = min(bound0, bound1)
    if needed > out.capacity:
        raise DescriptorLayoutError(
            f'up to {needed} matches possible, output holds {out.capacity}')


def mutual_nn_match(side0, side1, out, scratch, min_cossim, stream, width=64):
    """
    Mutual-NN matches of two :class:`DescriptorSet` into ``out`` (ordered by idx0).

    ``min_cossim > 0`` also requires similarity strictly above it. A side with
    a host count of zero gives zero matches and launches no kernel. Raises
    :class:`DescriptorLayoutError` (see :func:`check_descriptor_set`,
    :func:`check_match_capacity`) before anything is enqueued.
    """
    bound0 = check_descriptor_set(side0, width, 'side 0')
    bound1 = check_descriptor_set(side1, width, 'side 1')
    check_match_capacity(bound0, bound1, out)
    if bound0 == 0 or bound1 == 0:
        memset_async(out.count, 0, stream)
        return
    best_row, best_col = scratch.ensure(bound0, bound1)
    memset_async(best_row, 0, stream)
    memset_async(best_col, 0, stream)
    module = kernels.match_module(int(width), _device_id())
    c0, b0 = count_args(side0.count)
    c1, b1 = count_args(side1.count)
    use_min = float(min_cossim) > 0
    with stream:
        function(module, 'mnn_best')(
            (blocks(bound1, MATCH_TILE), blocks(bound0, MATCH_TILE)), (MATCH_THREADS,),
            (side0.buffer, c0, b0, side1.buffer, c1, b1, best_row, best_col))
        function(module, 'mnn_collect')(
            (1,), (COLLECT_THREADS,),
            (best_row, best_col, c0, b0, c1, b1, np.float32(min_cossim), np.int32(use_min),
             out.idx0, out.idx1, out.similarity, out.count, np.int32(out.capacity)))
