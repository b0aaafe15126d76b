# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The spread selection on the device (``spread.cu``) against the host's ``select_spread``.

Kernel level: synthetic candidate sets (uniform, clustered, tied scores, pairs exactly the
radius apart, a track age chain through matches, some unverified) must give the host's
kept indices exactly, in the same order, and the ages the host derives. Engine level: on
real frames (one by one, and chained inside one group) every frame is selected on the
device, and a stream that uses the device's choice publishes exactly what a stream that
selects on the host publishes. Marked ``gpu``: skipped, with the reason, where CuPy or a
CUDA device is missing (run on the GPU machine: ``bash bench/gpu_check.sh``).
"""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from test_gpu_spread import (assert_same_output, frames, gpu_engine, MIN_DISTANCE, one_by_one,
                             START_NS)
from test_gpu_stamp_jump import PERIOD_NS, stamped
from xfeat_ros.features.spread import select_spread, Spread
from xfeat_ros.runtime.stream import CameraStream, Done

WIDTH, HEIGHT = 640.0, 480.0
# (radius, grid cell, per cell, cap): radius only, grid only, both, a cap that binds
SETTINGS = [(20.0, 0, 0, 0), (7.5, 0, 0, 0), (0.0, 64, 3, 0), (12.0, 80, 2, 0),
            (20.0, 0, 0, 50), (30.0, 0, 0, 4096)]


def layouts(rng, n):
    """Return candidate sets: name -> (keypoints float32 [n, 2], scores float32 [n] descending)."""
    uniform = rng.uniform((0, 0), (WIDTH, HEIGHT), (n, 2))
    centres = rng.uniform((0, 0), (WIDTH, HEIGHT), (12, 2))
    clustered = centres[rng.integers(0, 12, n)] + rng.normal(0, 6, (n, 2))
    lattice = np.stack(np.meshgrid(np.arange(0, 400, 20.0), np.arange(0, 400, 20.0)),
                       -1).reshape(-1, 2)[:n]  # neighbours exactly 20 px apart
    out = {}
    for name, points in (('uniform', uniform), ('clustered', clustered), ('lattice', lattice)):
        points = np.clip(points, 0, [WIDTH - 1, HEIGHT - 1]).astype(np.float32)
        count = len(points)
        scores = np.sort(rng.uniform(0.05, 1.0, count))[::-1].astype(np.float32)
        if name != 'uniform':
            scores = np.round(scores, 1).astype(np.float32)  # many ties
        out[name] = (points, scores)
    return out


def select_on_device(prev_kept_age, idx0, idx1, verified, keypoints, scores, spread):
    """Run ``gpu.spread.enqueue`` on hand-made slots; return (kept, ages, kept_age)."""
    import cupy as cp
    from xfeat_ros.features.gpu import spread as device_spread
    from xfeat_ros.features.gpu.buffers import GpuSlot
    n = len(keypoints)
    capacity = max(n, len(prev_kept_age), 1)
    previous, slot = GpuSlot(capacity), GpuSlot(capacity)
    previous.selection.kept_age[:len(prev_kept_age)] = cp.asarray(prev_kept_age, cp.uint32)
    slot.keypoints[:n] = cp.asarray(keypoints)
    slot.scores[:n] = cp.asarray(scores)
    slot.count[:] = n
    m = len(idx0)
    slot.matches.idx0[:m] = cp.asarray(idx0, cp.int32)
    slot.matches.idx1[:m] = cp.asarray(idx1, cp.int32)
    slot.matches.count[:] = m
    slot.epipolar.mask[:m] = cp.asarray(verified, cp.uint8)
    slot.checked, slot.spread = True, spread
    stream = cp.cuda.Stream(non_blocking=True)
    device_spread.enqueue(SimpleNamespace(stream=stream), slot, previous if m else None)
    stream.synchronize()
    out = slot.selection
    count = int(out.kept_count.get()[0])
    return (out.kept.get()[:count].astype(np.int64), out.ages.get()[:n],
            out.kept_age.get()[:n])


def host_ages(prev_kept_age, idx0, idx1, verified, n):
    """Return the host's ages: prev + 1 through a verified match from a kept keypoint."""
    ages = np.zeros(n, dtype=np.int64)
    for a, b, ok in zip(idx0, idx1, verified):
        if ok and prev_kept_age[a] > 0:
            ages[b] = prev_kept_age[a] + 1
    return ages


