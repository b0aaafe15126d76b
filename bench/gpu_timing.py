# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Profile of the GPU pipeline: where a frame's time goes, per stage and per batch size.

Run on the GPU machine (bench/gpu_check.sh does)::

    python3 bench/gpu_timing.py --shared .devshared --upstream .upstream --out timing.json \
        [--profile]

Frames: real 640x480 RGB images (TUM fr2/desk) rotated, raw bytes on the host
as a camera driver hands them over; top_k 4096, detect + describe + match
against the previous frame (min_cossim 0.82), results copied to the host.

* ours@N (N = 1, 8, 32): groups of N frames through ``submit_group`` (stage
  the bytes in pinned memory, upload, one flush: decode, backbone, detection,
  description and matching batched), then ``results``; per frame: wall time,
  device time (CUDA events from after the host copies to the end of the
  group's work), host time to stage, to enqueue, to fetch the results;
* stages: CUDA events between the stages of one flush (engine with
  ``profile=True``) at 1 and 8 frames;
* with ``--profile``: pure device time of each part (CUDA graph replays:
  backbone, detection + description, upload, decode, matcher with and
  without tensor cores) at 1, 8 and 32 frames; the backbone's top kernels
  (torch.profiler); every backbone option at 1 and 8 frames with its golden
  parity (``--variants`` picks some); the host's hot spots (cProfile of
  submit_group + results at 1 and 8 frames);
* upstream XFeat (``--upstream``, a checkout of verlab/accelerated_features,
  never committed) ``detectAndCompute`` + ``match`` at 1 and in batches of 8.
"""

import argparse
import json
import logging
from pathlib import Path
import statistics
import sys
import time
from types import SimpleNamespace

import numpy as np

LOG = logging.getLogger('gpu_timing')
REPO = Path(__file__).resolve().parents[1]
TUM = 'data/tum_fr2_desk/rgb'
GROUPS = (1, 8, 32)


def frame_messages(shared, count):
    """Up to ``count`` TUM frames as sensor_msgs/Image-like rgb8 messages."""
    from xfeat_ros.image_codec import raw_image
    from xfeat_ros.image_files import read_image
    msgs = []
    for path in sorted((Path(shared) / TUM).glob('*.png'))[:count]:
        pixels, encoding = read_image(path)
        msg = raw_image(pixels, encoding)
        msg.pixels = pixels  # the upstream contender reads the array itself
        msgs.append(msg)
    if not msgs:
        raise SystemExit(f'no frames under {Path(shared) / TUM}')
    return msgs


def shared_inputs(shared, images=8):
    """``(messages, weights)`` of the timing scripts: TUM frames and the backbone weights."""
    from xfeat_ros.weights import load_weights
    return (frame_messages(shared, images),
            load_weights(Path(shared) / 'models' / 'xfeat_backbone.npz'))


def median_ms(values):
    """Return the median of a list of seconds, in milliseconds."""
    return 1000.0 * statistics.median(values)


def time_ours(engine, msgs, group, frames, warmup):
    """Time groups of ``group`` frames through submit_group + results; per-frame medians."""
    cupy = engine.cupy
    sets = [[engine.alloc_slot() for _ in range(group)] for _ in range(2)]
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    rounds = max(frames // group, 5)
    warm = max(warmup // group, 2)
    samples = {'wall': [], 'device': [], 'stage': [], 'enqueue': [], 'fetch': []}
    previous = None
    for r in range(warm + rounds):
        slots = sets[r % 2]
        batch = [msgs[(r * group + j) % len(msgs)] for j in range(group)]
        t0 = time.perf_counter()
        engine.submit_group(batch, slots, previous=previous, chain=True, start_event=start)
        end.record(engine.stream)
        t1 = time.perf_counter()
        results = engine.results(slots)
        t2 = time.perf_counter()
        previous = slots[-1]
        if r >= warm:
            samples['wall'].append((t2 - t0) / group)
            samples['device'].append(cupy.cuda.get_elapsed_time(start, end) / 1e3 / group)
            samples['stage'].append(engine.last_group_seconds['stage'] / group)
            samples['enqueue'].append(engine.last_group_seconds['enqueue'] / group)
            samples['fetch'].append((t2 - t1) / group)
    out = {f'{k}_ms': median_ms(v) for k, v in samples.items()}
    out.update(keypoints=len(results[-1][0]), matches=len(results[-1][1]))
    return out


def stage_breakdown(engine, msgs, group, rounds=20):
    """Median device milliseconds of each stage of one flush of ``group`` frames."""
    engine.profile = True
    sets = [[engine.alloc_slot() for _ in range(group)] for _ in range(2)]
    stages = {}
    previous = None
    for r in range(rounds):
        slots = sets[r % 2]
        engine.submit_group([msgs[(r * group + j) % len(msgs)] for j in range(group)], slots,
                            previous=previous, chain=True)
        engine.synchronize()
        previous = slots[-1]
        if r < 3:
            continue
        first, last = dict(slots[0].marks), dict(slots[-1].marks)
        points = [('start', first['start'])] + [(name, last[name]) for name in (
            'upload', 'decode', 'backbone', 'detect', 'describe', 'match') if name in last]
        for (_, a), (name, b) in zip(points, points[1:]):
            stages.setdefault(name, []).append(engine.cupy.cuda.get_elapsed_time(a, b))
    engine.profile = False
    return {name: statistics.median(v) for name, v in stages.items()}


def graph_ms(cupy, stream, fn, reps=30):
    """Device milliseconds of ``fn``'s launches, captured once as a CUDA graph and replayed."""
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
    return cupy.cuda.get_elapsed_time(start, end) / reps


