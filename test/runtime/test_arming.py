# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The scheduler arming a single camera's next frame on the engine (ROS-free).

An engine with ``arm`` (the GPU engine: the next frame's chain enqueued behind
a gate on the device) is stood in for by a scripted one that records which
calls would fire, cancel or leave an armed chain: a next frame fires it only
when it is submitted alone into the reserved slot, chained to the previous
frame's slot, with the armed layout.
"""

import threading
import time

from core_fakes import features_at, frame_msg, scene, ScriptedEngine
import pytest
from xfeat_ros.features.engine import Capabilities, EngineConfig
from xfeat_ros.features.image_codec import ImageLayout
from xfeat_ros.runtime.scheduler import Scheduler, SchedulerConfig
from xfeat_ros.runtime.stream import CameraStream

WAIT_S = 10.0


@pytest.fixture(scope='module')
def scripted():
    points, descriptors = scene()
    out = {str(i): features_at(i, points, descriptors) for i in range(6)}
    out.update({f'big{i}': features_at(i, points, descriptors, (480, 640)) for i in range(6)})
    return out


class ArmingEngine(ScriptedEngine):
    """A scripted engine with the GPU engine's arming contract (see the module docstring)."""

    capabilities = Capabilities(groups=True, arming=True)

    def __init__(self, features, arm_error=None):
        super().__init__(features)
        self.armed = None          # (layout, slot, previous) while a chain is armed
        self.events = []           # 'armed', 'fired', 'cancelled', 'disarmed'
        self.changed = threading.Condition()
        self.arm_error = arm_error
        self.fired_on = []         # the thread of each fired submit_group
        self.sync_gate = None      # a threading.Event each synchronize waits for
        self.fire_errors = []      # exceptions a fitting submit_group raises, in order
        self.fire_gate = None      # a threading.Event a fitting submit_group waits for

    def _note(self, event):
        with self.changed:
            self.events.append(event)
            self.changed.notify_all()

    def wait_for(self, count, event):
        with self.changed:
            assert self.changed.wait_for(lambda: self.events.count(event) >= count, WAIT_S), \
                self.events

    def _cancel(self):
        if self.armed is not None:
            self.armed = None
            self._note('cancelled')

    def arm(self, like, slot, previous=None, placement=None, tracks=None):
        self._cancel()
        if self.arm_error is not None:
            raise self.arm_error
        self.armed = (ImageLayout.of(like), slot, previous)
        self._note('armed')
        return True

    def expect_groups(self, frames):
        pass

    def disarm(self):
        self._cancel()
        self._note('disarmed')

    def configure(self, top_k=None, threshold=None, min_cossim=None):
        self._cancel()
        super().configure(top_k, threshold, min_cossim)

    def submit_group(self, msgs, slots, previous=None, chain=False):
        if self.armed is not None:
            layout, slot, before = self.armed
            if (len(msgs) == 1 and chain and slots[0] is slot and previous is before
                    and ImageLayout.of(msgs[0]) == layout):
                if self.fire_errors:
                    raise self.fire_errors.pop(0)
                if self.fire_gate is not None:
                    self._note('firing')
                    assert self.fire_gate.wait(WAIT_S)
                self.armed = None
                self.fired_on.append(threading.current_thread().name)
                self._note('fired')
            else:
                self._cancel()
        self.calls.append(('group', [m.header.frame_id for m in msgs], chain))
        for msg, slot in zip(msgs, slots):
            slot.features = self.features_by_id[msg.header.frame_id]
            slot.matches = None
        if chain and previous is not None:
            self.submit_match(previous, slots[0])

    def synchronize(self):
        self._cancel()
        if self.sync_gate is not None:
            assert self.sync_gate.wait(WAIT_S)
        super().synchronize()


def build(engine, cameras=('',), **config):
    streams = {name: CameraStream(name) for name in cameras}
    scheduler = Scheduler(engine, streams, SchedulerConfig(**config),
                          engine_config=EngineConfig(), make_cpu_engine=lambda config: None)
    done = Done()
    scheduler.on_done = done.append
    return scheduler, streams, done


class Done(list):
    """Finished frames, appended by the output thread; :meth:`wait` for a count of them."""

    def __init__(self):
        super().__init__()
        self.changed = threading.Condition()

    def append(self, frame):
        with self.changed:
            super().append(frame)
            self.changed.notify_all()

    def wait(self, count):
        with self.changed:
            assert self.changed.wait_for(lambda: len(self) >= count, WAIT_S), len(self)


def put(scheduler, streams, frame_id, camera='', shape=(240, 320)):
    msg = frame_msg(0, stamp_s=time.time(), shape=shape)
    msg.header.frame_id = frame_id
    return scheduler.put(streams[camera].accept(msg, time.monotonic()))


