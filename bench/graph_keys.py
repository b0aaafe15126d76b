# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Groups of several cameras through the node's scheduler and the GPU engine, no ROS.

The node's device thread hands the engine every queued frame at once, so with
several cameras the groups are ever new combinations of cameras and of the
slots the scheduler gives them. The GPU engine caches a CUDA graph of a group's
matches by its slots; this drives :class:`xfeat_ros.core.scheduler.Scheduler`
with groups of random cameras (1 to ``--cameras`` of them, in random order,
one frame each, the fixture's rgb8 640x480 frames) and reports, per engine
``capture_after`` (1: every new key captured at once, as before 2026-12-02),
the wall time per group (median, p90, p99, max), the captures and the host time
they took::

    python3 bench/graph_keys.py --cameras 1,2,8 --groups 400 --capture-after 1,2

CPU-only machines can count the keys without a device (``--keys-only``): the
same scheduler with an engine that only records each group's match key.
"""

import argparse
import itertools
import json
from pathlib import Path
import random
import statistics
import sys
import time

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from xfeat_ros.core.scheduler import Scheduler, SchedulerConfig  # noqa: E402
from xfeat_ros.core.stream import CameraStream, Pending  # noqa: E402


def random_groups(cameras, groups, seed=0):
    """Return ``groups`` lists of camera names: 1 to ``cameras`` distinct ones, random order."""
    rng = random.Random(seed)
    names = [f'c{i}' for i in range(cameras)]
    return names, [rng.sample(names, rng.randint(1, cameras)) for _ in range(groups)]


class KeyEngine:
    """The engine contract, recording the match key the GPU engine would build per group."""

    device, name = 'cuda:0', 'keys'

    def __init__(self):
        """Start with no keys."""
        self.keys, self._queued, self._tokens = [], [], itertools.count()

    def configure(self, **settings):
        """Nothing to configure."""

    def alloc_slot(self):
        """Return a slot with a token, as the GPU engine's slots have."""
        from types import SimpleNamespace
        return SimpleNamespace(token=next(self._tokens))

    def submit_group(self, msgs, slots):
        """Nothing to compute."""

    def submit_match(self, previous, slot):
        """Queue the pair, as the GPU engine does until its flush."""
        self._queued.append((previous.token, slot.token))

    def synchronize(self):
        """Record the group's match key (its pairs in order)."""
        if self._queued:
            self.keys.append(tuple(self._queued))
        self._queued = []

    def results(self, slots):
        """Return nothing per slot: the scheduler only passes it on."""
        return [(None, None) for _ in slots]


def drive(engine, names, groups, msgs):
    """
    Run ``groups`` through a scheduler over ``engine``.

    Returns each group's seconds and the engine's capture count and capture
    seconds after it (zeros for an engine without them).
    """
    streams = {name: CameraStream(name) for name in names}
    scheduler = Scheduler(engine, streams, SchedulerConfig(max_frames_in_flight=len(names)))
    seconds, captures, frame = [], [], itertools.count()
    for group in groups:
        items = [Pending(name, msgs[next(frame) % len(msgs)], time.monotonic())
                 for name in group]
        start = time.perf_counter()
        scheduler.process(items)
        seconds.append(time.perf_counter() - start)
        captures.append((getattr(engine, 'graph_captures', 0),
                         getattr(engine, 'graph_capture_seconds', 0.0)))
    return seconds, captures


def summary(seconds, frames):
    """Milliseconds per group (median, p90, p99, max) and per frame."""
    ms = sorted(1000.0 * s for s in seconds)

    def at(q):
        return round(ms[min(len(ms) - 1, int(q * len(ms)))], 3)
    return {'groups': len(ms), 'median_ms': round(statistics.median(ms), 3), 'p90_ms': at(0.9),
            'p99_ms': at(0.99), 'max_ms': round(ms[-1], 3),
            'ms_per_frame': round(sum(ms) / frames, 3)}


def main(argv=None):
    """Parse arguments, run every (cameras, capture_after) case, print and save a table."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--cameras', default='1,2,8')
    parser.add_argument('--groups', type=int, default=400)
    parser.add_argument('--warmup', type=int, default=20, help='groups not counted')
    parser.add_argument('--capture-after', default='1,2')
    parser.add_argument('--images', default=str(REPO / 'test/data/data/tum_fr2_desk/rgb'))
    parser.add_argument('--keys-only', action='store_true',
                        help='count the match keys only (no device needed)')
    parser.add_argument('--json', help='write the results here')
    args = parser.parse_args(argv)
    cameras = [int(c) for c in args.cameras.split(',')]
    rows = []
    if args.keys_only:
        sys.path.insert(0, str(REPO / 'test'))
        from core_fakes import frame_msg  # the tests' tiny mono8 frames
        for count in cameras:
            names, groups = random_groups(count, args.groups)
            engine = KeyEngine()
            drive(engine, names, groups, [frame_msg(i) for i in range(4)])
            rows.append({'cameras': count, 'match_groups': len(engine.keys),
                         'distinct_keys': len(set(engine.keys))})
            print(rows[-1])
    else:
        from xfeat_ros.gpu.factory import create_gpu_engine
        from xfeat_ros.image_codec import raw_image
        from xfeat_ros.image_files import read_image
        paths = sorted(p for p in Path(args.images).iterdir() if p.suffix in ('.png', '.jpg'))
        msgs = [raw_image(*read_image(p)) for p in paths]
        for count in cameras:
            names, groups = random_groups(count, args.warmup + args.groups)
            for capture_after in (int(c) for c in args.capture_after.split(',')):
                engine = create_gpu_engine('pytorch')
                engine.capture_after = capture_after
                seconds, captures = drive(engine, names, groups, msgs)
                frames = sum(len(g) for g in groups[args.warmup:])
                (warm, warm_s), (end, end_s) = captures[args.warmup - 1], captures[-1]
                row = {'cameras': count, 'capture_after': capture_after,
                       **summary(seconds[args.warmup:], frames), 'captures': end - warm,
                       'capture_s': round(end_s - warm_s, 3),
                       'warmup_captures': warm}
                rows.append(row)
                print(row, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
