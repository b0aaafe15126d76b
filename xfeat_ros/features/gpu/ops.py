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

Detection and description run on a batch of ``frames`` frames of one model
size per launch (:func:`detect_frames`, :func:`describe_frames`); each frame's
results go to its own buffers through a device *frame table*
(:func:`frame_table_rows`, layout :data:`xfeat_ros.features.gpu.kernels.FRAME_TABLE`).
:func:`top_k` and :func:`sample_descriptors` are the one-frame forms (they
upload a one-row table, so they cannot be captured in a CUDA graph).

Matching (one pair, or a flush's pairs at once) is :mod:`xfeat_ros.features.gpu.matching`.

Shapes below omit a leading batch dimension of 1 where the backbone has one;
all arrays are C-contiguous device arrays.
"""

from dataclasses import dataclass
import math

import numpy as np

from xfeat_ros.features.gpu import kernels
# launch shapes the kernels are compiled with (injected into their preamble)
from xfeat_ros.features.gpu.kernels import (NMS_BLOCK, NORM_PIXELS, NORM_THREADS, RANK_SPLIT,
                                            RANK_THREADS, SELECT_THREADS)

# Block shapes of kernels written for any block size (Python-only choices).
BLOCK_2D = (32, 8)
BLOCK_1D = 256
GRID_STRIDE_BLOCKS = 264  # 2 per SM on an H200; grid-stride loops cover any count
DESCRIBE_WARPS = 8
RADIX_BINS = 1 << kernels.RADIX_BITS
RADIX_PASSES = 64 // kernels.RADIX_BITS  # digits of a 64-bit key


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
    entry = _FUNCTIONS.get(key)
    if entry is None:
        # the module is kept with its kernel: its id is never handed to another module
        entry = _FUNCTIONS[key] = (module, module.get_function(name))
    return entry[1]


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

def decode_frames(raw, raw_stride, info, height, width, step, big_endian, out, stream,
                  frames=1):
    """
    Decode ``frames`` images of one layout and resize them to model size, one launch.

    ``raw`` uint8 device bytes, frame f at ``f * raw_stride`` (each at least
    ``step * height`` bytes), ``info`` the :class:`xfeat_ros.features.image_codec.EncodingInfo`
    of the encoding, ``out`` float32 [frames, mh, mw] (or [frames, 1, mh, mw])
    device array receiving grey in [0, 1].
    """
    mh, mw = out.shape[-2:]
    colour = 1 if info.colour else 0
    offsets = info.colour if info.colour else (0, 0, 0)
    kernel = function(kernels.preprocess_module(_device_id()), 'decode_resize')
    grid = (blocks(mw, BLOCK_2D[0]), blocks(mh, BLOCK_2D[1]), int(frames))
    args = (raw, np.int64(raw_stride), np.int32(height), np.int32(width), np.int32(step),
            np.int32(info.pixel_bytes), np.int32(info.bytes_per_channel == 2),
            np.int32(colour), np.int32(offsets[0]), np.int32(offsets[1]),
            np.int32(offsets[2]), np.int32(bool(big_endian)), np.int32(mh), np.int32(mw),
            np.float32(height / mh), np.float32(width / mw), out)
    with stream:
        kernel(grid, BLOCK_2D, args)


def decode_resize(raw, info, height, width, step, big_endian, out, stream):
    """Decode one image's raw bytes and resize it to model size (see :func:`decode_frames`)."""
    decode_frames(raw, 0, info, height, width, step, big_endian, out, stream, 1)


# -- the gate of an armed chain (xfeat_ros.features.gpu.armed) ----------------------------------

def gate_wait(gate_ptr, expire_ns, stream):
    """Hold ``stream`` until the pinned gate word at ``gate_ptr`` is opened (or expires)."""
    kernel = function(kernels.gate_module(_device_id()), 'gate_wait')
    with stream:
        kernel((1,), (1,), (np.uint64(gate_ptr), np.uint64(expire_ns)))


def continue_tracks(prev_ids, prev_ages, prev_count, matches, verified, keypoint_count,
                    next_id, out, stream):
    """
    Continue track ids through a frame's verified matches on ``stream`` (``tracks.cu``).

    ``prev_ids`` uint64 / ``prev_ages`` uint32 device arrays of the previous
    frame's ``prev_count`` keypoints; ``matches`` a
    :class:`xfeat_ros.features.gpu.matching.MatchOutput`, ``verified`` its uint8 mask;
    ``keypoint_count`` the current frame's int32 [1] device count; ``out``
    a :class:`TrackOutput` of the current frame's capacity.
    """
    kernel = function(kernels.tracks_module(_device_id()), 'continue_tracks')
    with stream:
        kernel((1,), (kernels.TRACK_THREADS,),
               (prev_ids, prev_ages, np.int32(prev_count), matches.idx0, matches.idx1, verified,
                matches.count, keypoint_count, np.int32(out.ids.size), np.uint64(next_id),
                out.seen, out.ids, out.ages, out.next_after))


@dataclass(frozen=True)
class TrackOutput:
    """
    Device results of :func:`continue_tracks` for up to ``capacity`` keypoints.

    ``ids`` uint64, ``ages`` uint32, ``seen`` uint8 scratch [capacity];
    ``next_after`` uint64 [1]; ``prev_ids`` / ``prev_ages`` [capacity] receive
    the previous frame's tracks from the host.
    """

    ids: object
    ages: object
    seen: object
    next_after: object
    prev_ids: object
    prev_ages: object


def alloc_track_output(capacity):
    """Device :class:`TrackOutput` for ``capacity`` keypoints (current device)."""
    cp = _cupy()
    n = max(int(capacity), 0)
    return TrackOutput(cp.zeros(n, dtype=cp.uint64), cp.zeros(n, dtype=cp.uint32),
                       cp.zeros(n, dtype=cp.uint8), cp.zeros(1, dtype=cp.uint64),
                       cp.zeros(n, dtype=cp.uint64), cp.zeros(n, dtype=cp.uint32))


@dataclass(frozen=True)
class SpreadOutput:
    """
    A slot's device selection (capacity ``N`` candidates).

    ``ages`` uint32 [N] (0: a new track), ``order`` int32 [N], ``kept``
    int32 [N] (first ``kept_count`` valid), ``kept_count`` int32 [1],
    ``kept_age`` uint32 [N] (0: dropped; read by the next frame), the earlier
    neighbours within the radius by rank (``neighbours`` int32 [N,
    SPREAD_NEIGHBOURS], ``neighbour_counts`` int32 [N]) and the select
    kernel's int32 scratch (``spread.cu``, :mod:`xfeat_ros.features.gpu.spread`).
    """

    ages: object
    order: object
    kept: object
    kept_count: object
    kept_age: object
    neighbours: object
    neighbour_counts: object
    scratch: object


def alloc_spread_output(capacity):
    """Device :class:`SpreadOutput` for ``capacity`` candidates (current device)."""
    cp = _cupy()
    n = max(int(capacity), 0)
    return SpreadOutput(cp.zeros(n, dtype=cp.uint32), cp.zeros(n, dtype=cp.int32),
                        cp.zeros(n, dtype=cp.int32), cp.zeros(1, dtype=cp.int32),
                        cp.zeros(n, dtype=cp.uint32),
                        cp.zeros((max(n, 1), kernels.SPREAD_NEIGHBOURS), dtype=cp.int32),
                        cp.zeros(max(n, 1), dtype=cp.int32),
                        cp.zeros(kernels.SPREAD_SCRATCH_PER * max(n, 1), dtype=cp.int32))


# -- frame tables ---------------------------------------------------------------------------

def pack_scales(scale_w, scale_h):
    """Return the scales word: float32 bits of ``scale_w`` (low), ``scale_h`` (high)."""
    bits = np.array([scale_w, scale_h], dtype=np.float32).view(np.uint32).astype(np.uint64)
    return int(bits[0] | (bits[1] << np.uint64(32)))


def _ptr(array):
    return 0 if array is None else int(array.data.ptr)


def frame_table_rows(frames):
    """
    Host uint64 [len(frames), FRAME_FIELDS] frame table.

    ``frames`` lists ``(count, keypoints, scores, descriptors, scale_w, scale_h)``
    with device arrays or None (a null pointer: a count of None means "the
    launch's capacity").
    """
    rows = np.zeros((len(frames), kernels.FRAME_FIELDS), dtype=np.uint64)
    col = kernels.FRAME_TABLE.index
    for f, (count, keypoints, scores, descriptors, scale_w, scale_h) in enumerate(frames):
        rows[f, col('count')] = _ptr(count)
        rows[f, col('keypoints')] = _ptr(keypoints)
        rows[f, col('scores')] = _ptr(scores)
        rows[f, col('descriptors')] = _ptr(descriptors)
        rows[f, col('scales')] = pack_scales(scale_w, scale_h)
    return rows


def _upload_table(rows, stream):
    """Copy a host frame table to a new device array on ``stream`` (not capturable)."""
    with stream:
        return _cupy().asarray(rows)


# -- detection ------------------------------------------------------------------------------

@dataclass
class DetectBuffers:
    """
    Device scratch of one model size for up to ``frames`` frames (reused in stream order).

    Per frame: ``heatmap`` float32 [mh, mw]; ``keys`` uint64 [mh * mw] candidate
    keys and ``count`` int32; ``hist`` uint32 [65536] radix histogram (kept zero
    between frames by the kernels); ``sel64`` uint64 [2] / ``sel32`` int32 [4]
    selection state; ``selected`` uint64 [capacity]; ``positions`` int32
    [capacity] sorted model-space positions ``y * mw + x``; ``counts`` int32
    keypoints kept (contiguous over frames, for one host copy). Each array has
    a leading frame dimension, except with ``frames`` None (one frame, no
    frame dimension: the one-frame form).
    """

    heatmap: object
    keys: object
    count: object
    hist: object
    sel64: object
    sel32: object
    selected: object
    positions: object
    counts: object

    @property
    def capacity(self):
        """Largest top_k these buffers hold."""
        return int(self.selected.shape[-1])

    @property
    def frames(self):
        """Frames these buffers hold."""
        return int(self.count.shape[0])


def alloc_detect_buffers(mh, mw, capacity, frames=None):
    """Allocate :class:`DetectBuffers` for model size ``mh x mw``, ``capacity`` keypoints."""
    cp = _cupy()
    lead = () if frames is None else (int(frames),)
    n = 1 if frames is None else int(frames)
    capacity = max(int(capacity), 0)
    return DetectBuffers(
        heatmap=cp.empty(lead + (mh, mw), dtype=cp.float32),
        keys=cp.empty(lead + (mh * mw,), dtype=cp.uint64),
        count=cp.zeros(n, dtype=cp.int32),
        hist=cp.zeros(lead + (RADIX_BINS,), dtype=cp.uint32),
        sel64=cp.zeros(lead + (2,), dtype=cp.uint64),
        sel32=cp.zeros(lead + (4,), dtype=cp.int32),
        selected=cp.empty(lead + (capacity,), dtype=cp.uint64),
        positions=cp.empty(lead + (capacity,), dtype=cp.int32),
        counts=cp.zeros(n, dtype=cp.int32))


def _frames_of(array, trailing):
    """Frames in ``array`` whose last ``trailing`` dimensions are one frame's."""
    return int(np.prod(array.shape[:-trailing], dtype=np.int64)) if array.ndim > trailing else 1


def heatmap(logits, out, stream, frames=None):
    """Softmax over 65 logits + pixel shuffle: logits [B, 65, h, w] -> ``out`` [B, 8h, 8w]."""
    h, w = logits.shape[-2:]
    frames = _frames_of(logits, 3) if frames is None else int(frames)
    kernel = function(kernels.detect_module(_device_id()), 'heatmap_softmax')
    with stream:
        kernel((blocks(w, BLOCK_2D[0]), blocks(h, BLOCK_2D[1]), frames), BLOCK_2D,
               (logits, np.int32(h), np.int32(w), out))


def nms_score(reliability, threshold, bufs, stream, frames=None):
    """
    5x5 NMS on ``bufs.heatmap`` and scores; candidates (score > 0) to ``bufs.keys``.

    ``reliability`` float32 [B, h, w] (any leading ones). Also fills the
    pass-0 radix histogram. The candidate counts are reset first. ``frames``
    (default: all of ``bufs``) frames are processed.
    """
    mh, mw = bufs.heatmap.shape[-2:]
    frames = bufs.frames if frames is None else int(frames)
    memset_async(bufs.count[:frames], 0, stream)
    kernel = function(kernels.detect_module(_device_id()), 'nms_score')
    with stream:
        kernel((blocks(mw, NMS_BLOCK[0]), blocks(mh, NMS_BLOCK[1]), frames), NMS_BLOCK,
               (bufs.heatmap, reliability, np.int32(mh), np.int32(mw), np.float32(threshold),
                bufs.keys, bufs.count, np.int32(bufs.keys.shape[-1]), bufs.hist))


def heatmap_nms_score(logits, reliability, threshold, bufs, stream, frames=None):
    """:func:`heatmap` then :func:`nms_score` into ``bufs``."""
    frames = bufs.frames if frames is None else int(frames)
    heatmap(logits, bufs.heatmap, stream, frames)
    nms_score(reliability, threshold, bufs, stream, frames)


def select_top_k(bufs, k, model_w, table, stream, frames=None):
    """
    Exact top-``k`` of each frame's candidates in ``bufs``, by score, then position.

    Writes, through the device frame ``table`` (rows: count, keypoints, scores,
    scales), each frame's count (kept), keypoints float32 [>= k, 2] in original
    pixels (x * scale_w, y * scale_h) and scores float32 [>= k]; also
    ``bufs.positions`` and ``bufs.counts``. No host round trip: a radix select
    on the device. ``k`` must be positive and at most ``bufs.capacity``.
    """
    frames = bufs.frames if frames is None else int(frames)
    module = kernels.detect_module(_device_id())
    select = function(module, 'radix_select')
    hist = function(module, 'radix_hist')
    capacity = np.int32(bufs.keys.shape[-1])
    stride = np.int32(bufs.capacity)
    per_frame = max(4, GRID_STRIDE_BLOCKS // frames)
    with stream:
        for rpass in range(RADIX_PASSES):
            if rpass:
                hist((per_frame, frames), (BLOCK_1D,),
                     (bufs.keys, bufs.count, capacity, np.int32(rpass), bufs.sel64, bufs.sel32,
                      bufs.hist))
            select((frames,), (SELECT_THREADS,),
                   (bufs.hist, bufs.count, capacity, np.int32(rpass), np.int32(k), bufs.sel64,
                    bufs.sel32))
        function(module, 'gather_selected')(
            (per_frame, frames), (BLOCK_1D,),
            (bufs.keys, bufs.count, capacity, bufs.sel64, bufs.sel32, np.int32(k),
             bufs.selected, stride))
        function(module, 'rank_sorted')(
            (blocks(k, RANK_THREADS // RANK_SPLIT), frames), (RANK_THREADS,),
            (bufs.selected, stride, bufs.sel32, np.int32(k), np.int32(model_w), table,
             bufs.counts, bufs.positions))


def top_k(bufs, k, model_w, scale_w, scale_h, count_out, keypoints, scores, stream):
    """
    One frame's exact top-``k`` (see :func:`select_top_k`) into the given arrays.

    ``count_out`` int32 [1], ``keypoints`` float32 [>= k, 2], ``scores``
    float32 [>= k]. Uploads a one-row frame table (not capturable).
    """
    k = min(int(k), bufs.capacity)
    if k <= 0:
        memset_async(count_out, 0, stream)
        return
    table = _upload_table(frame_table_rows(
        [(count_out, keypoints, scores, None, scale_w, scale_h)]), stream)
    select_top_k(bufs, k, model_w, table, stream, frames=1)


# -- descriptors ----------------------------------------------------------------------------

def normalize_feats(feats, feats_hwc, stream, frames=None):
    """L2-normalise feats [B, C, h, w] over channels into ``feats_hwc`` [B, h, w, C]."""
    channels, h, w = feats.shape[-3:]
    frames = _frames_of(feats, 3) if frames is None else int(frames)
    kernel = function(kernels.describe_module(_device_id(), channels), 'normalize_feats')
    with stream:
        kernel((blocks(h * w, NORM_PIXELS), frames), (NORM_THREADS,),
               (feats, np.int32(h), np.int32(w), feats_hwc))


def describe_frames(feats_hwc, model_hw, positions, table, capacity, stream, frames=None):
    """
    Bicubic, L2-normalised descriptors of each frame at its sorted keypoint positions.

    ``feats_hwc`` float32 [B, h, w, C] unit-length features, ``model_hw``
    (mh, mw), ``positions`` int32 [B, capacity] model pixels ``y * mw + x``;
    through the device frame ``table`` (rows: count, descriptors) each frame's
    count (null: ``capacity``) and float32 [>= count, C] output.
    """
    h, w, channels = feats_hwc.shape[-3:]
    frames = _frames_of(feats_hwc, 3) if frames is None else int(frames)
    mh, mw = model_hw
    kernel = function(kernels.describe_module(_device_id(), channels), 'describe')
    with stream:
        kernel((blocks(capacity, DESCRIBE_WARPS), frames), (32 * DESCRIBE_WARPS,),
               (feats_hwc, np.int32(h), np.int32(w), np.int32(mh), np.int32(mw), positions,
                np.int32(positions.shape[-1]), table, np.int32(capacity)))


def sample_descriptors(feats_hwc, model_hw, positions, count, out, stream):
    """
    One frame's descriptors (see :func:`describe_frames`).

    ``feats_hwc`` float32 [h, w, C], ``positions`` int32 [>= n], ``count`` an
    int or :class:`DeviceCount`, ``out`` float32 [>= n, C]. Uploads a one-row
    frame table (not capturable); a zero host bound launches nothing.
    """
    bound = count_bound(count)
    if bound <= 0:
        return
    device_count = count.array if isinstance(count, DeviceCount) else None
    table = _upload_table(frame_table_rows([(device_count, None, None, out, 1.0, 1.0)]), stream)
    describe_frames(feats_hwc, model_hw, positions, table, bound, stream, frames=1)


def decode_batch(ws, batch, stream):
    """
    Decode a batch's raw rows (``ws.raw``) into ``ws.image``, one launch when one layout.

    ``batch``: ``[(slot, height, width, info, step, big_endian)]`` in row order.
    """
    layouts = {frame[1:] for frame in batch}
    if len(layouts) == 1:
        _, height, width, info, step, big_endian = batch[0]
        decode_frames(ws.raw, ws.raw_stride, info, height, width, step, big_endian,
                      ws.image, stream, len(batch))
        return
    for row, (_, height, width, info, step, big_endian) in enumerate(batch):
        decode_resize(ws.raw[row * ws.raw_stride:], info, height, width, step, big_endian,
                      ws.image[row], stream)


def capture_cached(cache, key, enqueue, stream, max_graphs):
    """
    Return ``cache``'s CUDA graph of ``key``, capturing ``enqueue()`` on ``stream`` first.

    A graph captured here is uploaded on ``stream`` at once, so that its first
    launch has nothing left to set up. Capturing (and the instantiation that
    ends it) waits for the device when a kernel is running, so an armed chain
    captures its graphs before it enqueues its gate (:mod:`.armed`). The cache
    (an OrderedDict) keeps the ``max_graphs`` most recently used; ``key`` must
    name every buffer and argument the launches bake in.
    """
    graph = cache.get(key)
    if graph is None:
        stream.begin_capture()
        try:
            enqueue()
        finally:
            graph = stream.end_capture()
        upload = getattr(graph, 'upload', None)  # CuPy's Graph.upload (absent in older CuPy)
        if upload is not None:
            upload(stream)
        cache[key] = graph
        while len(cache) > max_graphs:
            cache.popitem(last=False)
    cache.move_to_end(key)
    return graph


def launch_cached(cache, key, enqueue, stream, max_graphs):
    """
    Launch ``cache``'s CUDA graph of ``key`` on ``stream`` (:func:`capture_cached` first).

    Nothing runs during a capture: the first launch is the first run.
    """
    capture_cached(cache, key, enqueue, stream, max_graphs).launch(stream)