def events_ms(cupy, stream, fn, reps=30):
    """Device milliseconds per call of ``fn`` enqueued back to back (for graph replays)."""
    fn()
    stream.synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(stream)
    for _ in range(reps):
        fn()
    end.record(stream)
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / reps


def parts_breakdown(engine, msgs):
    """Pure device milliseconds of each part per batch size (graph replays, no launch gaps)."""
    from xfeat_ros.image_codec import ENCODINGS
    from xfeat_ros.gpu import matching, ops
    cupy = engine.cupy
    stream = engine.stream
    out = {}
    for group in GROUPS:
        slots = [engine.alloc_slot() for _ in range(group)]
        engine.submit_group([msgs[j % len(msgs)] for j in range(group)], slots)
        engine.synchronize()
        ws = engine._workspaces[(480, 640)]
        with cupy.cuda.Device(engine.gpu):
            row = {
                'backbone': events_ms(cupy, stream, lambda: engine.backbone.run(
                    ws.image[:group], ws.outputs(group), stream)),
                'detect+describe': graph_ms(cupy, stream, lambda: engine._detect_describe(
                    ws, group, 4096)),
                'decode': graph_ms(cupy, stream, lambda: ops.decode_frames(
                    ws.raw, ws.raw_stride, ENCODINGS['rgb8'], 480, 640, 640 * 3, False,
                    ws.image, stream, group)),
                'upload': events_ms(cupy, stream, lambda: [
                    engine.cupy.cuda.runtime.memcpyAsync(
                        ws.raw_row(j), slots[j].staging.ptr, 640 * 480 * 3,
                        cupy.cuda.runtime.memcpyHostToDevice, stream.ptr)
                    for j in range(group)], reps=10)}
        out[f'{group} frames (ms per group)'] = row
        LOG.info('parts at %d frames: %s', group, row)
    slots = [engine.alloc_slot() for _ in range(2)]
    engine.submit_group(msgs[:2], slots)
    engine.synchronize()
    for name, tc in (('match tensor cores', True), ('match fp32', False)):
        side0 = matching.DescriptorSet(slots[0].descriptors, ops.DeviceCount(slots[0].count, 4096),
                                       64)
        side1 = matching.DescriptorSet(slots[1].descriptors, ops.DeviceCount(slots[1].count, 4096),
                                       64)
        scratch = matching.MatchScratch()
        with cupy.cuda.Device(engine.gpu):
            out[name] = graph_ms(cupy, stream, lambda: matching.mutual_nn_match(
                side0, side1, slots[1].matches, scratch, 0.82, stream, tensor_cores=tc))
    out['keypoints'] = int(slots[1].count.get()[0])
    return out


