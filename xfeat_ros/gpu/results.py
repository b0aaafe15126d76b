# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Results of the GPU engine's slots to the host, through pinned memory.

After the slots' work has passed, the host knows each slot's keypoint and
match counts (small pinned copies made by the flush). :func:`copy_to_host`
then enqueues one device-to-host copy per array into a single pinned block
(CuPy's pinned pool) and records an event; the NumPy arrays returned are
views of that block (no second host copy), valid once the event has passed.
"""

import numpy as np

from xfeat_ros.gpu.buffers import copy_async, cupy_module, PinnedBuffer
from xfeat_ros.pipeline import Features, MatchResult

FEATURES = 'features'
MATCHES = 'matches'


def result_parts(slot, kinds):
    """``[(kind, slot, [(device array, rows)])]`` of a slot whose work has passed."""
    out = []
    if FEATURES in kinds:
        n = slot.keypoint_count()
        out.append((FEATURES, slot, [(slot.keypoints, n), (slot.scores, n),
                                     (slot.descriptors, n)]))
    if MATCHES in kinds:
        m = int(slot.host_counts.array[1])
        match = slot.matches
        out.append((MATCHES, slot, [(match.idx0, m), (match.idx1, m),
                                    (match.similarity, m), (slot.epipolar.mask, m)]))
    return out


def copy_to_host(requests, stream):
    """
    Enqueue the copies of every request's arrays into one pinned block.

    Returns ``(event, views)``: ``views[r]`` lists NumPy views (the first
    ``rows`` rows of each array) of request ``r``; read them after
    ``event.synchronize()``.
    """
    cupy = cupy_module()
    arrays = [(array, rows) for _, _, parts in requests for array, rows in parts]
    sizes = [rows * int(np.prod(array.shape[1:], dtype=np.int64)) * array.itemsize
             for array, rows in arrays]
    block = PinnedBuffer(sum((n + 7) // 8 * 8 for n in sizes) + 8)
    flat, offset = [], 0
    for (array, rows), nbytes in zip(arrays, sizes):
        copy_async(block.ptr + offset, array.data.ptr, nbytes,
                   cupy.cuda.runtime.memcpyDeviceToHost, stream)
        shape = (rows,) + tuple(array.shape[1:])
        flat.append(np.frombuffer(block.memory, dtype=array.dtype,
                                  count=int(np.prod(shape)), offset=offset).reshape(shape))
        offset += (nbytes + 7) // 8 * 8
    event = cupy.cuda.Event(disable_timing=True)
    event.record(stream)
    views, start = [], 0
    for _, _, parts in requests:
        views.append(flat[start:start + len(parts)])
        start += len(parts)
    return event, views


def assemble(kind, slot, arrays):
    """Build a host :class:`Features` or :class:`MatchResult` from the copied arrays."""
    if kind == FEATURES:
        return Features(arrays[0], arrays[1], arrays[2], slot.image_hw)
    return MatchResult(arrays[0].astype(np.int64), arrays[1].astype(np.int64), arrays[2],
                       arrays[3].astype(bool))
