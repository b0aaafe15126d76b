# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Results of the GPU engine's slots to the host, through pinned memory.

:func:`copy_to_host` enqueues the device-to-host copies into a single pinned
block (CuPy's pinned pool) and records an event: one copy per allocation, so
a slot's three feature arrays travel in one copy and its match arrays with the
check's mask in another (:func:`xfeat_ros.gpu.buffers.carve`; the gaps between
them too). The NumPy arrays returned are views of that block (no second host
copy), valid once the event has passed. A slot whose work has passed copies
its counted rows; a slot whose work is still under way copies its whole
capacity right away, behind its work in stream order, so that the host waits
once instead of waiting for the counts and then for the copies;
:func:`assemble` cuts the rows to the counts, which the flush's small pinned
copies hold by then.
"""

import math

import numpy as np

from xfeat_ros.gpu.buffers import copy_async, cupy_module, PinnedBuffer
from xfeat_ros.pipeline import Features, MatchResult

FEATURES = 'features'
MATCHES = 'matches'


def result_parts(slot, kinds, finished=True):
    """
    ``[(kind, slot, [(device array, rows)])]`` to copy for ``slot``.

    ``finished``: the slot's work has passed, so its counts are known and only
    the counted rows are copied; otherwise every row (the capacity).
    """
    out = []
    if FEATURES in kinds:
        n = slot.keypoint_count() if finished else slot.capacity
        out.append((FEATURES, slot, [(slot.keypoints, n), (slot.scores, n),
                                     (slot.descriptors, n)]))
    if MATCHES in kinds:
        match = slot.matches
        m = int(slot.host_counts.array[1]) if finished else match.capacity
        parts = [(match.idx0, m), (match.idx1, m), (match.similarity, m)]
        if getattr(slot, 'checked', True):  # the epipolar mask of a checked match
            parts.append((slot.epipolar.mask, m))
        out.append((MATCHES, slot, parts))
    return out


def _spans(parts):
    """
    Group ``[(device array, rows)]`` into copies: ``[(first, nbytes, [(part, shift)])]``.

    Consecutive parts that are views of one allocation, each after the end of
    the one before (a slot's carved arrays), form one copy from the first
    one's start to the last one's end; ``shift`` is a part's byte offset in it.
    Other parts are copies of their own.
    """
    spans = []
    for array, rows in parts:
        nbytes = rows * math.prod(array.shape[1:]) * array.itemsize
        if spans:
            first, _, members = spans[-1]
            shift = array.data.ptr - first.data.ptr
            last, last_shift = members[-1]
            last_end = last_shift + last[1] * math.prod(last[0].shape[1:]) * last[0].itemsize
            if array.data.mem is first.data.mem and shift >= last_end:
                members.append(((array, rows), shift))
                spans[-1] = (first, shift + nbytes, members)
                continue
        spans.append((array, nbytes, [((array, rows), 0)]))
    return spans


def copy_to_host(requests, stream):
    """
    Enqueue the copies of every request's arrays into one pinned block.

    A slot's carved arrays (:func:`xfeat_ros.gpu.buffers.carve`) travel in one
    copy per allocation, gaps included. Returns ``(event, views)``:
    ``views[r]`` lists NumPy views (the first ``rows`` rows of each array) of
    request ``r``; read them after ``event.synchronize()``.
    """
    cupy = cupy_module()
    spans = [_spans(parts) for _, _, parts in requests]
    # math.prod, not np.prod: a dozen calls per frame, ~8 us each in NumPy
    block = PinnedBuffer(sum((nbytes + 7) // 8 * 8 for request in spans
                             for _, nbytes, _ in request) + 8)
    views, offset = [], 0
    for request in spans:
        arrays = []
        for first, nbytes, members in request:
            copy_async(block.ptr + offset, first.data.ptr, nbytes,
                       cupy.cuda.runtime.memcpyDeviceToHost, stream)
            for (array, rows), shift in members:
                shape = (rows,) + tuple(array.shape[1:])
                arrays.append(np.frombuffer(block.memory, dtype=array.dtype,
                                            count=math.prod(shape),
                                            offset=offset + shift).reshape(shape))
            offset += (nbytes + 7) // 8 * 8
        views.append(arrays)
    event = cupy.cuda.Event(disable_timing=True)
    event.record(stream)
    return event, views


def assemble(kind, slot, arrays):
    """Build a host :class:`Features` or :class:`MatchResult` (rows cut to the slot's counts)."""
    if kind == FEATURES:
        n = slot.keypoint_count()
        return Features(arrays[0][:n], arrays[1][:n], arrays[2][:n], slot.image_hw)
    m = int(slot.host_counts.array[1])
    verified = arrays[3][:m].astype(bool) if len(arrays) > 3 else None
    return MatchResult(arrays[0][:m].astype(np.int64), arrays[1][:m].astype(np.int64),
                       arrays[2][:m], verified)
