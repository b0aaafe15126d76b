# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
What a frame's spread selection costs: on the host (select_spread) and on the device.

    python bench/spread_cost.py --gpu 0 --repeat 50 --json out.json

For each top_k (candidates are 2 x top_k, the GPU engine's detection of a TUM fr2/desk
frame) and each spread (radius 20, radius 30, grid 80 px x 4), in one run:

* ``host``: :func:`xfeat_ros.features.spread.select_spread` on those candidates (median
  and 90th percentile of ``--repeat`` runs, ms);
* ``device``: the ``spread.cu`` launches of :func:`xfeat_ros.features.gpu.spread.enqueue`
  between two CUDA events (ms; no match, every candidate new, as on a first frame);
* ``equal``: the device's kept indices equal the host's.

Without ``--gpu`` only the host column is measured. Exit status 1 with one line on a
mistake (no data, no CUDA device).
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

from xfeat_ros.errors import XFeatError
from xfeat_ros.features.spread import select_spread, Spread

SPREADS = {'r20': Spread(20.0), 'r30': Spread(30.0), 'grid80x4': Spread(0.0, 80, 4)}


def timed(call, repeat):
    """Median and 90th percentile (ms) of ``repeat`` calls of ``call()``."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000.0)
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))]


def device_cost(engine, slot, spread, repeat):
    """Median / p90 device ms of a slot's selection; and its kept indices."""
    from xfeat_ros.features.gpu import spread as device_spread
    cupy = engine.cupy
    slot.spread = spread
    times = []
    with cupy.cuda.Device(engine.gpu):
        for _ in range(repeat + 1):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(engine.stream)
            device_spread.enqueue(engine, slot, None)
            end.record(engine.stream)
            end.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, end))
        count = int(slot.selection.kept_count.get()[0])
        kept = slot.selection.kept.get()[:count].astype(np.int64)
    times = sorted(times[1:])
    return statistics.median(times), times[int(0.9 * (len(times) - 1))], kept


def main(argv=None):
    """Measure and print (and write ``--json``); 0, or 1 with one line on a mistake."""
    parser = argparse.ArgumentParser(prog='spread_cost', description=__doc__.split('\n')[1])
    parser.add_argument('--gpu', type=int, default=None)
    parser.add_argument('--repeat', type=int, default=50)
    parser.add_argument('--top-k', type=int, nargs='+', default=[300, 1024, 4096])
    parser.add_argument('--json', default=None)
    args = parser.parse_args(argv)
    from xfeat_ros.features.image_codec import raw_image
    from xfeat_ros.tools.bench.frames import default_images, default_weights
    from xfeat_ros.tools.image_files import list_sequence, read_image
    try:
        path = list_sequence(default_images())[0][1]
    except (OSError, IndexError, ValueError, XFeatError) as exc:
        print(f'spread_cost: error: no TUM frame ({exc})', file=sys.stderr)
        return 1
    msg = raw_image(*read_image(path))
    rows = []
    for top_k in args.top_k:
        engine = slot = None
        if args.gpu is not None:
            from xfeat_ros.features.gpu.factory import create_gpu_engine
            try:
                engine = create_gpu_engine('pytorch', default_weights(), args.gpu, top_k,
                                           0.05, 0.82, spread=Spread(20.0))
            except (ImportError, XFeatError) as exc:
                print(f'spread_cost: error: no GPU engine ({exc})', file=sys.stderr)
                return 1
            slot = engine.alloc_slot()
            engine.submit(msg, slot)
            engine.synchronize()
            candidates = engine.features(slot)
        else:
            from xfeat_ros.features.engine import EngineConfig
            from xfeat_ros.features.factory import cpu_engine
            cpu = cpu_engine(EngineConfig(weights=default_weights(), top_k=top_k,
                                          min_distance=20.0))
            cpu_slot = cpu.alloc_slot()
            cpu.submit(msg, cpu_slot)
            cpu.synchronize()
            candidates = cpu.features(cpu_slot)
        n = len(candidates)
        ages, tracked = np.zeros(n, np.uint32), np.zeros(n, bool)
        for name, spread in SPREADS.items():
            spread = spread.for_frame(top_k, 0.82)
            host = timed(lambda: select_spread(candidates.keypoints, candidates.scores, ages,
                                               tracked, spread), args.repeat)
            want = select_spread(candidates.keypoints, candidates.scores, ages, tracked, spread)
            row = {'top_k': top_k, 'candidates': n, 'spread': name, 'kept': len(want),
                   'host_ms': [round(v, 4) for v in host]}
            if engine is not None:
                *device, kept = device_cost(engine, slot, spread, args.repeat)
                row.update(device_ms=[round(v, 4) for v in device],
                           equal=bool(np.array_equal(kept, want)))
            rows.append(row)
            print(json.dumps(row))
    if args.json:
        from xfeat_ros.tools.plumbing import environment
        out = {'command': 'python bench/spread_cost.py ' + ' '.join(argv or sys.argv[1:]),
               'environment': environment(), 'rows': rows}
        with open(args.json, 'w') as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
