# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The GPU engine's host time per frame, as the node drives it, for a profiler.

One camera, ``--group`` frames per synchronization (1: the node at 30 Hz):
``submit_group`` (frame i matched against frame i - 1), ``results``, repeated
over the fixture frames (rgb8, 640x480, top_k 4096). Prints the medians of the
wall time per group and of the host parts the engine records. Run it under
``py-spy record --gil`` to see where the interpreter spends a frame::

    py-spy record --gil -r 2000 -f raw -o host.txt -- python3 bench/host_profile.py --frames 2000
"""

import argparse
from pathlib import Path
import statistics
import sys
import time

REPO = Path(__file__).resolve().parents[1]


def main(argv=None):
    """Run the loop; print medians (ms)."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--images', default=str(REPO / 'test/data/data/tum_fr2_desk/rgb'))
    parser.add_argument('--frames', type=int, default=1000)
    parser.add_argument('--group', type=int, default=1)
    parser.add_argument('--warmup', type=int, default=50)
    parser.add_argument('--pace-ms', type=float, default=0.0,
                        help='idle this long between groups (33: a 30 Hz camera; 0: back to '
                             'back), so that caches, CPU and GPU clocks cool as in the node')
    parser.add_argument('--serial-heads', action='store_true',
                        help='the backbone with parallel_heads=False: one chain of kernels, '
                             'so its CUDA graph is a straight line')
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from xfeat_ros.gpu.factory import create_gpu_engine
    from xfeat_ros.image_codec import raw_image
    from xfeat_ros.image_files import read_image
    paths = sorted(p for p in Path(args.images).iterdir() if p.suffix in ('.png', '.jpg'))
    msgs = [raw_image(*read_image(p)) for p in paths]
    options = {'pytorch': {'parallel_heads': False}} if args.serial_heads else None
    engine = create_gpu_engine('pytorch', options=options)
    slots = [engine.alloc_slot() for _ in range(2 * args.group)]
    import cupy
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    previous = None
    walls, stage, enqueue, fetch, device = [], [], [], [], []
    for i in range(args.warmup + args.frames // args.group):
        group = slots[(i % 2) * args.group:(i % 2 + 1) * args.group]
        frames = [msgs[(i * args.group + j) % len(msgs)] for j in range(args.group)]
        if args.pace_ms > 0:
            time.sleep(args.pace_ms / 1000.0)
        t0 = time.perf_counter()
        engine.submit_group(frames, group, previous=previous, chain=True, start_event=start)
        end.record(engine.stream)
        t1 = time.perf_counter()
        engine.results(group)
        t2 = time.perf_counter()
        previous = group[-1]
        if i >= args.warmup:
            walls.append(t2 - t0)
            stage.append(engine.last_group_seconds['stage'])
            enqueue.append(engine.last_group_seconds['enqueue'])
            fetch.append(t2 - t1)
            device.append(cupy.cuda.get_elapsed_time(start, end) / 1000.0)
    per = 1000.0 / args.group
    median = statistics.median
    print(f'group {args.group}, paced {args.pace_ms:g} ms'
          f'{", serial heads" if args.serial_heads else ""}: per frame wall '
          f'{median(walls) * per:.3f} ms, stage {median(stage) * per:.3f}, '
          f'enqueue {median(enqueue) * per:.3f}, '
          f'results (waits for the device) {median(fetch) * per:.3f}, device (upload to '
          f'last kernel) {median(device) * per:.3f}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
