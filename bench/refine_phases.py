# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Where the track check's refinement spends its time: clock64() stamps per phase, on the GPU.

On the GPU machine (the matches of ``bench/ransac_timing.py --save-matches``)::

    python3 bench/refine_phases.py --matches .devshared/matches.npz --out phases.json

A copy of ``ransac_refine.cu``'s source (the shipped file is not changed) gets
stamps: thread 0 writes ``clock64()`` into a ``__device__`` array at the
boundaries of the refinement's phases, per round. The instrumented kernel
replaces the shipped one in one :class:`xfeat_ros.gpu.ransac.EpipolarRansac`,
which checks every fourth TUM and EuRoC pair of the file and the synthetic
4096-match pair (as ``bench/ransac_timing.py`` lays them out). Per phase: the
median over ``--reps`` runs of its cycles, and microseconds at the SM clock
given by ``--sm-mhz`` (the H200 machine runs at 1980 MHz under load). The
masks must equal the shipped kernel's (``equal``), so the stamps changed no
result. ``--source-only`` prints the instrumented source (no GPU needed; for
a compile check with nvcc).

Phases of a round: ``centre`` (the inliers' centroids from the sums the
previous count made), ``spread`` (their mean distances), ``ata`` (the 9 x 9
normal equations), ``cholesky``, ``inverse`` (the inverse iterations),
``rank2`` (Jacobi, rank 2, denormalisation), ``count`` (the candidate's
inliers and their coordinate sums). Outside the rounds: ``pick`` (gather and
best model), ``first_count``, ``mask`` (the output mask).
"""

import argparse
import json
from pathlib import Path
import statistics
import sys

import numpy as np

REPO = Path(__file__).resolve().parents[1]
ROUND_SLOTS = 8   # stamps a round: start, then the end of each of the 7 phases
ROUND_PHASES = ('centre', 'spread', 'ata', 'cholesky', 'inverse', 'rank2', 'count')
KERNEL_SLOTS = {'start': 56, 'picked': 57, 'first_counted': 58, 'rounds_done': 59,
                'masked': 60}
PREAMBLE = (
    '__device__ long long xf_clock[64];\n'
    '__device__ int xf_round;\n'
    '#define XF_STAMP(slot) do { if (threadIdx.x == 0) \\\n'
    '    xf_clock[xf_round * 8 + (slot)] = clock64(); } while (0)\n'
    '#define XF_STAMP_AT(index) do { if (threadIdx.x == 0) \\\n'
    '    xf_clock[(index)] = clock64(); } while (0)\n')
# (anchor text, text put before it, text put after it); each anchor occurs once
PATCHES = (
    ('    const Matches pts = {kp0, idx0, kp1, idx1, cache_points ? gathered : nullptr};\n',
     '', '    XF_STAMP_AT(56);\n'),
    ('    const int best_score = (int)(best_key >> 32) - 1;\n', '    XF_STAMP_AT(57);\n', ''),
    ('        for (int round = 0; round < REFINE_ROUNDS && kept >= MIN_MATCHES; ++round) {\n',
     '        XF_STAMP_AT(58);\n',
     '            if (threadIdx.x == 0) xf_round = round;\n            XF_STAMP(0);\n'),
    ('            const double c1x = centre_cur[2] / kept, c1y = centre_cur[3] / kept;\n', '',
     '            XF_STAMP(1);\n'),
    ('            block_sums(spread, red, sums);\n', '', '            XF_STAMP(2);\n'),
    ('            block_sums(acc, red, sums);\n', '', '            XF_STAMP(3);\n'),
    ('    for (int it = 0; it < INVERSE_ITERATIONS; ++it) {\n', '    XF_STAMP(4);\n', ''),
    ('    if (lane < 9) vec[lane] = xi;\n    __syncwarp();\n    if (lane == 0) {\n',
     '    XF_STAMP(5);\n', ''),
    ('        ok = unit9(out);\n', '', '        XF_STAMP(6);\n'),
    ('            const int fresh = count_and_centre(cand, pts, n, t2, ired, red, centre_cand,\n'
     '                                               cand_flags);\n', '',
     '            XF_STAMP(7);\n'),
    ('    if (kept < MIN_MATCHES) kept = 0;\n', '    XF_STAMP_AT(59);\n', ''),
    ('    if (tid == 0) inliers[0] = kept;\n', '    XF_STAMP_AT(60);\n', ''),
)


def instrumented_source():
    """Return the refinement's full source (as the loader builds it) with the stamps."""
    from xfeat_ros.gpu import kernels
    source = kernels.refine_variant().source()
    for anchor, before, after in PATCHES:
        if source.count(anchor) != 1:
            raise SystemExit(f'refine_phases: anchor not found once in ransac_refine.cu: '
                             f'{anchor.strip()!r}')
        source = source.replace(anchor, before + anchor + after)
    return PREAMBLE + source


