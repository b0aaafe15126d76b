# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The scheduler without ROS: groups, overlap, overload, slots, fallback, faults.

A scripted engine (test/core_fakes.py) stands in for the real one; its
``gate`` holds a submit so a test can make frames arrive "while the device
works" without timing assumptions.
"""

import threading
import time

from core_fakes import features_at, frame_msg, scene, ScriptedEngine
import pytest
from xfeat_ros.errors import DeviceError, ImageLayoutError
from xfeat_ros.features.engine import Capabilities, EngineConfig
from xfeat_ros.runtime.scheduler import EngineFailure, Scheduler, SchedulerConfig
from xfeat_ros.runtime.stereo import StereoPairing
from xfeat_ros.runtime.stream import CameraStream

FRAMES = 12


@pytest.fixture(scope='module')
def scripted():
    points, descriptors = scene()
    return {str(i): features_at(i, points, descriptors) for i in range(FRAMES)}


def build(engine, cameras=('',), stereo=None, make_cpu=None, **config):
    streams = {name: CameraStream(name) for name in cameras}
    if stereo is not None:
        stereo = StereoPairing(stereo, 0.0, lambda camera, key: streams[camera].count(key))
    scheduler = Scheduler(engine, streams, SchedulerConfig(**config), engine_config=EngineConfig(),
                          stereo=stereo, make_cpu_engine=make_cpu or (lambda config: None))
    done = []
    scheduler.on_done = done.append
    return scheduler, streams, done


def put(scheduler, streams, index, camera=''):
    return scheduler.put(streams[camera].accept(frame_msg(index), time.monotonic()))


def groups(engine):
    """Frame ids submitted per synchronization, from the engine's call log."""
    out, current = [], []
    for call in engine.calls:
        if call[0] == 'submit':
            current.append(call[1])
        elif call[0] == 'synchronize':
            out.append(current)
            current = []
    return out


def test_idle_engine_takes_a_frame_at_once_and_arrivals_form_the_next_group(scripted):
    engine = ScriptedEngine(scripted)
    engine.gate = threading.Event()
    scheduler, streams, done = build(engine, queue_size=8)
    scheduler.start()
    try:
        put(scheduler, streams, 0)
        assert engine.submitting.wait(5)  # alone: nothing waited for company
        for i in (1, 2, 3):  # arrive while the engine works on frame 0
            put(scheduler, streams, i)
        engine.gate.set()
        assert scheduler.wait_idle(10)
    finally:
        scheduler.stop()
    assert groups(engine) == [['0'], ['1', '2', '3']]
    assert [d.item.msg.header.frame_id for d in done] == ['0', '1', '2', '3']
    assert done[0].matches is None and all(len(d.matches) == 200 for d in done[1:])


def test_group_size_is_bounded_by_max_frames_in_flight(scripted):
    engine = ScriptedEngine(scripted)
    engine.gate = threading.Event()
    scheduler, streams, _ = build(engine, ('a', 'b', 'c'), queue_size=2,
                                  max_frames_in_flight=4)
    scheduler.start()
    try:
        put(scheduler, streams, 0, 'a')
        assert engine.submitting.wait(5)
        for i, camera in zip(range(1, 7), 'abcabc'):
            put(scheduler, streams, i, camera)
        engine.gate.set()
        assert scheduler.wait_idle(10)
    finally:
        scheduler.stop()
    assert groups(engine) == [['0'], ['1', '2', '3', '4'], ['5', '6']]  # arrival order


def test_outputs_of_one_group_overlap_the_engine_on_the_next(scripted):
    engine = ScriptedEngine(scripted)
    scheduler, streams, done = build(engine)
    publishing, release = threading.Event(), threading.Event()

    def slow_output(frame):
        if frame.item.msg.header.frame_id == '0':
            publishing.set()
            assert release.wait(10)
        done.append(frame)
    scheduler.on_done = slow_output
    scheduler.start()
    try:
        put(scheduler, streams, 0)
        assert publishing.wait(5)
        engine.submitting.clear()
        put(scheduler, streams, 1)
        assert engine.submitting.wait(5)  # the engine runs frame 1 while frame 0 publishes
        assert not release.is_set() and done == []
        release.set()
        assert scheduler.wait_idle(10)
    finally:
        scheduler.stop()
    assert [d.item.msg.header.frame_id for d in done] == ['0', '1']