def backbone_kernels(weights, groups=(1, 8), steps=10):
    """Top CUDA kernels of the default backbone's forward, run eagerly (torch.profiler)."""
    import torch
    from xfeat_ros.gpu.backbone import TorchBackbone
    backbone = TorchBackbone(weights, 0, cuda_graphs=False)
    tables = {}
    for group in groups:
        x = torch.rand(group, 1, 480, 640, device='cuda')
        binding = SimpleNamespace(image=x, feats=torch.empty(group, 64, 60, 80, device='cuda'),
                                  logits=torch.empty(group, 65, 60, 80, device='cuda'),
                                  reliability=torch.empty(group, 1, 60, 80, device='cuda'))
        with torch.no_grad(), backbone._cudnn():
            for _ in range(3):
                backbone._forward_into(binding)
            torch.cuda.synchronize()
            with torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(steps):
                    backbone._forward_into(binding)
                torch.cuda.synchronize()
        tables[f'{group} frames, {steps} forwards'] = prof.key_averages().table(
            sort_by='self_cuda_time_total', row_limit=25, max_name_column_width=90)
    return tables


PLAIN = {'fused_relu': False, 'parallel_heads': False, 'fused_scales': False,
         'direct_convs': 0, 'wide_convs': False}
VARIANTS = {
    'plain (folded BN only)': PLAIN,
    'fused_relu': {**PLAIN, 'fused_relu': True},
    'parallel_heads': {**PLAIN, 'parallel_heads': True},
    'fused_scales': {**PLAIN, 'fused_scales': True},
    'direct_convs': {**PLAIN, 'direct_convs': 4},
    'wide_convs': {**PLAIN, 'wide_convs': True},
    'defaults/wide_convs=all': {'wide_convs': ('block2', 'block3', 'block4', 'block5',
                                               'block_fusion')},
    'defaults': {},
    'defaults/wide_convs=off': {'wide_convs': False},
    'defaults/direct_convs=0': {'direct_convs': 0},
    'defaults/direct_convs=1': {'direct_convs': 1},
    'defaults/direct_convs=2': {'direct_convs': 2},
    'defaults/direct_convs=3': {'direct_convs': 3},
    'defaults + cudnn_benchmark': {'cudnn_benchmark': True},
    'plain + channels_last + cudnn_benchmark': {**PLAIN, 'channels_last': True,
                                                'cudnn_benchmark': True},
    'fp16 (not parity)': {'precision': 'fp16'},
}
PROFILE_STEPS = ('parts', 'kernels', 'variants', 'host')


