# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The GPU frame engine: same contract as :class:`xfeat_ros.engine.CpuEngine`.

Everything of a frame runs on the device, on one CUDA stream, with no
synchronization inside ``submit``/``submit_match``::

    raw bytes -> pinned staging (per slot) -> device (async copy)
      -> decode + resize (preprocess.cu) -> backbone (PyTorch / TensorRT / ORT)
      -> heatmap, NMS, scores, top-K (detect.cu) -> descriptors (describe.cu)
      -> keypoint count -> pinned host (async copy)
    submit_match: mutual NN against the previous slot's device descriptors
      (match.cu) -> match count -> pinned host (async copy)

``synchronize()`` is one stream synchronization for all outstanding slots;
``features()``/``matches()`` then copy at most ``count`` rows to the host.

Buffers: a slot owns its results (capacity ``top_k``) and a pinned staging
buffer; per model size a workspace holds the network input, the backbone
outputs and the detection scratch. Stream order makes sharing a workspace
between slots safe. Nothing is allocated per frame: workspaces are created
on a new resolution (the last :data:`MAX_WORKSPACES` sizes are kept),
staging and raw buffers grow only, slots grow when ``top_k`` grows.
"""

from collections import OrderedDict
import itertools
import logging

import numpy as np

from xfeat_ros.decode import validate_layout
from xfeat_ros.defaults import MIN_COSSIM, THRESHOLD, TOP_K
from xfeat_ros.errors import BackendError, DescriptorLayoutError
from xfeat_ros.gpu import kernels, ops
from xfeat_ros.gpu.backbone import create_gpu_backbone, GPU_BACKENDS
from xfeat_ros.pipeline import DESCRIPTOR_SIZE, Features, MatchResult
from xfeat_ros.preprocess import model_size
from xfeat_ros.weights import load_weights, resolve_weights

LOG = logging.getLogger(__name__)

ENGINE_BACKENDS = ('auto',) + GPU_BACKENDS
AUTO_ORDER = ('tensorrt', 'pytorch')
MAX_WORKSPACES = 4
MAX_GRAPHS = 64  # per workspace (detection) and per engine (matching)
_TOKENS = itertools.count()
STAGES = ('upload', 'decode', 'backbone', 'detect', 'describe')


def message_bytes(data):
    """View ``sensor_msgs/Image.data`` (bytes, array.array, memoryview, list) as uint8 [N]."""
    try:
        return np.frombuffer(data, dtype=np.uint8)
    except TypeError:
        return np.asarray(data, dtype=np.uint8).reshape(-1)


def _cupy():
    try:
        import cupy
    except ImportError as exc:
        raise BackendError('cupy is not installed') from exc
    return cupy


class PinnedBuffer:
    """Page-locked host memory viewed as a NumPy array (for async copies)."""

    def __init__(self, nbytes, dtype=np.uint8):
        """Allocate ``nbytes`` bytes of pinned memory."""
        cupy = _cupy()
        self.memory = cupy.cuda.alloc_pinned_memory(max(int(nbytes), 1))
        self.nbytes = int(nbytes)
        self.array = np.frombuffer(self.memory, dtype=dtype,
                                   count=self.nbytes // np.dtype(dtype).itemsize)

    @property
    def ptr(self):
        """Host address."""
        return self.memory.ptr


def copy_async(dst_ptr, src_ptr, nbytes, kind, stream):
    """``cudaMemcpyAsync`` on ``stream`` (``kind``: a cupy.cuda.runtime memcpy kind)."""
    _cupy().cuda.runtime.memcpyAsync(dst_ptr, src_ptr, nbytes, kind, stream.ptr)


class GpuSlot:
    """
    Results of one in-flight frame, resident on the device until requested.

    ``keypoints`` float32 [capacity, 2] (original pixels), ``scores`` float32
    [capacity], ``descriptors`` float32 [capacity, 64], ``count`` int32 [1],
    ``matches`` (:class:`xfeat_ros.gpu.ops.MatchOutput`) against the previous
    frame; ``host_counts`` pinned int32 [2] = (keypoints, matches) after a sync.
    """

    def __init__(self, capacity, desc_dim=DESCRIPTOR_SIZE):
        """Pre-allocate device buffers for ``capacity`` keypoints (current device)."""
        self.allocate(capacity, desc_dim)

    def allocate(self, capacity, desc_dim=DESCRIPTOR_SIZE):
        """(Re)allocate every buffer; attributes set by the caller are kept."""
        cupy = _cupy()
        self.token = next(_TOKENS)  # identity of this buffer set, for graph caches
        self.capacity = max(int(capacity), 0)
        self.desc_dim = int(desc_dim)
        self.keypoints = cupy.empty((self.capacity, 2), dtype=cupy.float32)
        self.scores = cupy.empty(self.capacity, dtype=cupy.float32)
        self.descriptors = cupy.empty((self.capacity, self.desc_dim), dtype=cupy.float32)
        self.count = cupy.zeros(1, dtype=cupy.int32)
        self.matches = ops.alloc_match_output(self.capacity)
        self.host_counts = PinnedBuffer(8, np.int32)
        self.host_counts.array[:] = 0
        self.staging = None
        self.uploaded = cupy.cuda.Event(disable_timing=True)
        self.done = cupy.cuda.Event(disable_timing=True)
        self.upload_pending = False
        self.submitted = False
        self.matched = False
        self.image_hw = None
        self.marks = []

    def staging_for(self, nbytes):
        """Pinned staging buffer of at least ``nbytes`` (waits for its previous upload)."""
        if self.upload_pending:
            self.uploaded.synchronize()
            self.upload_pending = False
        if self.staging is None or self.staging.nbytes < nbytes:
            self.staging = PinnedBuffer(nbytes)
        return self.staging

    def stage_times_ms(self):
        """Milliseconds of each stage, from the marks of an engine with ``profile=True``."""
        elapsed = _cupy().cuda.get_elapsed_time
        return {name: elapsed(start, end)
                for (_, start), (name, end) in zip(self.marks, self.marks[1:])}


class Workspace:
    """Device buffers of one model size, shared by all slots in stream order."""

    def __init__(self, mh, mw, capacity, desc_dim=DESCRIPTOR_SIZE):
        """Allocate the network input/outputs and detection scratch for ``mh x mw``."""
        cupy = _cupy()
        h, w = mh // 8, mw // 8
        self.model_hw = (mh, mw)
        self.image = cupy.empty((1, 1, mh, mw), dtype=cupy.float32)
        self.feats = cupy.empty((1, desc_dim, h, w), dtype=cupy.float32)
        self.logits = cupy.empty((1, 65, h, w), dtype=cupy.float32)
        self.reliability = cupy.empty((1, 1, h, w), dtype=cupy.float32)
        self.feats_hwc = cupy.empty((h, w, desc_dim), dtype=cupy.float32)
        self.detect = ops.alloc_detect_buffers(mh, mw, capacity)
        self.graphs = OrderedDict()  # captured detection graphs, see GpuEngine._launch

    @property
    def outputs(self):
        """Backbone output buffers ``(feats, logits, reliability)``."""
        return self.feats, self.logits, self.reliability


class GpuEngine:
    """Frame engine on one CUDA device (see the module docstring)."""

    def __init__(self, backbone, gpu=0, top_k=TOP_K, threshold=THRESHOLD, min_cossim=MIN_COSSIM,
                 profile=False, graphs=True):
        """
        Wrap a GPU backbone; compiles the kernels now so errors surface here.

        ``graphs=True`` captures the post-backbone launches of a (workspace,
        slot, settings) combination once as a CUDA graph and replays it, which
        cuts the host's launch cost per frame; ``profile=True`` records CUDA
        events between stages (and launches directly).
        """
        cupy = _cupy()
        self.cupy = cupy
        self.gpu = int(gpu)
        self.device = f'cuda:{self.gpu}'
        self.backbone = backbone
        self.name = backbone.name
        self.desc_dim = DESCRIPTOR_SIZE
        self.top_k = int(top_k)
        self.threshold = float(threshold)
        self.min_cossim = float(min_cossim)
        self.profile = bool(profile)
        self.graphs = bool(graphs)
        self._match_graphs = OrderedDict()
        self._workspaces = OrderedDict()
        self._raw = None
        self._scratch = ops.MatchScratch()
        self._pair_slots = [None, None]  # match_features' descriptor uploads
        from cupy.cuda.compiler import CompileException
        with cupy.cuda.Device(self.gpu):
            self.stream = cupy.cuda.Stream(non_blocking=True)
            try:
                modules = {'preprocess.cu': kernels.preprocess_module(self.gpu),
                           'detect.cu': kernels.detect_module(self.gpu),
                           'describe.cu': kernels.describe_module(self.gpu, self.desc_dim),
                           'match.cu': kernels.match_module(self.desc_dim, self.gpu)}
                for filename, module in modules.items():  # look up outside any graph capture
                    for entry in kernels.ENTRY_POINTS[filename]:
                        ops.function(module, entry)
            except (CompileException, cupy.cuda.runtime.CUDARuntimeError) as exc:
                raise BackendError(f'CUDA kernels failed to compile or load: {exc}') from exc

    # -- settings and slots -------------------------------------------------------------------

    def configure(self, top_k=None, threshold=None, min_cossim=None):
        """Change detection or matching settings; takes effect on the next submit."""
        if top_k is not None:
            self.top_k = int(top_k)
        if threshold is not None:
            self.threshold = float(threshold)
        if min_cossim is not None:
            self.min_cossim = float(min_cossim)

    def alloc_slot(self):
        """Return a new slot with device buffers of capacity ``top_k``."""
        with self.cupy.cuda.Device(self.gpu), self.stream:
            return GpuSlot(self.top_k, self.desc_dim)

    def _fit_slot(self, slot):
        if slot.capacity < self.top_k:
            if slot.submitted:
                slot.done.synchronize()
            slot.allocate(self.top_k, self.desc_dim)

    def _workspace(self, mh, mw):
        ws = self._workspaces.get((mh, mw))
        if ws is None:
            ws = Workspace(mh, mw, self.top_k, self.desc_dim)
            self._workspaces[(mh, mw)] = ws
            while len(self._workspaces) > MAX_WORKSPACES:
                _, old = self._workspaces.popitem(last=False)
                # rare (a fifth resolution): let queued work finish before the
                # backbone frees graph memory bound to the old buffers
                self.stream.synchronize()
                self.backbone.release(old.image)
        elif ws.detect.capacity < self.top_k:
            ws.detect = ops.alloc_detect_buffers(mh, mw, self.top_k)
            ws.graphs.clear()
        self._workspaces.move_to_end((mh, mw))
        return ws

    def _raw_buffer(self, nbytes):
        if self._raw is None or self._raw.size < nbytes:
            self._raw = self.cupy.empty(nbytes, dtype=self.cupy.uint8)
        return self._raw

    def _launch(self, cache, key, enqueue):
        """
        Run ``enqueue()`` on the stream, through a cached CUDA graph when enabled.

        The graph of ``key`` is captured on first use (nothing runs during the
        capture) and launched; the key must name every buffer and argument the
        launches bake in.
        """
        if not self.graphs or self.profile:
            enqueue()
            return
        graph = cache.get(key)
        if graph is None:
            self.stream.begin_capture()
            try:
                enqueue()
            finally:
                graph = self.stream.end_capture()
            cache[key] = graph
            while len(cache) > MAX_GRAPHS:
                cache.popitem(last=False)
        cache.move_to_end(key)
        graph.launch(self.stream)

    def _detect_describe(self, ws, slot, k, height, width):
        """Enqueue heatmap -> NMS -> top-K -> descriptors -> count copy for one frame."""
        cupy = self.cupy
        stream = self.stream
        mh, mw = ws.model_hw
        ops.heatmap_nms_score(ws.logits[0], ws.reliability[0, 0], self.threshold, ws.detect,
                              stream)
        ops.top_k(ws.detect, k, mw, width / mw, height / mh, slot.count, slot.keypoints,
                  slot.scores, stream)
        self._mark(slot, 'detect')
        ops.normalize_feats(ws.feats[0], ws.feats_hwc, stream)
        ops.sample_descriptors(ws.feats_hwc, (mh, mw), ws.detect.positions,
                               ops.DeviceCount(slot.count, k), slot.descriptors, stream)
        self._mark(slot, 'describe')
        copy_async(slot.host_counts.ptr, slot.count.data.ptr, 4,
                   cupy.cuda.runtime.memcpyDeviceToHost, stream)

    def _match(self, previous, slot):
        """Enqueue mutual-NN matching and the match-count copy."""
        side0 = ops.DescriptorSet(previous.descriptors,
                                  ops.DeviceCount(previous.count, previous.capacity),
                                  previous.desc_dim)
        side1 = ops.DescriptorSet(slot.descriptors, ops.DeviceCount(slot.count, slot.capacity),
                                  slot.desc_dim)
        ops.mutual_nn_match(side0, side1, slot.matches, self._scratch, self.min_cossim,
                            self.stream, width=self.desc_dim)
        self._mark(slot, 'match')
        copy_async(slot.host_counts.ptr + 4, slot.matches.count.data.ptr, 4,
                   self.cupy.cuda.runtime.memcpyDeviceToHost, self.stream)

    def _mark(self, slot, name):
        if self.profile:
            event = self.cupy.cuda.Event()
            event.record(self.stream)
            slot.marks.append((name, event))

    # -- the contract ---------------------------------------------------------------------------

    def submit(self, msg, slot):
        """
        Enqueue decode -> backbone -> detect -> describe of ``msg`` into ``slot``.

        Raises the typed :class:`xfeat_ros.errors.ImageError` family before
        anything is enqueued. Never synchronizes (except to reuse the slot's
        own staging buffer while its previous upload is still in flight).
        """
        data = message_bytes(msg.data)
        height, width, step = msg.height, msg.width, msg.step
        info = validate_layout(msg.encoding, height, width, step, data.size)
        mh, mw = model_size(height, width)
        cupy = self.cupy
        stream = self.stream
        with cupy.cuda.Device(self.gpu), stream:
            self._fit_slot(slot)
            ws = self._workspace(mh, mw)
            k = min(self.top_k, slot.capacity)
            slot.marks = []
            self._mark(slot, 'start')
            staging = slot.staging_for(data.size)
            staging.array[:data.size] = data
            raw = self._raw_buffer(data.size)
            copy_async(raw.data.ptr, staging.ptr, data.size,
                       cupy.cuda.runtime.memcpyHostToDevice, stream)
            slot.uploaded.record(stream)
            slot.upload_pending = True
            self._mark(slot, 'upload')
            ops.decode_resize(raw, info, height, width, step, bool(msg.is_bigendian), ws.image,
                              stream)
            self._mark(slot, 'decode')
            self.backbone.run(ws.image, ws.outputs, stream)
            self._mark(slot, 'backbone')
            key = (slot.token, k, self.threshold, int(height), int(width))
            self._launch(ws.graphs, key,
                         lambda: self._detect_describe(ws, slot, k, height, width))
            slot.done.record(stream)
        slot.submitted = True
        slot.matched = False
        slot.image_hw = (int(height), int(width))

    def submit_match(self, previous, slot):
        """Enqueue mutual-NN matching of ``previous``'s descriptors against ``slot``'s."""
        if not (getattr(previous, 'submitted', False) and getattr(slot, 'submitted', False)):
            raise DescriptorLayoutError('both slots must hold submitted frames before matching')
        cupy = self.cupy
        stream = self.stream
        with cupy.cuda.Device(self.gpu), stream:
            best_row, best_col = self._scratch.ensure(previous.capacity, slot.capacity)
            key = (previous.token, slot.token, self.min_cossim, best_row.data.ptr,
                   best_col.data.ptr)
            self._launch(self._match_graphs, key, lambda: self._match(previous, slot))
            slot.done.record(stream)
        slot.matched = True

    def match_features(self, features0, features1):
        """
        Match two host :class:`Features` on the device now; return a :class:`MatchResult`.

        For stereo pairs, whose frames were published (and their slots possibly
        reused) before the partner arrived: the float32 descriptors are
        uploaded into two engine-owned slots and matched by the same kernels
        as :meth:`submit_match`; one synchronization.
        """
        cupy = self.cupy
        with cupy.cuda.Device(self.gpu), self.stream:
            sides = []
            for index, features in enumerate((features0, features1)):
                n = len(features)
                slot = self._pair_slots[index]
                if slot is None or slot.capacity < max(n, 1):
                    slot = self._pair_slots[index] = GpuSlot(max(n, self.top_k), self.desc_dim)
                if n:
                    slot.descriptors[:n].set(
                        np.ascontiguousarray(features.descriptors, dtype=np.float32),
                        stream=self.stream)
                slot.count.set(np.array([n], dtype=np.int32), stream=self.stream)
                slot.submitted = True
                sides.append(slot)
        self.submit_match(*sides)
        self.synchronize()
        return self.matches(sides[1])

    def synchronize(self):
        """One stream synchronization for every outstanding slot."""
        with self.cupy.cuda.Device(self.gpu):
            self.stream.synchronize()

    def features(self, slot):
        """Host :class:`Features` of a submitted slot (copies ``count`` rows), else None."""
        if not getattr(slot, 'submitted', False):
            return None
        with self.cupy.cuda.Device(self.gpu):
            slot.done.synchronize()
            n = int(slot.host_counts.array[0])
            return Features(slot.keypoints[:n].get(), slot.scores[:n].get(),
                            slot.descriptors[:n].get(), slot.image_hw)

    def matches(self, slot):
        """Host :class:`MatchResult` of a matched slot (copies ``count`` rows), else None."""
        if not getattr(slot, 'matched', False):
            return None
        with self.cupy.cuda.Device(self.gpu):
            slot.done.synchronize()
            m = int(slot.host_counts.array[1])
            out = slot.matches
            return MatchResult(out.idx0[:m].get().astype(np.int64),
                               out.idx1[:m].get().astype(np.int64), out.similarity[:m].get())


def _check_device(gpu):
    cupy = _cupy()
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise BackendError(f'no usable CUDA device: {exc}') from exc
    if not 0 <= int(gpu) < count:
        raise BackendError(f'no CUDA device {gpu} ({count} visible)')


def select_backend(backend, weights, gpu=0, options=None):
    """
    Create the GPU backbone for ``backend`` ('auto': TensorRT, then PyTorch CUDA).

    ``weights`` is a loaded weights dict; ``options`` maps a backend name to
    keyword arguments for its class. Raises :class:`BackendError` (with every
    reason) when none is usable.
    """
    if backend not in ENGINE_BACKENDS:
        raise BackendError(f'unknown GPU backend {backend!r} (choose from {ENGINE_BACKENDS})')
    options = options or {}
    order = AUTO_ORDER if backend == 'auto' else (backend,)
    reasons = []
    for name in order:
        try:
            return create_gpu_backbone(name, weights, gpu, **options.get(name, {}))
        except BackendError as exc:
            LOG.info('GPU backend %s unavailable: %s', name, exc)
            reasons.append(f'{name}: {exc}')
    raise BackendError('no usable GPU backend (' + '; '.join(reasons) + ')')


def create_gpu_engine(backend='auto', weights='', gpu=0, top_k=TOP_K, threshold=THRESHOLD,
                      min_cossim=MIN_COSSIM, options=None):
    """
    Build a :class:`GpuEngine` for the node.

    ``backend`` is one of :data:`ENGINE_BACKENDS`; ``weights`` a path ('' for
    the lookup of :func:`xfeat_ros.weights.resolve_weights`) or a loaded dict.
    Raises :class:`BackendError` when CuPy, the device or every candidate
    backend is unusable (the node then falls back to the CPU engine), and
    :class:`xfeat_ros.errors.WeightsError` for unusable weights.
    """
    if backend not in ENGINE_BACKENDS:
        raise BackendError(f'unknown GPU backend {backend!r} (choose from {ENGINE_BACKENDS})')
    _check_device(gpu)
    if not isinstance(weights, dict):
        weights = load_weights(resolve_weights(weights))
    backbone = select_backend(backend, weights, gpu, options)
    engine = GpuEngine(backbone, gpu, top_k, threshold, min_cossim)
    LOG.info('GPU engine: backend %s on cuda:%d (asked for %s)', engine.name, int(gpu), backend)
    return engine