def test_full_queue_drops_the_oldest_and_counts_it(scripted):
    engine = ScriptedEngine(scripted)
    engine.gate = threading.Event()
    scheduler, streams, done = build(engine)  # the default: one queued frame per camera
    assert scheduler.config.queue_size == 1
    scheduler.start()
    try:
        put(scheduler, streams, 0)
        assert engine.submitting.wait(5)
        assert [put(scheduler, streams, i) for i in (1, 2, 3)] == [False, True, True]
        assert scheduler.queued('') == 1
        engine.gate.set()
        assert scheduler.wait_idle(10)
    finally:
        scheduler.stop()
    assert [d.item.msg.header.frame_id for d in done] == ['0', '3']  # the newest is kept
    counts = streams[''].counts()
    assert counts['dropped_queue_full'] == 2 and counts['accepted'] == 4


def test_stop_counts_queued_frames_and_later_ones(scripted):
    engine = ScriptedEngine(scripted)
    engine.gate = threading.Event()
    scheduler, streams, done = build(engine, queue_size=4)
    scheduler.start()
    put(scheduler, streams, 0)
    assert engine.submitting.wait(5)
    put(scheduler, streams, 1)
    put(scheduler, streams, 2)
    threading.Timer(0.2, engine.gate.set).start()
    scheduler.stop()  # finishes frame 0 and its outputs
    put(scheduler, streams, 3)
    assert [d.item.msg.header.frame_id for d in done] == ['0']
    assert streams[''].counts()['dropped_shutdown'] == 3


def test_frames_of_one_camera_in_a_group_match_in_a_chain(scripted):
    engine = ScriptedEngine(scripted)
    scheduler, streams, _ = build(engine, queue_size=8)
    items = [streams[''].accept(frame_msg(i), 0.0) for i in range(3)]
    done = scheduler.process(items)
    assert [d.matches is None for d in done] == [True, False, False]
    assert [c[0] for c in engine.calls] == ['submit', 'submit', 'match', 'submit', 'match',
                                            'synchronize', 'results']  # one read-back
    more = scheduler.process([streams[''].accept(frame_msg(3), 0.0)])
    assert len(more[0].matches) == 200  # against frame 2, kept from the last group


def test_slots_are_reused(scripted):
    engine = ScriptedEngine(scripted)
    scheduler, streams, _ = build(engine, ('a', 'b'))
    for i in range(0, FRAMES, 2):
        scheduler.process([streams['a'].accept(frame_msg(i), 0.0),
                           streams['b'].accept(frame_msg(i + 1), 0.0)])
    assert engine.allocated <= 6  # two cameras' newest slots plus one group


def test_size_change_is_not_matched(scripted):
    engine = ScriptedEngine({**scripted, 'big': scripted['1']})
    scheduler, streams, _ = build(engine)
    first = scheduler.process([streams[''].accept(frame_msg(0), 0.0)])
    big = frame_msg(1, shape=(480, 640))
    big.header.frame_id = 'big'
    second = scheduler.process([streams[''].accept(big, 0.0)])
    assert first[0].matches is None and second[0].matches is None
    assert not any(c[0] == 'match' for c in engine.calls)


def test_live_settings_reach_the_engine_before_the_next_group(scripted):
    engine = ScriptedEngine(scripted)
    scheduler, streams, _ = build(engine)
    scheduler.process([streams[''].accept(frame_msg(0), 0.0)])
    scheduler.configure(top_k=100, min_cossim=0.9)
    scheduler.process([streams[''].accept(frame_msg(1), 0.0)])
    configure = engine.calls.index(('configure', 100, None, 0.9))
    assert engine.calls[configure + 1] == ('submit', '1')


