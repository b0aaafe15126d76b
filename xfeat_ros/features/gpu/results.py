# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Results of the GPU engine's slots to the host, through pinned memory.

:func:`copy_to_host` enqueues one device-to-host copy per array into a single
pinned block (CuPy's pinned pool) and records an event; the NumPy arrays
returned are views of that block (no second host copy), valid once the event
has passed. A slot whose work has passed copies its counted rows; a slot
whose work is still under way copies its whole capacity right away, behind
its work in stream order, so that the host waits once instead of waiting for
the counts and then for the copies; :func:`assemble` cuts the rows to the
counts, which the flush's small pinned copies hold by then. A slot's
features may leave on another stream as soon as its batch is described
(:func:`copy_early_and_late`), while its matches are still being made. A
chain enqueued before its frame exists (:mod:`.armed`) enqueues its copies
too, behind its work (:func:`prefetch`): :func:`fetch` then only waits for
them.
"""

import math

import numpy as np

from xfeat_ros.features.gpu.buffers import copy_async, cupy_module, PinnedBuffer
from xfeat_ros.features.pipeline import ContinuedTracks, Features, MatchResult
from xfeat_ros.features.spread import Selected

FEATURES = 'features'
MATCHES = 'matches'
SELECTION = 'selection'  # a spread selection made on the device (.spread)
# each kind is copied where the slot's flag is set
KIND_FLAGS = ((FEATURES, 'submitted'), (MATCHES, 'matched'), (SELECTION, 'selects'))


def result_parts(slot, kinds, finished=True, checked=None):
    """
    ``[(kind, slot, [(device array, rows)])]`` to copy for ``slot``.

    ``finished``: the slot's work has passed, so its counts are known and only
    the counted rows are copied; otherwise every row (the capacity).
    ``checked``: whether the match carries the epipolar mask (and tracks
    continued on the device); None reads the slot's own ``checked``.
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
        if getattr(slot, 'checked', True) if checked is None else checked:  # its mask
            parts.append((slot.epipolar.mask, m))
            if getattr(slot, 'tracked', None) is not None:  # tracks continued on the device
                n = slot.keypoint_count() if finished else slot.capacity
                parts += [(slot.tracks.ids, n), (slot.tracks.ages, n),
                          (slot.tracks.next_after, 1)]
        out.append((MATCHES, slot, parts))
    if SELECTION in kinds:
        selection = slot.selection
        n = slot.keypoint_count() if finished else slot.capacity
        out.append((SELECTION, slot, [(selection.kept, slot.capacity),
                                      (selection.kept_count, 1), (selection.ages, n)]))
    return out


def _sizes(arrays):
    """Bytes of the first ``rows`` rows of each ``(array, rows)``."""
    # math.prod, not np.prod: a dozen calls per frame, ~8 us each in NumPy
    return [rows * math.prod(array.shape[1:]) * array.itemsize for array, rows in arrays]


def _block_bytes(sizes):
    """Bytes of a pinned block holding pieces of ``sizes``, each at an 8-byte boundary."""
    return sum((n + 7) // 8 * 8 for n in sizes) + 8


def copy_to_host(requests, stream, block=None, placed=()):
    """
    Enqueue the copies of every request's arrays into one pinned block.

    ``block``: a :class:`PinnedBuffer` to copy into (a new one if None or too
    small). ``placed``: ``(start, {index: offset})``, the byte offsets of
    some arrays (by their index in request order) and where the rest begin.
    Returns ``(event, views)``: ``views[r]`` lists NumPy views (the first
    ``rows`` rows of each array) of request ``r``; read them after
    ``event.synchronize()``.
    """
    cupy = cupy_module()
    arrays = [(array, rows) for _, _, parts in requests for array, rows in parts]
    sizes = _sizes(arrays)
    start, fixed = placed or (0, {})
    offsets = []
    offset = (start + 7) // 8 * 8   # the rest, each at an 8-byte boundary
    for index, nbytes in enumerate(sizes):
        if index in fixed:
            offsets.append(fixed[index])
            continue
        offsets.append(offset)
        offset += (nbytes + 7) // 8 * 8
    if block is None or block.nbytes < offset + 8:
        block = PinnedBuffer(offset + 8)
    flat = []
    for (array, rows), nbytes, offset in zip(arrays, sizes, offsets):
        copy_async(block.ptr + offset, array.data.ptr, nbytes,
                   cupy.cuda.runtime.memcpyDeviceToHost, stream)
        shape = (rows,) + tuple(array.shape[1:])
        flat.append(np.frombuffer(block.memory, dtype=array.dtype,
                                  count=math.prod(shape), offset=offset).reshape(shape))
    event = cupy.cuda.Event(disable_timing=True)
    event.record(stream)
    views, start = [], 0
    for _, _, parts in requests:
        views.append(flat[start:start + len(parts)])
        start += len(parts)
    return event, views


def copy_early_and_late(requests, early_stream, stream, behind_done=False):
    """
    Enqueue ``requests`` (of :func:`result_parts`) in two :func:`copy_to_host` passes.

    A slot's features whose batch recorded ``described`` (after its
    description and keypoint counts) go on ``early_stream`` behind that
    event, beside the work still queued on ``stream`` (matching, checks);
    everything else on ``stream``, or with ``behind_done`` on
    ``early_stream`` behind each slot's ``done`` event (``stream`` may hold
    an armed chain's closed gate, :mod:`.armed`). Returns ``[(requests,
    (event, views))]``, one entry per non-empty pass.
    """
    early, late = [], []
    for request in requests:
        kind, slot, _ = request
        described = kind == FEATURES and getattr(slot, 'described', None) is not None
        (early if described else late).append(request)
    copies = []
    if early:
        for _, slot, _ in early:
            early_stream.wait_event(slot.described)
        copies.append((early, copy_to_host(early, early_stream)))
    if late and behind_done:
        for _, slot, _ in late:
            early_stream.wait_event(slot.done)
        copies.append((late, copy_to_host(late, early_stream)))
    elif late:
        copies.append((late, copy_to_host(late, stream)))
    return copies


# where placed arrays sit among a prefetch's (features, then matches): the features'
# three, then the tracks' ids and ages after the match's four arrays
PLACED_FEATURES = (0, 1, 2)
PLACED_TRACKS = (7, 8)


def prefetch_block(slot, place=None):
    """
    Return ``(block, placed)``: a pinned block for whatever :func:`prefetch` may copy.

    ``place(rows, dim)`` (or None) returns ``(size, (keypoints, scores,
    descriptors, track_ids, track_ages))``: byte offsets in the first
    ``size`` bytes (a message laid out around them,
    :mod:`xfeat_ros.ros.transport.keypoints_wire`); the rest follows. The track offsets
    are used where the slot's tracks are continued on the device
    (``slot.tracked``, set before this call). Taken before a gate is
    enqueued (:mod:`.armed`): a page-locked allocation behind a closed gate
    may synchronize implicitly and wait for it.
    """
    # the mask counted whatever the slot's last match was: this frame's check is set later
    kinds = (FEATURES, MATCHES) + ((SELECTION,) if getattr(slot, 'selects', False) else ())
    requests = result_parts(slot, kinds, finished=False, checked=True)
    parts = [part for _, _, kind_parts in requests for part in kind_parts]
    found = place(slot.capacity, slot.desc_dim) if place is not None else None
    if found is None:
        return PinnedBuffer(_block_bytes(_sizes(parts))), ()
    size, offsets = found
    tracked = getattr(slot, 'tracked', None) is not None   # then its parts hold the tracks
    indices = PLACED_FEATURES + (PLACED_TRACKS if tracked else ())
    fixed = dict(zip(indices, offsets))
    rest = [part for i, part in enumerate(parts) if i not in fixed]
    return PinnedBuffer((size + 7) // 8 * 8 + _block_bytes(_sizes(rest))), (size, fixed)


def prefetch(slot, stream, block=None, placed=()):
    """
    Enqueue the copies of everything ``slot`` will hold, on ``stream`` behind its work.

    Its whole capacity, as the counts are not known yet; into ``block`` (of
    :func:`prefetch_block`, with its ``placed``) if given. Returns
    ``(requests, (event, views))``: kept as the slot's ``prefetched`` once
    the frame is really there, :func:`fetch` then waits for these copies
    instead of enqueuing its own. The caller keeps the block (``views``)
    alive until ``event`` has passed, whether the frame comes or not.
    """
    kinds = [kind for kind, flag in KIND_FLAGS if getattr(slot, flag, False)]
    requests = result_parts(slot, kinds, finished=False)
    if FEATURES not in kinds:
        placed = ()
    return requests, copy_to_host(requests, stream, block, placed)


def assemble(kind, slot, arrays):
    """Build a host :class:`Features`, :class:`MatchResult` or :class:`Selected` (rows cut)."""
    if kind == SELECTION:
        return Selected(arrays[0][:int(arrays[1][0])].astype(np.int64),
                        arrays[2][:slot.keypoint_count()])
    if kind == FEATURES:
        n = slot.keypoint_count()
        return Features(arrays[0][:n], arrays[1][:n], arrays[2][:n], slot.image_hw,
                        getattr(slot, 'wire', None), getattr(slot, 'spread', None))
    m = int(slot.host_counts.array[1])
    verified = arrays[3][:m].astype(bool) if len(arrays) > 3 else None
    tracks = None
    if len(arrays) > 4:
        n = slot.keypoint_count()
        tracks = ContinuedTracks(arrays[4][:n], arrays[5][:n], int(arrays[6][0]), slot.tracked)
    return MatchResult(arrays[0][:m].astype(np.int64), arrays[1][:m].astype(np.int64),
                       arrays[2][:m], verified, tracks)


def fetch(slots, kinds, early_stream, stream, flush, behind_done=False):
    """
    Copy the results ``kinds`` of ``slots`` to the host; ``{(id(slot), kind): result}``.

    ``flush(slot)`` first enqueues a slot's work still deferred by the
    engine. A slot still at work copies its whole capacity at once (no wait
    for its counts first). Features of a described batch go on
    ``early_stream`` as soon as their batch is described, beside the matching
    and the checks; the rest follows ``stream`` (``behind_done``: see
    :func:`copy_early_and_late`). A slot whose copies were enqueued with its
    work (its ``prefetched``, :func:`prefetch`) only waits for them. One wait
    per copy block.
    """
    requests, copies = [], []
    for slot in slots:
        wanted = [kind for kind, flag in KIND_FLAGS
                  if kind in kinds and getattr(slot, flag, False)]
        if not wanted:
            continue
        prefetched = getattr(slot, 'prefetched', None)
        if prefetched is not None:
            copies.append(prefetched)
            continue
        flush(slot)
        requests.extend(result_parts(slot, wanted, slot.done.done))
    if requests:
        copies.extend(copy_early_and_late(requests, early_stream, stream, behind_done))
    for _, (event, _) in copies:
        event.synchronize()
    return {(id(slot), kind): assemble(kind, slot, arrays)
            for requests, (_, views) in copies
            for (kind, slot, _), arrays in zip(requests, views) if kind in kinds}


def features_of(found, slot):
    """Return ``slot``'s Features of :func:`fetch`, with its device selection and dense map."""
    features = found.get((id(slot), FEATURES))
    if features is not None:
        features.selected = found.get((id(slot), SELECTION))
        features.dense = slot.dense
    return features
