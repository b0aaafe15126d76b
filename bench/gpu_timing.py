# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Per-frame time of detect + describe + match on the GPU, ours next to upstream XFeat.

Run on the GPU machine (bench/gpu_check.sh does)::

    python3 bench/gpu_timing.py --shared .devshared --upstream .upstream --out timing.json

Frames: real 640x480 RGB images (TUM fr2/desk) rotated, raw bytes on the host
as a camera driver hands them over. Per frame: upload, decode, backbone,
detection (top_k 4096), descriptors, mutual-NN matching against the previous
frame (min_cossim 0.82), and the host copy of keypoints, scores, descriptors
and matches. Wall time per frame (perf_counter) and GPU time (CUDA events)
are the median over ``--frames`` frames after ``--warmup`` frames.

* ours @1: one frame in flight (submit, match, synchronize, copy) per frame;
* ours @8: groups of 8 frames submitted with one synchronization, time / 8;
* ours no-graphs: the same without the CUDA graphs of the post-backbone launches;
* upstream @1: upstream's ``XFeat.detectAndCompute`` + ``XFeat.match`` from a
  checkout of verlab/accelerated_features (``--upstream``; used here only,
  never committed), weights loaded with ``strict=False`` from the project's
  backbone state dict (upstream's model also has ``fine_matcher`` parameters);
* upstream @8: upstream's batched ``detectAndCompute`` on 8 frames + 8 matches.

Also measured: our FP16 backbone (time, and parity against ../shared/golden
with the thresholds of test_parity.py, to show whether FP16 keeps parity).
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


def frame_messages(shared, count):
    """Up to ``count`` TUM frames as sensor_msgs/Image-like rgb8 messages."""
    from xfeat_ros.image_files import read_image
    msgs = []
    for path in sorted((Path(shared) / TUM).glob('*.png'))[:count]:
        pixels, encoding = read_image(path)
        height, width = pixels.shape[:2]
        msgs.append(SimpleNamespace(data=pixels.tobytes(), encoding=encoding, height=height,
                                    width=width, step=width * 3, is_bigendian=0,
                                    pixels=pixels))
    if not msgs:
        raise SystemExit(f'no frames under {Path(shared) / TUM}')
    return msgs


def median_ms(values):
    """Median of a list of seconds, in milliseconds."""
    return 1000.0 * statistics.median(values)


def time_ours_single(engine, msgs, warmup, frames):
    """One frame in flight: submit, match the previous, sync, copy; per-frame times."""
    cupy = engine.cupy
    slots = [engine.alloc_slot(), engine.alloc_slot()]
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    wall, gpu = [], []
    for i in range(warmup + frames):
        slot, prev = slots[i % 2], slots[(i - 1) % 2]
        t0 = time.perf_counter()
        start.record(engine.stream)
        engine.submit(msgs[i % len(msgs)], slot)
        if i:
            engine.submit_match(prev, slot)
        end.record(engine.stream)
        engine.synchronize()
        features = engine.features(slot)
        matches = engine.matches(slot)
        t1 = time.perf_counter()
        if i >= warmup:
            wall.append(t1 - t0)
            gpu.append(cupy.cuda.get_elapsed_time(start, end) / 1000.0)
    return {'wall_ms': median_ms(wall), 'gpu_ms': median_ms(gpu),
            'keypoints': len(features), 'matches': len(matches)}


def time_ours_group(engine, msgs, warmup, frames, group=8):
    """``group`` frames in flight under one synchronization; per-frame times."""
    cupy = engine.cupy
    sets = [[engine.alloc_slot() for _ in range(group)] for _ in range(2)]
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    wall, gpu, host = [], [], []
    prev = None
    rounds = (warmup + frames) // group
    for r in range(rounds):
        slots = sets[r % 2]
        t0 = time.perf_counter()
        start.record(engine.stream)
        for j, slot in enumerate(slots):
            engine.submit(msgs[(r * group + j) % len(msgs)], slot)
            if prev is not None:
                engine.submit_match(prev, slot)
            prev = slot
        end.record(engine.stream)
        t_enqueued = time.perf_counter()
        engine.synchronize()
        results = [(engine.features(s), engine.matches(s)) for s in slots]
        t1 = time.perf_counter()
        if r * group >= warmup:
            wall.append((t1 - t0) / group)
            gpu.append(cupy.cuda.get_elapsed_time(start, end) / 1000.0 / group)
            host.append((t_enqueued - t0) / group)
    return {'wall_ms': median_ms(wall), 'gpu_ms': median_ms(gpu),
            'host_enqueue_ms': median_ms(host),
            'keypoints': len(results[-1][0]), 'matches': len(results[-1][1])}


def stage_breakdown(engine, msgs, frames=50):
    """Median GPU milliseconds per stage (engine with profile=True)."""
    engine.profile = True
    slots = [engine.alloc_slot(), engine.alloc_slot()]
    stages = {}
    for i in range(frames):
        slot, prev = slots[i % 2], slots[(i - 1) % 2]
        engine.submit(msgs[i % len(msgs)], slot)
        if i:
            engine.submit_match(prev, slot)
        engine.synchronize()
        if i >= 5:
            for name, ms in slot.stage_times_ms().items():
                stages.setdefault(name, []).append(ms)
    engine.profile = False
    return {name: statistics.median(v) for name, v in stages.items()}


def graph_ms(cupy, stream, fn, reps=50):
    """GPU milliseconds of ``fn``'s launches, captured once as a CUDA graph and replayed."""
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


def events_ms(cupy, stream, fn, reps=50):
    """GPU milliseconds per call of ``fn`` enqueued back to back (for graph replays)."""
    fn()
    stream.synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(stream)
    for _ in range(reps):
        fn()
    end.record(stream)
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / reps


def ops_breakdown(engine, msgs):
    """Pure GPU time of every post-backbone op at 640x480 (CUDA graphs, no launch gaps)."""
    from xfeat_ros.gpu import kernels, ops
    cupy = engine.cupy
    stream = engine.stream
    slots = [engine.alloc_slot(), engine.alloc_slot()]
    for msg, slot in zip(msgs, slots):
        engine.submit(msg, slot)
    engine.submit_match(slots[0], slots[1])
    engine.synchronize()
    mh, mw = 480, 640
    ws = engine._workspaces[(mh, mw)]
    slot = slots[1]
    k = 4096
    det = ws.detect
    rank = kernels.detect_module(engine.gpu).get_function('rank_sorted')
    out = {}
    with cupy.cuda.Device(engine.gpu):
        out['backbone (graph replay)'] = events_ms(
            cupy, stream, lambda: engine.backbone.run(ws.image, ws.outputs, stream))
        out['heatmap'] = graph_ms(
            cupy, stream, lambda: ops.heatmap(ws.logits[0], det.heatmap, stream))
        out['heatmap+nms+topk'] = graph_ms(cupy, stream, lambda: (
            ops.heatmap_nms_score(ws.logits[0], ws.reliability[0, 0], 0.05, det, stream),
            ops.top_k(det, k, mw, 1.0, 1.0, slot.count, slot.keypoints, slot.scores, stream)))
        out['nms_score (+hist0)'] = graph_ms(cupy, stream, lambda: ops.nms_score(
            ws.reliability[0, 0], 0.05, det, stream))
        engine.submit(msgs[0], slot)  # restore a consistent selection state
        engine.synchronize()

        def run_rank():
            with stream:
                rank((ops.blocks(k, ops.RANK_THREADS),), (ops.RANK_THREADS,),
                     (det.selected, det.sel32, np.int32(k), np.int32(mw), np.float32(1),
                      np.float32(1), slot.count, slot.keypoints, slot.scores, det.positions))
        out['rank_sorted'] = graph_ms(cupy, stream, run_rank)
        out['normalize_feats'] = graph_ms(cupy, stream, lambda: ops.normalize_feats(
            ws.feats[0], ws.feats_hwc, stream))
        out['describe'] = graph_ms(cupy, stream, lambda: ops.sample_descriptors(
            ws.feats_hwc, (mh, mw), det.positions, ops.DeviceCount(slot.count, k),
            slot.descriptors, stream))
        side0 = ops.DescriptorSet(slots[0].descriptors, ops.DeviceCount(slots[0].count, k), 64)
        side1 = ops.DescriptorSet(slot.descriptors, ops.DeviceCount(slot.count, k), 64)
        scratch = ops.MatchScratch()
        out['match 4096x4096'] = graph_ms(cupy, stream, lambda: ops.mutual_nn_match(
            side0, side1, slot.matches, scratch, 0.82, stream))
        engine.synchronize()
    out['keypoints'] = int(slot.count.get()[0])
    return out


def backbone_profile(weights, msgs, steps=20):
    """Top CUDA kernels of one eager FP32 forward at 640x480 (torch.profiler)."""
    import torch
    from xfeat_ros.model import XFeatNet
    from xfeat_ros.gpu.backbone import exact_convolutions
    net = XFeatNet.from_weights(weights).cuda().eval()
    x = torch.rand(1, 1, 480, 640, device='cuda')
    tables = {}
    for bench in (False, True):
        with torch.no_grad(), exact_convolutions(torch, bench):
            for _ in range(5):
                net(x)
            torch.cuda.synchronize()
            with torch.profiler.profile(
                    activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(steps):
                    net(x)
                torch.cuda.synchronize()
        tables[f'benchmark={bench}'] = prof.key_averages().table(
            sort_by='self_cuda_time_total', row_limit=18, max_name_column_width=70)
    return tables


def backbone_variants(weights, msgs, shared):
    """Graph-replay time and golden parity of each PyTorch backbone configuration."""
    from xfeat_ros.gpu.backbone import TorchBackbone
    from xfeat_ros.gpu.engine import GpuEngine
    configs = {'fp32 (default: folded BN)': {}, 'fp32 unfolded': {'fold': False},
               'fp32 bench': {'cudnn_benchmark': True},
               'fp32 cl bench': {'channels_last': True, 'cudnn_benchmark': True},
               'fp16': {'precision': 'fp16'},
               'fp16 cl bench': {'precision': 'fp16', 'channels_last': True,
                                 'cudnn_benchmark': True}}
    out = {}
    for name, options in configs.items():
        engine = GpuEngine(TorchBackbone(weights, 0, **options), 0, 4096, 0.05, 0.82)
        slot = engine.alloc_slot()
        engine.submit(msgs[0], slot)
        engine.synchronize()
        ws = engine._workspaces[(480, 640)]
        with engine.cupy.cuda.Device(0):
            ms = events_ms(engine.cupy, engine.stream,
                           lambda: engine.backbone.run(ws.image, ws.outputs, engine.stream))
        out[name] = {'backbone_ms': ms, 'parity': golden_parity(engine, shared)}
        LOG.info('backbone %s: %s', name, out[name])
    return out


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


def time_upstream_single(xfeat, msgs, warmup, frames):
    """Upstream detectAndCompute + match per frame, results copied to the host."""
    import torch
    dev = xfeat.dev
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    wall, gpu = [], []
    prev = None
    for i in range(warmup + frames):
        t0 = time.perf_counter()
        start.record()
        out = xfeat.detectAndCompute(upstream_tensor(torch, msgs[i % len(msgs)], dev),
                                     top_k=4096)[0]
        idx0 = idx1 = torch.zeros(0, dtype=torch.long)
        if prev is not None:
            idx0, idx1 = xfeat.match(prev, out['descriptors'], min_cossim=0.82)
        end.record()
        host = [out['keypoints'].cpu(), out['scores'].cpu(), out['descriptors'].cpu(),
                idx0.cpu(), idx1.cpu()]
        t1 = time.perf_counter()
        prev = out['descriptors']
        if i >= warmup:
            wall.append(t1 - t0)
            gpu.append(start.elapsed_time(end) / 1000.0)
    return {'wall_ms': median_ms(wall), 'gpu_ms': median_ms(gpu),
            'keypoints': len(host[0]), 'matches': len(host[3])}


def time_upstream_batch(xfeat, msgs, warmup, frames, group=8):
    """Upstream's batched detectAndCompute on ``group`` frames + matches; per frame."""
    import torch
    dev = xfeat.dev
    wall = []
    prev = None
    rounds = (warmup + frames) // group
    for r in range(rounds):
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
        if r * group >= warmup:
            wall.append((t1 - t0) / group)
    return {'wall_ms': median_ms(wall)}


def golden_parity(engine, shared):
    """Worst parity numbers of an engine over the golden images (test_parity thresholds)."""
    sys.path.insert(0, str(REPO / 'test'))
    from golden_util import GOLDEN_IMAGES, parity
    from xfeat_ros.image_files import read_image
    worst = {'found': 1.0, 'min_cosine': 1.0, 'max_score_rel': 0.0}
    for stem, rel in GOLDEN_IMAGES.items():
        pixels, encoding = read_image(Path(shared) / 'data' / rel)
        height, width = pixels.shape[:2]
        msg = SimpleNamespace(data=pixels.tobytes(), encoding=encoding, height=height,
                              width=width, step=pixels[0].nbytes, is_bigendian=0)
        slot = engine.alloc_slot()
        engine.submit(msg, slot)
        engine.synchronize()
        f = engine.features(slot)
        p = parity(dict(np.load(Path(shared) / 'golden' / f'{stem}.npz')), f.keypoints,
                   f.scores, f.descriptors)
        worst = {'found': min(worst['found'], p.found),
                 'min_cosine': min(worst['min_cosine'], p.min_cosine),
                 'max_score_rel': max(worst['max_score_rel'], p.max_score_rel)}
    worst['holds'] = (worst['found'] >= 0.99 and worst['min_cosine'] >= 0.999
                      and worst['max_score_rel'] <= 1e-4)
    return worst


def table(results):
    """Markdown table of the timing results."""
    base = results.get('upstream@1', {}).get('wall_ms')
    lines = ['| configuration | wall ms/frame | GPU ms/frame | upstream@1 / this |',
             '| --- | ---: | ---: | ---: |']
    for name, r in results.items():
        if not isinstance(r, dict) or 'wall_ms' not in r:
            continue
        ratio = f'{base / r["wall_ms"]:.2f}x' if base else '-'
        gpu = f'{r["gpu_ms"]:.3f}' if 'gpu_ms' in r else '-'
        lines.append(f'| {name} | {r["wall_ms"]:.3f} | {gpu} | {ratio} |')
    return '\n'.join(lines)


def main(argv=None):
    """Run every measurement and write JSON + a table."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--shared', default=str(REPO.parent / 'shared'))
    parser.add_argument('--upstream', default=str(REPO / '.upstream'))
    parser.add_argument('--frames', type=int, default=200)
    parser.add_argument('--warmup', type=int, default=24)
    parser.add_argument('--images', type=int, default=8)
    parser.add_argument('--out', default='')
    parser.add_argument('--skip-upstream', action='store_true')
    parser.add_argument('--profile', action='store_true',
                        help='also: per-op GPU times, backbone kernels and variants')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')
    sys.path.insert(0, str(REPO))
    from xfeat_ros.gpu.engine import create_gpu_engine
    import torch

    shared = Path(args.shared)
    msgs = frame_messages(shared, args.images)
    weights = shared / 'models' / 'xfeat_backbone.npz'
    results = {'gpu': torch.cuda.get_device_name(0), 'frame_hw': [msgs[0].height, msgs[0].width],
               'frames': args.frames, 'images': len(msgs)}
    engine = create_gpu_engine('pytorch', str(weights), 0, 4096, 0.05, 0.82)
    results['ours@1'] = time_ours_single(engine, msgs, args.warmup, args.frames)
    results['ours@8'] = time_ours_group(engine, msgs, args.warmup, args.frames)
    from xfeat_ros.gpu.engine import GpuEngine
    direct = GpuEngine(engine.backbone, 0, 4096, 0.05, 0.82, graphs=False)
    results['ours no-graphs@1'] = time_ours_single(direct, msgs, args.warmup, args.frames)
    results['ours no-graphs@8'] = time_ours_group(direct, msgs, args.warmup, args.frames)
    results['ours stages ms'] = stage_breakdown(engine, msgs)
    LOG.info('ours: %s', {k: results[k] for k in ('ours@1', 'ours@8', 'ours stages ms')})

    fp16 = create_gpu_engine('pytorch', str(weights), 0, 4096, 0.05, 0.82,
                             options={'pytorch': {'precision': 'fp16'}})
    results['ours fp16@1'] = time_ours_single(fp16, msgs, args.warmup, args.frames)
    results['ours fp16@8'] = time_ours_group(fp16, msgs, args.warmup, args.frames)
    results['fp16 golden parity'] = golden_parity(fp16, shared)
    results['fp32 golden parity'] = golden_parity(engine, shared)
    LOG.info('fp16: %s', {k: results[k] for k in ('ours fp16@1', 'ours fp16@8',
                                                  'fp16 golden parity')})

    if args.profile:
        from xfeat_ros.weights import load_weights
        loaded = load_weights(weights)
        for label, step in (('ops ms', lambda: ops_breakdown(engine, msgs)),
                            ('backbone kernels', lambda: backbone_profile(loaded, msgs)),
                            ('backbone variants', lambda: backbone_variants(loaded, msgs,
                                                                            shared))):
            try:
                results[label] = step()
            except Exception as exc:  # a profiling step must not cost the others
                LOG.exception('profile step %s failed: %s', label, exc)
                continue
            if label == 'backbone kernels':
                for name, text in results.pop(label).items():
                    print(f'== backbone kernels, {name}\n{text}')
            else:
                LOG.info('%s: %s', label, results[label])
    if not args.skip_upstream:
        xfeat = load_upstream(args.upstream, shared / 'models' / 'xfeat_backbone.pt', 4096)
        results['upstream@1'] = time_upstream_single(xfeat, msgs, args.warmup, args.frames)
        results['upstream batch8'] = time_upstream_batch(xfeat, msgs, args.warmup, args.frames)
    text = table(results)
    print(text)
    print(json.dumps(results, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
