# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The GPU engine's spread selection, on the device inside the frame's work (``spread.cu``).

With a spreading :class:`xfeat_ros.features.spread.Spread` (a radius or a
grid, no carried tracks) each frame's selection is enqueued behind its match
and the match's epipolar check, or behind its detection where it has no
previous frame::

    spread_ages   candidate ages: a verified match from a keypoint the previous
                  frame kept continues its track (previous slot's kept_age + 1)
    spread_rank   placement order: oldest track first, then by score, ties by index
    spread_neighbours  each candidate's earlier neighbours within the radius (many blocks)
    spread_select the greedy radius / grid pass -> kept indices, count, kept_age

The previous frame's kept ages never leave the device: the chain of a
camera's frames reads them in stream order, whichever group each frame came
in. The host reads back the kept indices and the ages they were chosen with
(:class:`xfeat_ros.features.spread.Selected`); the camera's stream uses them
where those ages equal its own tracks' (always, unless its tracks and the
device's chain part ways), and selects on the host otherwise
(:meth:`xfeat_ros.runtime.stream.CameraStream.advance`).

Carried tracks add candidates on the host, after the engine's work: with
``carry_frames`` > 0 (each frame's dense map then goes to the host,
:func:`dense_to_host`), and above
:data:`xfeat_ros.features.gpu.kernels.SPREAD_MAX_CANDIDATES` candidates, the
host selects.
"""

import numpy as np

from xfeat_ros.features.carry import DenseMap
from xfeat_ros.features.gpu import kernels, ops
from xfeat_ros.features.gpu.buffers import copy_async, PinnedBuffer


def selects_on_device(engine):
    """Tell whether ``engine``'s frames are selected on the device (see the module docstring)."""
    spread = engine.spread
    return (spread.spreads and spread.carry_frames == 0
            and 0 < engine.detect_k <= kernels.SPREAD_MAX_CANDIDATES)


def enqueue(engine, slot, previous=None):
    """
    Enqueue ``slot``'s selection on the engine's stream (matched against ``previous``).

    ``previous``: the slot its match ran against (its kept ages), or None for
    a frame matched to nothing. Records the slot's ``done`` behind it.
    """
    spread, stream = slot.spread, engine.stream  # the Spread (and cap) of the slot's frame
    module = kernels.spread_module(ops._device_id())
    out = slot.selection
    capacity = np.int32(out.ages.size)
    has_match = previous is not None
    source = previous.selection.kept_age if has_match else out.kept_age
    mask = slot.epipolar.mask
    use_mask = bool(has_match and getattr(slot, 'checked', False))
    with stream:
        ops.function(module, 'spread_ages')(
            (1,), (kernels.SPREAD_THREADS,),
            (source, slot.matches.idx0, slot.matches.idx1, mask, slot.matches.count,
             slot.count, capacity, np.int32(has_match), np.int32(use_mask), out.ages))
        per_block = kernels.SPREAD_RANK_THREADS // kernels.SPREAD_RANK_SPLIT
        ops.function(module, 'spread_rank')(
            (ops.blocks(out.ages.size, per_block),), (kernels.SPREAD_RANK_THREADS,),
            (slot.scores, out.ages, slot.count, capacity, out.order))
        radius = np.float64(spread.min_distance)
        if radius > 0:
            ops.function(module, 'spread_neighbours')(
                (ops.blocks(out.ages.size, kernels.SPREAD_NEIGHBOUR_THREADS),),
                (kernels.SPREAD_NEIGHBOUR_THREADS,),
                (slot.keypoints, out.order, slot.count, capacity, radius, out.neighbours,
                 out.neighbour_counts))
        grid = spread.grid_cell_px if spread.grid_cell_px > 0 else 0
        ops.function(module, 'spread_select')(
            (1,), (kernels.SPREAD_THREADS,),
            (slot.keypoints, out.order, out.ages, slot.count, capacity, radius, np.int32(grid),
             np.int32(spread.max_per_cell),
             np.int32(spread.top_k if spread.top_k > 0 else out.ages.size), out.neighbours,
             out.neighbour_counts, out.scratch, out.kept, out.kept_count, out.kept_age),
            shared_mem=max(int(capacity), 1))
    slot.done.record(stream)


def select_matched(engine, pairs):
    """
    Enqueue the selection of each selecting slot of ``[(previous, slot, _)]`` just matched.

    In order: a previous slot flushed in the same call and matched to nothing
    (the first frame of a chained group) is selected first, as its kept ages
    are what the next one reads.
    """
    waiting = engine._unselected
    with engine.cupy.cuda.Device(engine.gpu):
        for previous, slot, _ in pairs:
            if not getattr(slot, 'selects', False):
                continue
            if waiting.pop(id(previous), None) is not None:
                enqueue(engine, previous, None)
            enqueue(engine, slot, previous)
            waiting.pop(id(slot), None)


def select_unmatched(engine):
    """Enqueue the selection of every selecting slot flushed with no match (first frames)."""
    waiting, engine._unselected = engine._unselected, {}
    if waiting:
        with engine.cupy.cuda.Device(engine.gpu):
            for slot in waiting.values():
                enqueue(engine, slot, None)


def dense_to_host(engine, ws, batch):
    """
    Copy each frame's unit-length dense descriptor map to the host (carried tracks).

    Where the engine carries tracks, every slot of ``batch`` gets
    ``slot.dense``: a :class:`xfeat_ros.features.carry.DenseMap` viewing a
    pinned block of its own, filled on the stream behind the frame's
    description (the workspace's map is the next group's); else None.
    """
    carrying = engine.spread.carry_frames > 0
    for f, (slot, height, width, *_) in enumerate(batch):
        slot.dense = None
        if not carrying:
            continue
        maps = ws.feats_hwc[f]
        block = PinnedBuffer(maps.nbytes, np.float32)
        copy_async(block.ptr, maps.data.ptr, maps.nbytes,
                   engine.cupy.cuda.runtime.memcpyDeviceToHost, engine.stream)
        copied = engine.cupy.cuda.Event(disable_timing=True)
        copied.record(engine.stream)
        engine._in_flight.append((copied, block))  # kept until the copy has landed
        mh, mw = ws.model_hw
        slot.dense = DenseMap(block.array.reshape(maps.shape).transpose(2, 0, 1), (mh, mw),
                              (width / mw, height / mh))