def run_armed(engine, frames):
    """Put ``frames`` frames of one camera, each after the one before was armed; stop."""
    scheduler, streams, done = build(engine)
    scheduler.start()
    try:
        for i in range(frames):
            put(scheduler, streams, str(i))
            done.wait(i + 1)
            engine.wait_for(i + 1, 'armed')  # armed after each frame was published
        armed_at_stop = engine.armed
    finally:
        scheduler.stop()
    return streams, done, armed_at_stop


def test_the_next_frame_of_a_single_camera_fires_its_armed_chain(scripted):
    engine = ArmingEngine(scripted)
    streams, done, armed_at_stop = run_armed(engine, 4)
    assert engine.events[:7] == ['armed', 'fired', 'armed', 'fired', 'armed', 'fired', 'armed']
    assert engine.events[-2:] == ['cancelled', 'disarmed']  # stopping leaves no gate closed
    counts = streams[''].counts()
    assert counts['next_frame_armed'] == 4 and counts['armed_frame_unused'] == 1  # the last
    # every later frame went alone, chained to the one before; matches as without arming
    assert [c for c in engine.calls if c[0] == 'group'] == [
        ('group', ['0'], False), ('group', ['1'], True), ('group', ['2'], True),
        ('group', ['3'], True)]
    assert [len(d.matches) for d in done[1:]] == [200, 200, 200]
    assert done[0].matches is None
    assert armed_at_stop[2] is not None  # the last chain was matched against frame 3


def first_armed_then(engine, scripted, step):
    """Run one camera's frame '0' until its next frame is armed, then ``step``; stop."""
    scheduler, streams, done = build(engine)
    scheduler.start()
    try:
        put(scheduler, streams, '0')
        engine.wait_for(1, 'armed')
        step(scheduler, streams, done)
    finally:
        scheduler.stop()
    return streams, done


def test_a_frame_that_does_not_fit_releases_the_reserved_slot(scripted):
    engine = ArmingEngine(scripted)

    def step(scheduler, streams, done):
        put(scheduler, streams, 'big1', shape=(480, 640))  # a new size: not what was armed
        done.wait(2)
        engine.wait_for(2, 'armed')
        put(scheduler, streams, 'big2', shape=(480, 640))
        done.wait(3)
    streams, done = first_armed_then(engine, scripted, step)
    assert engine.events[:5] == ['armed', 'cancelled', 'armed', 'fired', 'armed']
    assert done[1].matches is None and len(done[2].matches) == 200
    assert engine.allocated <= 4  # the released slot was used again, not leaked
    assert streams[''].counts()['armed_frame_unused'] == 2  # frame big1, and the last at stop


def test_nothing_is_armed_for_several_cameras_or_when_switched_off(scripted):
    for cameras, config in ((('a', 'b'), {}), (('',), {'arm_next_frame': False})):
        engine = ArmingEngine(scripted)
        scheduler, streams, done = build(engine, cameras, **config)
        scheduler.start()
        try:
            for i, camera in enumerate(cameras * 2):
                put(scheduler, streams, str(i), camera)
                done.wait(i + 1)
                assert scheduler.wait_idle(WAIT_S)
        finally:
            scheduler.stop()
        assert 'armed' not in engine.events
        assert all(not c[2] for c in engine.calls if c[0] == 'group')  # matched as before


def test_new_settings_cancel_the_armed_frame(scripted):
    engine = ArmingEngine(scripted)

    def step(scheduler, streams, done):
        scheduler.configure(top_k=100)
        put(scheduler, streams, '1')
        done.wait(2)
        engine.wait_for(2, 'armed')
    _, done = first_armed_then(engine, scripted, step)
    assert engine.events[:3] == ['armed', 'cancelled', 'disarmed']
    assert 'fired' not in engine.events[:4]
    assert len(done[1].matches) == 200  # still matched, on the ordinary path


def test_a_failing_arm_is_reported_and_costs_no_frame(scripted):
    engine = ArmingEngine(scripted, arm_error=RuntimeError('no gate'))
    scheduler, streams, done = build(engine)
    errors = []
    scheduler.report.error = lambda text, **kw: errors.append(text)
    scheduler.start()
    try:
        for i in range(3):
            put(scheduler, streams, str(i))
            done.wait(i + 1)
            assert scheduler.wait_idle(WAIT_S)
    finally:
        scheduler.stop()
    assert 'armed' not in engine.events and len(errors) >= 1 and 'no gate' in errors[0]
    assert [len(d.matches) for d in done[1:]] == [200, 200]