def test_device_error_falls_back_to_the_cpu_engine(scripted):
    gpu = ScriptedEngine(scripted, device='cuda:0', name='fake_gpu')
    cpu = ScriptedEngine(scripted)
    scheduler, streams, _ = build(gpu, make_cpu=lambda config: cpu)
    done = [scheduler.process([streams[''].accept(frame_msg(i), 0.0)]) for i in (0, 1)]
    gpu.failures = [DeviceError('CUDA error: an illegal memory access was encountered')]
    done += [scheduler.process([streams[''].accept(frame_msg(i), 0.0)]) for i in (2, 3)]
    assert scheduler.engine is cpu and 'fake_gpu on cuda:0 failed (DeviceError)' in \
        scheduler.fallback
    assert [len(d[0].matches) for d in done[1:]] == [200, 200, 200]  # across the switch too
    assert ('submit', '2') in cpu.calls and ('submit', '3') in cpu.calls


def test_a_plain_runtime_error_is_a_fault_not_a_device_failure(scripted):
    gpu = ScriptedEngine(scripted, device='cuda:0')
    scheduler, streams, done = build(gpu, make_cpu=lambda config: pytest.fail('fell back'))
    scheduler.start()
    try:
        put(scheduler, streams, 0)
        assert scheduler.wait_idle(10)
        gpu.failures = [RuntimeError('a bug, not the device')]
        put(scheduler, streams, 1)
        assert scheduler.wait_idle(10)
        put(scheduler, streams, 2)
        assert scheduler.wait_idle(10)
    finally:
        scheduler.stop()
    assert scheduler.engine is gpu and scheduler.fallback is None and scheduler.failure is None
    assert streams[''].counts()['dropped_internal_error'] == 1
    assert [d.item.msg.header.frame_id for d in done] == ['0', '2']
    assert len(done[1].matches) == 200  # matched against frame 0, the last good one


def test_device_error_without_fallback_stops(scripted):
    gpu = ScriptedEngine(scripted, device='cuda:0')
    scheduler, streams, done = build(gpu, fallback_to_cpu=False)
    failed = threading.Event()
    scheduler.on_failure = lambda exc: failed.set()
    scheduler.start()
    try:
        gpu.failures = [DeviceError('out of memory')]
        put(scheduler, streams, 0)
        assert failed.wait(10)
        put(scheduler, streams, 1)
    finally:
        scheduler.stop()
    counts = streams[''].counts()
    assert counts['dropped_engine_failure'] == 1 and counts['dropped_shutdown'] == 1
    assert 'out of memory' in scheduler.failure and done == []
    with pytest.raises(EngineFailure):
        gpu.failures = [DeviceError('again')]
        scheduler.process([streams[''].accept(frame_msg(2), 0.0)])


def test_engine_rejection_is_counted_late(scripted):
    engine = ScriptedEngine(scripted)
    scheduler, streams, _ = build(engine)
    rejected = []
    scheduler.on_reject = lambda item, exc: rejected.append(exc)
    scheduler.process([streams[''].accept(frame_msg(0), 0.0)])
    engine.failures = [ImageLayoutError('bad bytes')]
    done = scheduler.process([streams[''].accept(frame_msg(i), 0.0) for i in (1, 2)])
    assert [d.item.msg.header.frame_id for d in done] == ['2']
    assert len(done[0].matches) == 200  # against frame 0: frame 1 never existed
    counts = streams[''].counts()
    assert counts['rejected_late'] == 1 and counts['rejected_ImageLayoutError'] == 1
    assert len(rejected) == 1


