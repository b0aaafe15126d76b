# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Where the tensor-core matcher's time goes: variants of ``mnn_rows_tc`` timed side by side.

Run on the GPU machine::

    python3 bench/match_probe.py --shared .devshared [--out probe.json]

Descriptors: the GPU engine's 4096 of two consecutive TUM frames (real
similarity structure), and random unit rows. Each variant is ``match.cu``
compiled with other macros, or with one stage cut out of the source (to
time by difference, as no hardware counters are read): the default; column
shares 1 / 2 / 4 / 8; another tiling; the products and running maxima only
(no candidate is queued, so nothing is re-checked); ``mnn_best`` (FP32) for
reference. Times are CUDA-graph replays of memset + kernel (the collection
step is the same for all). Every full variant's best_row / best_col is
checked bitwise against ``mnn_best``'s.
"""

import argparse
import json
from pathlib import Path
import sys

import numpy as np

REPO = Path(__file__).resolve().parents[1]
NO_QUEUE = ('if (active[mt][h] && top >= threshold) {', 'if (false) {')


def compile_variant(cupy, width, tiling, cut=None):
    """Compile match.cu for ``width`` with ``tiling`` macros; ``cut`` = (old, new) source edit."""
    from xfeat_ros.gpu import kernels
    defines = (('DESC_DIM', width),) + tuple(tiling.items())
    source = kernels.KernelVariant('match.cu', defines, kernels.BASE_OPTIONS).source()
    if cut is not None:
        assert cut[0] in source, cut[0]
        source = source.replace(*cut)
    module = cupy.RawModule(code=source, options=kernels.BASE_OPTIONS)
    module.compile()
    return module


def graph_us(cupy, stream, fn, reps=50):
    """Device microseconds per replay of ``fn``'s launches captured as one graph."""
    fn()
    stream.synchronize()
    stream.begin_capture()
    fn()
    graph = stream.end_capture()
    graph.launch(stream)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(stream)
    for _ in range(reps):
        graph.launch(stream)
    end.record(stream)
    end.synchronize()
    return 1000.0 * cupy.cuda.get_elapsed_time(start, end) / reps


def real_descriptors(shared):
    """Descriptors of two consecutive TUM frames from the GPU engine (host float32 [4096, 64])."""
    from types import SimpleNamespace
    from xfeat_ros.gpu.engine import create_gpu_engine
    from xfeat_ros.image_files import read_image
    from xfeat_ros.weights import load_weights
    engine = create_gpu_engine('pytorch', load_weights(shared / 'models' / 'xfeat_backbone.npz'),
                               0, 4096, 0.05, 0.82)
    paths = sorted((shared / 'data' / 'tum_fr2_desk' / 'rgb').glob('*.png'))[:2]
    msgs = []
    for path in paths:
        pixels, encoding = read_image(path)
        msgs.append(SimpleNamespace(data=pixels.tobytes(), encoding=encoding,
                                    height=pixels.shape[0], width=pixels.shape[1],
                                    step=pixels.shape[1] * 3, is_bigendian=0))
    slots = [engine.alloc_slot() for _ in msgs]
    engine.submit_group(msgs, slots)
    return [f.descriptors for f, _ in engine.results(slots)]


def probe(cupy, d0, d1, width, sms):
    """Time every variant on one descriptor pair; dict name -> microseconds (and checks)."""
    from xfeat_ros.gpu import kernels, ops
    stream = cupy.cuda.Stream(non_blocking=True)
    n0, n1 = len(d0), len(d1)
    a, b = cupy.asarray(d0), cupy.asarray(d1)
    best = cupy.zeros(n0 + n1, dtype=cupy.uint64)
    margin = np.float32(ops.TC_MARGIN)
    null = np.uint64(0)

    def run(module, grid, threads, name):
        def fn():
            cupy.cuda.runtime.memsetAsync(best.data.ptr, 0, best.nbytes, stream.ptr)
            with stream:
                module.get_function(name)(grid, (threads,), args)
        return fn

    out = {}
    base = kernels.match_tiling(width)
    reference = compile_variant(cupy, width, base)
    args = (a, null, np.int32(n0), b, null, np.int32(n1), best[:n0], best[n0:])
    out['mnn_best (fp32)'] = graph_us(cupy, stream, run(
        reference, (ops.blocks(n1, 64), ops.blocks(n0, 64)), 256, 'mnn_best'))
    want = best.get()
    args = (a, null, np.int32(n0), b, null, np.int32(n1), margin, best[:n0], best[n0:])
    tilings = {'default': base,
               'warps 8 x 16 rows, 32 columns': dict(base, TC_WARPS=8, TC_MT=1, TC_COLS=32)}
    for label, tiling in tilings.items():
        module = compile_variant(cupy, width, tiling)
        rows = tiling['TC_WARPS'] * 16 * tiling['TC_MT']
        strips = ops.blocks(max(n0, n1), rows)
        chosen = ops.rows_tc_grid(n0, n1, width, sms) if label == 'default' else None
        for shares in (1, 2, 4, 8):
            grid = (shares, strips, 2)
            name = f'rows_tc {label}, {shares} shares'
            out[name] = graph_us(cupy, stream, run(module, grid, 32 * tiling['TC_WARPS'],
                                                   'mnn_rows_tc'))
            out[name + ' equal'] = bool(np.array_equal(best.get(), want))
            if chosen is not None and chosen == grid:
                out['rows_tc default grid'] = list(grid)
        if label == 'default':
            cut = compile_variant(cupy, width, tiling, NO_QUEUE)
            grid = ops.rows_tc_grid(n0, n1, width, sms)
            out['rows_tc products and maxima only (default grid)'] = graph_us(
                cupy, stream, run(cut, grid, 32 * tiling['TC_WARPS'], 'mnn_rows_tc'))
    side0 = ops.DescriptorSet(a, n0, width)
    side1 = ops.DescriptorSet(b, n1, width)
    match = ops.alloc_match_output(min(n0, n1))
    scratch = ops.MatchScratch()
    for label, tc in (('tensor cores', True), ('fp32', False)):
        out[f'mutual_nn_match total ({label})'] = graph_us(
            cupy, stream, lambda: ops.mutual_nn_match(side0, side1, match, scratch, 0.82, stream,
                                                      width=width, tensor_cores=tc))
    return out


def main(argv=None):
    """Run the probe on real and random descriptors; print and write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--shared', default=str(REPO.parent / 'shared'))
    parser.add_argument('--out', default='')
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    import cupy
    from xfeat_ros.gpu import ops
    sms = ops.multiprocessors()
    rng = np.random.default_rng(0)
    results = {'gpu': cupy.cuda.runtime.getDeviceProperties(0)['name'].decode(), 'sms': sms}
    pairs = {'real 4096 x 4096': real_descriptors(Path(args.shared))}
    rand = rng.standard_normal((8192, 64)).astype(np.float32)
    rand /= np.linalg.norm(rand, axis=1, keepdims=True)
    pairs['random 4096 x 4096'] = [rand[:4096], rand[4096:]]
    for label, (d0, d1) in pairs.items():
        results[label] = probe(cupy, np.ascontiguousarray(d0, np.float32),
                               np.ascontiguousarray(d1, np.float32), 64, sms)
        for name, value in results[label].items():
            print(f'{label:>18} | {name:<48} | {value}')
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