@pytest.mark.gpu
@pytest.mark.parametrize('settings', SETTINGS, ids=lambda s: 'r{}-g{}x{}-cap{}'.format(*s))
@pytest.mark.parametrize('n', [0, 1, 600, 4000])
def test_device_selection_equals_select_spread(settings, n):
    radius, grid, per_cell, cap = settings
    rng = np.random.default_rng(n + int(radius * 10) + grid)
    spread = Spread(radius, grid, per_cell, top_k=cap)
    for name, (keypoints, scores) in layouts(rng, n).items():
        count = len(keypoints)
        prev_n = max(count, 1)
        prev_kept_age = np.where(rng.random(prev_n) < 0.5, rng.integers(1, 9, prev_n), 0)
        idx0 = rng.permutation(prev_n)[:count // 2]
        idx1 = rng.permutation(count)[:len(idx0)]
        verified = rng.random(len(idx0)) < 0.8
        kept, ages, kept_age = select_on_device(prev_kept_age, idx0, idx1, verified,
                                                keypoints, scores, spread)
        want_ages = host_ages(prev_kept_age, idx0, idx1, verified, count)
        np.testing.assert_array_equal(ages, want_ages, err_msg=name)
        want = select_spread(keypoints, scores, want_ages, want_ages > 0, spread)
        np.testing.assert_array_equal(kept, want, err_msg=name)
        expected_kept_age = np.zeros(count, dtype=np.int64)
        expected_kept_age[want] = np.maximum(want_ages[want], 1)
        np.testing.assert_array_equal(kept_age, expected_kept_age, err_msg=name)


def lockstep(outs_and_dones):
    """Advance two streams over the same Done frames: device choice vs host selection."""
    device, host = CameraStream(''), CameraStream('')
    for done in outs_and_dones:
        assert done.features.selected is not None
        stripped = replace(done.features, selected=None)
        a = device.advance(done)
        b = host.advance(Done(done.item, stripped, done.matches))
        assert_same_output(a, b)
    return device.counts(), host.counts()


@pytest.fixture(scope='module', params=[(300, Spread(MIN_DISTANCE)), (1024, Spread(30.0)),
                                        (300, Spread(0.0, 80, 4)), (4096, Spread(20.0))],
                ids=['k300-r20', 'k1024-r30', 'k300-grid80x4', 'k4096-r20'])
def selecting(request, weights_npz):
    top_k, spread = request.param
    return gpu_engine(weights_npz, top_k, spread), top_k


@pytest.mark.gpu
def test_every_frame_is_selected_on_the_device_as_the_host_would(selecting, shared_dir):
    engine, top_k = selecting
    msgs = frames(shared_dir)
    dones = one_by_one(engine, CameraStream(''), msgs)
    device, host = lockstep(dones)
    assert device['spread_selected_on_device'] == len(msgs)
    assert device['spread_selected_on_host'] == 0
    assert device['spread_dropped'] == host['spread_dropped'] > 0
    assert max(len(d.features.selected.kept) for d in dones) <= top_k


@pytest.mark.gpu
def test_frames_chained_in_one_group_read_each_others_selection(selecting, shared_dir):
    engine, _ = selecting
    msgs = frames(shared_dir)[:4]
    stream = CameraStream('')
    items = [stream.accept(stamped(m, START_NS + i * PERIOD_NS), float(i))
             for i, m in enumerate(msgs)]
    slots = [engine.alloc_slot() for _ in msgs]
    engine.submit_group(msgs, slots, chain=True)  # frame i matched to frame i - 1 on the device
    results = engine.results(slots)
    dones = [Done(item, features, matches if i else None)
             for i, (item, (features, matches)) in enumerate(zip(items, results))]
    device, _ = lockstep(dones)
    assert device['spread_selected_on_device'] == len(msgs)
    assert device['spread_selected_on_host'] == 0
    # the chain carried tracks through the group: the last frame has tracks of age >= 3
    assert dones[-1].features.selected.ages.max() >= 3
