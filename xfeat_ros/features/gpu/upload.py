# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The GPU engine's image uploads: pinned buffers to take images into, staging, the copy.

A frame's bytes reach the device from pinned host memory: a buffer of
:func:`image_buffer` the image was taken into (no host copy), or else the
slot's pinned staging buffer, which :func:`stage` readies and the engine's
:class:`~xfeat_ros.features.gpu.buffers.HostCopier` fills; :func:`enqueue_upload`
then copies them into the next raw row of their model size's batch (or lets
an armed chain's ``fetch`` do so behind its gate). Functions of the engine's
state (:class:`xfeat_ros.features.gpu.engine.GpuEngine`), as in :mod:`.armed`.
"""

import numpy as np

from xfeat_ros.errors import ImageLayoutError
from xfeat_ros.features.gpu.buffers import copy_async, message_bytes, PinnedBuffer
from xfeat_ros.features.gpu.image_pool import ImagePool
from xfeat_ros.features.image_codec import validate_layout
from xfeat_ros.features.preprocess import model_size


def image_buffer(engine, nbytes):
    """
    Return a pinned uint8 buffer of at least ``nbytes`` to take an image message into.

    An image whose pixels lie in such a buffer is uploaded from it without
    a copy into a slot's staging buffer (:mod:`xfeat_ros.features.gpu.image_pool`);
    the buffer is handed out again once nothing refers to it.
    """
    if engine._image_pool is None:
        engine._image_pool = ImagePool(lambda size: PinnedBuffer(size).array)
    try:
        with engine.cupy.cuda.Device(engine.gpu):
            return engine._image_pool.get(nbytes)
    except engine.cupy.cuda.runtime.CUDARuntimeError:
        # no pinned memory to be had (or a failed device, the node now on the CPU):
        # plain memory, which an engine copies as before; never an error at receipt
        return np.empty(max(int(nbytes), 1), np.uint8)


def pooled_offset(engine, data):
    """Return the offset of ``data`` (an array) in a buffer of :func:`image_buffer`, or None."""
    pool = engine._image_pool
    found = pool.locate(data) if pool is not None else None
    return None if found is None else found[1]


def stage(engine, msg, slot):
    """
    Validate ``msg`` and ready the pinned memory its bytes are uploaded from.

    Returns ``(model size, frame, copy, source)``: ``copy`` = (staging view,
    bytes), done by the caller (:class:`HostCopier`) before the upload is
    enqueued, or None when the bytes lie in a buffer of :meth:`image_buffer`
    already; ``source`` = (host address, byte count) of the upload, or (device
    address, byte count, copy kind) for pixels decoded on the device
    (:class:`xfeat_ros.features.gpu.jpeg.DeviceImage`: the upload waits for
    their decode on the engine's stream, no host copy).
    """
    if getattr(msg, 'device_pixels', None) is not None:
        return _stage_device(engine, msg, slot)
    data = message_bytes(msg.data)
    height, width, step = msg.height, msg.width, msg.step
    info = validate_layout(msg.encoding, height, width, step, data.size)
    mh, mw = model_size(height, width)
    if engine._waiting(slot):
        engine.flush()
    frame = (slot, int(height), int(width), info, int(step), bool(msg.is_bigendian))
    with engine.cupy.cuda.Device(engine.gpu), engine.stream:
        engine._fit_slot(slot)
        where = pooled_offset(engine, data)
        slot.pooled_offset = where
        if where is not None:
            slot.upload_from(data)
            return (mh, mw), frame, None, (data.ctypes.data, data.size)
        staging = slot.staging_for(data.size)
    return (mh, mw), frame, (staging.array[:data.size], data), (staging.ptr, data.size)


def _stage_device(engine, msg, slot):
    """Stage a :class:`~xfeat_ros.features.gpu.jpeg.DeviceImage` (see :func:`stage`)."""
    height, width, step = msg.height, msg.width, msg.step
    info = validate_layout(msg.encoding, height, width, step, msg.nbytes)
    if msg.device != engine.gpu:
        raise ImageLayoutError(f'image decoded on cuda:{msg.device}, the engine runs on '
                               f'cuda:{engine.gpu}')
    mh, mw = model_size(height, width)
    if engine._waiting(slot):
        engine.flush()
    frame = (slot, int(height), int(width), info, int(step), False)
    with engine.cupy.cuda.Device(engine.gpu), engine.stream:
        engine._fit_slot(slot)
        slot.pooled_offset = None
        slot.upload_from(msg.device_pixels)  # kept until this upload has passed
        engine.stream.wait_event(msg.ready)
    kind = engine.cupy.cuda.runtime.memcpyDeviceToDevice
    return (mh, mw), frame, None, (msg.device_pixels.data_ptr(), msg.nbytes, kind)


def enqueue_upload(engine, size, frame, source, fetch=None):
    """
    Upload a staged frame into the next raw row of its model size's batch.

    ``fetch(dst, stream)``, if given, enqueues the upload instead of a copy
    from ``source``'s address (an armed chain's gate, :mod:`.armed`).
    """
    cupy = engine.cupy
    slot = frame[0]
    batch = engine._pending.get(size)
    if batch is not None and len(batch) >= engine.max_batch:
        engine.flush()
        batch = None
    with cupy.cuda.Device(engine.gpu), engine.stream:
        ws = engine._workspace(*size, 1 + (len(batch) if batch else 0))
        ws.grow_raw(source[1], keep=len(batch) if batch else 0)
        batch = engine._pending.setdefault(size, [])
        slot.marks = []
        engine._mark(slot.marks, 'start')
        if fetch is None:
            kind = source[2] if len(source) > 2 else cupy.cuda.runtime.memcpyHostToDevice
            copy_async(ws.raw_row(len(batch)), source[0], source[1], kind, engine.stream)
        else:
            fetch(ws.raw_row(len(batch)), engine.stream)
        slot.uploaded.record(engine.stream)
        slot.upload_pending = True
        engine._mark(slot.marks, 'upload')
        batch.append(frame)
    slot.submitted = True
    slot.pending = True
    slot.matched = False
    slot.prefetched = None  # copies enqueued for an earlier frame (.armed) are not this one's
    slot.wire = None
    slot.tracked = None
    slot.image_hw = frame[1:3]
    slot.spread = engine.frame_spread()
