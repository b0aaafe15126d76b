# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Pipeline and CPU modes: this package's engine against the PyTorch reference and upstream.

Each contender (:class:`EngineContender`, :class:`TorchContender`) runs groups
of N frames in the same process on the same device; :func:`time_contenders`
gathers per-frame wall and device times and :func:`run_pipeline` writes the
table and the JSON (:mod:`xfeat_ros.tools.bench.report`).
"""

import math
import os
import sys
import time

from xfeat_ros.features.engine import EngineConfig
from xfeat_ros.features.factory import create_engine
from xfeat_ros.logs import package_logger
from xfeat_ros.tools.bench.frames import (fit_resolution, frame_message, load_images,
                                          parse_resolutions)
from xfeat_ros.tools.bench.report import (best_against_best, pipeline_ratios, pipeline_table,
                                          write_json)
from xfeat_ros.tools.bench.stats import summarize
from xfeat_ros.tools.plumbing import environment, load_upstream

LOG = package_logger('xfeat_bench')

DEFAULT_RESOLUTIONS = '640x480,1280x720,1920x1080'
DEFAULT_IN_FLIGHT = '1,2,4,8,16'
DEFAULT_BASELINE_IN_FLIGHT = '1,8'
UNCHECKED = 'xfeat_ros (no epipolar check)'  # --unchecked: what upstream's match does
ARMED = 'xfeat_ros (armed)'  # --armed: each next frame enqueued before it comes (one in flight)
ARMED_UNCHECKED = 'xfeat_ros (armed, no epipolar check)'


def parse_ints(text):
    """``'1,2,4'`` -> ``[1, 2, 4]`` (each at least 1)."""
    values = [int(v) for v in text.split(',') if v.strip()]
    if not values or min(values) < 1:
        raise ValueError(f'expected positive integers, got {text!r}')
    return values


# -- pipeline contenders -------------------------------------------------------------------------

class DeviceTimer:
    """CUDA events around enqueued work (CuPy stream or PyTorch's current stream)."""

    def __init__(self, kind=None, stream=None, gpu=0):
        """``kind``: 'cupy', 'torch' or None (CPU: no device time)."""
        self.kind = kind
        self.stream = stream
        self.gpu = gpu
        if kind == 'cupy':
            import cupy
            with cupy.cuda.Device(gpu):
                self.events = (cupy.cuda.Event(), cupy.cuda.Event())
        elif kind == 'torch':
            import torch
            self.events = (torch.cuda.Event(enable_timing=True),
                           torch.cuda.Event(enable_timing=True))

    def start(self):
        """Record the start event."""
        self._record(0)

    def stop(self):
        """Record the end event (after the last enqueue, before the host waits)."""
        self._record(1)

    def _record(self, which):
        if self.kind == 'cupy':
            self.events[which].record(self.stream)
        elif self.kind == 'torch':
            self.events[which].record()

    def elapsed_s(self):
        """Seconds between the events (waits for the end event); None on the CPU."""
        if self.kind == 'cupy':
            import cupy
            self.events[1].synchronize()
            return cupy.cuda.get_elapsed_time(*self.events) / 1e3
        if self.kind == 'torch':
            self.events[1].synchronize()
            return self.events[0].elapsed_time(self.events[1]) / 1e3
        return None


class EngineContender:
    """
    This package's engine (the node's): N frames and their matches, one sync, host copies.

    On the GPU engine a group goes through ``submit_group`` (host copies into
    pinned memory, uploads, one flush: one backbone call for the N frames)
    and ``results`` (one pass of pinned copies); elsewhere through ``submit``
    / ``submit_match`` / ``synchronize`` / ``features`` / ``matches``.
    Besides the device span (events around everything enqueued), the GPU
    engine reports ``device_work``: from after the host's copies into pinned
    memory to the end of the group's work (the device's own time), and the
    host's time to stage the bytes and to enqueue the group.
    """

    def __init__(self, engine, max_in_flight, label='xfeat_ros', epipolar=None, arm=False):
        """
        Allocate two sets of ``max_in_flight`` slots (a round's and the previous round's).

        ``epipolar`` (True / False) sets the GPU engine's device check of the
        matches before each group; None keeps the engine's setting. ``arm``:
        after a one-frame group, the next frame is armed
        (:meth:`xfeat_ros.features.gpu.engine.GpuEngine.arm`, into the next round's
        slot) while this one's results are fetched; its device times then
        start where its gate opened.
        """
        self.engine = engine
        self.name = label
        self.epipolar = epipolar
        self.on_gpu = engine.device.startswith('cuda')
        self.max_in_flight = max_in_flight if self.on_gpu else 1
        self.sets = [[engine.alloc_slot() for _ in range(self.max_in_flight)] for _ in range(2)]
        self.parity = 0
        self.previous = None
        self.grouped = engine.capabilities.groups
        self.arm = bool(arm) and engine.capabilities.arming
        self.timer = (DeviceTimer('cupy', engine.stream, engine.gpu) if self.on_gpu
                      else DeviceTimer())
        self.work_start = None
        if self.on_gpu and self.grouped:
            import cupy
            with cupy.cuda.Device(engine.gpu):
                self.work_start = cupy.cuda.Event()

    def reset(self):
        """Forget the previous frame (new resolution)."""
        self.previous = None

    def finish(self):
        """Cancel the frame armed last (nobody submits it), so no later wait stands behind it."""
        if self.arm:
            self.engine.synchronize()

    def run(self, msgs):
        """Process ``msgs`` as one group; a dict of its times (s) and counts."""
        engine = self.engine
        slots = self.sets[self.parity][:len(msgs)]
        self.parity ^= 1
        extra = {}
        started = None
        if self.epipolar is not None:
            engine.epipolar = self.epipolar
        t0 = time.perf_counter()
        self.timer.start()
        if self.grouped:
            engine.submit_group(msgs, slots, previous=self.previous, chain=True,
                                start_event=self.work_start)
            self.timer.stop()
            started = getattr(engine, 'last_start_event', None)
            if started is self.work_start:
                started = None  # not through an armed chain
            if self.arm and len(msgs) == 1:
                engine.arm(msgs[0], self.sets[self.parity][0], previous=slots[-1])
            extra = {'host_stage': engine.last_group_seconds['stage'],
                     'host_enqueue': engine.last_group_seconds['enqueue']}
            results = engine.results(slots)
        else:
            for msg, slot in zip(msgs, slots):
                engine.submit(msg, slot)
                if self.previous is not None:
                    engine.submit_match(self.previous, slot)
                self.previous = slot
            self.timer.stop()
            engine.synchronize()
            results = [(engine.features(slot), engine.matches(slot)) for slot in slots]
        wall = time.perf_counter() - t0
        self.previous = slots[-1]
        device = self.timer.elapsed_s()
        if self.work_start is not None:
            import cupy
            extra['device_work'] = cupy.cuda.get_elapsed_time(started or self.work_start,
                                                              self.timer.events[1]) / 1e3
            if started is not None:  # the timer's start was enqueued behind the chain
                device = extra['device_work']
        features, matches = results[-1]
        return dict(extra, wall=wall, device=device, keypoints=len(features.keypoints),
                    matches=None if matches is None else len(matches.idx0))


class TorchContender:
    """A PyTorch detector (reference or upstream) on batches of N frames, results to the host."""

    def __init__(self, name, detect, match, device):
        """``detect(uint8 [B, H, W, 3] on device) -> [dict]``, ``match(d0, d1) -> (i0, i1)``."""
        import torch
        self.torch = torch
        self.name = name
        self.detect = detect
        self.match = match
        self.device = torch.device(device)
        self.on_gpu = self.device.type == 'cuda'
        self.max_in_flight = 64
        self.previous = None
        self.timer = DeviceTimer('torch' if self.on_gpu else None)

    def reset(self):
        """Forget the previous frame (new resolution)."""
        self.previous = None

    def run(self, msgs):
        """Process ``msgs`` as one batch; a dict of its times (s) and counts."""
        torch = self.torch
        t0 = time.perf_counter()
        self.timer.start()
        frames = [torch.from_numpy(msg.pixels).to(self.device, non_blocking=False)
                  for msg in msgs]
        outs = self.detect(torch.stack(frames) if len(frames) > 1 else frames[0][None])
        pairs = []
        for out in outs:
            if self.previous is not None:
                pairs.append(self.match(self.previous, out['descriptors']))
            self.previous = out['descriptors']
        self.timer.stop()
        host = [[out[k].cpu() for k in ('keypoints', 'scores', 'descriptors')] for out in outs]
        host_pairs = [(a.cpu(), b.cpu()) for a, b in pairs]
        device_s = self.timer.elapsed_s()
        wall = time.perf_counter() - t0
        return {'wall': wall, 'device': device_s, 'keypoints': len(host[-1][0]),
                'matches': len(host_pairs[-1][0]) if host_pairs else None}


def reference_contender(weights, device, top_k, threshold, min_cossim):
    """Build the PyTorch reference of upstream (:mod:`~xfeat_ros.tools.reference_torch`)."""
    from xfeat_ros.tools.reference_torch import ReferenceXFeat
    ref = ReferenceXFeat(weights, device, top_k, threshold, min_cossim)
    return TorchContender('reference', ref.detect_and_compute, ref.match, device)


def upstream_contender(directory, weights, device, top_k, threshold, min_cossim):
    """Upstream XFeat from a checkout (``modules/``), with the same weights, on ``device``."""
    xfeat = load_upstream(directory, weights, top_k, threshold, device)

    def detect(images):
        x = images.permute(0, 3, 1, 2).float() / 255.0
        return xfeat.detectAndCompute(x, top_k=top_k)

    def match(d0, d1):
        return xfeat.match(d0, d1, min_cossim=min_cossim)
    return TorchContender('upstream', detect, match, device)


def time_contenders(contenders, msgs, in_flight, frames, warmup, interleave=False):
    """
    Per-frame wall and device times of each contender at ``in_flight`` frames per group.

    By default each runs all its rounds in one block: steady state, as on a
    machine that runs only that pipeline. ``interleave``: the contenders take
    turns, one group each, on the same frame sequence, so that each starts
    cold (caches, clocks) after the others; on the H200 that made every
    contender slower (ours 1.3 -> 2.0 ms, upstream 4.3 -> 8.7 ms at 640x480,
    one frame in flight), and on the CPU the thread pools of ONNX Runtime and
    PyTorch spin after their work and slow whoever runs next.
    """
    rounds = max(math.ceil(frames / in_flight), 3)
    warm_rounds = max(math.ceil(warmup / in_flight), 2)
    samples = {id(c): {} for c in contenders}
    last = {}
    for contender in contenders:
        contender.reset()
    turns = ([(r, contenders) for r in range(warm_rounds + rounds)] if interleave else
             [(r, [c]) for c in contenders for r in range(warm_rounds + rounds)])
    for r, turn in turns:
        group = [msgs[(r * in_flight + j) % len(msgs)] for j in range(in_flight)]
        for contender in turn:
            out = contender.run(group)
            if r == warm_rounds + rounds - 1 and hasattr(contender, 'finish'):
                contender.finish()
            last[id(contender)] = out
            if r < warm_rounds:
                continue
            for key in TIMED:  # per frame, in ms
                if out.get(key) is not None:
                    samples[id(contender)].setdefault(key, []).append(
                        1e3 * out[key] / in_flight)
    rows = []
    for contender in contenders:
        row = {'contender': contender.name, 'in_flight': in_flight,
               'frames': rounds * in_flight,
               'keypoints': last[id(contender)]['keypoints'],
               'matches': last[id(contender)]['matches']}
        row.update({key: summarize(values) for key, values in samples[id(contender)].items()})
        rows.append(row)
    return rows


# Times a contender's run may report (seconds per group; rows hold ms per frame):
# wall; device = CUDA events around everything enqueued; device_work = from
# after the host's copies into pinned memory to the end (ours on the GPU);
# host_stage / host_enqueue = host seconds to copy the bytes into pinned
# memory / to enqueue the group (ours on the GPU).
TIMED = ('wall', 'device', 'device_work', 'host_stage', 'host_enqueue')


def torch_settings():
    """Return the precision settings of PyTorch that the reference and upstream run with."""
    import torch
    out = {'threads': torch.get_num_threads()}
    for name, read in (('cudnn_allow_tf32', lambda: torch.backends.cudnn.allow_tf32),
                       ('matmul_allow_tf32', lambda: torch.backends.cuda.matmul.allow_tf32),
                       ('cudnn_benchmark', lambda: torch.backends.cudnn.benchmark)):
        try:
            out[name] = bool(read())
        except (AttributeError, RuntimeError):
            out[name] = None
    return out


def machine_rates(device, size=8192, copy_mib=1024, reps=10):
    """
    Measure the device's FP32 matmul rate and copy bandwidth (PyTorch defaults: no TF32).

    The roofline of the floor estimate in docs/design-notes.md: TFLOP/s of an
    ``size`` x ``size`` product, GB/s (read + write) of a ``copy_mib`` MiB copy.
    """
    import torch
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    src = torch.empty(copy_mib * 2 ** 18, device=device)
    dst = torch.empty_like(src)
    out = {'matmul_tf32': torch_settings().get('matmul_allow_tf32')}
    for name, step, work in (('fp32_matmul_tflops', lambda: a @ b, 2.0 * size ** 3 / 1e12),
                             ('copy_gbps', lambda: dst.copy_(src), 8.0 * src.numel() / 1e9)):
        step()
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            step()
        end.record()
        end.synchronize()
        out[name] = work * reps / (start.elapsed_time(end) / 1e3)
    return out


def run_pipeline(args):
    """Pipeline / CPU mode: measure every contender, print the table, write JSON."""
    from xfeat_ros.features.weights import load_weights, resolve_weights
    weights = load_weights(resolve_weights(args.weights))
    engine = create_engine(EngineConfig(args.backend, weights, args.gpu, args.threads,
                                        args.top_k, args.threshold, args.min_cossim), LOG)
    device = engine.device
    on_gpu = device.startswith('cuda')
    import torch
    if on_gpu:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(args.threads or os.cpu_count())
    in_flight = parse_ints(args.in_flight) if on_gpu else [1]
    baseline_n = [n for n in parse_ints(args.baseline_in_flight) if on_gpu or n == 1]
    unchecked = args.unchecked and hasattr(engine, 'epipolar')  # the GPU engine's check
    contenders = [(EngineContender(engine, max(in_flight),
                                   epipolar=True if unchecked else None), in_flight)]
    if unchecked:
        contenders.append((EngineContender(engine, max(in_flight), UNCHECKED, epipolar=False),
                           in_flight))
    armed = args.armed and engine.capabilities.arming and 1 in in_flight
    if armed:
        contenders.append((EngineContender(engine, 1, ARMED, epipolar=True, arm=True), [1]))
        if unchecked:
            contenders.append((EngineContender(engine, 1, ARMED_UNCHECKED, epipolar=False,
                                               arm=True), [1]))
    contenders.append((reference_contender(weights, device, args.top_k, args.threshold,
                                           args.min_cossim), baseline_n))
    if args.upstream:
        contenders.append((upstream_contender(args.upstream, weights, device, args.top_k,
                                              args.threshold, args.min_cossim), baseline_n))
    images = load_images(args.images, args.num_images)
    results = {'mode': args.mode, 'environment': environment(),
               'settings': {'backend': engine.name, 'device': device, 'top_k': args.top_k,
                            'threshold': args.threshold, 'min_cossim': args.min_cossim,
                            'frames': args.frames, 'warmup': args.warmup,
                            'images': str(args.images), 'num_images': len(images),
                            'threads': args.threads,
                            'order': ('interleaved: the contenders take turns, one group each'
                                      if args.interleave else 'one contender after the other'),
                            'baseline_torch': torch_settings(),
                            'timed': 'per frame: host image bytes -> detect + describe + match '
                                     'against the previous frame -> keypoints, scores, '
                                     'descriptors and matches on the host; N frames per group '
                                     '(ours on the GPU: submit_group of N frames (one backbone '
                                     'call per model size) and results (one pass of pinned '
                                     'copies), elsewhere N submits and one synchronize; '
                                     'reference / upstream: a batch of N); wall time / N; '
                                     'device = CUDA events around the enqueued work / N; '
                                     'device_work (ours on the GPU) = from after the host '
                                     'copies into pinned memory to the end of the work / N; '
                                     'host_stage / host_enqueue = host time to copy the bytes '
                                     'into pinned memory / to enqueue the group, / N'},
               'results': []}
    sys.stdout.write(f'xfeat_bench {args.mode}: {engine.name} on {device}, top_k {args.top_k}, '
                     f'{args.frames} frames of {len(images)} images per measurement\n')
    for width, height in parse_resolutions(args.resolutions):
        msgs = [frame_message(fit_resolution(img, width, height)) for img in images]
        for n, rep in ((n, rep) for n in sorted(set(in_flight) | set(baseline_n))
                       for rep in range(args.repeat)):
            group = [c for c, counts in contenders if n in counts]
            # every other repeat in the reverse order, so that no contender always runs first
            for row in time_contenders(group[::-1] if rep % 2 else group, msgs, n, args.frames,
                                       args.warmup, args.interleave):
                row['resolution'] = f'{width}x{height}'
                if args.repeat > 1:
                    row['repeat'] = rep
                results['results'].append(row)
                sys.stdout.write(f'  {width}x{height} {row["contender"]:>9} N={n:<2} '
                                 + (f'#{rep} ' if args.repeat > 1 else '')
                                 + f'{row["wall"]["median_ms"]:9.3f} ms/frame wall'
                                 + (f', {row["device"]["median_ms"]:.3f} device'
                                    if 'device' in row else '')
                                 + (f', {row["device_work"]["median_ms"]:.3f} device work, '
                                    f'host {row["host_stage"]["median_ms"]:.3f} stage + '
                                    f'{row["host_enqueue"]["median_ms"]:.3f} enqueue'
                                    if 'device_work' in row else '')
                                 + f' ({row["keypoints"]} keypoints, {row["matches"]} matches)\n')
            sys.stdout.flush()
            write_json(args.json, results)
    if on_gpu and not args.no_machine_rates:
        try:
            results['machine_rates'] = machine_rates(device)
        except Exception as exc:  # noqa: B902 - a side measurement must not cost the results
            results['machine_rates'] = {'error': repr(exc)}
        sys.stdout.write(f'  machine rates: {results["machine_rates"]}\n')
    results['ratios'] = pipeline_ratios(results['results'])
    results['best'] = best_against_best(results['results'])
    labels = [label for label, wanted in ((UNCHECKED, unchecked), (ARMED, armed),
                                          (ARMED_UNCHECKED, armed and unchecked)) if wanted]
    for label in labels:
        results['ratios'] += pipeline_ratios(results['results'], label)
    if unchecked:
        results['best'] += best_against_best(results['results'], UNCHECKED)
    if armed:
        results['arm_counts'] = dict(engine.arm_counts)
        results['settings']['armed'] = (
            'one frame in flight; after each frame is submitted the next one is armed '
            '(its whole chain enqueued behind a gate in pinned memory) before the results '
            'of this one are fetched; the next submit writes its bytes and opens the gate. '
            'device / device_work start where the gate opened')
    write_json(args.json, results)
    sys.stdout.write('\n' + pipeline_table(results))
    for label in labels:
        sys.stdout.write('\n' + pipeline_table(results, label))
    if armed:
        sys.stdout.write(f'  armed chains: {results["arm_counts"]}\n')
    for entry in results['ratios'] if args.repeat > 1 else []:
        runs = ', '.join(f'{name[:-len("_over_ours")]}/ours {entry[name]:.2f}x '
                         f'({" ".join(f"{v:.2f}" for v in entry[name + "_runs"])})'
                         for name in ('reference_over_ours', 'upstream_over_ours')
                         if name + '_runs' in entry)
        if not runs:  # no baseline at this N (ours only): nothing to pair
            continue
        sys.stdout.write(f'  median of {args.repeat} repeats, {entry["resolution"]} '
                         f'N={entry["in_flight"]}'
                         + (f' {entry["contender"]}' if 'contender' in entry else '')
                         + f': {runs}\n')
    for entry in results['best']:
        sys.stdout.write(f'  best {entry["resolution"]}: ' + ', '.join(
            f'{k} {v:.3f}' if isinstance(v, float)
            else f'{k} [{", ".join(f"{x:.3g}" for x in v)}]' if isinstance(v, list)
            else f'{k} {v}'
            for k, v in entry.items() if k != 'resolution') + '\n')
    return 0
