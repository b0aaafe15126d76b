# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Interleaved A/B of GPU engine variants in one process: per-frame wall and device time.

Run on the GPU machine::

    python3 bench/engine_ab.py --shared .devshared --out ab.json \
        [--variants shipped,wide_convs=off,branches=1] [--groups 1,8] [--rounds 3]

Every variant is its own engine (its own graphs); in each round every variant
runs ``bench/gpu_timing.py``'s ``time_ours`` at each group size (TUM 640x480
rgb8, top_k 4096, chained matches, results on the host), so machine drift
falls on all variants alike. Variants:

* ``shipped``: the defaults;
* ``wide_convs=off``: blocks 4 and 5 on cuDNN instead of ``backbone.cu``'s
  wide direct kernels;
* ``fused_norm=off``: the input's instance norm by PyTorch's operators
  (ten graph nodes) instead of ``backbone.cu``'s two kernels;
* ``branches=N`` (N = 1, 2, 4): the epipolar checks of a flush's matches on N
  side streams instead of :data:`xfeat_ros.gpu.pair_graph.EPIPOLAR_BRANCHES`
  (1: one after the other);
* ``pairs=N`` (N = 1, 2, 4, 16): a flush's pairs matched in chunks of N (instead
  of :data:`xfeat_ros.gpu.pair_graph.BATCH_PAIRS`), each chunk's checks forked
  after it.
"""

import argparse
import json
import logging
from pathlib import Path
import statistics
import sys

LOG = logging.getLogger('engine_ab')
REPO = Path(__file__).resolve().parents[1]
VARIANTS = ('shipped', 'wide_convs=off', 'fused_norm=off', 'branches=1', 'branches=2',
            'branches=4', 'pairs=1', 'pairs=2', 'pairs=4', 'pairs=16')
OPTIONS = {'wide_convs=off': {'wide_convs': False}, 'fused_norm=off': {'fused_norm': False}}


def build(name, weights):
    """Return the engine of a variant (nothing captured yet)."""
    from xfeat_ros.gpu.backbone import TorchBackbone
    from xfeat_ros.gpu.engine import GpuEngine
    options = OPTIONS.get(name, {})
    engine = GpuEngine(TorchBackbone(weights, 0, **options), 0, 4096, 0.05, 0.82)
    if name.startswith('branches='):
        engine._pairs.branches = engine._pairs.branches[:int(name.split('=')[1])]
    if name.startswith('pairs='):
        engine._pairs.batch_pairs = int(name.split('=')[1])
    return engine


def summarize(rounds):
    """Median over rounds of each ``*_ms`` figure, and the per-round values."""
    keys = [k for k in rounds[0] if k.endswith('_ms')]
    return {**{k: statistics.median(r[k] for r in rounds) for k in keys},
            'rounds': [{k: round(r[k], 4) for k in keys} for r in rounds]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--shared', default=str(REPO.parent / 'shared'))
    parser.add_argument('--variants', default=','.join(VARIANTS))
    parser.add_argument('--groups', default='1,8')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--frames', type=int, default=120)
    parser.add_argument('--warmup', type=int, default=16)
    parser.add_argument('--out', default='')
    args = parser.parse_args(argv)
    names = [n for n in args.variants.split(',') if n]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f'unknown variants {unknown} (choose from {", ".join(VARIANTS)})')
    logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / 'bench'))
    from gpu_timing import shared_inputs, time_ours

    msgs, weights = shared_inputs(args.shared)
    engines = {name: build(name, weights) for name in names}
    groups = [int(g) for g in args.groups.split(',') if g]
    samples = {(name, g): [] for name in names for g in groups}
    for r in range(args.rounds):
        for name, engine in engines.items():
            for group in groups:
                result = time_ours(engine, msgs, group, args.frames, args.warmup)
                samples[(name, group)].append(result)
                LOG.info('round %d %s @%d: wall %.3f device %.3f ms', r, name, group,
                         result['wall_ms'], result['device_ms'])
    out = {f'{name}@{g}': summarize(v) for (name, g), v in samples.items()}
    for key, row in out.items():
        print(f'{key:24s} wall {row["wall_ms"]:.3f}  device {row["device_ms"]:.3f}  '
              f'stage {row["stage_ms"]:.3f}  enqueue {row["enqueue_ms"]:.3f}  '
              f'fetch {row["fetch_ms"]:.3f} ms/frame')
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
