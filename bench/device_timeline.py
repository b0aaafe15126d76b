# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The device timeline of one group through the GPU engine: every kernel and copy, in order.

Run on the GPU machine::

    python3 bench/device_timeline.py --shared .devshared --out timeline.json [--groups 1,8]
    python3 bench/device_timeline.py --shared .devshared --groups 1 --pause-ms 33  # 30 Hz

For each group size N the engine (shipped settings, CUDA graphs on) takes
``--rounds`` groups of N TUM 640x480 rgb8 frames through ``submit_group``
(chained matches) + ``results`` under torch.profiler (CUPTI sees the kernels
inside CUDA graphs too). A pause after each group separates the groups on the
device timeline. Per group: the span from the first device operation to the
last, the busy time (union of the operations), the idle gaps, and the list of
operations with their start offsets and durations; the median group by span
is printed and saved with the per-name totals over all groups.
"""

import argparse
import json
import logging
from pathlib import Path
import statistics
import sys
import tempfile
import time

LOG = logging.getLogger('device_timeline')
REPO = Path(__file__).resolve().parents[1]
PAUSE_S = 0.002  # host pause between groups: a gap no group has inside it
DEVICE_CATEGORIES = ('kernel', 'gpu_memcpy', 'gpu_memset')


def trace_ops(trace, categories):
    """Operations ``[(start_us, end_us, name)]`` of a Chrome trace's categories, by start."""
    ops = [(float(e['ts']), float(e['ts']) + float(e.get('dur', 0.0)), e.get('name', '?'))
           for e in trace.get('traceEvents', [])
           if e.get('cat') in categories and e.get('ph') == 'X']
    return sorted(ops)


def split_groups(ops, gap_us):
    """Split a sorted op list where the device idles longer than ``gap_us``."""
    groups, current, end = [], [], None
    for op in ops:
        if current and op[0] - end > gap_us:
            groups.append(current)
            current = []
        end = op[1] if not current else max(end, op[1])
        current.append(op)
    if current:
        groups.append(current)
    return groups


def summarize(group, host):
    """
    Span, busy time and gaps (us) of one group's ops, and the ops relative to its start.

    ``host``: the runtime calls (cudaLaunchKernel, cudaGraphLaunch, copies, syncs)
    from the previous group's end to this group's end, relative to the same start
    (negative: before the device began).
    """
    start = group[0][0]
    busy, gaps, reach = 0.0, [], start
    for a, b, _ in group:
        if a > reach:
            gaps.append(a - reach)
        busy += max(0.0, b - max(a, reach))
        reach = max(reach, b)
    return {'span_us': reach - start, 'busy_us': busy, 'idle_us': sum(gaps),
            'largest_gap_us': max(gaps, default=0.0),
            'ops': [(round(a - start, 2), round(b - a, 2), name) for a, b, name in group],
            'host': [(round(a - start, 2), round(b - a, 2), name) for a, b, name in host]}


def short(name, width=70):
    """Shorten a kernel's (possibly templated) name for tables."""
    return name if len(name) <= width else name[:width - 3] + '...'


def run(engine, msgs, group, rounds, warmup, pause_s=PAUSE_S):
    """
    Profile ``rounds`` groups of ``group`` frames; return the summary of each group.

    ``pause_s``: the host's idle time after each group (0.033: a 30 Hz camera).
    """
    import torch
    sets = [[engine.alloc_slot() for _ in range(group)] for _ in range(2)]
    previous = None

    def loop(count, offset):
        nonlocal previous
        for r in range(count):
            slots = sets[(offset + r) % 2]
            batch = [msgs[((offset + r) * group + j) % len(msgs)] for j in range(group)]
            engine.submit_group(batch, slots, previous=previous, chain=True)
            engine.results(slots)
            previous = slots[-1]
            time.sleep(pause_s)

    loop(warmup, 0)
    engine.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        loop(rounds, warmup)
        engine.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / 'trace.json'
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    groups = split_groups(trace_ops(trace, DEVICE_CATEGORIES), gap_us=0.5e6 * pause_s)
    calls = trace_ops(trace, ('cuda_runtime', 'cuda_driver'))
    out, since = [], float('-inf')
    for g in groups:
        end = max(b for _, b, _ in g)
        out.append(summarize(g, [c for c in calls if since < c[0] <= end]))
        since = end
    return out


def report(label, groups):
    """Median group (by span) with its ops; per-name medians over all groups."""
    if not groups:
        return {'groups': 0}
    ordered = sorted(groups, key=lambda g: g['span_us'])
    median = ordered[len(ordered) // 2]
    per_name = {}
    for g in groups:
        totals = {}
        for _, dur, name in g['ops']:
            totals[name] = totals.get(name, 0.0) + dur
        for name, total in totals.items():
            per_name.setdefault(name, []).append(total)
    names = sorted(((statistics.median(v), len(v), n) for n, v in per_name.items()),
                   reverse=True)
    lines = [f'== {label}: {len(groups)} groups; median span {median["span_us"]:.1f} us, '
             f'busy {median["busy_us"]:.1f}, idle {median["idle_us"]:.1f} '
             f'(largest gap {median["largest_gap_us"]:.1f})',
             '   start    dur  op']
    lines += [f'{a:8.1f} {d:6.1f}  {short(n)}' for a, d, n in median['ops']]
    lines.append('-- host runtime calls of that group (start relative to the device start)')
    lines += [f'{a:8.1f} {d:6.1f}  {short(n)}' for a, d, n in median['host']]
    lines.append('-- per op name, median us per group (groups seen)')
    lines += [f'{t:8.1f} ({c:3d})  {short(n)}' for t, c, n in names]
    print('\n'.join(lines))
    keys = ('span_us', 'busy_us', 'idle_us', 'largest_gap_us')
    return {'groups': len(groups),
            'median': {k: median[k] for k in keys},
            'medians over groups': {k: statistics.median(g[k] for g in groups) for k in keys},
            'ops of the median group': median['ops'],
            'host calls of the median group': median['host'],
            'per name (median us per group)': {n: t for t, _, n in names}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--shared', default=str(REPO.parent / 'shared'))
    parser.add_argument('--groups', default='1,8')
    parser.add_argument('--rounds', type=int, default=30)
    parser.add_argument('--warmup', type=int, default=10)
    parser.add_argument('--pause-ms', type=float, default=1e3 * PAUSE_S,
                        help='host idle time after each group (33: a 30 Hz camera; default 2)')
    parser.add_argument('--serial-heads', action='store_true',
                        help='the backbone with parallel_heads=False (a straight-line graph)')
    parser.add_argument('--out', default='')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / 'bench'))
    from gpu_timing import shared_inputs
    from xfeat_ros.gpu.engine import create_gpu_engine

    msgs, weights = shared_inputs(args.shared)
    options = {'pytorch': {'parallel_heads': False}} if args.serial_heads else None
    engine = create_gpu_engine('pytorch', weights, 0, 4096, 0.05, 0.82, options)
    results = {}
    for group in (int(g) for g in args.groups.split(',') if g):
        results[f'{group} frames'] = report(f'{group} frames per group',
                                            run(engine, msgs, group, args.rounds, args.warmup,
                                                args.pause_ms / 1e3))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
