# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Host -> device copy rates of image-sized pieces from pinned memory (GPU machine).

The 8-frame device timelines show the eight 921,600-byte uploads of a group taking
20-116 us each (47 down to 8 GB/s), 385 us before the first kernel. This probe asks
whether the rate depends on how the pinned memory is laid out or where it lives:

* ``separate``: one pinned allocation per image (as each engine slot has its own);
* ``block``: the eight images as views of one pinned allocation;
* ``one-copy``: the whole block in one copy;
* ``write-combined``: one allocation with ``cudaHostAllocWriteCombined``;
* each again after pinning the process to the CPUs of the GPU's NUMA node (fresh
  allocations, so their pages are first touched there), when that node is known.

Per variant: ``--reps`` rounds of eight copies back to back on one stream, each copy
between two events; the median and p90 of the per-copy rate and the median of a round's
span. Prints a table and writes ``--json``.

    python3 bench/upload_probe.py --json upload.json
"""

import argparse
import ctypes
import json
import os
from pathlib import Path

import numpy as np

IMAGE_BYTES = 640 * 480 * 3
WRITE_COMBINED = 4  # cudaHostAllocWriteCombined


def gpu_numa(cupy):
    """``(numa node, cpu list text)`` of the current GPU from sysfs; (None, None) if unknown."""
    bus = cupy.cuda.runtime.deviceGetPCIBusId(cupy.cuda.Device().id).lower()
    base = Path('/sys/bus/pci/devices') / bus
    try:
        node = int((base / 'numa_node').read_text())
        cpus = (base / 'local_cpulist').read_text().strip()
    except OSError:
        return None, None
    return node, cpus


def parse_cpulist(text):
    """Set of CPU numbers of a sysfs cpu list such as ``0-7,16-23``."""
    out = set()
    for part in text.split(','):
        if '-' in part:
            low, high = part.split('-')
            out.update(range(int(low), int(high) + 1))
        elif part:
            out.add(int(part))
    return out


def pinned(cupy, nbytes, flags=0):
    """Return a filled NumPy view of a fresh pinned allocation, and what keeps it alive."""
    if flags:  # cudaHostAlloc with flags: CuPy's pool does not take them
        pointer = cupy.cuda.runtime.hostAlloc(nbytes, flags)
        array = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(pointer))
        array[:] = 7
        return array, pointer
    memory = cupy.cuda.alloc_pinned_memory(nbytes)
    array = np.frombuffer(memory, np.uint8, nbytes)
    array[:] = 7
    return array, memory


def time_copies(cupy, sources, reps):
    """Per-copy rates (GB/s) and round spans (us) of copying ``sources`` back to back."""
    stream = cupy.cuda.Stream(non_blocking=True)
    sizes = [s.nbytes for s in sources]
    device = cupy.empty(sum(sizes), np.uint8)
    events = [cupy.cuda.Event() for _ in range(len(sources) + 1)]
    rates, spans = [], []
    for rep in range(reps + 3):
        offset = 0
        events[0].record(stream)
        for i, source in enumerate(sources):
            cupy.cuda.runtime.memcpyAsync(device.data.ptr + offset, source.ctypes.data,
                                          source.nbytes, 1, stream.ptr)
            events[i + 1].record(stream)
            offset += source.nbytes
        stream.synchronize()
        if rep < 3:
            continue
        for i, size in enumerate(sizes):
            ms = cupy.cuda.get_elapsed_time(events[i], events[i + 1])
            rates.append(size / (ms * 1e-3) / 1e9)
        spans.append(cupy.cuda.get_elapsed_time(events[0], events[-1]) * 1e3)
    return rates, spans


def variants(cupy, frames):
    """``{name: sources}`` of the layouts above (allocated now, in this thread)."""
    keep = []
    separate = []
    for _ in range(frames):
        array, memory = pinned(cupy, IMAGE_BYTES)
        keep.append(memory)
        separate.append(array)
    block, memory = pinned(cupy, IMAGE_BYTES * frames)
    keep.append(memory)
    combined, handle = pinned(cupy, IMAGE_BYTES * frames, WRITE_COMBINED)
    keep.append(handle)
    return keep, {
        'separate': separate,
        'block': [block[i * IMAGE_BYTES:(i + 1) * IMAGE_BYTES] for i in range(frames)],
        'one-copy': [block],
        'write-combined': [combined[i * IMAGE_BYTES:(i + 1) * IMAGE_BYTES]
                           for i in range(frames)],
    }


def summarize(rates, spans):
    """Median / p90 / min rate and median span."""
    values = np.array(rates)
    return {'rate_median_gbs': round(float(np.median(values)), 2),
            'rate_p10_gbs': round(float(np.percentile(values, 10)), 2),
            'rate_min_gbs': round(float(values.min()), 2),
            'span_median_us': round(float(np.median(spans)), 1)}


def main(argv=None):
    """Measure every variant, print a table, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--frames', type=int, default=8)
    parser.add_argument('--reps', type=int, default=60)
    parser.add_argument('--json', help='write the results here')
    args = parser.parse_args(argv)
    import cupy
    node, cpus = gpu_numa(cupy)
    record = {'gpu_numa_node': node, 'gpu_local_cpus': cpus,
              'affinity_at_start': sorted(os.sched_getaffinity(0)),
              'numa_nodes': sorted(p.name for p in Path('/sys/devices/system/node').glob('node*')),
              'rows': []}
    placements = [('as started', None)]
    if cpus:
        local = parse_cpulist(cpus) & os.sched_getaffinity(0)
        if local and local != os.sched_getaffinity(0):
            placements.append(('GPU-local CPUs', local))
    for placement, cpuset in placements:
        if cpuset:
            os.sched_setaffinity(0, cpuset)
        keep, layouts = variants(cupy, args.frames)
        for name, sources in layouts.items():
            row = dict(placement=placement, layout=name, copies=len(sources),
                       **summarize(*time_copies(cupy, sources, args.reps)))
            record['rows'].append(row)
            print(f"{placement:15s} {name:15s} copies {row['copies']}  rate median "
                  f"{row['rate_median_gbs']:6.2f} p10 {row['rate_p10_gbs']:6.2f} min "
                  f"{row['rate_min_gbs']:6.2f} GB/s  round {row['span_median_us']:7.1f} us",
                  flush=True)
        del keep
    started = len(record['affinity_at_start'])
    print(f'GPU NUMA node {node}, local CPUs {cpus}, affinity at start {started} CPUs, '
          f'nodes {record["numa_nodes"]}')
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
