# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
A camera's next frame enqueued on the device before its image exists.

At one frame in flight the host's launches stand between an image and its
results: ~0.18 ms of enqueue at 640x480 on the H200 machine, during which the
device waits (docs/design-notes.md). :func:`arm` enqueues the
whole chain of a camera's next frame while the device still works on the
current one - the upload from the slot's pinned staging buffer, decode,
backbone, detection, description, the match against the previous frame and
its check - behind a *gate* (``kernels/gate.cu``): a word of pinned host
memory that a one-thread kernel polls. When the frame comes and fits what was
armed (the same slot and previous slot, image layout and settings),
:func:`fire` copies its bytes into that staging buffer and opens the gate:
nothing is launched on the critical path.

Where the camera's images are taken into the engine's pinned image buffers
(the node's image thread), the chain uploads from the buffer the next image
will be taken into instead (:meth:`xfeat_ros.features.gpu.image_pool.ImagePool.newest`,
at the offset the previous image's pixels had in theirs): :func:`fire` then
only checks that the image lies there and opens the gate, without a copy; an
image found elsewhere cancels the chain (the ordinary path uploads it from
where it is).

Anything else asked of the engine first cancels an armed chain
(:func:`cancel`), so that no host wait ever stands behind a closed gate: the
cancelled chain runs on the stale bytes of the staging buffer (or of the
image buffer, whatever it holds by then) into the reserved slot, which holds
no frame afterwards. A gate the host has not opened within
:data:`HOST_LIFETIME_S` is never opened; its wait kernel gives up after
:data:`DEVICE_LIFETIME_NS` (a camera that stopped does not hold the stream for
ever), and the frame takes the ordinary path.

Only a backbone that enqueues without synchronizing and has its graph for one
frame of that size already (``ready()``, the PyTorch backbone) can be armed.
Nothing that waits for the device may follow the gate: the chain's own graphs
(detection, the match and its check) are captured before it, as a capture
waits while a kernel runs.
"""

from dataclasses import dataclass
import time

import numpy as np

from xfeat_ros.errors import ImageError
from xfeat_ros.features.gpu import kernels, ops, results as host_results, upload
from xfeat_ros.features.gpu.buffers import copy_async, message_bytes, PinnedBuffer
from xfeat_ros.features.gpu.spread import select_unmatched, selects_on_device
from xfeat_ros.features.image_codec import ImageLayout, validate_layout
from xfeat_ros.features.preprocess import model_size

HOST_LIFETIME_S = 2.5        # the host opens a gate at most this long after arming it
DEVICE_LIFETIME_NS = 5_000_000_000  # gate_wait gives up after this (> HOST_LIFETIME_S)


@dataclass(eq=False)
class Armed:
    """What an armed chain was enqueued for, and where its image goes."""

    key: tuple          # layout and settings a frame must have to fire it
    slot: object
    previous: object    # slot it is matched against, or None
    gate: PinnedBuffer  # uint64 [1]
    staging: PinnedBuffer  # the slot's pinned bytes that the chain uploads (None: reserved)
    nbytes: int
    armed_at: float     # time.monotonic()
    started: object     # CUDA event recorded when the gate opened (the frame's device start)
    reserved: object = None  # the image buffer the chain uploads from, held (or None)
    source: int = 0     # host address the chain uploads from
    prefetched: object = None  # its results' copies (.results.prefetch), the slot's on fire
    wire: object = None  # the block, when the features were placed for a message


def reserve(engine, previous, nbytes):
    """
    Return ``(buffer, address)`` the next image's pixels will be taken to, or None.

    The buffer the image thread holds for its next sample (the pool's
    newest) at the offset the pixels of ``previous``'s image had in theirs;
    None where either is unknown or the buffer is too small.
    """
    pool = engine._image_pool
    offset = getattr(previous, 'pooled_offset', None)
    if pool is None or offset is None:
        return None
    buffer = pool.newest()
    if buffer is None or buffer.size < offset + nbytes:
        return None
    return buffer, buffer.ctypes.data + offset


def settings_key(engine):
    """Return the engine settings an armed chain is enqueued with."""
    return (engine.top_k, engine.threshold, engine.min_cossim, engine.epipolar,
            engine.tensor_cores)


def armable(engine, size):
    """Return the workspace of model ``size`` if a chain can be armed on it now, else None."""
    ready = getattr(engine.backbone, 'ready', None)
    ws = engine._workspaces.get(size)
    if (engine.profile or ready is None or ws is None or ws.detect.capacity < engine.detect_k
            or not ready(ws.image[:1], ws.outputs(1))):
        return None
    return ws


def arm(engine, like, slot, previous=None, placement=None, tracks=None):
    """
    Enqueue a frame laid out like ``like`` into ``slot`` (matched against ``previous``).

    Returns whether the chain was armed (see the module docstring for when
    it is not). ``slot`` is reserved for that frame; the caller must not read
    it until it submitted the frame (or the chain was cancelled).
    ``placement`` (see :func:`.results.prefetch_block`) puts the frame's
    features where a message of them keeps them; its Features then carry
    that block as ``wire``. ``tracks`` ``(ids, ages, next_id, token)``: the
    previous frame's track ids (uint64) and ages (uint32) and the camera's
    next new id; with a checked match, the chain continues them through the
    verified matches (``tracks.cu``) and the frame's MatchResult carries
    them (:class:`xfeat_ros.features.pipeline.ContinuedTracks`, made from ``(token,
    next_id)``), placed too where a placement is given.
    """
    marks = [('start', time.perf_counter())]
    engine.last_arm_seconds = None
    cancel(engine)
    engine.flush()
    layout = ImageLayout.of(like) if not isinstance(like, ImageLayout) else like
    if layout.on_device:  # decoded on the device: no host bytes for the gate's upload
        return False
    height, width, step, encoding = layout.height, layout.width, layout.step, layout.encoding
    big_endian = bool(layout.is_bigendian)
    info = validate_layout(encoding, height, width, step, step * height)
    size = model_size(height, width)
    ws = armable(engine, size)
    if ws is None or slot is previous or (previous is not None and not (
            previous.submitted and not engine._waiting(previous))):
        return False
    nbytes = step * height
    cupy = engine.cupy
    with cupy.cuda.Device(engine.gpu), engine.stream:
        engine._fit_slot(slot)
        reserved = reserve(engine, previous, nbytes)
        if reserved is None:
            staging = slot.staging_for(nbytes)  # waits (rarely) for the slot's last upload
            source = staging.ptr
        else:
            staging, source = None, reserved[1]
            slot.upload_from(None)  # waits (rarely) for the slot's last upload
        # Capturing a graph waits while a kernel runs: behind the gate it would wait for
        # the gate to expire (a fresh process's second arm() took 5.0 s on the H200
        # machine, in the match graph's capture). Every graph the chain replays is
        # captured and uploaded here, before the gate exists.
        engine._capture_frame(ws, slot, previous)
        made_from = _send_tracks(engine, slot, previous, tracks)
        gate = PinnedBuffer(8, np.uint64)
        gate.array[0] = kernels.GATE_CLOSED
        # The flush behind the gate takes a small pinned block for its counts: one freed
        # into CuPy's pool now is what it gets, instead of a page-locked allocation, which
        # synchronizes implicitly and could wait for this very gate.
        PinnedBuffer(4, np.int32)
        # The same for the block its results are copied into, behind its work (below).
        slot.selects = selects_on_device(engine)  # its prefetch copies the selection too
        block, placed = host_results.prefetch_block(slot, placement)
        started = cupy.cuda.Event()
        frame = (slot, height, width, info, step, big_endian)
        # Stamped before the wait is enqueued: whatever blocks below, the host never opens
        # a gate the device may have given up on (HOST_LIFETIME_S < DEVICE_LIFETIME_NS).
        armed_at = time.monotonic()
        marks.append(('prepared', time.perf_counter()))

        def fetch(dst, stream):
            ops.gate_wait(gate.ptr, DEVICE_LIFETIME_NS, stream)
            started.record(stream)
            copy_async(dst, source, nbytes, cupy.cuda.runtime.memcpyHostToDevice, stream)
        upload.enqueue_upload(engine, size, frame, (source, nbytes), fetch=fetch)
        slot.tracked = made_from  # the upload cleared it as it does for any new frame
        marks.append(('chain', time.perf_counter()))  # behind the closed gate from here on
        # the gate goes back to CuPy's pinned pool only once its chain has read it
        passed = cupy.cuda.Event(disable_timing=True)
        passed.record(engine.stream)
        engine._in_flight.append((passed, gate))
    if previous is not None:
        engine.submit_match(previous, slot)
    marks.append(('match', time.perf_counter()))
    engine.flush()
    select_unmatched(engine)  # a frame matched to nothing: its selection joins the chain
    if made_from is not None:
        with cupy.cuda.Device(engine.gpu):
            out = slot.tracks
            ops.continue_tracks(out.prev_ids, out.prev_ages, len(tracks[0]), slot.matches,
                                slot.epipolar.mask, slot.count, made_from[1], out, engine.stream)
    marks.append(('flush', time.perf_counter()))
    with cupy.cuda.Device(engine.gpu):
        # the results' copies follow the chain: the frame's collection only waits for them
        prefetched = host_results.prefetch(slot, engine.stream, block, placed)
    engine._in_flight.append(prefetched[1])  # its block is kept until the copies passed
    marks.append(('prefetch', time.perf_counter()))
    # Seconds of each step, for the probe: a step near DEVICE_LIFETIME_NS blocked behind the
    # gate it had just enqueued (an implicitly synchronizing call), naming the culprit.
    engine.last_arm_seconds = {name: round(t - marks[i][1], 6)
                               for i, (name, t) in enumerate(marks[1:])}
    engine._armed = Armed((layout, settings_key(engine)), slot, previous, gate,
                          staging, nbytes, armed_at, started,
                          reserved[0] if reserved else None, source, prefetched,
                          block.array if placed else None)
    engine.arm_counts['armed'] += 1
    return True


def _send_tracks(engine, slot, previous, tracks):
    """
    Copy the previous frame's tracks to ``slot``'s device arrays (before the gate).

    Sets and returns ``slot.tracked`` = ``(token, next_id)`` where the chain
    will continue them (:func:`.results.prefetch_block` places them), None
    where it will not: no ``tracks``, no previous slot, no device check of
    the match, or more previous keypoints than the slot holds. The copy is
    enqueued ahead of the gate, so it runs at once.
    """
    slot.tracked = None
    if tracks is None or previous is None or not engine.epipolar:
        return None
    ids, ages, next_id, token = tracks
    count = len(ids)
    if count > slot.capacity or len(ages) != count:
        return None
    staging = PinnedBuffer(max(count, 1) * 12)
    staging.array[:count * 8].view(np.uint64)[:] = ids
    staging.array[count * 8:count * 12].view(np.uint32)[:] = ages
    out, kind = slot.tracks, engine.cupy.cuda.runtime.memcpyHostToDevice
    copy_async(out.prev_ids.data.ptr, staging.ptr, count * 8, kind, engine.stream)
    copy_async(out.prev_ages.data.ptr, staging.ptr + count * 8, count * 4, kind, engine.stream)
    passed = engine.cupy.cuda.Event(disable_timing=True)
    passed.record(engine.stream)
    engine._in_flight.append((passed, staging))  # its pinned bytes kept until copied
    slot.tracked = (token, int(next_id))  # read by prefetch_block: the tracks' places
    return slot.tracked


def cancel(engine):
    """Open an armed gate as cancelled; its slot then holds no frame."""
    armed = engine._armed
    if armed is None:
        return
    engine._armed = None
    armed.gate.array[0] = kernels.GATE_CANCELLED
    armed.slot.submitted = False
    armed.slot.matched = False
    armed.slot.tracked = None
    armed.slot.selects = False
    engine.arm_counts['cancelled'] += 1


def fire(engine, msgs, slots, previous, chain):
    """
    Run a ``submit_group`` call through the armed chain if it fits; return whether it did.

    A call that does not fit cancels the chain (the caller then takes the
    ordinary path). A message with a bad layout raises its typed error after
    the cancel, as the ordinary path would.
    """
    armed = engine._armed
    fits = (len(msgs) == 1 and slots[0] is armed.slot
            and (previous if chain else None) is armed.previous
            and time.monotonic() - armed.armed_at < HOST_LIFETIME_S
            and (ImageLayout.of(msgs[0]), settings_key(engine)) == armed.key)
    if not fits:
        cancel(engine)
        return False
    t0 = time.perf_counter()
    msg = msgs[0]
    data = message_bytes(msg.data)
    try:
        validate_layout(msg.encoding, msg.height, msg.width, msg.step, data.size)
    except ImageError:
        cancel(engine)
        raise
    nbytes = armed.nbytes
    if armed.reserved is None:
        engine._copier.copy([(armed.staging.array[:nbytes], data[:nbytes])])
    elif data.ctypes.data != armed.source:
        cancel(engine)  # taken elsewhere: uploaded from there on the ordinary path
        return False
    else:
        # its own chain's upload reads it: kept until that passed (never waited for here,
        # where the upload still stands behind the closed gate)
        armed.slot.upload_source = data
    armed.slot.pooled_offset = upload.pooled_offset(engine, data)
    armed.slot.prefetched = armed.prefetched
    armed.slot.wire = armed.wire
    engine.last_fire_copied = armed.reserved is None
    t1 = time.perf_counter()
    armed.gate.array[0] = kernels.GATE_OPEN  # after the bytes (x86 keeps the store order)
    engine._armed = None
    engine.arm_counts['fired'] += 1
    engine.last_start_event = armed.started
    engine.last_group_seconds = {'stage': t1 - t0, 'enqueue': time.perf_counter() - t1}
    return True