class GroupEngine(ScriptedEngine):
    capabilities = Capabilities(groups=True)
    """A scripted engine that takes a whole group in one call (a batched backbone)."""

    def __init__(self, features):
        super().__init__(features)
        self.group_calls = []

    def expect_groups(self, frames):
        pass

    def submit_group(self, msgs, slots):
        if any(msg.header.frame_id == 'bad' for msg in msgs):
            raise ImageLayoutError('bad frame in the group')
        self.group_calls.append([msg.header.frame_id for msg in msgs])
        for msg, slot in zip(msgs, slots):
            slot.features = self.features_by_id[msg.header.frame_id]
            slot.matches = None


def test_an_engine_with_submit_group_gets_the_whole_group(scripted):
    engine = GroupEngine(scripted)
    scheduler, streams, _ = build(engine, ('a', 'b'))
    items = [streams['a'].accept(frame_msg(0), 0.0), streams['b'].accept(frame_msg(1), 0.0),
             streams['a'].accept(frame_msg(2), 0.0)]
    done = scheduler.process(items)
    assert engine.group_calls == [['0', '1', '2']]
    assert [c for c in engine.calls if c[0] == 'match'] == [('match', 200, 200)]  # 2 after 0
    assert done[2].matches is not None and len(done[2].matches) == 200
    bad = frame_msg(3)
    bad.header.frame_id = 'bad'
    engine.features_by_id['bad'] = scripted['3']
    engine.failures = [ImageLayoutError('bad bytes')]
    done = scheduler.process([streams['a'].accept(bad, 0.0),
                              streams['b'].accept(frame_msg(4), 0.0)])
    assert len(engine.group_calls) == 1  # the bad group went frame by frame
    assert [d.item.msg.header.frame_id for d in done] == ['4']
    assert streams['a'].counts()['rejected_late'] == 1


@pytest.mark.parametrize('cameras,config,largest', [
    (('',), {}, 1),
    (('a', 'b', 'c'), {}, 3),
    (('a', 'b', 'c'), {'queue_size': 4}, 8),
    (('a', 'b', 'c'), {'queue_size': 2, 'max_frames_in_flight': 5}, 5),
    (tuple('abcdefghij'), {}, 8),
])
def test_the_engine_hears_the_largest_group_at_once(scripted, cameras, config, largest):
    """A group holds every camera's queue, up to max_frames_in_flight; the engine is told."""
    class Expecting(GroupEngine):
        expected = []

        def expect_groups(self, frames):
            self.expected.append(frames)

    engine = Expecting(scripted)
    scheduler, _, _ = build(engine, cameras, **config)
    assert scheduler.largest_group() == largest
    assert engine.expected == [largest]
    build(ScriptedEngine(scripted), cameras, **config)   # an engine without groups is fine


def test_stereo_frames_pair_on_the_engine_side(scripted):
    engine = ScriptedEngine(scripted)
    scheduler, streams, _ = build(engine, ('left', 'right'), stereo=[('left', 'right')])
    left = streams['left'].accept(frame_msg(0, stamp_s=1.0), 0.0)
    right = streams['right'].accept(frame_msg(1, stamp_s=1.0), 0.0)
    lonely = streams['right'].accept(frame_msg(2, stamp_s=2.0), 0.0)
    done = scheduler.process([left, right, lonely])
    assert done[0].stereo is None and done[2].stereo is None
    match = done[1].stereo
    assert match.left is done[0] and match.right is done[1] and len(match.result) == 200


# -- stamps that jump back (a replayed or looping bag, a camera on another clock) --------------
def accept(streams, camera, index, stamp_s):
    return streams[camera].accept(frame_msg(index, stamp_s=stamp_s), 0.0)


