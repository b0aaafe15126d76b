# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The GPU engine's armed chain across image stamps that jump back (the scheduler's path).

A frame whose stamp jumped back (a replayed bag after live frames) restarts its camera's
stream: it must not fire the chain armed for it, which would match it to the old
timeline's frame on the device and continue that frame's track ids there. With arming on,
every frame's keypoints, matches and tracks equal those with arming off, and the frames
after the jump fire their chains again. Marked ``gpu``: skipped, with the reason, where
CuPy or a CUDA device is missing (run on the GPU machine: ``bash bench/gpu_check.sh all``).
"""

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from test_gpu_armed import assert_same_results, DEADLINE_S, tum_messages, within_deadline
from xfeat_ros.runtime.scheduler import Scheduler, SchedulerConfig
from xfeat_ros.runtime.stream import CameraStream

LIVE_NS = 1796451675035557349   # the stamps of the issue: live ones, then a replayed bag's
BAG_NS = 1311868169163497984
PERIOD_NS = 100_000_000


@pytest.fixture(scope='module')
def engine(weights_npz):
    """Build one PyTorch-backed GPU engine for the module (graphs captured once)."""
    from xfeat_ros.features.gpu.factory import create_gpu_engine
    return create_gpu_engine('pytorch', str(weights_npz), 0, 4096, 0.05, 0.82)


def stamped(msg, stamp):
    """``msg`` with a header stamped ``stamp`` (ns)."""
    header = SimpleNamespace(stamp=SimpleNamespace(sec=stamp // 1_000_000_000,
                                                   nanosec=stamp % 1_000_000_000),
                             frame_id='camera')
    return SimpleNamespace(**vars(msg), header=header)


def run_tracked(engine, msgs, stamps, arm):
    """
    Run ``msgs`` as one camera through a Scheduler, tracks continued as the node does.

    Each frame is put on a fresh thread once the chain for it was armed (``arm``);
    its tracks are made on the output thread before the next frame is armed with
    them. Returns ``([(Done, FrameOutput)], engine arm counts added, stream counts)``.
    """
    streams = {'': CameraStream('')}
    scheduler = Scheduler(engine, streams, SchedulerConfig(arm_next_frame=arm),
                          make_cpu_engine=lambda config: None)
    outs, changed = [], threading.Condition()

    def on_done(done):
        out = streams[''].advance(done)
        with changed:
            outs.append((done, out))
            changed.notify_all()
    scheduler.on_done = on_done
    before = dict(engine.arm_counts)
    scheduler.start()
    try:
        for i, (msg, stamp) in enumerate(zip(msgs, stamps)):
            if arm and i:  # wait until the output thread has armed this frame's chain
                deadline = time.monotonic() + DEADLINE_S
                while streams[''].counts()['next_frame_armed'] < i:
                    assert time.monotonic() < deadline, 'the next frame was never armed'
                    time.sleep(0.001)
            item = streams[''].accept(stamped(msg, stamp), time.monotonic())
            within_deadline(lambda: scheduler.put(item))  # a thread new to CUDA, like rcl's
            with changed:
                assert changed.wait_for(lambda: len(outs) > i, DEADLINE_S)
    finally:
        scheduler.stop()
    added = {key: engine.arm_counts[key] - before[key] for key in before}
    return outs, added, streams[''].counts()


@pytest.mark.gpu
def test_a_frame_whose_stamp_jumped_back_takes_the_ordinary_path(engine, shared_dir):
    tum = tum_messages(shared_dir)
    msgs = tum + tum[:2]
    stamps = ([LIVE_NS + i * PERIOD_NS for i in range(3)]
              + [BAG_NS + i * PERIOD_NS for i in range(3)])  # frame 3 jumps back
    want, plain, _ = run_tracked(engine, msgs, stamps, arm=False)
    got, armed, counts = run_tracked(engine, msgs, stamps, arm=True)
    assert plain['fired'] == 0
    assert armed['fired'] == 4  # frames 1, 2, 4 and 5; frame 3's chain is not used
    assert armed['cancelled'] >= 1 and counts['armed_frame_unused'] >= 1
    assert counts['submitted_at_receipt'] == 4 and counts['stamp_jumps_back'] == 1
    assert counts['tracks_from_engine'] == 4  # continued on the device, within a timeline
    assert_same_results([(d.features, d.matches) for d, _ in got],
                        [(d.features, d.matches) for d, _ in want])
    assert got[3][0].matches is None and got[3][1].restarted
    for (_, a), (_, b) in zip(got, want):
        np.testing.assert_array_equal(a.frame.track_ids, b.frame.track_ids)
        np.testing.assert_array_equal(a.frame.track_ages, b.frame.track_ages)
    ids = [out.frame.track_ids for _, out in got]
    assert ids[3].min() > max(i.max() for i in ids[:3])  # new tracks, no id reused
    assert got[3][1].frame.track_ages.max() == 1 and got[5][1].frame.track_ages.max() == 3
