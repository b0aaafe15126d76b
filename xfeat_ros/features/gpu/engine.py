# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The GPU frame engine: same contract as :class:`xfeat_ros.features.engine.CpuEngine`.

Everything of a frame runs on the device, on one CUDA stream. ``submit``
enqueues the frame's upload (pinned staging -> row b of its model size's raw
bytes) and defers the rest, so that all frames of one model size submitted
before the next synchronization share one backbone call and one launch of
each kernel (a *flush*): decode + resize, backbone, detection, description,
then the queued matches as one graph with each pair's epipolar check, the
spread selections behind them, and the results to one pinned block per
frame. A flush happens in ``synchronize()``, in ``features()``/``matches()``/
``results()`` of a frame not yet flushed, when a batch reaches ``max_batch``
frames, and before a slot still waiting is submitted again; ``flush()``
forces one. The data path, the kernels and the memory are laid out in
docs/gpu.md.

Buffers: a slot owns its results (capacity :attr:`GpuEngine.detect_k`) and
a pinned staging buffer; per model size a workspace holds the batch input,
the backbone outputs and the detection scratch for up to ``max_batch``
frames (the last :data:`MAX_WORKSPACES` sizes are kept). A new workspace is
made for the largest group the caller said to expect
(:meth:`GpuEngine.expect_groups`) and runs the backbone once at every batch
size up to it, so that no size is met for the first time mid-stream.
"""

from collections import deque, OrderedDict
import time

import numpy as np

from xfeat_ros.defaults import MIN_COSSIM, THRESHOLD, TOP_K
from xfeat_ros.errors import BackendError, DescriptorLayoutError
from xfeat_ros.features.engine import Capabilities, GPU_BACKENDS
from xfeat_ros.features.gpu import armed, host_pairs, jpeg, kernels, ops, upload
from xfeat_ros.features.gpu import results as host_results
from xfeat_ros.features.gpu import spread as device_spread
from xfeat_ros.features.gpu.buffers import (batch_capacity, copy_async, cupy_module, GpuSlot,
                                            HostCopier, message_bytes, PinnedBuffer, TableRing,
                                            Workspace)
from xfeat_ros.features.gpu.pair_graph import PairMatcher, PairSettings
from xfeat_ros.features.pipeline import DESCRIPTOR_SIZE
from xfeat_ros.features.spread import NO_SPREAD
from xfeat_ros.logs import package_logger

LOG = package_logger(__name__)

ENGINE_BACKENDS = ('auto',) + GPU_BACKENDS
MAX_WORKSPACES = 4
MAX_GRAPHS = 64  # per workspace (detection) and per engine (matching)
MAX_BATCH = 32

STAGES = ('upload', 'decode', 'backbone', 'detect', 'describe')

__all__ = ['GpuEngine', 'GpuSlot', 'PinnedBuffer', 'copy_async', 'message_bytes',
           'ENGINE_BACKENDS']


class GpuEngine:
    """Frame engine on one CUDA device (see the module docstring)."""

    def __init__(self, backbone, gpu=0, top_k=TOP_K, threshold=THRESHOLD,
                 min_cossim=MIN_COSSIM, profile=False, graphs=True, max_batch=MAX_BATCH,
                 tensor_cores=True, copy_workers=None, epipolar=True, spread=NO_SPREAD):
        """
        Wrap a GPU backbone; compiles the kernels now so errors surface here.

        ``graphs=True`` captures the post-backbone launches of a (workspace,
        batch size, settings) combination once as a CUDA graph and replays it;
        ``profile=True`` records CUDA events between stages (and launches
        directly). ``max_batch`` caps the frames of one backbone call (1: one
        call per frame, as before batching). ``tensor_cores=False`` matches
        with the FP32 kernel only (same matches, slower). ``copy_workers``
        threads copy image bytes into pinned memory (1: on the calling thread;
        default :data:`xfeat_ros.features.gpu.buffers.COPY_WORKERS`). ``epipolar``
        checks every match on the device (the tracks' RANSAC,
        ``MatchResult.verified``); False leaves ``verified`` None, for
        consumers that verify matches themselves (the attribute may change
        between submissions). An active ``spread``
        (:class:`xfeat_ros.features.spread.Spread`) makes each frame's features
        :meth:`~xfeat_ros.features.spread.Spread.candidates` of ``top_k`` spread
        candidates, as the CPU engine's: the runtime keeps the published ones once
        the frame's tracks are known (:meth:`xfeat_ros.runtime.stream.CameraStream.advance`).
        Frames of a spread of a radius or a grid are selected on the device too
        (:mod:`.spread`); with carried tracks (``spread.carry_frames``) each
        frame's dense descriptor map goes to the host with its features.
        """
        cupy = cupy_module()
        self.cupy = cupy
        self.gpu = int(gpu)
        self.device = f'cuda:{self.gpu}'
        self.backbone = backbone
        self.name = backbone.name
        self.desc_dim = DESCRIPTOR_SIZE
        self.top_k = int(top_k)
        self.spread = spread
        self.threshold = float(threshold)
        self.min_cossim = float(min_cossim)
        self.profile = bool(profile)
        self.graphs = bool(graphs)
        self.max_batch = max(1, int(max_batch))
        self.group_frames = 1  # frames a group may hold (expect_groups)
        self.tensor_cores = bool(tensor_cores)
        self.epipolar = bool(epipolar)  # may change between groups (benchmarks, tests)
        self._copier = HostCopier(copy_workers)
        self._image_pool = None  # pinned buffers images are taken into (image_buffer)
        self._jpeg = None  # the nvJPEG decoder (jpeg_decoder), False where there is none
        self._workspaces = OrderedDict()
        self._pending = OrderedDict()  # (mh, mw) -> [(slot, height, width)] awaiting a flush
        self._queued = []  # (previous, slot, tensor_cores) matches awaiting a flush
        self._unselected = {}  # id -> flushed slot whose device spread selection waits (.spread)
        self._pair_slots = [None, None]  # match_features' descriptor uploads
        self._in_flight = deque()  # (event, pinned block) kept until the copy into it passed
        self._armed = None  # the next frame's chain enqueued behind a gate (armed.py)
        self.arm_counts = {'armed': 0, 'fired': 0, 'cancelled': 0}
        self.last_fire_copied = None  # whether the last fired frame was copied into staging
        self.last_start_event = None  # CUDA event at the device start of the last group
        self.last_flush_marks = []
        self.last_group_seconds = {}  # host seconds of submit_group: 'stage', 'enqueue'
        from cupy.cuda.compiler import CompileException
        with cupy.cuda.Device(self.gpu):
            self.stream = cupy.cuda.Stream(non_blocking=True)
            # features to the host while the matching and the checks still run
            self.copy_stream = cupy.cuda.Stream(non_blocking=True)
            self._tables = TableRing(self.max_batch)
            try:
                modules = {'preprocess.cu': kernels.preprocess_module(self.gpu),
                           'gate.cu': kernels.gate_module(self.gpu),
                           'tracks.cu': kernels.tracks_module(self.gpu),
                           'spread.cu': kernels.spread_module(self.gpu),
                           'detect.cu': kernels.detect_module(self.gpu),
                           'describe.cu': kernels.describe_module(self.gpu, self.desc_dim),
                           'match.cu': kernels.match_module(self.desc_dim, self.gpu),
                           'match_tc.cu': kernels.match_tc_module(self.desc_dim, self.gpu),
                           'match_refine.cu': kernels.match_refine_module(self.desc_dim,
                                                                          self.gpu),
                           'ransac.cu': kernels.ransac_module(self.gpu),
                           'ransac_refine.cu': kernels.refine_module(self.gpu)}
                for filename, module in modules.items():  # look up outside any graph capture
                    for entry in kernels.ENTRY_POINTS[filename]:
                        ops.function(module, entry)
            except (CompileException, cupy.cuda.runtime.CUDARuntimeError) as exc:
                raise BackendError(f'CUDA kernels failed to compile or load: {exc}') from exc
            # The matcher and the track check of every match (issue 10: tracks off the
            # host's critical path), made here: nothing may be allocated while a graph is
            # captured.
            self._pairs = PairMatcher(cupy, self.stream, self.desc_dim)

    # -- settings and slots -------------------------------------------------------------------

    def configure(self, top_k=None, threshold=None, min_cossim=None):
        """Change detection or matching settings; frames submitted before keep the old ones."""
        armed.cancel(self)
        self.flush()
        device_spread.select_unmatched(self)
        if top_k is not None:
            self.top_k = int(top_k)
        if threshold is not None:
            self.threshold = float(threshold)
        if min_cossim is not None:
            self.min_cossim = float(min_cossim)

    @property
    def detect_k(self):
        """Keypoints detected per frame: ``top_k``, or the spread's candidates."""
        return self.spread.candidates(self.top_k)

    def frame_spread(self):
        """Return the Spread a frame's features are candidates of (cap ``top_k``), or None."""
        return self.spread.for_frame(self.top_k, self.min_cossim) if self.spread.active else None

    def alloc_slot(self):
        """Return a new slot with device buffers of capacity :attr:`detect_k`."""
        with self.cupy.cuda.Device(self.gpu), self.stream:
            return GpuSlot(self.detect_k, self.desc_dim)

    def _fit_slot(self, slot):
        if slot.capacity < self.detect_k:
            if slot.submitted:
                slot.done.synchronize()
            slot.allocate(self.detect_k, self.desc_dim)

    @property
    def capabilities(self):
        """Every optional part of the contract; the epipolar check as currently set."""
        return Capabilities(groups=True, arming=True, image_buffers=True,
                            epipolar=self.epipolar, jpeg_decoder=True)

    def jpeg_decoder(self):
        """
        Return the engine's nvJPEG decoder (:mod:`.jpeg`), or None where there is none.

        Made on first use; where torchvision (or its nvJPEG) is missing, None
        from then on, said once in the log: JPEG payloads are then decoded on
        the CPU.
        """
        if self._jpeg is None:
            decoder, reason = jpeg.probe(self.cupy, self.gpu)
            self._jpeg = decoder or False
            if decoder is None:
                LOG.warning('compressed images are decoded on the CPU: %s', reason)
        return self._jpeg or None

    def expect_groups(self, frames):
        """
        Make each new workspace for groups of up to ``frames`` frames, its backbone ready.

        The backbone binds (and captures) per batch size on first use: ~40-55 ms
        for the PyTorch backbone on the H200 machine, which at 8 x 120 Hz drops
        frames of every camera when a batch size first comes mid-stream (a
        one-frame group after two-frame ones; docs/design-notes.md).
        So a new workspace runs the backbone once at every size up to
        ``frames`` (capped at ``max_batch``), on the first frame of its model
        size, which waits for the workspace anyway.
        """
        self.group_frames = max(1, min(int(frames), self.max_batch))

    def _ready_batches(self, ws):
        """Run the backbone on a new workspace at every batch size up to the expected group."""
        ws.image.fill(0)   # a defined input for the runs (their outputs are overwritten)
        for frames in range(1, self.group_frames + 1):  # ws.frames >= group_frames
            self.backbone.run(ws.image[:frames], ws.outputs(frames), self.stream)

    def _workspace(self, mh, mw, frames):
        """Return the workspace of ``mh x mw`` for ``frames`` frames (pending rows kept)."""
        ws = self._workspaces.get((mh, mw))
        if ws is None and len(self._workspaces) >= MAX_WORKSPACES:
            self.flush()  # rare (a fifth resolution): nothing may wait in the evicted one
            _, old = self._workspaces.popitem(last=False)
            self.stream.synchronize()  # queued work done before graph memory is released
            self.backbone.release(old.image)
        if ws is None or ws.frames < frames or ws.detect.capacity < self.detect_k:
            size = batch_capacity(max(frames, ws.frames if ws else 1, self.group_frames),
                                  self.max_batch)
            new = Workspace(mh, mw, self.detect_k, size, self.desc_dim,
                            ws.raw_stride if ws else 0)
            if ws is not None:
                pending = len(self._pending.get((mh, mw), ()))
                if pending:  # uploaded rows waiting for their flush move along
                    new.raw[:pending * ws.raw_stride] = ws.raw[:pending * ws.raw_stride]
                self.backbone.release(ws.image)
            ws = self._workspaces[(mh, mw)] = new
            self._ready_batches(ws)
        self._workspaces.move_to_end((mh, mw))
        return ws

    def _launch(self, cache, key, enqueue):
        """Run ``enqueue()`` on the stream, through the cached CUDA graph of ``key`` if enabled."""
        if not self.graphs or self.profile:
            enqueue()
        else:
            ops.launch_cached(cache, key, enqueue, self.stream, MAX_GRAPHS)

    def _capture(self, cache, key, enqueue):
        """Capture (not run) the graph ``_launch`` would replay for ``key``, if graphs are on."""
        if self.graphs and not self.profile:
            ops.capture_cached(cache, key, enqueue, self.stream, MAX_GRAPHS)

    def _capture_frame(self, ws, slot, previous):
        """
        Capture the graphs of a one-frame flush into ``slot`` (matched against ``previous``).

        An armed chain calls this before its gate: capturing behind a running
        gate kernel would wait until the gate expired (:mod:`.armed`).
        """
        k = self.detect_k
        if k > 0:
            self._capture(ws.graphs, (1, k, self.threshold),
                          lambda: self._detect_describe(ws, 1, k))
        if previous is not None:
            self._pairs.capture([(previous, slot, self.tensor_cores)], self._pair_settings())

    def _pair_settings(self):
        return PairSettings(self.min_cossim, self.epipolar, self._launch, self._capture,
                            self._mark)

    def _mark(self, marks, name):
        if self.profile:
            event = self.cupy.cuda.Event()
            event.record(self.stream)
            marks.append((name, event))

    # -- batches --------------------------------------------------------------------------------

    def _detect_describe(self, ws, frames, k):
        """Enqueue heatmap -> NMS -> top-K -> descriptors of ``frames`` frames (capturable)."""
        stream = self.stream
        mh, mw = ws.model_hw
        table = self._tables.device
        ops.heatmap_nms_score(ws.logits, ws.reliability, self.threshold, ws.detect, stream,
                              frames)
        ops.select_top_k(ws.detect, k, mw, table, stream, frames)
        self._mark(self.last_flush_marks, 'detect')
        ops.normalize_feats(ws.feats, ws.feats_hwc, stream, frames)
        ops.describe_frames(ws.feats_hwc, (mh, mw), ws.detect.positions, table, k, stream,
                            frames)
        self._mark(self.last_flush_marks, 'describe')

    def _decode(self, ws, batch):
        """Decode the batch's raw rows into ``ws.image`` (one launch if one layout)."""
        ops.decode_batch(ws, batch, self.stream)
        self._mark(self.last_flush_marks, 'decode')

    def _run_batch(self, ws, batch):
        """Enqueue decode, backbone, detection and description of a batch."""
        cupy = self.cupy
        stream = self.stream
        frames = len(batch)
        mh, mw = ws.model_hw
        k = self.detect_k
        self._decode(ws, batch)
        self.backbone.run(ws.image[:frames], ws.outputs(frames), stream)
        self._mark(self.last_flush_marks, 'backbone')
        # the table is read from detection on: built while the backbone runs
        rows = ops.frame_table_rows([(s.count, s.keypoints, s.scores, s.descriptors,
                                      w / mw, h / mh) for s, h, w, _, _, _ in batch])
        self._tables.upload(rows, stream)
        if k > 0:
            self._launch(ws.graphs, (frames, k, self.threshold),
                         lambda: self._detect_describe(ws, frames, k))
        else:
            ops.memset_async(ws.detect.counts[:frames], 0, stream)
            for slot, *_ in batch:
                ops.memset_async(slot.count, 0, stream)
        counts = PinnedBuffer(4 * frames, np.int32)
        copy_async(counts.ptr, ws.detect.counts.data.ptr, 4 * frames,
                   cupy.cuda.runtime.memcpyDeviceToHost, stream)
        # the block returns to CuPy's pinned pool only after this copy has landed
        # (the pool could hand it to a staging buffer that the host writes at once)
        copied = cupy.cuda.Event(disable_timing=True)
        copied.record(stream)
        self._in_flight.append((copied, counts))
        selects = device_spread.selects_on_device(self)
        device_spread.dense_to_host(self, ws, batch if k > 0 else ())
        for f, (slot, *_) in enumerate(batch):
            slot.selects = selects
            if selects:  # enqueued behind its match, or on its own (select_unmatched)
                self._unselected[id(slot)] = slot
            slot.count_ref = (counts, f)
            slot.pending = False
            slot.marks.extend(self.last_flush_marks)
            if slot.described is None:
                slot.described = cupy.cuda.Event(disable_timing=True)
            slot.described.record(stream)
            slot.done.record(stream)

    def _enqueue_matches(self, pairs):
        """Enqueue ``[(previous, slot, tensor_cores)]`` as one graph, then their selections."""
        self._pairs.enqueue(pairs, self._pair_settings())
        device_spread.select_matched(self, pairs)

    def flush(self):
        """Enqueue every waiting batch (one backbone call per model size), then queued matches."""
        if not (self._pending or self._queued):
            return
        armed.cancel(self)
        while self._in_flight and self._in_flight[0][0].done:
            self._in_flight.popleft()
        with self.cupy.cuda.Device(self.gpu), self.stream:
            for size, batch in self._pending.items():
                self.last_flush_marks = []
                self._run_batch(self._workspaces[size], batch)
            self._pending.clear()
            queued, self._queued = self._queued, []
            if queued:
                self._enqueue_matches(queued)

    def _waiting(self, slot):
        """Tell whether ``slot`` waits in a batch or in a queued match."""
        return slot.pending or any(slot is a or slot is b for a, b, _ in self._queued)

    def image_buffer(self, nbytes):
        """Return a pinned uint8 buffer of at least ``nbytes`` to take an image into (.upload)."""
        return upload.image_buffer(self, nbytes)

    # -- the contract ---------------------------------------------------------------------------

    def submit(self, msg, slot):
        """
        Take ``msg`` into ``slot``: upload now, decode and the rest at the next flush.

        Raises the typed :class:`xfeat_ros.errors.ImageError` family before
        anything is enqueued. Never synchronizes (except to reuse the slot's
        own staging buffer while its previous upload is still in flight).
        """
        armed.cancel(self)
        size, frame, copy, source = upload.stage(self, msg, slot)
        if copy is not None:
            self._copier.copy([copy])
        upload.enqueue_upload(self, size, frame, source)

    def submit_match(self, previous, slot):
        """Match ``previous``'s descriptors against ``slot``'s (enqueued at the next flush)."""
        if not (getattr(previous, 'submitted', False) and getattr(slot, 'submitted', False)):
            raise DescriptorLayoutError('both slots must hold submitted frames before matching')
        armed.cancel(self)
        if previous.pending or slot.pending or self._queued:
            self._queued.append((previous, slot, self.tensor_cores))
        else:
            with self.cupy.cuda.Device(self.gpu), self.stream:
                self._enqueue_matches([(previous, slot, self.tensor_cores)])
        slot.matched = True

    def arm(self, like, slot, previous=None, placement=None, tracks=None):
        """
        Enqueue the next frame (laid out like ``like``) into ``slot`` before it comes.

        The frame's whole chain, matched against ``previous`` if given, waits
        on the device behind a gate that the ``submit_group([msg], [slot],
        previous, chain=True)`` of a fitting frame opens; anything else
        cancels it (:mod:`.armed`). Returns whether it was armed. ``slot`` is
        reserved for that frame: do not read it before submitting into it.
        ``placement`` and ``tracks``: see :func:`.armed.arm`; with an active
        spread neither applies (the published keypoints are chosen on the host,
        after the chain), so both are ignored.
        """
        if self.spread.carry_frames > 0:
            return False  # the dense map's pinned block is taken per frame: never behind a gate
        if self.spread.active:
            placement = tracks = None
        return armed.arm(self, like, slot, previous, placement, tracks)

    def disarm(self):
        """Cancel an armed chain, if any (its slot then holds no frame)."""
        armed.cancel(self)

    def submit_group(self, msgs, slots, previous=None, chain=False, start_event=None):
        """
        Submit ``msgs`` into ``slots`` (same length) as one group, then flush.

        Every message is validated and copied into its slot's pinned staging
        buffer first, then all uploads are enqueued back to back and the group
        is flushed: frames of one model size share one decode launch, one
        backbone call and one launch of each detection kernel (up to
        ``max_batch`` frames). With ``chain``, frame i is also matched against
        frame i - 1 and the first frame against ``previous`` (a submitted slot)
        when given. ``start_event`` (a CUDA event), if given, is recorded on
        the stream after the host copies and before the first upload (device
        time of the group without the host's copies). A typed error of a
        message is raised before anything of the group is enqueued.
        """
        if len(msgs) != len(slots):
            raise ValueError(f'{len(msgs)} messages for {len(slots)} slots')
        if len({id(s) for s in slots}) != len(slots):
            raise ValueError('a slot appears twice in one group')
        if self._armed is not None and armed.fire(self, msgs, slots, previous, chain):
            return
        self.last_start_event = start_event
        t0 = time.perf_counter()
        staged = [upload.stage(self, msg, slot) for msg, slot in zip(msgs, slots)]
        self._copier.copy([copy for _, _, copy, _ in staged if copy is not None])
        if start_event is not None:
            start_event.record(self.stream)
        t1 = time.perf_counter()
        for size, frame, _, source in staged:
            upload.enqueue_upload(self, size, frame, source)
        if chain:
            for before, slot in zip([previous] + list(slots[:-1]), slots):
                if before is not None:
                    self.submit_match(before, slot)
        self.flush()
        self.last_group_seconds = {'stage': t1 - t0, 'enqueue': time.perf_counter() - t1}

    def match_features(self, features0, features1):
        """Match two host :class:`Features` on the device now (stereo; :mod:`.host_pairs`)."""
        return host_pairs.match_host_features(self, features0, features1)

    def synchronize(self):
        """Flush, then one stream synchronization for every outstanding slot."""
        armed.cancel(self)
        self.flush()
        device_spread.select_unmatched(self)
        with self.cupy.cuda.Device(self.gpu):
            self.stream.synchronize()

    def _fetch(self, slots, kinds):
        """Copy the results ``kinds`` of ``slots`` to the host (one sync); ``{(id, kind): r}``."""
        if self._armed is not None and any(s is self._armed.slot for s in slots):
            armed.cancel(self)
        with self.cupy.cuda.Device(self.gpu):
            found = host_results.fetch(slots, kinds, self.copy_stream, self.stream,
                                       flush=self._complete, behind_done=self._armed is not None)
        for slot in slots:  # their uploads passed before the copies waited for
            if getattr(slot, 'submitted', False):
                slot.upload_source = None
        return found

    def _complete(self, slot):
        """Enqueue whatever of ``slot``'s work is still deferred (its batch, its selection)."""
        if self._waiting(slot):
            self.flush()
        device_spread.select_unmatched(self)

    def results(self, slots):
        """
        Host ``[(Features or None, MatchResult or None)]`` of ``slots``, one copy pass.

        Flushes if needed, waits for the slots, enqueues every copy into one
        pinned block and synchronizes once (cheaper than ``features`` and
        ``matches`` per slot). ``None`` where a slot holds no (matched) frame.
        """
        kinds = (host_results.FEATURES, host_results.MATCHES, host_results.SELECTION)
        found = self._fetch(slots, kinds)
        return [(host_results.features_of(found, s), found.get((id(s), host_results.MATCHES)))
                for s in slots]

    def features(self, slot):
        """Host :class:`Features` of a submitted slot (copies ``count`` rows), else None."""
        found = self._fetch([slot], (host_results.FEATURES, host_results.SELECTION))
        return host_results.features_of(found, slot)

    def matches(self, slot):
        """Host :class:`MatchResult` of a matched slot (copies ``count`` rows), else None."""
        kind = host_results.MATCHES
        return self._fetch([slot], (kind,)).get((id(slot), kind))