@pytest.mark.parametrize('submit', ['one by one', 'as a group'])
def test_a_jump_back_restarts_only_its_cameras_matching(scripted, submit):
    engine = (ScriptedEngine if submit == 'one by one' else GroupEngine)(scripted)
    scheduler, streams, _ = build(engine, ('a', 'b'))
    scheduler.process([accept(streams, 'a', 0, 100.0), accept(streams, 'b', 1, 100.0)])
    # a's stamps jump back; in the same group b goes on, and a's next frame follows the jump
    done = scheduler.process([accept(streams, 'a', 2, 50.0), accept(streams, 'b', 3, 100.1),
                              accept(streams, 'a', 4, 50.1)])
    assert [d.item.restart for d in done] == [True, False, False]
    assert done[0].matches is None  # never matched to frame 0 of the old timeline
    assert len(done[1].matches) == 200 and len(done[2].matches) == 200  # b: 1 -> 3; a: 2 -> 4
    assert [c for c in engine.calls if c[0] == 'match'] == [('match', 200, 200)] * 2
    assert streams['a'].counts()['stamp_jumps_back'] == 1
    assert streams['b'].counts()['stamp_jumps_back'] == 0


def test_a_jump_back_holds_when_its_frame_is_dropped_from_the_queue(scripted):
    engine = ScriptedEngine(scripted)
    engine.gate = threading.Event()
    scheduler, streams, done = build(engine)  # one queued frame: a newer one drops it
    scheduler.start()
    try:
        scheduler.put(accept(streams, '', 0, 100.0))
        assert engine.submitting.wait(5)
        assert not scheduler.put(accept(streams, '', 1, 50.0))  # jumps back, then dropped:
        assert scheduler.put(accept(streams, '', 2, 50.1))      # its successor is new too
        engine.gate.set()
        assert scheduler.wait_idle(10)
    finally:
        scheduler.stop()
    assert [d.item.msg.header.frame_id for d in done] == ['0', '2']
    assert done[1].matches is None and done[1].item.timeline == 1
    counts = streams[''].counts()
    assert counts['dropped_queue_full'] == 1 and counts['stamp_jumps_back'] == 1


def test_a_fallback_keeps_the_timeline_of_the_frames_in_hand(scripted):
    gpu = ScriptedEngine(scripted, device='cuda:0', name='fake_gpu')
    cpu = ScriptedEngine(scripted)
    scheduler, streams, _ = build(gpu, make_cpu=lambda config: cpu)
    done = [scheduler.process([accept(streams, '', i, s)])[0]
            for i, s in enumerate((100.0, 50.0, 50.1))]
    gpu.failures = [DeviceError('CUDA error: an illegal memory access was encountered')]
    done += [scheduler.process([accept(streams, '', i, s)])[0]
             for i, s in ((3, 50.2), (4, 50.3))]
    assert scheduler.engine is cpu
    assert [d.matches is None for d in done] == [True, True, False, False, False]


def test_a_looping_stereo_pair_never_pairs_frames_of_two_timelines(scripted):
    engine = ScriptedEngine(scripted)
    scheduler, streams, _ = build(engine, ('left', 'right'), stereo=[('left', 'right')])
    # stamps 1, 2, 3 then the loop again; right's frame at 3 s is lost the first time round
    frames = [('left', 0, 1.0), ('right', 1, 1.0), ('left', 2, 2.0), ('right', 3, 2.0),
              ('left', 4, 3.0),
              ('left', 5, 1.0), ('right', 6, 1.0), ('left', 7, 2.0), ('right', 8, 2.0),
              ('left', 9, 3.0), ('right', 10, 3.0)]
    done = [d for camera, index, stamp_s in frames
            for d in scheduler.process([accept(streams, camera, index, stamp_s)])]
    pairs = [(d.stereo.left.item.msg.header.frame_id, d.stereo.right.item.msg.header.frame_id)
             for d in done if d.stereo is not None]
    assert pairs == [('0', '1'), ('2', '3'), ('5', '6'), ('7', '8'), ('9', '10')]
    assert streams['left'].counts()['stereo_unpaired'] == 1   # frame 4, dropped at the loop
    assert streams['left'].counts()['stamp_jumps_back'] == 1
    assert streams['right'].counts()['stamp_jumps_back'] == 1
    assert done[5].matches is None and done[6].matches is None  # each side restarts