def host_profile(engine, msgs, groups=(1, 8), rounds=200, top=30):
    """Profile ``rounds`` groups through submit_group + results (cProfile): host hot spots."""
    import cProfile
    import io
    import pstats
    out = {}
    for group in groups:
        sets = [[engine.alloc_slot() for _ in range(group)] for _ in range(2)]
        previous = None

        def loop(count):
            nonlocal previous
            for r in range(count):
                slots = sets[r % 2]
                engine.submit_group([msgs[(r * group + j) % len(msgs)] for j in range(group)],
                                    slots, previous=previous, chain=True)
                engine.results(slots)
                previous = slots[-1]

        loop(10)
        profiler = cProfile.Profile()
        profiler.enable()
        loop(max(rounds // group, 10))
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats('tottime').print_stats(top)
        out[f'{group} frames'] = text.getvalue()
    return out


def backbone_variants(weights, msgs, shared, names=None):
    """Graph-replay time at 1 and 8 frames and golden parity of each backbone option set."""
    from xfeat_ros.gpu.backbone import TorchBackbone
    from xfeat_ros.gpu.engine import GpuEngine
    out = {}
    for name, options in VARIANTS.items():
        if names and name not in names:
            continue
        try:
            engine = GpuEngine(TorchBackbone(weights, 0, **options), 0, 4096, 0.05, 0.82)
            row = {}
            for group in (1, 8):
                slots = [engine.alloc_slot() for _ in range(group)]
                engine.submit_group([msgs[j % len(msgs)] for j in range(group)], slots)
                engine.synchronize()
                ws = engine._workspaces[(480, 640)]
                with engine.cupy.cuda.Device(0):
                    row[f'backbone_ms@{group}'] = events_ms(
                        engine.cupy, engine.stream,
                        lambda: engine.backbone.run(ws.image[:group], ws.outputs(group),
                                                    engine.stream))
            row['parity'] = golden_parity(engine, shared)
            row['parity_group'] = golden_parity(engine, shared, grouped=True)
        except Exception as exc:  # noqa: B902 - a failing option is a result, not a crash
            LOG.exception('backbone variant %s failed', name)
            row = {'error': repr(exc)}
        out[name] = row
        LOG.info('backbone %s: %s', name, row)
    return out


def golden_parity(engine, shared, grouped=False):
    """Worst parity numbers over the golden images (alone, or all nine as one group)."""
    sys.path.insert(0, str(REPO / 'test'))
    from golden_util import GOLDEN_IMAGES, parity
    from xfeat_ros.image_codec import raw_image
    from xfeat_ros.image_files import read_image
    msgs = [raw_image(*read_image(Path(shared) / 'data' / rel)) for rel in GOLDEN_IMAGES.values()]
    slots = [engine.alloc_slot() for _ in msgs]
    if grouped:
        engine.submit_group(msgs, slots)
        features = [f for f, _ in engine.results(slots)]
    else:
        features = []
        for msg, slot in zip(msgs, slots):
            engine.submit(msg, slot)
            features.append(engine.features(slot))
    worst = {'found': 1.0, 'min_cosine': 1.0, 'max_score_rel': 0.0}
    for stem, f in zip(GOLDEN_IMAGES, features):
        p = parity(dict(np.load(Path(shared) / 'golden' / f'{stem}.npz')), f.keypoints,
                   f.scores, f.descriptors)
        worst = {'found': min(worst['found'], p.found),
                 'min_cosine': min(worst['min_cosine'], p.min_cosine),
                 'max_score_rel': max(worst['max_score_rel'], p.max_score_rel)}
    worst['holds'] = (worst['found'] >= 0.99 and worst['min_cosine'] >= 0.999
                      and worst['max_score_rel'] <= 1e-4)
    return worst


def load_upstream(upstream, weights_pt, top_k):
    """Upstream XFeat with the project's weights (strict=False: no fine_matcher here)."""
    import torch
    sys.path.insert(0, str(Path(upstream).resolve()))
    from modules.xfeat import XFeat
    xfeat = XFeat(weights=None, top_k=top_k, detection_threshold=0.05)
    state = torch.load(weights_pt, map_location=xfeat.dev, weights_only=True)
    missing, unexpected = xfeat.net.load_state_dict(state, strict=False)
    backbone_missing = [k for k in missing if not k.startswith('fine_matcher')]
    if backbone_missing or unexpected:
        raise SystemExit(f'upstream weights mismatch: {backbone_missing[:3]} {unexpected[:3]}')
    xfeat.net.eval()
    return xfeat


def upstream_tensor(torch, msg, device):
    """Host uint8 frame -> device float [1, 3, H, W] in [0, 1] (what upstream expects)."""
    x = torch.from_numpy(msg.pixels).to(device)
    return x.permute(2, 0, 1)[None].float() / 255.0


def time_upstream(xfeat, msgs, group, frames, warmup):
    """Upstream's (batched) detectAndCompute on ``group`` frames + matches; per frame."""
    import torch
    dev = xfeat.dev
    wall = []
    prev = None
    rounds = max(frames // group, 5)
    warm = max(warmup // group, 2)
    for r in range(warm + rounds):
        t0 = time.perf_counter()
        batch = torch.cat([upstream_tensor(torch, msgs[(r * group + j) % len(msgs)], dev)
                           for j in range(group)])
        outs = xfeat.detectAndCompute(batch, top_k=4096)
        host = []
        for out in outs:
            if prev is not None:
                idx0, idx1 = xfeat.match(prev, out['descriptors'], min_cossim=0.82)
                host += [idx0.cpu(), idx1.cpu()]
            host += [out['keypoints'].cpu(), out['scores'].cpu(), out['descriptors'].cpu()]
            prev = out['descriptors']
        t1 = time.perf_counter()
        if r >= warm:
            wall.append((t1 - t0) / group)
    return {'wall_ms': median_ms(wall)}


def table(results):
    """Markdown table of the timing results."""
    base = results.get('upstream@1', {}).get('wall_ms')
    lines = ['| configuration | wall ms/frame | device ms/frame | host stage / enqueue / '
             'fetch ms | upstream@1 / this |', '| --- | ---: | ---: | --- | ---: |']
    for name, r in results.items():
        if not isinstance(r, dict) or 'wall_ms' not in r:
            continue
        ratio = f'{base / r["wall_ms"]:.2f}x' if base else '-'
        device = f'{r["device_ms"]:.3f}' if 'device_ms' in r else '-'
        host = (f'{r["stage_ms"]:.3f} / {r["enqueue_ms"]:.3f} / {r["fetch_ms"]:.3f}'
                if 'stage_ms' in r else '-')
        lines.append(f'| {name} | {r["wall_ms"]:.3f} | {device} | {host} | {ratio} |')
    return '\n'.join(lines)


def main(argv=None):
    """Run every measurement and write JSON + a table."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--shared', default=str(REPO.parent / 'shared'))
    parser.add_argument('--upstream', default=str(REPO / '.upstream'))
    parser.add_argument('--frames', type=int, default=200)
    parser.add_argument('--warmup', type=int, default=32)
    parser.add_argument('--images', type=int, default=8)
    parser.add_argument('--out', default='')
    parser.add_argument('--skip-upstream', action='store_true')
    parser.add_argument('--profile', nargs='?', const=','.join(PROFILE_STEPS), default='',
                        help='also (comma list, default all): parts (device time per part), '
                             'kernels (backbone kernels), variants (backbone options), '
                             'host (cProfile of the host path)')
    parser.add_argument('--variants', default='',
                        help='backbone option sets to profile (comma list of names of '
                             'VARIANTS; default all)')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')
    sys.path.insert(0, str(REPO))
    from xfeat_ros.gpu.engine import create_gpu_engine
    from xfeat_ros.weights import load_weights
    import torch

    shared = Path(args.shared)
    msgs = frame_messages(shared, args.images)
    weights = load_weights(shared / 'models' / 'xfeat_backbone.npz')
    results = {'gpu': torch.cuda.get_device_name(0), 'frame_hw': [msgs[0].height, msgs[0].width],
               'frames': args.frames, 'images': len(msgs)}

    def save():
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1) + '\n')

    engine = create_gpu_engine('pytorch', weights, 0, 4096, 0.05, 0.82)
    for group in GROUPS:
        results[f'ours@{group}'] = time_ours(engine, msgs, group, args.frames, args.warmup)
        LOG.info('ours@%d: %s', group, results[f'ours@{group}'])
    for group in (1, 8):
        results[f'stages ms @{group}'] = stage_breakdown(engine, msgs, group)
        LOG.info('stages @%d: %s', group, results[f'stages ms @{group}'])
    results['golden parity (default)'] = golden_parity(engine, shared)
    results['golden parity (one group)'] = golden_parity(engine, shared, grouped=True)
    save()
    wanted = [step for step in args.profile.split(',') if step]
    steps = {'parts': ('parts', lambda: parts_breakdown(engine, msgs)),
             'kernels': ('backbone kernels', lambda: backbone_kernels(weights)),
             'variants': ('backbone variants', lambda: backbone_variants(
                 weights, msgs, shared, [n for n in args.variants.split(',') if n])),
             'host': ('host profile', lambda: host_profile(engine, msgs))}
    for label, step in (steps[name] for name in wanted if name in steps):
        try:
            results[label] = step()
        except Exception as exc:  # noqa: B902 - a profiling step must not cost the others
            LOG.exception('profile step %s failed: %s', label, exc)
            continue
        if label in ('backbone kernels', 'host profile'):
            for name, text in results.pop(label).items():
                print(f'== {label}, {name}\n{text}')
        save()
    if not args.skip_upstream:
        xfeat = load_upstream(args.upstream, shared / 'models' / 'xfeat_backbone.pt', 4096)
        for group in (1, 8):
            results[f'upstream@{group}'] = time_upstream(xfeat, msgs, group, args.frames // 2,
                                                         args.warmup)
            LOG.info('upstream@%d: %s', group, results[f'upstream@{group}'])
    print(table(results))
    print(json.dumps(results, indent=1))
    save()
    return 0


if __name__ == '__main__':
    sys.exit(main())
