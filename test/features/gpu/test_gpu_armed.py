# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Frames enqueued before their image comes (:mod:`xfeat_ros.features.gpu.armed`).

An armed chain runs the same kernels on the same bytes as a frame submitted
the ordinary way, so its results are equal bit for bit; a frame that does not
fit and every other call of the engine cancel it, and no call waits behind a
gate the host has not opened (each is run with a deadline shorter than the
gate's own expiry, so a wait would fail the test instead of passing late).

GPU tests carry ``@pytest.mark.gpu`` and are skipped (with the reason) where
CuPy or a CUDA device is missing. The host-only tests at the end (which calls
fire an armed chain, the bytes staged before the gate opens) run on CI.
"""

import threading
import time
from types import SimpleNamespace

from golden_util import GOLDEN_IMAGES
import numpy as np
import pytest
from xfeat_ros.errors import ImageLayoutError
from xfeat_ros.features.gpu import armed, kernels
from xfeat_ros.features.image_codec import ImageLayout, raw_image
from xfeat_ros.features.tracks import next_tracks
from xfeat_ros.ros.transport import keypoints_wire
from xfeat_ros.ros.transport.cdr import Header, keypoints_cdr, Time
from xfeat_ros.tools.image_files import read_image

DEADLINE_S = 3.0  # well under armed.DEVICE_LIFETIME_NS: a wait behind the gate fails
assert DEADLINE_S * 1e9 < armed.DEVICE_LIFETIME_NS


@pytest.fixture(scope='module')
def engine(weights_npz):
    """Build one PyTorch-backed GPU engine, module-scoped so that graphs are captured once."""
    from xfeat_ros.features.gpu.factory import create_gpu_engine
    return create_gpu_engine('pytorch', str(weights_npz), 0, 4096, 0.05, 0.82)


def tum_messages(shared_dir, encoding='rgb8'):
    """Return the four TUM golden frames (640x480) as Image messages."""
    frames = [read_image(shared_dir / 'data' / GOLDEN_IMAGES[s])[0]
              for s in list(GOLDEN_IMAGES)[3:7]]
    if encoding == 'mono8':
        frames = [f.mean(axis=2).astype(np.uint8)[:, :, None] for f in frames]
    return [raw_image(f, encoding) for f in frames]


def within_deadline(call):
    """Run ``call()`` on a thread; fail if it has not returned within DEADLINE_S."""
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault('value', call()), daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    assert not thread.is_alive(), 'the call waited behind a closed gate'
    return out.get('value')


def run_sequence(engine, msgs, arm, placement=None):
    """Each frame alone, chained to the one before; with ``arm`` each next one armed first."""
    slots = [engine.alloc_slot(), engine.alloc_slot()]
    previous, out = None, []
    counts = dict(engine.arm_counts)
    for i, msg in enumerate(msgs):
        slot = slots[i % 2]
        engine.submit_group([msg], [slot], previous=previous, chain=True)
        # a fired frame is collected from the copies enqueued with its chain, no other
        assert (slot.prefetched is not None) == (arm and i > 0)
        if arm and i + 1 < len(msgs):  # arm() must not wait behind its own gate either
            assert within_deadline(lambda: engine.arm(msgs[i + 1], slots[(i + 1) % 2],
                                                      previous=slot, placement=placement))
        out.append(within_deadline(lambda: engine.results([slot])[0]))
        previous = slot
    if arm:
        fired = len(msgs) - 1
        assert engine.arm_counts == {'armed': counts['armed'] + fired,
                                     'fired': counts['fired'] + fired,
                                     'cancelled': counts['cancelled']}
    return out


def assert_same_results(got, want):
    """Bit-for-bit equal features and matches (with the check's mask)."""
    assert len(got) == len(want)
    for (fa, ma), (fb, mb) in zip(got, want):
        assert fa.image_hw == fb.image_hw
        for name in ('keypoints', 'scores', 'descriptors'):
            np.testing.assert_array_equal(getattr(fa, name), getattr(fb, name), err_msg=name)
        assert (ma is None) == (mb is None)
        if ma is not None:
            for name in ('idx0', 'idx1', 'similarity', 'verified'):
                np.testing.assert_array_equal(getattr(ma, name), getattr(mb, name),
                                              err_msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize('encoding', ['rgb8', 'mono8'])
def test_armed_frames_equal_ordinary_frames(engine, shared_dir, encoding):
    msgs = tum_messages(shared_dir, encoding) * 2
    want = run_sequence(engine, msgs, arm=False)
    assert sum(len(m.idx0) for _, m in want[1:]) > 0
    assert_same_results(run_sequence(engine, msgs, arm=True), want)


@pytest.mark.gpu
def test_features_placed_for_their_message_equal_ordinary_frames(engine, shared_dir):
    """An armed frame's features copied to the places of its Keypoints message."""
    msgs = tum_messages(shared_dir)
    want = run_sequence(engine, msgs, arm=False)
    got = run_sequence(engine, msgs, arm=True, placement=keypoints_wire.placement('camera'))
    assert_same_results(got, want)
    assert got[0][0].wire is None   # the first frame was not armed
    written = 0
    for features, _ in got[1:]:
        assert features.wire is not None
        found = keypoints_wire.layout('camera', len(features), features.descriptors.shape[1])
        if len(features) != engine.top_k:   # placed for top_k rows: written the ordinary way
            assert not keypoints_wire.fits(features.wire, found, features)
            continue
        assert keypoints_wire.fits(features.wire, found, features)
        header = Header(Time(7, 8), 'camera')
        ids, ages = np.arange(len(features), dtype=np.uint64), np.ones(len(features), np.uint32)
        size = keypoints_wire.write_around(features.wire, found, header, features.image_hw,
                                           ids, ages)
        assert bytes(features.wire[:size]) == keypoints_cdr(header, features, (ids, ages))
        written += 1
    assert written > 0


def run_tracked(engine, msgs, placement=None):
    """
    Each frame collected, its tracks made on the host, then the next frame armed with them.

    Returns ``[(features, matches, (ids, ages, next_id, previous frame))]``: the
    host's tracks of each frame (:func:`next_tracks`) and the state they were
    made from.
    """
    slots = [engine.alloc_slot(), engine.alloc_slot()]
    previous_slot = frame = None
    next_id, out = 5, []
    for i, msg in enumerate(msgs):
        slot = slots[i % 2]
        engine.submit_group([msg], [slot], previous=previous_slot, chain=True)
        features, matches = within_deadline(lambda: engine.results([slot])[0])
        ids, ages, after, _ = next_tracks(features, next_id, frame, matches,
                                          verified=None if matches is None else matches.verified)
        out.append((features, matches, (ids, ages, next_id, frame)))
        frame = SimpleNamespace(features=features, track_ids=ids, track_ages=ages)
        next_id = after
        if i + 1 < len(msgs):
            assert within_deadline(lambda: engine.arm(
                msgs[i + 1], slots[(i + 1) % 2], previous=slot, placement=placement,
                tracks=(ids, ages, next_id, frame)))
        previous_slot = slot
    return out


@pytest.mark.gpu
@pytest.mark.parametrize('placed', [False, True])
def test_tracks_continued_on_the_device_equal_the_hosts(engine, shared_dir, placed):
    """An armed frame's track ids, ages and next id equal next_tracks' of the same state."""
    msgs = tum_messages(shared_dir) * 2
    got = run_tracked(engine, msgs, keypoints_wire.placement('camera') if placed else None)
    assert got[0][1] is None     # the first frame: nothing to continue
    continued = 0
    for features, matches, (ids, ages, next_id, frame) in got[1:]:
        made = matches.tracks
        assert made is not None and made.made_from[0] is frame
        assert made.made_from[1] == next_id
        np.testing.assert_array_equal(made.ids, ids)
        np.testing.assert_array_equal(made.ages, ages)
        want_next = next_tracks(features, next_id, frame, matches, matches.verified)[2]
        assert made.next_id == want_next
        continued += int(np.count_nonzero(ages > 1))
        if placed and len(features) == engine.top_k:
            found = keypoints_wire.layout('camera', len(features), features.descriptors.shape[1])
            assert made.ids.ctypes.data == features.wire.ctypes.data + found.track_ids
            header = Header(Time(9, 10), 'camera')
            size = keypoints_wire.write_around(features.wire, found, header, features.image_hw,
                                               made.ids, made.ages)
            assert bytes(features.wire[:size]) == keypoints_cdr(header, features, (ids, ages))
    assert continued > 0   # tracks did cross frames


def place(buffer, msg, offset):
    """``msg`` taken into ``buffer`` (a pinned image buffer) with its pixels at ``offset``."""
    data = np.frombuffer(msg.data, np.uint8)
    buffer[offset:offset + data.size] = data
    return SimpleNamespace(**{**vars(msg), 'data': memoryview(
        buffer[offset:offset + data.size]).toreadonly()})


@pytest.mark.gpu
@pytest.mark.parametrize('offsets', [(100, 100, 100, 100), (100, 0, 0, 100)])
def test_armed_frames_from_image_buffers_equal_ordinary_frames(engine, shared_dir, offsets):
    """
    Pixels taken into pinned image buffers as the node's image thread takes them.

    After each take the thread holds the buffer of its next sample; the chain
    armed for that sample uploads from there without a copy. Where the
    pixels' offset moved (another header length) the chain is cancelled and
    the frame goes the ordinary way; every frame equals the ordinary path's.
    """
    msgs = tum_messages(shared_dir)
    want = run_sequence(engine, msgs, arm=False)
    nbytes = len(msgs[0].data) + max(offsets)
    slots = [engine.alloc_slot(), engine.alloc_slot()]
    before = dict(engine.arm_counts)
    held = engine.image_buffer(nbytes)  # the image thread's buffer for its first sample
    previous, got, copied = None, [], []
    for i, msg in enumerate(msgs):
        taken = place(held, msg, offsets[i])
        held = engine.image_buffer(nbytes)  # taken right after, for the next sample
        slot = slots[i % 2]
        engine.last_fire_copied = None
        within_deadline(lambda: engine.submit_group([taken], [slot], previous=previous,
                                                    chain=True))
        copied.append(engine.last_fire_copied)
        taken = None  # the engine keeps its own reference until the upload passed
        if i + 1 < len(msgs):
            assert within_deadline(lambda: engine.arm(msgs[i + 1], slots[(i + 1) % 2],
                                                      previous=slot))
        got.append(within_deadline(lambda: engine.results([slot])[0]))
        previous = slot
    assert_same_results(got, want)
    moved = [offsets[i] != offsets[i - 1] for i in range(1, len(msgs))]
    assert copied == [None] + [None if m else False for m in moved]  # never a staging copy
    assert engine.arm_counts['fired'] - before['fired'] == moved.count(False)
    assert engine.arm_counts['cancelled'] - before['cancelled'] == moved.count(True)


def submit_then_arm(engine, msgs):
    """Submit frame 0 into a new slot and arm frame 1 into another; return both slots."""
    a, b = engine.alloc_slot(), engine.alloc_slot()
    engine.submit_group([msgs[0]], [a], chain=True)
    assert engine.arm(msgs[1], b, previous=a)
    return a, b


def scheduled(engine, msgs, arm):
    """Run ``msgs`` as one camera through a Scheduler, each put() on a fresh thread."""
    from xfeat_ros.runtime.scheduler import Scheduler, SchedulerConfig
    from xfeat_ros.runtime.stream import CameraStream
    streams = {'': CameraStream('')}
    scheduler = Scheduler(engine, streams, SchedulerConfig(arm_next_frame=arm),
                          make_cpu_engine=lambda config: None)
    done, changed = [], threading.Condition()

    def on_done(frame):
        with changed:
            done.append(frame)
            changed.notify_all()
    scheduler.on_done = on_done
    before = dict(engine.arm_counts)
    scheduler.start()
    try:
        for i, msg in enumerate(msgs):
            msg = SimpleNamespace(**vars(msg), header=SimpleNamespace(
                stamp=SimpleNamespace(sec=i + 1, nanosec=0), frame_id='camera'))
            if arm and i:  # wait until the output thread has armed this frame's chain
                deadline = time.monotonic() + DEADLINE_S
                while streams[''].counts()['next_frame_armed'] < i:
                    assert time.monotonic() < deadline, 'the next frame was never armed'
                    time.sleep(0.001)
            item = streams[''].accept(msg, time.monotonic())
            within_deadline(lambda: scheduler.put(item))  # a thread new to CUDA, like rcl's
            with changed:
                assert changed.wait_for(lambda: len(done) > i, DEADLINE_S)
    finally:
        scheduler.stop()
    fired = engine.arm_counts['fired'] - before['fired']
    return [(d.features, d.matches) for d in done], fired, streams[''].counts()


@pytest.mark.gpu
def test_frames_fired_by_the_putting_thread_equal_the_device_threads(engine, shared_dir):
    # three rgb8 frames fire their armed chains from put(); the mono8 frame of the same size
    # does not fit, cancels, and is submitted the ordinary way on that fresh thread
    msgs = tum_messages(shared_dir)[:3] + tum_messages(shared_dir, 'mono8')[3:]
    want, fired_off, _ = scheduled(engine, msgs, arm=False)
    cancelled = engine.arm_counts['cancelled']
    got, fired, counts = scheduled(engine, msgs, arm=True)
    assert fired_off == 0 and fired == 2
    assert engine.arm_counts['cancelled'] > cancelled  # the mono8 frame's
    # armed after frames 0-2 (and after 3 unless stop() came first); nothing lost
    assert counts['next_frame_armed'] >= 3 and counts['dropped_internal_error'] == 0
    assert len(want) == 4 and want[0][1] is None and want[3][1] is not None
    assert_same_results(got, want)


@pytest.mark.gpu
def test_settings_changed_between_arm_and_frame_take_the_ordinary_path(engine, shared_dir):
    msgs = tum_messages(shared_dir)
    a, b = submit_then_arm(engine, msgs)
    engine.epipolar = False
    try:
        cancelled = engine.arm_counts['cancelled']
        within_deadline(lambda: engine.submit_group([msgs[1]], [b], previous=a, chain=True))
        assert engine.arm_counts['cancelled'] == cancelled + 1
        _, matches = within_deadline(lambda: engine.results([b])[0])
        assert matches.verified is None  # run unchecked, as asked at submission
    finally:
        engine.epipolar = True


def _cancelling_calls(engine, msgs, features):
    a, b, c = (engine.alloc_slot() for _ in range(3))
    return a, b, {
        'synchronize': lambda: engine.synchronize(),
        'configure': lambda: engine.configure(top_k=engine.top_k),
        'match_features': lambda: engine.match_features(features, features),
        'submit': lambda: engine.submit(msgs[2], c),
        'submit_match': lambda: engine.submit_match(a, a),
        'results of the reserved slot': lambda: engine.results([b]),
        'another slot': lambda: engine.submit_group([msgs[1]], [c], previous=a, chain=True),
        'another previous': lambda: engine.submit_group([msgs[1]], [b], chain=True),
        'another layout': lambda: engine.submit_group([msgs[3]], [b], previous=a, chain=True),
    }


@pytest.mark.gpu
@pytest.mark.parametrize('call', ['synchronize', 'configure', 'match_features', 'submit',
                                  'submit_match', 'results of the reserved slot',
                                  'another slot', 'another previous', 'another layout'])
def test_other_calls_cancel_the_armed_chain(engine, shared_dir, call):
    msgs = tum_messages(shared_dir)
    msgs[3] = tum_messages(shared_dir, 'mono8')[3]
    features = engine.results([_submitted(engine, msgs[0])])[0][0]
    a, b, calls = _cancelling_calls(engine, msgs, features)
    engine.submit_group([msgs[0]], [a], chain=True)
    assert engine.arm(msgs[1], b, previous=a)
    cancelled = engine.arm_counts['cancelled']
    within_deadline(calls[call])
    assert engine.arm_counts['cancelled'] == cancelled + 1 and engine._armed is None
    within_deadline(engine.synchronize)
    if call in ('another previous', 'another layout'):  # b now holds that frame
        assert within_deadline(lambda: engine.results([b]))[0][0] is not None
    else:
        assert within_deadline(lambda: engine.results([b])) == [(None, None)]
    # the engine goes on: the next frame equals the same frame submitted alone
    d = engine.alloc_slot()
    engine.submit_group([msgs[2]], [d], previous=a, chain=True)
    got = within_deadline(lambda: engine.results([d]))
    want = run_sequence(engine, [msgs[0], msgs[2]], arm=False)[1:]
    assert_same_results(got, want)


def _submitted(engine, msg):
    slot = engine.alloc_slot()
    engine.submit(msg, slot)
    return slot


@pytest.mark.gpu
def test_a_bad_frame_cancels_with_its_typed_error(engine, shared_dir):
    msgs = tum_messages(shared_dir)
    a, b = submit_then_arm(engine, msgs)
    short = SimpleNamespace(**{**vars(msgs[1]), 'data': msgs[1].data[:-7]})
    with pytest.raises(ImageLayoutError):
        engine.submit_group([short], [b], previous=a, chain=True)
    assert engine._armed is None
    within_deadline(engine.synchronize)


def fire_unfitting(engine, msgs, want, arm):
    """
    Submit frame 0, ``arm()`` frame 1 behind it, then submit frame 1 into the armed slot.

    The gate is expected to be too old by then: the submit must cancel the chain and take
    the ordinary path, with the same results as without arming (``want``).
    """
    a, b = engine.alloc_slot(), engine.alloc_slot()
    engine.submit_group([msgs[0]], [a], chain=True)
    first = within_deadline(lambda: engine.results([a]))
    arm(a, b)
    counts = dict(engine.arm_counts)
    engine.submit_group([msgs[1]], [b], previous=a, chain=True)
    assert engine.arm_counts['fired'] == counts['fired']
    assert engine.arm_counts['cancelled'] == counts['cancelled'] + 1
    assert_same_results(first + within_deadline(lambda: engine.results([b])), want)


@pytest.mark.gpu
def test_an_old_gate_is_never_opened(engine, shared_dir, monkeypatch):
    """Past its host lifetime a chain is cancelled; past its device lifetime it ran on."""
    msgs = tum_messages(shared_dir)
    want = run_sequence(engine, msgs[:2], arm=False)
    monkeypatch.setattr(armed, 'HOST_LIFETIME_S', 0.0)
    monkeypatch.setattr(armed, 'DEVICE_LIFETIME_NS', 1_000_000)

    def arm(a, b):
        assert engine.arm(msgs[1], b, previous=a)
        within_deadline(engine.stream.synchronize)  # the wait kernel gave up by itself
    fire_unfitting(engine, msgs, want, arm)


@pytest.mark.gpu
def test_a_slow_arm_is_never_fired(engine, shared_dir, monkeypatch):
    """
    The gate's age counts from before its wait was enqueued.

    An ``arm()`` held up after enqueuing the wait (here a sleep in the flush,
    as a graph capture behind the closed gate held it until the gate expired,
    in a fresh process on the H200 machine) must not be fired: the device may
    have passed the gate already.
    """
    msgs = tum_messages(shared_dir)
    want = run_sequence(engine, msgs[:2], arm=False)
    monkeypatch.setattr(armed, 'HOST_LIFETIME_S', 0.2)
    run_batch = engine._run_batch

    def arm(a, b):
        monkeypatch.setattr(engine, '_run_batch',
                            lambda *args: (time.sleep(0.3), run_batch(*args)))
        assert engine.arm(msgs[1], b, previous=a)
        monkeypatch.setattr(engine, '_run_batch', run_batch)
    fire_unfitting(engine, msgs, want, arm)


@pytest.mark.gpu
def test_no_graph_is_captured_behind_the_gate(engine, shared_dir, monkeypatch):
    """
    A capture waits while a kernel runs: behind the gate it would wait for its expiry.

    New slots make a new pair (a match graph never captured): ``arm()`` must capture
    it, and detection's graph, before it enqueues the gate, and nothing after.
    """
    from xfeat_ros.features.gpu import ops
    log = []
    capture_cached, gate_wait = ops.capture_cached, ops.gate_wait

    def capture_logged(cache, key, *args):
        log.append('capture' if key not in cache else 'cached')
        return capture_cached(cache, key, *args)

    def gate_logged(*args):
        log.append('gate')
        return gate_wait(*args)
    monkeypatch.setattr(ops, 'capture_cached', capture_logged)
    monkeypatch.setattr(ops, 'gate_wait', gate_logged)
    msgs = tum_messages(shared_dir)
    a, b = engine.alloc_slot(), engine.alloc_slot()
    engine.submit_group([msgs[0]], [a], chain=True)
    del log[:]
    assert within_deadline(lambda: engine.arm(msgs[1], b, previous=a))
    assert 'capture' in log[:log.index('gate')]  # the new pair's match graph
    assert log[log.index('gate') + 1:] == ['cached', 'cached']  # detection, match: replays
    within_deadline(lambda: engine.submit_group([msgs[1]], [b], previous=a, chain=True))
    assert within_deadline(lambda: engine.results([b]))[0][1] is not None


@pytest.mark.gpu
def test_arm_is_refused_where_it_cannot_hold(engine, shared_dir, monkeypatch):
    msgs = tum_messages(shared_dir)
    a, b = engine.alloc_slot(), engine.alloc_slot()
    other = raw_image(np.zeros((288, 352, 3), np.uint8), 'rgb8')  # a model size never run
    assert not engine.arm(other, b)
    engine.submit_group([msgs[0]], [a], chain=True)
    assert not engine.arm(msgs[1], a, previous=a)
    assert not engine.arm(msgs[1], b, previous=engine.alloc_slot())  # nothing in it
    monkeypatch.setattr(engine, 'profile', True)  # stage events: launches made one by one
    assert not engine.arm(msgs[1], b, previous=a)
    monkeypatch.setattr(engine, 'profile', False)
    assert engine.arm(msgs[1], b, previous=a)
    within_deadline(engine.synchronize)
    assert engine._armed is None


# -- the gate's kernels --------------------------------------------------------------------------

@pytest.mark.gpu
def test_gate_wait_holds_the_stream_until_opened(cp, stream):
    from xfeat_ros.features.gpu import ops
    from xfeat_ros.features.gpu.buffers import PinnedBuffer
    gate = PinnedBuffer(8, np.uint64)
    for value in (kernels.GATE_OPEN, kernels.GATE_CANCELLED):
        gate.array[0] = kernels.GATE_CLOSED
        ops.gate_wait(gate.ptr, 10 ** 10, stream)
        after = cp.cuda.Event(disable_timing=True)
        after.record(stream)
        assert not after.done  # held (the kernel polls for 10 s unless opened)
        gate.array[0] = value
        within_deadline(after.synchronize)
    gate.array[0] = kernels.GATE_CLOSED
    ops.gate_wait(gate.ptr, 2_000_000, stream)  # 2 ms: gives up by itself
    within_deadline(stream.synchronize)


# -- host only (CI) ------------------------------------------------------------------------------

class FakeEngine:
    """What :func:`armed.fire` and :func:`armed.cancel` touch of an engine."""

    def __init__(self):
        self.top_k, self.threshold, self.min_cossim = 4096, 0.05, 0.82
        self.epipolar, self.tensor_cores = True, True
        self.arm_counts = {'armed': 0, 'fired': 0, 'cancelled': 0}
        self._image_pool = None
        self._copier = SimpleNamespace(copy=lambda copies: [np.copyto(d, s) for d, s in copies])
        self.last_start_event = None
        self.last_group_seconds = {}


class GateLog(np.ndarray):
    """The gate's word, logging what was in the staging buffer each time it was written."""

    def __setitem__(self, index, value):
        staged = None if self.staging is None else self.staging.array.copy()
        self.log.append((int(value), staged))
        super().__setitem__(index, value)


def armed_fake(like, age_s=0.0):
    engine = FakeEngine()
    slot, previous = SimpleNamespace(submitted=True, matched=True), object()
    staging = SimpleNamespace(array=np.zeros(like.step * like.height, np.uint8), ptr=4096)
    gate = np.zeros(1, np.uint64).view(GateLog)
    gate.log, gate.staging = [], staging
    engine._armed = armed.Armed(
        (ImageLayout.of(like), armed.settings_key(engine)), slot, previous,
        SimpleNamespace(array=gate, ptr=64), staging, like.step * like.height,
        armed.time.monotonic() - age_s, 'started')
    return engine, slot, previous, gate, staging


def small(encoding='rgb8', value=9):
    return raw_image(np.full((4, 6, 3 if encoding == 'rgb8' else 1), value, np.uint8),
                     encoding)


def test_a_fitting_frame_writes_its_bytes_then_opens_the_gate():
    msg = small()
    engine, slot, previous, gate, staging = armed_fake(msg)
    assert armed.fire(engine, [msg], [slot], previous, True)
    assert len(gate.log) == 1 and gate.log[0][0] == kernels.GATE_OPEN
    np.testing.assert_array_equal(gate.log[0][1], np.frombuffer(msg.data, np.uint8))
    assert engine._armed is None and engine.last_start_event == 'started'
    assert engine.arm_counts == {'armed': 0, 'fired': 1, 'cancelled': 0}
    assert slot.submitted  # holds the frame


@pytest.mark.parametrize('change', ['slot', 'previous', 'unchained', 'two frames', 'layout',
                                    'settings', 'age'])
def test_anything_else_cancels_and_leaves_the_ordinary_path(change):
    msg = small()
    engine, slot, previous, gate, _ = armed_fake(msg, age_s=10.0 if change == 'age' else 0.0)
    msgs, slots, before, chain = [msg], [slot], previous, True
    if change == 'slot':
        slots = [SimpleNamespace()]
    elif change == 'previous':
        before = object()
    elif change == 'unchained':
        chain = False
    elif change == 'two frames':
        msgs, slots = [msg, msg], [slot, SimpleNamespace()]
    elif change == 'layout':
        msgs = [small('mono8')]
    elif change == 'settings':
        engine.threshold = 0.1
    assert not armed.fire(engine, msgs, slots, before, chain)
    assert [value for value, _ in gate.log] == [kernels.GATE_CANCELLED]
    assert engine._armed is None and not slot.submitted and not slot.matched
    assert engine.arm_counts == {'armed': 0, 'fired': 0, 'cancelled': 1}


def test_a_bad_frame_is_refused_with_its_typed_error_after_the_cancel():
    msg = small()
    engine, slot, previous, gate, _ = armed_fake(msg)
    bad = SimpleNamespace(**{**vars(msg), 'data': msg.data[:-1]})
    with pytest.raises(ImageLayoutError):
        armed.fire(engine, [bad], [slot], previous, True)
    assert gate[0] == kernels.GATE_CANCELLED and engine._armed is None


def test_the_host_gives_up_on_a_gate_before_the_device_does():
    assert armed.HOST_LIFETIME_S * 1e9 <= armed.DEVICE_LIFETIME_NS / 2


def armed_reserved(like, offset=24):
    """Return an armed fake whose chain uploads from a pool buffer held for the next image."""
    from xfeat_ros.features.gpu.image_pool import ImagePool
    engine, slot, previous, gate, _ = armed_fake(like)
    engine._image_pool = ImagePool(lambda size: np.zeros(size, np.uint8))
    nbytes = like.step * like.height
    reserved = engine._image_pool.get(nbytes + offset)
    gate.staging = None
    engine._armed.staging = None
    engine._armed.reserved = reserved
    engine._armed.source = reserved.ctypes.data + offset
    return engine, slot, previous, gate, reserved


def test_a_frame_in_the_reserved_buffer_opens_the_gate_without_a_copy():
    msg = small()
    engine, slot, previous, gate, reserved = armed_reserved(msg, offset=24)
    data = np.frombuffer(msg.data, np.uint8)
    reserved[24:24 + data.size] = data  # the image thread's take
    taken = SimpleNamespace(**{**vars(msg), 'data': memoryview(
        reserved[24:24 + data.size]).toreadonly()})
    engine._copier = SimpleNamespace(copy=lambda copies: pytest.fail('copied'))
    assert armed.fire(engine, [taken], [slot], previous, True)
    assert [value for value, _ in gate.log] == [kernels.GATE_OPEN]
    assert engine.last_fire_copied is False and slot.pooled_offset == 24
    # the pixels stay referenced until the chain's upload has read them
    assert slot.upload_source.ctypes.data == reserved.ctypes.data + 24
    assert engine.arm_counts == {'armed': 0, 'fired': 1, 'cancelled': 0}


def test_a_frame_taken_elsewhere_cancels_the_reserved_chain():
    msg = small()
    engine, slot, previous, gate, reserved = armed_reserved(msg, offset=24)
    assert not armed.fire(engine, [msg], [slot], previous, True)  # not in the reserved buffer
    assert [value for value, _ in gate.log] == [kernels.GATE_CANCELLED]
    assert engine._armed is None and not slot.submitted


def test_reserve_finds_the_buffer_held_for_the_next_image():
    from xfeat_ros.features.gpu.image_pool import ImagePool
    engine = FakeEngine()
    previous = SimpleNamespace(pooled_offset=None)
    assert armed.reserve(engine, previous, 100) is None  # no pool
    engine._image_pool = ImagePool(lambda size: np.zeros(size, np.uint8))
    held = engine._image_pool.get(1000)
    assert armed.reserve(engine, previous, 100) is None  # the last image was not pooled
    previous.pooled_offset = 40
    buffer, address = armed.reserve(engine, previous, 100)
    assert buffer is held and address == held.ctypes.data + 40
    assert armed.reserve(engine, previous, held.size) is None  # too small at that offset
    del buffer, held
    assert armed.reserve(engine, previous, 100) is None  # nobody holds it for an image
