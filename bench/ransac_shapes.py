# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Launch shapes of the track check's hypothesis and score kernels, timed side by side.

On the GPU machine (the matches of ``bench/ransac_timing.py --save-matches``)::

    python3 bench/ransac_shapes.py --matches .devshared/matches.npz --out shapes.json

Each shape sets the launch constants of :mod:`xfeat_ros.gpu.kernels`
(``RANSAC_HYPOTHESIS_THREADS``; ``RANSAC_SCORE_THREADS``,
``RANSAC_SCORE_PER_THREAD`` and ``RANSAC_SCORE_SPLITS``, which are injected
into ``ransac.cu``), recompiles,
and times every kernel of the check (CUDA events, median of ``--reps``) on
every fourth TUM and EuRoC pair and the synthetic 4096-match pair, as
``bench/ransac_timing.py`` lays them out (bound 4096, device count). The
shapes run interleaved over ``--rounds`` rounds. Every shape's hypotheses,
scores, masks and models must equal the first shape's bit for bit (the
kernels' arithmetic does not depend on the launch shape): ``equal`` says so.
"""

import argparse
import itertools
import json
from pathlib import Path
import statistics
import sys

import numpy as np

REPO = Path(__file__).resolve().parents[1]
HYPOTHESIS_THREADS = (64,)
# score kernel: (threads per block, models a thread, blocks sharing a model's matches)
SCORE_SHAPES = ((128, 2, 32), (128, 4, 16), (256, 1, 32), (64, 2, 64), (128, 2, 16),
                (128, 1, 32))


def use_shape(kernels, hypothesis_threads, score_threads, per_thread, splits):
    """Set the launch constants of one shape and compile ``ransac.cu`` for them."""
    kernels.RANSAC_HYPOTHESIS_THREADS = hypothesis_threads
    kernels.RANSAC_SCORE_THREADS = score_threads
    kernels.RANSAC_SCORE_PER_THREAD = per_thread
    kernels.RANSAC_SCORE_SPLITS = splits
    kernels.RANSAC_SCORE_MODELS = score_threads * per_thread
    kernels.LAUNCH_DEFINES['ransac.cu'] = (('SCORE_THREADS', score_threads),
                                           ('SCORE_PER_THREAD', per_thread),
                                           ('SCORE_SPLITS', splits))
    kernels.ransac_module.cache_clear()  # ops.function keeps the old modules (ids unique)


def pairs_of(data, ransac_timing):
    """``[(name, (kp0, kp1, idx0, idx1))]``: every fourth real pair, then the synthetic one."""
    out = []
    for name, _, _ in ransac_timing.SEQUENCES:
        frames, matches = ransac_timing.sequence(data, name)
        for i in range(0, len(matches), 4):
            m = matches[i]
            out.append((f'{name}_{i + 1}', (frames[i], frames[i + 1], m[:, 0], m[:, 1])))
    p0, p1 = ransac_timing.synthetic_pair()
    index = np.arange(len(p0))
    out.append(('synthetic_4096', (p0, p1, index, index)))
    return out


def main(argv=None):
    """Time every shape on every pair; print one line a shape; write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--matches', required=True, help="ransac_timing's --save-matches npz")
    parser.add_argument('--reps', type=int, default=30)
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--out', help='JSON results file')
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / 'bench'))
    import ransac_timing
    from xfeat_ros.gpu import kernels
    try:
        data = dict(np.load(args.matches))
    except (OSError, ValueError) as exc:
        parser.exit(2, f'ransac_shapes: cannot read {args.matches}: {exc}\n')
    pairs = pairs_of(data, ransac_timing)
    shapes = [(h, *score) for h, score in itertools.product(HYPOTHESIS_THREADS, SCORE_SHAPES)]
    times = {shape: {} for shape in shapes}
    reference, equal = {}, dict.fromkeys(shapes, True)
    for _ in range(args.rounds):
        for shape in shapes:
            use_shape(kernels, *shape)
            bench = ransac_timing.DeviceBench()
            for name, loaded in pairs:
                bench.load(*loaded)
                timing, mask = bench.time(args.reps)
                outputs = (bench.models, bench.check.scores.get(), mask, bench.fundamental)
                first = reference.setdefault(name, outputs)
                equal[shape] = equal[shape] and all(
                    np.array_equal(a, b, equal_nan=True) for a, b in zip(first, outputs))
                for stage, ms in timing['stages_ms'].items():
                    times[shape].setdefault(stage, []).append(ms)
                times[shape].setdefault('graph', []).append(timing['graph_ms'])
    rows = []
    for shape in shapes:
        row = {'hypothesis_threads': shape[0], 'score_threads': shape[1],
               'score_per_thread': shape[2], 'score_splits': shape[3], 'equal': equal[shape],
               **{f'{k}_us': 1e3 * statistics.median(v) for k, v in times[shape].items()}}
        rows.append(row)
        print(' '.join(f'{k}={v:.1f}' if isinstance(v, float) else f'{k}={v}'
                       for k, v in row.items()), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({'command': ' '.join(sys.argv), 'pairs':
                                              [name for name, _ in pairs], 'rows': rows},
                                             indent=1) + '\n')
    return 0 if all(equal.values()) else 1


if __name__ == '__main__':
    sys.exit(main())