def test_an_idle_schedulers_armed_frame_is_fired_by_the_thread_that_puts_it(scripted):
    engine = ArmingEngine(scripted)
    streams, done, _ = run_armed(engine, 3)
    # frames 1 and 2 fired their chains from put() (the test's thread, the node's image
    # thread), not from the device thread; frame 0 had nothing armed
    assert engine.fired_on == [threading.current_thread().name] * 2
    assert [len(d.matches) for d in done[1:]] == [200, 200]
    assert all(d.item.marks['queue'] <= d.item.marks['submit'] <= d.item.marks['device']
               for d in done)
    counts = streams[''].counts()
    assert counts['dropped_queue_full'] == 0
    assert counts['next_frame_armed'] == 3 and counts['armed_frame_unused'] == 1
    assert counts['submitted_at_receipt'] == 2


def test_a_frame_fired_at_receipt_is_finished_by_stop(scripted):
    engine = ArmingEngine(scripted)

    def step(scheduler, streams, done):
        engine.sync_gate = threading.Event()   # the device thread will wait in synchronize
        put(scheduler, streams, '1')
        assert engine.fired_on == [threading.current_thread().name]
        assert not scheduler.idle()            # in flight from put() on
        stopper = threading.Thread(target=scheduler.stop)
        stopper.start()
        engine.sync_gate.set()
        stopper.join(WAIT_S)
        assert not stopper.is_alive()
    streams, done = first_armed_then(engine, scripted, step)
    assert [d.item.msg.header.frame_id for d in done] == ['0', '1']  # not lost at stop
    assert len(done[1].matches) == 200
    assert streams[''].counts()['dropped_shutdown'] == 0


def test_a_failing_fire_at_receipt_leaves_the_frame_to_the_device_thread(scripted):
    engine = ArmingEngine(scripted)
    warnings = []

    def step(scheduler, streams, done):
        scheduler.report.warning = lambda text, **kw: warnings.append(text)
        engine.fire_errors.append(RuntimeError('copy failed'))
        put(scheduler, streams, '1')
        done.wait(2)
    streams, done = first_armed_then(engine, scripted, step)
    assert len(warnings) == 1 and 'copy failed' in warnings[0]
    assert engine.fired_on == []      # the device thread took the ordinary path
    assert [d.item.msg.header.frame_id for d in done] == ['0', '1']
    assert len(done[1].matches) == 200


def test_a_frame_fired_while_the_scheduler_stops_is_counted_not_lost(scripted):
    engine = ArmingEngine(scripted)

    def step(scheduler, streams, done):
        engine.fire_gate = threading.Event()   # the fire holds the engine until released
        putter = threading.Thread(target=put, args=(scheduler, streams, '1'))
        putter.start()
        engine.wait_for(1, 'firing')
        stopper = threading.Thread(target=scheduler.stop)
        stopper.start()
        scheduler._threads[0].join(WAIT_S)     # the device thread ends with nothing to take
        assert not scheduler._threads[0].is_alive()
        engine.fire_gate.set()                 # the fire completes after that
        putter.join(WAIT_S)
        stopper.join(WAIT_S)
        assert not stopper.is_alive() and scheduler.idle()
    streams, done = first_armed_then(engine, scripted, step)
    assert [d.item.msg.header.frame_id for d in done] == ['0']
    assert streams[''].counts()['dropped_shutdown'] == 1   # frame 1: counted, not lost


def test_a_frame_whose_stamp_jumped_back_never_fires_the_armed_chain(scripted):
    """The chain would match it to the old timeline's frame and continue its tracks there."""
    engine = ArmingEngine(scripted)
    scheduler, streams, done = build(engine)

    def put_at(frame_id, stamp_s):
        msg = frame_msg(0, stamp_s=stamp_s)
        msg.header.frame_id = frame_id
        scheduler.put(streams[''].accept(msg, time.monotonic()))
    scheduler.start()
    try:
        for i, stamp_s in enumerate((1796451675.0, 1796451675.1, 1311868169.2, 1311868169.3)):
            if i:
                engine.wait_for(i, 'armed')  # the chain for this frame is armed
            put_at(str(i), stamp_s)
            done.wait(i + 1)
        engine.wait_for(4, 'armed')
    finally:
        scheduler.stop()
    assert engine.events[:7] == ['armed', 'fired', 'armed', 'cancelled', 'armed', 'fired',
                                 'armed']
    assert [c for c in engine.calls if c[0] == 'group'] == [
        ('group', ['0'], False), ('group', ['1'], True), ('group', ['2'], False),
        ('group', ['3'], True)]
    assert done[2].item.restart and done[2].matches is None  # matched to nothing
    assert len(done[1].matches) == 200 and len(done[3].matches) == 200  # 0 -> 1, 2 -> 3
    counts = streams[''].counts()
    assert counts['submitted_at_receipt'] == 2 and counts['next_frame_armed'] == 4
    assert counts['armed_frame_unused'] == 2  # frame 2's chain, and the last one at stop