def phases_of(clock):
    """Cycles of each phase from one run's stamps (``clock`` int64 [64]; 0: not reached)."""
    out = {}
    k = KERNEL_SLOTS
    spans = (('pick', k['start'], k['picked']), ('first_count', k['picked'], k['first_counted']),
             ('mask', k['rounds_done'], k['masked']))
    for name, a, b in spans:
        if clock[a] and clock[b]:
            out[name] = int(clock[b] - clock[a])
    for r in range(KERNEL_SLOTS['start'] // ROUND_SLOTS):
        base = r * ROUND_SLOTS
        if not clock[base]:
            break
        previous = clock[base]
        for i, name in enumerate(ROUND_PHASES, start=1):
            if not clock[base + i]:
                break
            out[f'round{r}_{name}'] = int(clock[base + i] - previous)
            previous = clock[base + i]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--matches', help="ransac_timing's --save-matches npz")
    parser.add_argument('--reps', type=int, default=10)
    parser.add_argument('--sm-mhz', type=float, default=1980.0)
    parser.add_argument('--out', help='JSON results file')
    parser.add_argument('--source-only', action='store_true',
                        help='print the instrumented source and stop')
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / 'bench'))
    if args.source_only:
        print(instrumented_source())
        return 0
    if not args.matches:
        parser.error('--matches is required (or --source-only)')
    import cupy
    import ransac_shapes
    import ransac_timing
    from xfeat_ros.gpu import kernels
    from xfeat_ros.gpu.ransac import refine_shared_bytes
    try:
        data = dict(np.load(args.matches))
    except (OSError, ValueError) as exc:
        parser.exit(2, f'refine_phases: cannot read {args.matches}: {exc}\n')
    module = cupy.RawModule(code=instrumented_source(), options=kernels.refine_variant().options)
    module.compile()
    patched = module.get_function('ransac_refine')
    patched.max_dynamic_shared_size_bytes = refine_shared_bytes(
        kernels.RANSAC_REFINE_SHARED_POINTS)
    clock = cupy.ndarray((64,), cupy.int64, module.get_global('xf_clock'))
    bench = ransac_timing.DeviceBench()
    shipped = bench.check._functions[2]
    rows = []
    for name, loaded in ransac_shapes.pairs_of(data, ransac_timing):
        bench.load(*loaded)
        masks, cycles = [], {}
        for kernel in (shipped, patched):
            bench.check._functions[2] = kernel
            for _ in range(args.reps):
                with bench.stream:  # in the check's stream order (a non-blocking stream)
                    clock.fill(0)
                for _, launch in bench.stages():
                    launch()
                bench.stream.synchronize()
                if kernel is patched:
                    for phase, value in phases_of(clock.get()).items():
                        cycles.setdefault(phase, []).append(value)
            masks.append(bench.out.mask.get().copy())
        bench.check._functions[2] = shipped
        row = {'pair': name, 'matches': len(loaded[2]), 'equal': bool(np.array_equal(*masks)),
               **{f'{phase}_us': statistics.median(v) / args.sm_mhz
                  for phase, v in cycles.items()}}
        rows.append(row)
        print(' '.join(f'{k}={v:.1f}' if isinstance(v, float) else f'{k}={v}'
                       for k, v in row.items()), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({'command': ' '.join(sys.argv), 'sm_mhz':
                                              args.sm_mhz, 'rows': rows}, indent=1) + '\n')
    return 0 if all(row['equal'] for row in rows) else 1


if __name__ == '__main__':
    sys.exit(main())
