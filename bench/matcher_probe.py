# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Where the tensor-core matcher's first kernel spends its time (GPU machine; a probe).

``mnn_approx_tc_pairs`` of ``--pairs`` pairs of ``--rows`` x ``--rows`` random unit
descriptors, compiled in variants that each leave part of the kernel out (the source is
edited as text, so the probe follows ``kernels/match_tc.cu``; an edit whose anchor is
gone stops the probe). Only ``shipped`` computes the right tables; the others exist to
be timed:

* ``shipped``: the kernel as the engine runs it;
* ``no_atomics``: without the row and column maxima's ``atomicMax``;
* ``no_tables``: without the tile tables' stores (the maxima kept);
* ``products_only``: the tiles' loads and products, then one conditional store;
* ``blocks6`` / ``blocks8``: ``__launch_bounds__`` minimum of 6 or 8 blocks an SM
  (for 64-wide descriptors).

Each variant's launches are timed between events, interleaved over ``--rounds`` rounds;
prints the median microseconds a launch per variant and writes ``--json``.

    python3 bench/matcher_probe.py --json probe.json
"""

import argparse
import json
from pathlib import Path
import re
import sys

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from xfeat_ros.gpu import kernels, matching, ops  # noqa: E402

EPILOGUE_START = '    // the operand tiles are free now'
EPILOGUE_END = '\n}\n'  # the first brace at column 0 after the start: approx_tile's end
ROW_ATOMIC = '                atomicMax(&out.row_max[i], v.first | TAG_MASK);\n'
COL_ATOMIC = '                atomicMax(&out.col_max[j], v.first | TAG_MASK);\n'
TABLE_STORES = ('            tile_first[at] = v.first;\n            tile_second[at] = v.second;\n')
# the minimum of blocks an SM for DESC_DIM 64
BLOCKS = re.compile(r'(#if DESC_DIM <= 64\n#define APPROX_MIN_BLOCKS )\d+\n')
# keeps every product alive at the cost of a sum and one rarely taken store
PRODUCTS_ONLY = """    float s = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            s += acc[nt][q];
        }
    }
    if (s == 1234.5f) {
        outputs.get().tile_first[tid] = 1u;
    }"""


def replace_all(text, old, new, variant, times=1):
    """``text`` with ``old`` replaced; SystemExit naming the variant unless it occurs ``times``."""
    if text.count(old) != times:
        raise SystemExit(f'matcher_probe: {variant}: anchor {old[:40]!r} is not in match_tc.cu '
                         f'{times} time(s)')
    return text.replace(old, new)


def variant_source(source, name):
    """Return the edited source of variant ``name`` (see the module docstring)."""
    if name == 'shipped':
        return source
    if name in ('blocks6', 'blocks8'):
        if not BLOCKS.search(source):
            raise SystemExit(f'matcher_probe: {name}: no APPROX_MIN_BLOCKS in match_tc.cu')
        return BLOCKS.sub(rf'\g<1>{name[-1]}\n', source, count=1)
    if name == 'no_atomics':
        return replace_all(replace_all(source, ROW_ATOMIC, '', name), COL_ATOMIC, '', name)
    if name == 'no_tables':
        return replace_all(source, TABLE_STORES, '', name, times=2)  # rows' and columns'
    if name == 'products_only':
        start = source.find(EPILOGUE_START)
        end = source.find(EPILOGUE_END, start) if start >= 0 else -1
        if end < 0:
            raise SystemExit('matcher_probe: products_only: epilogue anchors not found')
        return source[:start] + PRODUCTS_ONLY + source[end:]
    raise SystemExit(f'matcher_probe: unknown variant {name}')


def main(argv=None):
    """Time the variants; print a table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--pairs', type=int, default=8)
    parser.add_argument('--rows', type=int, default=4096)
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--reps', type=int, default=20)
    parser.add_argument('--variants', default='shipped,blocks6,no_atomics,no_tables,'
                                              'products_only')
    parser.add_argument('--json', type=Path)
    args = parser.parse_args(argv)
    import cupy
    width = 64
    base = kernels.match_tc_variant(width)
    names = args.variants.split(',')
    functions = {}
    for name in names:
        module = cupy.RawModule(code=variant_source(base.source(), name), options=base.options)
        functions[name] = module.get_function('mnn_approx_tc_pairs')
    rng = np.random.default_rng(0)
    stream = cupy.cuda.Stream(non_blocking=True)
    pairs = []
    for _ in range(args.pairs):
        sides = []
        for _ in range(2):
            d = rng.standard_normal((args.rows, width)).astype(np.float32)
            d /= np.linalg.norm(d, axis=1, keepdims=True)
            sides.append(matching.DescriptorSet(cupy.asarray(d.reshape(-1)), args.rows, width))
        pairs.append((sides[0], sides[1], matching.alloc_match_output(args.rows)))
    scratch = matching.PairScratch()
    table, rows, cols, zeroed = matching.upload_table(pairs, scratch, width)
    matching.match_pairs(table, rows, cols, zeroed, scratch, 0.82, stream, width=width)
    grid = (ops.blocks(cols, kernels.MATCH_TILE), ops.blocks(rows, kernels.MATCH_TILE), args.pairs)
    times = {name: [] for name in names}
    events = [cupy.cuda.Event() for _ in range(2)]
    for _ in range(args.rounds):
        for name in names:
            for _ in range(args.reps):
                events[0].record(stream)
                with stream:
                    functions[name](grid, (kernels.TC_THREADS,), (table,))
                events[1].record(stream)
                events[1].synchronize()
                times[name].append(1e3 * cupy.cuda.get_elapsed_time(events[0], events[1]))
    summary = {name: {'median_us': float(np.median(t)), 'p10_us': float(np.percentile(t, 10)),
                      'p90_us': float(np.percentile(t, 90)), 'n': len(t)}
               for name, t in times.items()}
    for name, s in summary.items():
        print(f'{name:>14}: median {s["median_us"]:7.1f} us  '
              f'[{s["p10_us"]:.1f}-{s["p90_us"]:.1f}]  ({args.pairs} pairs of {args.rows})')
    if args.json:
        args.json.write_text(json.dumps({'pairs': args.pairs, 'rows': args.rows,
                                         'variants': summary}, indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
