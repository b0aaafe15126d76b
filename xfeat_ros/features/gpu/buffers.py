# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Device and pinned host buffers of the GPU engine.

* :class:`PinnedBuffer` - page-locked host memory viewed as NumPy (CuPy's
  pinned pool), the source and target of every host <-> device copy;
* :class:`GpuSlot` - one in-flight frame's results, resident on the device;
* :class:`Workspace` - the network input, backbone outputs and detection
  scratch of one model size for a batch of up to ``frames`` frames;
* :class:`TableRing` - pinned host frame tables, uploaded in stream order
  into one device table per engine, never overwritten while a copy is pending;
* :class:`HostCopier` - host copies of image bytes into pinned memory, in
  parallel (PyTorch's C++ threads where PyTorch is loaded).
"""

from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
import itertools
import os
import sys
import warnings

import numpy as np

from xfeat_ros.errors import BackendError
from xfeat_ros.features.gpu import kernels, matching, ops
from xfeat_ros.features.gpu.ransac import alloc_epipolar_output
from xfeat_ros.features.pipeline import DESCRIPTOR_SIZE

_TOKENS = itertools.count()
TABLE_RING = 4
COPY_PIECE = 1 << 20  # bytes per host copy task
COPY_WORKERS = max(1, min(4, (os.cpu_count() or 2) // 2))
TORCH_COPY_MIN = 1 << 18  # bytes from which one copy goes through Tensor.copy_


def cupy_module():
    """Return CuPy, or raise :class:`BackendError` where it is missing."""
    try:
        import cupy
    except ImportError as exc:
        raise BackendError('cupy is not installed') from exc
    return cupy


class PinnedBuffer:
    """Page-locked host memory viewed as a NumPy array (for async copies)."""

    def __init__(self, nbytes, dtype=np.uint8):
        """Allocate ``nbytes`` bytes of pinned memory (from CuPy's pinned pool)."""
        cupy = cupy_module()
        self.memory = cupy.cuda.alloc_pinned_memory(max(int(nbytes), 1))
        self.nbytes = int(nbytes)
        self.array = np.frombuffer(self.memory, dtype=dtype,
                                   count=self.nbytes // np.dtype(dtype).itemsize)

    @property
    def ptr(self):
        """Host address."""
        return self.memory.ptr


def message_bytes(data):
    """View ``sensor_msgs/Image.data`` (bytes, array.array, memoryview, list) as uint8 [N]."""
    try:
        return np.frombuffer(data, dtype=np.uint8)
    except TypeError:
        return np.asarray(data, dtype=np.uint8).reshape(-1)


def copy_async(dst_ptr, src_ptr, nbytes, kind, stream):
    """``cudaMemcpyAsync`` on ``stream`` (``kind``: a cupy.cuda.runtime memcpy kind)."""
    if nbytes:
        cupy_module().cuda.runtime.memcpyAsync(dst_ptr, src_ptr, nbytes, kind, stream.ptr)


class GpuSlot:
    """
    Results of one in-flight frame, resident on the device until requested.

    ``keypoints`` float32 [capacity, 2] (original pixels), ``scores`` float32
    [capacity], ``descriptors`` float32 [capacity, 64], ``count`` int32 [1],
    ``matches`` (:class:`xfeat_ros.features.gpu.matching.MatchOutput`) against the previous
    frame; ``host_counts`` pinned int32 [2] = (keypoints, matches) once the
    slot's ``done`` event has passed (the keypoint count arrives in its
    batch's pinned block, ``count_ref``).
    """

    def __init__(self, capacity, desc_dim=DESCRIPTOR_SIZE):
        """Pre-allocate device buffers for ``capacity`` keypoints (current device)."""
        self.allocate(capacity, desc_dim)

    def allocate(self, capacity, desc_dim=DESCRIPTOR_SIZE):
        """(Re)allocate every buffer; attributes set by the caller are kept."""
        cupy = cupy_module()
        if hasattr(self, 'uploaded'):
            self._previous_upload_passed()  # its source (staging or a pooled image) is let go
        self.token = next(_TOKENS)  # identity of this buffer set, for graph caches
        self.capacity = max(int(capacity), 0)
        self.desc_dim = int(desc_dim)
        self.keypoints = cupy.empty((self.capacity, 2), dtype=cupy.float32)
        self.scores = cupy.empty(self.capacity, dtype=cupy.float32)
        self.descriptors = cupy.empty((self.capacity, self.desc_dim), dtype=cupy.float32)
        self.count = cupy.zeros(1, dtype=cupy.int32)
        self.matches = matching.alloc_match_output(self.capacity)
        self.epipolar = alloc_epipolar_output(self.capacity)
        self.tracks = ops.alloc_track_output(self.capacity)
        self.selection = ops.alloc_spread_output(self.capacity)  # used by a spreading engine
        self.selects = False  # its frame's spread selection is made on the device
        self.dense = None  # its frame's dense map on the host, where tracks are carried
        self.host_counts = PinnedBuffer(8, np.int32)
        self.host_counts.array[:] = 0
        self.count_ref = (self.host_counts, 0)
        self.staging = None
        self.upload_source = None  # a pooled image its upload reads, kept until that passed
        self.pooled_offset = None  # where its last image's pixels lay in their image buffer
        self.uploaded = cupy.cuda.Event(disable_timing=True)
        self.done = cupy.cuda.Event(disable_timing=True)
        # recorded after its batch's description and keypoint counts (None: no such
        # batch, e.g. features set from the host): the features may be copied from then on
        self.described = None
        self.upload_pending = False
        self.submitted = False
        self.pending = False  # decoded, waiting for its batch's backbone call
        self.matched = False
        self.prefetched = None  # its results' copies, enqueued with an armed chain (.results)
        self.wire = None        # their block, when placed for a message (.results.prefetch)
        # (previous frame, next id) its tracks were continued from on the device (.armed), or None
        self.tracked = None
        self.image_hw = None
        self.spread = None  # the Spread its features are candidates of (engine.frame_spread)
        self.marks = []

    def _previous_upload_passed(self):
        """Wait (rarely) until this slot's last upload has read its source."""
        if self.upload_pending:
            self.uploaded.synchronize()
            self.upload_pending = False

    def upload_from(self, data):
        """Keep ``data`` (pinned, an image buffer's view) alive as the next upload's source."""
        self._previous_upload_passed()
        self.upload_source = data

    def staging_for(self, nbytes):
        """Pinned staging buffer of at least ``nbytes`` (waits for its previous upload)."""
        self._previous_upload_passed()
        self.upload_source = None
        if self.staging is None or self.staging.nbytes < nbytes:
            self.staging = PinnedBuffer(nbytes)
        return self.staging

    def keypoint_count(self):
        """Keypoints of the last finished frame (valid once ``done`` has passed)."""
        block, index = self.count_ref
        return int(block.array[index])

    def stage_times_ms(self):
        """Milliseconds of each stage, from the marks of an engine with ``profile=True``."""
        elapsed = cupy_module().cuda.get_elapsed_time
        return {name: elapsed(start, end)
                for (_, start), (name, end) in zip(self.marks, self.marks[1:])}


def batch_capacity(needed, max_batch):
    """Frames a workspace is allocated for: the next power of two, at most ``max_batch``."""
    frames = 1
    while frames < needed:
        frames *= 2
    return max(min(frames, int(max_batch)), int(needed))


RAW_ALIGN = 256


class Workspace:
    """
    Device buffers of one model size for up to ``frames`` frames, shared in stream order.

    ``raw`` holds the frames' image bytes as uploaded (frame f at
    ``f * raw_stride``), ``image`` the decoded network input [frames, 1, mh, mw].
    """

    def __init__(self, mh, mw, capacity, frames=1, desc_dim=DESCRIPTOR_SIZE, raw_stride=0):
        """Allocate the network input/outputs and detection scratch for ``mh x mw``."""
        cupy = cupy_module()
        h, w = mh // 8, mw // 8
        self.model_hw = (mh, mw)
        self.frames = int(frames)
        self.raw_stride = 0
        self.raw = None
        self.grow_raw(raw_stride)
        self.image = cupy.empty((frames, 1, mh, mw), dtype=cupy.float32)
        self.feats = cupy.empty((frames, desc_dim, h, w), dtype=cupy.float32)
        self.logits = cupy.empty((frames, 65, h, w), dtype=cupy.float32)
        self.reliability = cupy.empty((frames, 1, h, w), dtype=cupy.float32)
        self.feats_hwc = cupy.empty((frames, h, w, desc_dim), dtype=cupy.float32)
        self.detect = ops.alloc_detect_buffers(mh, mw, capacity, frames)
        self.graphs = OrderedDict()  # captured detection graphs, see GpuEngine._launch

    def grow_raw(self, nbytes, keep=0):
        """Make every frame's raw row hold ``nbytes``; the first ``keep`` rows move along."""
        stride = -(-int(nbytes) // RAW_ALIGN) * RAW_ALIGN
        if stride <= self.raw_stride:
            return
        old, old_stride = self.raw, self.raw_stride
        self.raw_stride = stride
        self.raw = cupy_module().empty(self.frames * stride, dtype=np.uint8)
        for row in range(keep):  # device copies on the current stream, in order
            self.raw[row * stride:row * stride + old_stride] = \
                old[row * old_stride:(row + 1) * old_stride]

    def raw_row(self, row):
        """Device pointer of frame ``row``'s raw bytes."""
        return self.raw.data.ptr + row * self.raw_stride

    def outputs(self, frames):
        """Backbone output views ``(feats, logits, reliability)`` of the first ``frames``."""
        return self.feats[:frames], self.logits[:frames], self.reliability[:frames]


class TableRing:
    """
    Pinned host frame tables uploaded into ``device`` (uint64 [frames, FRAME_FIELDS]).

    ``upload(rows, stream)`` writes the rows into the next pinned buffer (after
    the copy that last read it has passed) and enqueues one host-to-device
    copy; kernels launched later on ``stream`` read the device table.
    """

    def __init__(self, frames, size=TABLE_RING):
        """Allocate ``size`` pinned tables and the device table for ``frames`` frames."""
        cupy = cupy_module()
        self.frames = int(frames)
        nbytes = self.frames * kernels.FRAME_FIELDS * 8
        self.host = [PinnedBuffer(nbytes, np.uint64) for _ in range(size)]
        self.events = [None] * size
        self.device = cupy.zeros((self.frames, kernels.FRAME_FIELDS), dtype=cupy.uint64)
        self.next = 0

    def upload(self, rows, stream):
        """Copy host ``rows`` (uint64 [n, FRAME_FIELDS]) into the device table on ``stream``."""
        cupy = cupy_module()
        index = self.next
        self.next = (index + 1) % len(self.host)
        if self.events[index] is not None:
            self.events[index].synchronize()
        else:
            self.events[index] = cupy.cuda.Event(disable_timing=True)
        flat = self.host[index].array
        flat[:rows.size] = rows.reshape(-1)
        copy_async(self.device.data.ptr, self.host[index].ptr, rows.nbytes,
                   cupy.cuda.runtime.memcpyHostToDevice, stream)
        self.events[index].record(stream)


def _source_tensor(torch, src):
    """``src`` as a tensor; a read-only array (a message's bytes) too, which copy_ only reads."""
    if src.flags.writeable:
        return torch.from_numpy(src)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', UserWarning)  # "not writable": it is only read
        return torch.from_numpy(src)


class HostCopier:
    """
    Copy ``[(pinned view, bytes)]`` into pinned memory, in parallel.

    Where PyTorch is loaded already (the PyTorch backbone; ``use_torch``: this
    copier does not import it, which would cost a second and hundreds of MB to
    a process that does not use it), each copy of at least
    :data:`TORCH_COPY_MIN` bytes is one ``Tensor.copy_``, which PyTorch splits
    over its intra-op threads in C++ (a VGA rgb8 image: 27 us on one thread,
    11 us on four, cache-hot); a split over Python
    threads cost more in hand-offs than it saved (docs/design-notes.md).
    Other copies go in pieces of :data:`COPY_PIECE` bytes over ``workers``
    threads (NumPy releases the GIL while it copies); one worker copies on
    the calling thread.
    """

    def __init__(self, workers=None, use_torch=True):
        """Use ``workers`` threads (default :data:`COPY_WORKERS`), started on first use."""
        self.workers = max(1, int(COPY_WORKERS if workers is None else workers))
        self._pool = None
        self.torch = sys.modules.get('torch') if use_torch else None

    def copy(self, copies):
        """Copy every ``(dst, src)`` pair; return when all are done."""
        if self.torch is not None:
            rest = []
            for dst, src in copies:
                if src.size >= TORCH_COPY_MIN:
                    self.torch.from_numpy(dst).copy_(_source_tensor(self.torch, src))
                else:
                    rest.append((dst, src))
            copies = rest
        pieces = [(dst[a:a + COPY_PIECE], src[a:a + COPY_PIECE]) for dst, src in copies
                  for a in range(0, src.size, COPY_PIECE)]
        if self.workers <= 1 or len(pieces) <= 1:
            for dst, src in pieces:
                np.copyto(dst, src)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix='xfeat_gpu_copy')
        for _ in self._pool.map(lambda pair: np.copyto(*pair), pieces):
            pass
