# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_bench``: the speed of the pipeline and of the node, measured side by side.

Modes (``xfeat_bench MODE --help`` lists the options of each):

``pipeline``
    Detect + describe + match (against the previous frame) per frame, from the
    image bytes on the host to keypoints, scores, descriptors and matches on
    the host, for each resolution and 1, 2, 4, 8, 16 frames in flight (the GPU
    engine submits N frames, then synchronizes once; the CPU engine has no
    asynchrony, so only N = 1 is measured there). Next to it, in the same
    process on the same device: the PyTorch reference of upstream's algorithm
    (:mod:`xfeat_ros.reference_torch`, batches of N) and, with
    ``--upstream DIR``, upstream XFeat itself (``detectAndCompute`` + ``match``).
    Frames are real images (``--images``, default TUM fr2/desk of
    ``../shared/data``) cropped and resized to each resolution, rotated so
    caches do not flatter. Wall time (perf_counter) and, on a GPU, device time
    (CUDA events around the enqueued work) per frame: median, p10 and p90
    after warm-up. Prints a table with ratios and writes JSON.
``cpu``
    ``pipeline`` with the CPU defaults: ONNX Runtime at 640x480, one frame in
    flight, against the reference (and upstream) on the CPU.
``node``
    Starts ``xfeat_node`` (``python -m xfeat_ros.node``) and separate camera
    processes (``xfeat_bench publisher``) for each configuration
    (cameras x Hz; ``max``: as fast as the publisher can), through real rclpy
    transport; after a warm-up, reports the publish and output rates,
    published / received by the node / processed / delivered counts, latency
    from image stamp to Keypoints receipt, the node's CPU load and GPU memory,
    as a table, JSON and a latency histogram PNG.
``publisher``
    The camera process of ``node`` (N cameras at R Hz; driven over stdin).
``plot``
    The latency histogram PNG of a ``node`` JSON file.

Every ROS process this tool starts runs with ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``
and one ``ROS_DOMAIN_ID`` (DDS traffic stays on this machine) and, with ``--dds-profile``
(default: the shipped config/fastdds_shm.xml), the same Fast DDS profile (xfeat_ros.dds).
"""

import argparse
import ast
import datetime
import json
import logging
import math
import os
from pathlib import Path
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

import numpy as np

from xfeat_ros import dds
from xfeat_ros.cli import one_line_errors
from xfeat_ros.core.scheduler import SchedulerConfig
from xfeat_ros.defaults import MIN_COSSIM, THRESHOLD, TOP_K
from xfeat_ros.engine import BACKENDS, create_engine, EngineConfig
from xfeat_ros.errors import XFeatError

LOG = logging.getLogger('xfeat_bench')

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESOLUTIONS = '640x480,1280x720,1920x1080'
DEFAULT_IN_FLIGHT = '1,2,4,8,16'
DEFAULT_BASELINE_IN_FLIGHT = '1,8'
DEFAULT_NODE_CONFIGS = '1x30,4x60,8x120,8xmax'
ENCODINGS = ('rgb8', 'mono8')  # camera images of the node mode
NODE_SETTLE_S = 0.5
RELIABLE_DEPTH = 10
ACK_TIMEOUT_S = 5.0


# -- small helpers (unit-tested) -----------------------------------------------------------------

def percentile(values, q):
    """Return the ``q``-th percentile of ``values``, q in 0..100, linear between ranks (NumPy)."""
    data = sorted(values)
    if not data:
        return math.nan
    pos = (len(data) - 1) * float(q) / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


def summarize(values_ms):
    """Median, p10, p90, mean, min, max and count of millisecond samples."""
    if not values_ms:
        return {'n': 0}
    return {'median_ms': percentile(values_ms, 50), 'p10_ms': percentile(values_ms, 10),
            'p90_ms': percentile(values_ms, 90), 'mean_ms': sum(values_ms) / len(values_ms),
            'min_ms': min(values_ms), 'max_ms': max(values_ms), 'n': len(values_ms)}


def latency_summary(latencies_ms):
    """Median, p99, max, mean and count of latencies in milliseconds."""
    if not latencies_ms:
        return {'n': 0}
    return {'median_ms': percentile(latencies_ms, 50), 'p99_ms': percentile(latencies_ms, 99),
            'max_ms': max(latencies_ms), 'mean_ms': sum(latencies_ms) / len(latencies_ms),
            'n': len(latencies_ms)}


def ratio(slower, faster):
    """``slower / faster`` (how many times faster ``faster`` is), None if either is missing."""
    if not slower or not faster:
        return None
    return slower / faster


def cpu_percent(ticks_before, ticks_after, wall_s, ticks_per_s):
    """CPU load in percent of one core from process CPU ticks over ``wall_s`` seconds."""
    if ticks_before is None or ticks_after is None or wall_s <= 0:
        return None
    return 100.0 * (ticks_after - ticks_before) / ticks_per_s / wall_s


def parse_resolutions(text):
    """``'640x480,1280x720'`` -> ``[(640, 480), (1280, 720)]`` (width, height)."""
    out = []
    for item in text.split(','):
        width, height = item.lower().strip().split('x')
        if int(width) < 32 or int(height) < 32:
            raise ValueError(f'resolution {item} is under 32 px a side')
        out.append((int(width), int(height)))
    return out


def parse_ints(text):
    """``'1,2,4'`` -> ``[1, 2, 4]`` (each at least 1)."""
    values = [int(v) for v in text.split(',') if v.strip()]
    if not values or min(values) < 1:
        raise ValueError(f'expected positive integers, got {text!r}')
    return values


def parse_node_configs(text):
    """``'1x30,8xmax'`` -> ``[(1, 30.0), (8, 0.0)]`` (cameras, Hz; 0: as fast as possible)."""
    out = []
    for item in text.split(','):
        cameras, rate = item.lower().strip().split('x', 1)
        rate = 0.0 if rate in ('max', 'afap', 'inf') else float(rate)
        if int(cameras) < 1 or rate < 0:
            raise ValueError(f'bad node configuration {item!r}')
        out.append((int(cameras), rate))
    return out


def config_label(cameras, rate):
    """``(8, 120.0)`` -> ``'8x120'``; rate 0 -> ``'8xmax'``."""
    return f'{cameras}x{"max" if rate <= 0 else f"{rate:g}"}'


def parse_final_counts(log_text):
    """Per-camera counters of the node's last ``final counts: {...}`` log line, else None."""
    found = re.findall(r'final counts: (\{.*\})', log_text)
    if not found:
        return None
    try:
        return ast.literal_eval(found[-1])
    except (ValueError, SyntaxError):
        return None


def header_from_cdr(raw):
    """
    Return ``(stamp_ns, frame_id)`` of a serialized message starting with a std_msgs/Header.

    CDR: 4 bytes encapsulation (byte 1 odd: little endian), int32 sec,
    uint32 nanosec, uint32 length of frame_id (with its NUL), the characters.
    """
    order = '<' if raw[1] & 1 else '>'
    sec, nanosec, length = np.frombuffer(raw, dtype=np.dtype(f'{order}u4'), count=3, offset=4)
    sec = int(np.int32(np.uint32(sec)))
    frame_id = bytes(raw[16:16 + max(int(length) - 1, 0)]).decode('utf-8', 'replace')
    return sec * 1_000_000_000 + int(nanosec), frame_id


def ros_param(value):
    """Format a Python value for ``--ros-args -p name:=value``."""
    if isinstance(value, (list, tuple)):
        return '[' + ','.join(f"'{v}'" for v in value) + ']'
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value if value else "''"
    return repr(value)


def ros_environment(domain_id=None, profile=dds.SHIPPED):
    """Keep DDS on this machine, apply the Fast DDS profile (xfeat_ros.dds); returns the domain."""
    return dds.ros_environment(profile, domain_id=domain_id)['domain_id']


# -- environment record --------------------------------------------------------------------------

def _version(module):
    try:
        return __import__(module).__version__
    except Exception:  # noqa: B902 - a missing or broken package is just not recorded
        return None


def _run_text(args, timeout=10):
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def cpu_model():
    """Return the CPU's model name from /proc/cpuinfo, or None."""
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return None


def environment():
    """Date, command, machine, GPU, driver and library versions of this run."""
    cpu = cpu_model()
    env = {'date_utc': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
           'command': [Path(sys.argv[0]).name] + sys.argv[1:],
           'git_commit': _run_text(['git', '-C', str(REPO), 'rev-parse', '--short', 'HEAD']),
           'python': platform.python_version(), 'machine': platform.machine(), 'cpu': cpu,
           'cores': os.cpu_count(), 'load_average': list(os.getloadavg()),
           'numpy': np.__version__,
           'onnxruntime': _version('onnxruntime'), 'torch': _version('torch')}
    gpu = _run_text(['nvidia-smi', '--query-gpu=name,driver_version,memory.total',
                     '--format=csv,noheader'])
    if gpu:
        env['gpu'] = gpu.splitlines()[0]
        env['cupy'] = _version('cupy')
        try:
            import torch
            env['torch_cuda'] = torch.version.cuda
        except ImportError:
            pass
    return env


def write_json(path, data):
    """Write ``data`` as indented JSON (atomically: a killed run leaves the last complete file)."""
    if not path:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + '.tmp')
    tmp.write_text(json.dumps(data, indent=1) + '\n')
    tmp.replace(path)


# -- frames --------------------------------------------------------------------------------------

def default_images():
    """TUM fr2/desk of ``../shared/data`` (``$XFEAT_ROS_SHARED`` honoured)."""
    shared = Path(os.environ.get('XFEAT_ROS_SHARED', REPO.parent / 'shared'))
    return shared / 'data' / 'tum_fr2_desk'


def default_weights():
    """``../shared/models/xfeat_backbone.npz`` if present, else '' (the weights lookup)."""
    shared = Path(os.environ.get('XFEAT_ROS_SHARED', REPO.parent / 'shared'))
    path = shared / 'models' / 'xfeat_backbone.npz'
    return str(path) if path.is_file() else ''


def load_images(folder, count):
    """Up to ``count`` images of a folder or sequence, evenly spread, as uint8 RGB [H, W, 3]."""
    from xfeat_ros.image_files import list_sequence, read_image
    paths = [p for _, p in list_sequence(folder)]
    if count and len(paths) > count:
        paths = [paths[round(i * (len(paths) - 1) / max(count - 1, 1))] for i in range(count)]
    images = []
    for path in paths:
        pixels, encoding = read_image(path)
        if encoding == 'mono16':
            pixels = (pixels // 257).astype(np.uint8)
        if pixels.shape[2] == 1:
            pixels = pixels.repeat(3, axis=2)
        images.append(np.ascontiguousarray(pixels))
    return images


def fit_resolution(pixels, width, height):
    """Centre-crop ``pixels`` to the aspect of ``width x height``, then resize to it."""
    import cv2
    h, w = pixels.shape[:2]
    if w * height > h * width:
        crop = round(h * width / height)
        pixels = pixels[:, (w - crop) // 2:(w - crop) // 2 + crop]
    elif w * height < h * width:
        crop = round(w * height / width)
        pixels = pixels[(h - crop) // 2:(h - crop) // 2 + crop]
    if pixels.shape[:2] == (height, width):
        return np.ascontiguousarray(pixels)
    shrink = width < pixels.shape[1]
    return cv2.resize(np.ascontiguousarray(pixels), (width, height),
                      interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)


def frame_message(pixels):
    """Wrap pixels as a ``sensor_msgs/Image``-like rgb8 frame (bytes, as from a driver)."""
    height, width = pixels.shape[:2]
    return SimpleNamespace(data=pixels.tobytes(), encoding='rgb8', height=height, width=width,
                           step=width * 3, is_bigendian=0, pixels=pixels)


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

    def __init__(self, engine, max_in_flight, label='xfeat_ros'):
        """Allocate two sets of ``max_in_flight`` slots (a round's and the previous round's)."""
        self.engine = engine
        self.name = label
        self.on_gpu = engine.device.startswith('cuda')
        self.max_in_flight = max_in_flight if self.on_gpu else 1
        self.sets = [[engine.alloc_slot() for _ in range(self.max_in_flight)] for _ in range(2)]
        self.parity = 0
        self.previous = None
        self.grouped = hasattr(engine, 'submit_group') and hasattr(engine, 'results')
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

    def run(self, msgs):
        """Process ``msgs`` as one group; a dict of its times (s) and counts."""
        engine = self.engine
        slots = self.sets[self.parity][:len(msgs)]
        self.parity ^= 1
        extra = {}
        t0 = time.perf_counter()
        self.timer.start()
        if self.grouped:
            engine.submit_group(msgs, slots, previous=self.previous, chain=True,
                                start_event=self.work_start)
            self.timer.stop()
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
            extra['device_work'] = cupy.cuda.get_elapsed_time(self.work_start,
                                                              self.timer.events[1]) / 1e3
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
    """Build the PyTorch reference of upstream's algorithm (:mod:`xfeat_ros.reference_torch`)."""
    from xfeat_ros.reference_torch import ReferenceXFeat
    ref = ReferenceXFeat(weights, device, top_k, threshold, min_cossim)
    return TorchContender('reference', ref.detect_and_compute, ref.match, device)


def upstream_contender(directory, weights, device, top_k, threshold, min_cossim):
    """Upstream XFeat from a checkout (``modules/``), with the same weights, on ``device``."""
    import torch
    directory = str(Path(directory).resolve())
    if not (Path(directory) / 'modules' / 'xfeat.py').is_file():
        raise SystemExit(f'--upstream {directory}: no modules/xfeat.py there')
    if directory not in sys.path:
        sys.path.insert(0, directory)
    from modules.xfeat import XFeat
    xfeat = XFeat(weights=None, top_k=top_k, detection_threshold=threshold)
    state = {k: torch.from_numpy(v) for k, v in weights.items()}
    missing, unexpected = xfeat.net.load_state_dict(state, strict=False)
    if [k for k in missing if not k.startswith('fine_matcher')] or unexpected:
        raise SystemExit(f'upstream weights mismatch: {missing[:3]} {unexpected[:3]}')
    xfeat.dev = torch.device(device)
    xfeat.net = xfeat.net.to(xfeat.dev).eval()

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

    The roofline of the floor estimate in bench/NOTES.md: TFLOP/s of an
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


def pipeline_table(results):
    """Text table of pipeline results: ours at each N next to reference / upstream and ratios."""
    by_key = {(r['resolution'], r['contender'], r['in_flight']): r for r in results['results']}
    has_upstream = any(r['contender'] == 'upstream' for r in results['results'])
    on_gpu = any('device' in r for r in results['results'])
    dev_head = f' {"(device)":>8}' if on_gpu else ''
    head = (f'{"resolution":>10} {"N":>3} | {"xfeat_ros ms/frame [p10-p90]":>30} '
            f'{"(device)":>9} | {"reference":>9} {"ref/ours":>8}{dev_head}')
    if has_upstream:
        head += f' | {"upstream":>9} {"up/ours":>8}{dev_head}'
    lines = [head, '-' * len(head)]
    for r in results['results']:
        if r['contender'] != 'xfeat_ros':
            continue
        res, n = r['resolution'], r['in_flight']
        wall = r['wall']
        device = r.get('device', {}).get('median_ms')
        cells = [f'{res:>10} {n:>3} | {wall["median_ms"]:9.3f} '
                 f'[{wall["p10_ms"]:8.3f}-{wall["p90_ms"]:8.3f}] '
                 f'{"" if device is None else f"({device:.3f})":>9}']
        for name in ('reference', 'upstream') if has_upstream else ('reference',):
            other = by_key.get((res, name, n))
            if other is None:
                cells.append(f'{"-":>9} {"-":>8}' + (f' {"":>8}' if on_gpu else ''))
            else:
                dev = ratio(other.get('device', {}).get('median_ms'), device)
                cells.append(f'{other["wall"]["median_ms"]:9.3f} '
                             f'{ratio(other["wall"]["median_ms"], wall["median_ms"]):7.2f}x'
                             + ('' if dev is None else f' {f"({dev:.2f}x)":>8}'))
        lines.append(' | '.join(cells))
    return '\n'.join(lines) + '\n'


def run_pipeline(args):
    """Pipeline / CPU mode: measure every contender, print the table, write JSON."""
    from xfeat_ros.weights import load_weights, resolve_weights
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
    contenders = [(EngineContender(engine, max(in_flight)), in_flight),
                  (reference_contender(weights, device, args.top_k, args.threshold,
                                       args.min_cossim), baseline_n)]
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
        for n in sorted(set(in_flight) | set(baseline_n)):
            group = [c for c, counts in contenders if n in counts]
            for row in time_contenders(group, msgs, n, args.frames, args.warmup,
                                       args.interleave):
                row['resolution'] = f'{width}x{height}'
                results['results'].append(row)
                sys.stdout.write(f'  {width}x{height} {row["contender"]:>9} N={n:<2} '
                                 f'{row["wall"]["median_ms"]:9.3f} ms/frame wall'
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
    write_json(args.json, results)
    sys.stdout.write('\n' + pipeline_table(results))
    for entry in results['best']:
        sys.stdout.write(f'  best {entry["resolution"]}: ' + ', '.join(
            f'{k} {v:.3f}' if isinstance(v, float) else f'{k} {v}'
            for k, v in entry.items() if k != 'resolution') + '\n')
    return 0


def pipeline_ratios(rows):
    """Per resolution and N: reference / ours and upstream / ours, wall and device medians."""
    by_key = {(r['resolution'], r['contender'], r['in_flight']): r for r in rows}
    out = []
    for (res, name, n), ours in by_key.items():
        if name != 'xfeat_ros':
            continue
        entry = {'resolution': res, 'in_flight': n, 'xfeat_ros_ms': ours['wall']['median_ms'],
                 'xfeat_ros_device_ms': ours.get('device', {}).get('median_ms'),
                 'xfeat_ros_device_work_ms': ours.get('device_work', {}).get('median_ms')}
        for other in ('reference', 'upstream'):
            row = by_key.get((res, other, n))
            if row is not None:
                entry[f'{other}_ms'] = row['wall']['median_ms']
                entry[f'{other}_over_ours'] = ratio(row['wall']['median_ms'],
                                                    ours['wall']['median_ms'])
                device = row.get('device', {}).get('median_ms')
                if device is not None:
                    entry[f'{other}_device_ms'] = device
                    entry[f'{other}_over_ours_device'] = ratio(device,
                                                               entry['xfeat_ros_device_ms'])
        out.append(entry)
    return out


def best_against_best(rows):
    """Per resolution: each contender's lowest median wall ms/frame over N, and ratios to ours."""
    best = {}
    for row in rows:
        key = (row['resolution'], row['contender'])
        if key not in best or row['wall']['median_ms'] < best[key]['wall']['median_ms']:
            best[key] = row
    out = []
    for res in dict.fromkeys(row['resolution'] for row in rows):
        ours = best.get((res, 'xfeat_ros'))
        if ours is None:
            continue
        entry = {'resolution': res, 'xfeat_ros_ms': ours['wall']['median_ms'],
                 'xfeat_ros_n': ours['in_flight']}
        for other in ('reference', 'upstream'):
            row = best.get((res, other))
            if row is not None:
                entry[f'{other}_ms'] = row['wall']['median_ms']
                entry[f'{other}_n'] = row['in_flight']
                entry[f'{other}_over_ours'] = ratio(row['wall']['median_ms'],
                                                    ours['wall']['median_ms'])
        out.append(entry)
    return out


# -- node mode -----------------------------------------------------------------------------------

def proc_cpu_ticks(pid):
    """Return user + system CPU ticks of a process (psutil, else /proc), or None."""
    try:
        import psutil
        times = psutil.Process(pid).cpu_times()
        return (times.user + times.system) * os.sysconf('SC_CLK_TCK')
    except ImportError:
        pass
    except Exception:  # noqa: B902 - the process is gone
        return None
    try:
        text = Path(f'/proc/{pid}/stat').read_text()
    except OSError:
        return None
    fields = text[text.rindex(')') + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)


def gpu_memory_used_mib():
    """``memory.used`` of GPU 0 in MiB (nvidia-smi), or None."""
    text = _run_text(['nvidia-smi', '--query-gpu=memory.used', '--format=csv,noheader,nounits'])
    try:
        return float(text.splitlines()[0]) if text else None
    except ValueError:
        return None


def gpu_memory_of(pid, baseline_mib):
    """GPU memory of process ``pid``: (MiB, how it was read) or (None, why not)."""
    text = _run_text(['nvidia-smi', '--query-compute-apps=pid,used_memory',
                      '--format=csv,noheader,nounits'])
    if text is None:
        return None, 'n/a (no nvidia-smi)'
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(',')]
        if len(parts) == 2 and parts[0] == str(pid):
            return float(parts[1]), 'nvidia-smi, node pid'
    used = gpu_memory_used_mib()
    if used is not None and baseline_mib is not None:
        return used - baseline_mib, 'nvidia-smi memory.used minus before the node started'
    return None, 'n/a (node pid not listed)'


class Collector:
    """The receiving end: raw Keypoints subscriptions, stamp -> receipt latency per frame."""

    def __init__(self, cameras):
        """Create a private context, node and one raw subscription per camera."""
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from xfeat_ros.messages import message_types
        keypoints_type = message_types()[0]
        self.rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node('xfeat_bench_collector', context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.cameras = list(cameras)
        self.received = []  # (camera index, frame_id, stamp_ns, receipt_ns)
        qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        for index, name in enumerate(self.cameras):
            self.node.create_subscription(
                keypoints_type, f'{name}/keypoints',
                lambda raw, i=index: self._on_keypoints(i, raw), qos, raw=True)

    def _on_keypoints(self, index, raw):
        now = time.time_ns()
        stamp, frame_id = header_from_cdr(raw)
        self.received.append((index, frame_id, stamp, now))

    def spin(self, seconds):
        """Spin for ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=min(0.05, max(deadline - time.monotonic(), 0)))

    def spin_until(self, predicate, timeout, alive=None):
        """Spin until ``predicate()``; False on timeout or when ``alive()`` turns false."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            if alive is not None and not alive():
                return False
            self.executor.spin_once(timeout_sec=0.05)
        return predicate()

    def node_ready(self):
        """Tell whether the node subscribes to every image topic and publishes keypoints."""
        ns = self.node.get_namespace().rstrip('/')
        return all(self.node.count_subscribers(f'{ns}/{c}/image') > 0
                   and self.node.count_publishers(f'{ns}/{c}/keypoints') > 0
                   for c in self.cameras)

    def close(self):
        """Destroy the node and the context."""
        self.executor.shutdown()
        self.node.destroy_node()
        self.rclpy.shutdown(context=self.context)


class PublisherProcess:
    """A ``xfeat_bench publisher`` child, driven by lines on stdin, answering JSON lines."""

    def __init__(self, cameras, args, log):
        """Start the process for camera names ``cameras``; a thread reads its answers."""
        import queue
        import threading
        cmd = [sys.executable, '-m', 'xfeat_ros.bench', 'publisher',
               '--cameras', ','.join(cameras), '--images', str(args.images),
               '--num-images', str(args.num_images), '--resolution', args.resolution,
               '--dds-profile', args.dds_profile, '--encoding', args.encoding]
        self.process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=log, text=True, bufsize=1,
                                        env=dict(os.environ, PYTHONUNBUFFERED='1'))
        self.events = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                self.events.put(event)
        self.events.put({'event': 'exit'})

    def send(self, line):
        """Send one command line."""
        self.process.stdin.write(line + '\n')
        self.process.stdin.flush()

    def wait_event(self, name, timeout):
        """Return the next event ``name`` within ``timeout`` s; None on timeout or exit."""
        import queue
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = self.events.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return None
            if event.get('event') == name:
                return event
            if event.get('event') == 'exit':
                self.events.put(event)
                return None

    def stop(self):
        """Close stdin (the child exits) and reap it."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_node(args, cameras, log):
    """Start ``xfeat_node`` for ``cameras`` with the bench's parameters."""
    params = {'cameras': cameras, 'backend': args.backend, 'weights': args.weights,
              'gpu': args.gpu, 'num_threads': args.threads, 'top_k': args.top_k,
              'max_frames_in_flight': args.max_frames_in_flight,
              'queue_size': args.queue_size, 'input_qos_reliability': 'reliable',
              'output_qos_reliability': 'reliable'}
    cmd = [sys.executable, '-m', 'xfeat_ros.node', '--ros-args']
    for name, value in params.items():
        cmd += ['-p', f'{name}:={ros_param(value)}']
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONUNBUFFERED='1'))


def stop_process(process, timeout=20.0):
    """SIGINT a child and wait (kill after ``timeout``); returns its exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def split_cameras(cameras, processes):
    """Deal camera names round-robin over ``processes`` publisher processes."""
    processes = max(1, min(processes, len(cameras)))
    return [cameras[i::processes] for i in range(processes)]


def node_counts(final, warmup_published, warmup_delivered):
    """Received / processed by the node in the measurement (warm-up frames subtracted)."""
    if not final:
        return None, None
    received = sum(c['received'] if 'received' in c else  # older nodes: no such counter
                   c.get('accepted', 0) + c.get('dropped_queue_full', 0) + c.get('rejected', 0)
                   for c in final.values())
    processed = sum(c.get('published', 0) for c in final.values())
    return received - warmup_published, processed - warmup_delivered


class _Run:
    """What one node configuration gathered (filled step by step, read once at the end)."""

    def __init__(self):
        """Start empty."""
        self.reports = []
        self.warm_published = self.warm_delivered = 0
        self.ticks = (None, None)
        self.wall_s = 0.0
        self.memory = (None, None)
        self.baseline_mib = None


def _measure(args, rate, collector, node, publishers, run):
    """Warm up, publish for ``args.duration`` s, drain; raises RuntimeError on failure."""
    if not collector.spin_until(collector.node_ready, args.start_timeout,
                                lambda: node.poll() is None):
        raise RuntimeError(f'node not ready (exit code {node.poll()})')
    for pub in publishers:
        if pub.wait_event('ready', args.start_timeout) is None:
            raise RuntimeError('a publisher process did not start')
    collector.spin(NODE_SETTLE_S)
    # Warm-up (CUDA graphs, workspaces, first allocations): published, then not counted.
    for pub in publishers:
        pub.send(f'warmup {args.warmup_frames} {args.warmup_rate}')
    for pub in publishers:
        event = pub.wait_event('warmup_done', 120.0)
        if event is None:
            raise RuntimeError('a publisher process failed its warm-up')
        run.warm_published += sum(event['published'])
    # Every warm-up frame back, or none for a while: the node's queue (1 frame per
    # camera by default) drops warm-up bursts, and a dropped frame never comes back.
    state = {'count': -1, 'since': time.monotonic()}

    def warmed_up():
        if len(collector.received) != state['count']:
            state['count'], state['since'] = len(collector.received), time.monotonic()
        return (len(collector.received) >= run.warm_published
                or time.monotonic() - state['since'] > args.drain_idle)
    collector.spin_until(warmed_up, 60.0, lambda: node.poll() is None)
    collector.spin(NODE_SETTLE_S)
    run.warm_delivered = len(collector.received)
    collector.received.clear()

    before = proc_cpu_ticks(node.pid)
    start = time.monotonic()
    for pub in publishers:
        pub.send(f'go {rate} {args.duration}')
    pending = list(publishers)
    deadline = start + args.duration + 60.0
    while pending and time.monotonic() < deadline:
        collector.spin(0.02)
        for pub in list(pending):
            event = pub.wait_event('report', 0.0)
            if event is not None:
                run.reports.append(event)
                pending.remove(pub)
            elif pub.process.poll() is not None:
                raise RuntimeError(f'a publisher process exited ({pub.process.returncode})')
    if pending:
        raise RuntimeError('a publisher process did not report')
    run.ticks = (before, proc_cpu_ticks(node.pid))
    run.wall_s = time.monotonic() - start
    published = sum(sum(r['published']) for r in run.reports)
    # Drain: the node finishes its queues; stop when all arrived or nothing new for a while.
    last_count, last_change = -1, time.monotonic()
    deadline = time.monotonic() + args.drain_timeout
    while time.monotonic() < deadline and len(collector.received) < published:
        collector.spin(0.1)
        if len(collector.received) != last_count:
            last_count, last_change = len(collector.received), time.monotonic()
        elif time.monotonic() - last_change > args.drain_idle:
            break
    run.memory = gpu_memory_of(node.pid, run.baseline_mib)


def run_node_config(args, cameras_count, rate, log_dir):
    """One node configuration end to end: node, collector, publishers; its result dict."""
    label = config_label(cameras_count, rate)
    cameras = [f'cam{i}' for i in range(cameras_count)]
    result = {'label': label, 'cameras': cameras_count, 'rate_hz': rate,
              'target_hz': cameras_count * rate if rate > 0 else None,
              'duration_s': args.duration, 'error': None}
    node_log_path = Path(log_dir) / f'node_{label}.log'
    pub_log_path = Path(log_dir) / f'publisher_{label}.log'
    run = _Run()
    run.baseline_mib = gpu_memory_used_mib()
    collector = Collector(cameras)
    with open(node_log_path, 'w') as node_log, open(pub_log_path, 'w') as pub_log:
        node = start_node(args, cameras, node_log)
        publishers = [PublisherProcess(group, args, pub_log)
                      for group in split_cameras(cameras, args.publisher_processes)]
        try:
            _measure(args, rate, collector, node, publishers, run)
        except RuntimeError as exc:
            result['error'] = f'{exc}; see {node_log_path} and {pub_log_path}'
            LOG.error('%s: %s', label, result['error'])
        finally:
            for pub in publishers:
                pub.stop()
            code = stop_process(node)
            rows = list(collector.received)
            collector.close()
    final = parse_final_counts(node_log_path.read_text(errors='replace'))
    received, processed = node_counts(final, run.warm_published, run.warm_delivered)
    measured = [row for row in rows if not row[1].startswith('w')]
    latencies = [(recv - stamp) / 1e6 for _, _, stamp, recv in measured]
    delivered = len({(row[0], row[1]) for row in measured})
    published = sum(sum(r['published']) for r in run.reports)
    pub_s = ((max(r['end_ns'] for r in run.reports) - min(r['start_ns'] for r in run.reports))
             / 1e9 if run.reports else 0.0)
    first_stamp = min((row[2] for row in measured), default=0)
    last_recv = max((row[3] for row in measured), default=0)
    result.update({
        'published': published,
        'publish_hz': published / max(args.duration, pub_s) if published else None,
        'node_received': received, 'node_processed': processed, 'delivered': delivered,
        'dropped': published - delivered,
        'duplicates': len(measured) - delivered,
        'delivered_per_camera': [sum(1 for row in measured if row[0] == i)
                                 for i in range(cameras_count)],
        'output_hz': (delivered / max(args.duration, (last_recv - first_stamp) / 1e9)
                      if delivered else None),
        'latency': latency_summary(latencies),
        'node_cpu_percent': cpu_percent(*run.ticks, run.wall_s, os.sysconf('SC_CLK_TCK')),
        'gpu_memory_mib': run.memory[0], 'gpu_memory_source': run.memory[1],
        'warmup': {'published': run.warm_published, 'delivered': run.warm_delivered},
        'node_exit_code': code, 'node_counts': final,
        'publisher_reports': run.reports,
        'latencies_ms': [round(v, 3) for v in latencies]})
    return result


def node_table(results):
    """Text table of node results."""
    head = (f'{"config":>8} {"target Hz":>9} {"pub Hz":>8} {"out Hz":>8} | {"published":>9} '
            f'{"received":>8} {"processed":>9} {"delivered":>9} {"dropped":>7} | '
            f'{"lat p50":>8} {"p99":>8} {"max ms":>8} | {"CPU %":>6} {"GPU MiB":>8}')
    lines = [head, '-' * len(head)]

    def num(value, fmt):
        return '-' if value is None else format(value, fmt)
    for r in results['configs']:
        lat = r.get('latency', {})
        lines.append(
            f'{r["label"]:>8} {num(r.get("target_hz"), ".0f"):>9} '
            f'{num(r.get("publish_hz"), ".1f"):>8} {num(r.get("output_hz"), ".1f"):>8} | '
            f'{num(r.get("published"), "d"):>9} {num(r.get("node_received"), "d"):>8} '
            f'{num(r.get("node_processed"), "d"):>9} {num(r.get("delivered"), "d"):>9} '
            f'{num(r.get("dropped"), "d"):>7} | {num(lat.get("median_ms"), ".2f"):>8} '
            f'{num(lat.get("p99_ms"), ".2f"):>8} {num(lat.get("max_ms"), ".2f"):>8} | '
            f'{num(r.get("node_cpu_percent"), ".0f"):>6} '
            f'{num(r.get("gpu_memory_mib"), ".0f"):>8}'
            + (f'  ERROR: {r["error"]}' if r.get('error') else ''))
    return '\n'.join(lines) + '\n'


def plot_latencies(results, png):
    """Latency histogram (one step curve per configuration, log-spaced bins) as a PNG."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    values = [v for r in results['configs'] for v in r.get('latencies_ms', []) if v > 0]
    if values:
        bins = np.geomspace(max(min(values), 1e-2), max(values) * 1.01, 60)
        for r in results['configs']:
            lat = np.asarray([v for v in r.get('latencies_ms', []) if v > 0])
            if lat.size == 0:
                continue
            summary = r['latency']
            ax.hist(lat, bins=bins, histtype='step', linewidth=1.5,
                    weights=np.full(lat.size, 1.0 / lat.size),
                    label=f'{r["label"]}: p50 {summary["median_ms"]:.1f}, '
                          f'p99 {summary["p99_ms"]:.1f} ms ({lat.size} frames)')
        ax.set_xscale('log')
        ax.legend(fontsize=8)
    settings = results.get('settings', {})
    env = results.get('environment', {})
    ax.set_xlabel('latency, image stamp -> Keypoints received (ms)')
    ax.set_ylabel('share of frames')
    ax.set_title(f'xfeat_node {settings.get("backend", "")} on '
                 f'{env.get("gpu", env.get("cpu", "")) or ""}'.strip()[:90], fontsize=9)
    ax.grid(True, which='both', alpha=0.3)
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)


def run_node(args):
    """Node mode: every configuration, then the table, JSON and PNG."""
    domain = ros_environment(args.domain_id, args.dds_profile)
    configs = parse_node_configs(args.configs)
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix='xfeat_bench_'))
    log_dir.mkdir(parents=True, exist_ok=True)
    if not args.weights:
        args.weights = default_weights()
    results = {'mode': 'node', 'environment': environment(),
               'settings': {'backend': args.backend, 'top_k': args.top_k,
                            'resolution': args.resolution, 'encoding': args.encoding,
                            'duration_s': args.duration,
                            'max_frames_in_flight': args.max_frames_in_flight,
                            'queue_size': args.queue_size, 'input_qos_reliability': 'reliable',
                            'warmup_frames_per_camera': args.warmup_frames,
                            'publisher_processes': args.publisher_processes,
                            'images': str(args.images), 'ros_domain_id': domain,
                            'ros_automatic_discovery_range': 'LOCALHOST',
                            'dds_profile': os.environ.get(dds.PROFILE_ENV, ''),
                            'latency': 'image header stamp (set just before publish) to '
                                       'receipt of its Keypoints in the collector process',
                            'node_counts': "from the node's final counts log line, warm-up "
                                           'frames subtracted', 'log_dir': str(log_dir)},
               'configs': []}
    sys.stdout.write(f'xfeat_bench node: {args.backend}, {args.resolution} {args.encoding}, '
                     f'top_k {args.top_k}, {args.duration:g} s per configuration, ROS_DOMAIN_ID '
                     f'{domain} (LOCALHOST), logs in {log_dir}\n')
    for cameras, rate in configs:
        row = run_node_config(args, cameras, rate, log_dir)
        results['configs'].append(row)
        lat = row.get('latency', {})
        sys.stdout.write(f'  {row["label"]}: published {row.get("published")}, delivered '
                         f'{row.get("delivered")}, p99 {lat.get("p99_ms")} ms'
                         + (f', error: {row["error"]}' if row['error'] else '') + '\n')
        sys.stdout.flush()
        write_json(args.json, results)
    sys.stdout.write('\n' + node_table(results))
    if args.png:
        try:
            plot_latencies(results, args.png)
        except ImportError as exc:
            sys.stdout.write(f'no PNG ({exc}); later: xfeat_bench plot {args.json} '
                             f'--png {args.png}\n')
    return 0 if all(not r['error'] for r in results['configs']) else 1


# -- publisher process ---------------------------------------------------------------------------

def _emit(event, **fields):
    sys.stdout.write(json.dumps(dict(event=event, **fields)) + '\n')
    sys.stdout.flush()


def _publish_loop(pubs, msgs, rate, duration=None, frames=None, prefix=''):
    """Publish one frame per camera per tick; returns (published per camera, stats)."""
    from builtin_interfaces.msg import Time
    counts = [0] * len(pubs)
    late = 0
    max_late = 0.0
    start = time.monotonic()
    start_ns = time.time_ns()
    tick = 0
    while True:
        if frames is not None and tick >= frames:
            break
        due = start + tick / rate if rate > 0 else time.monotonic()
        if duration is not None and due - start >= duration:
            break
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        elif rate > 0:
            lag = now - due
            max_late = max(max_late, lag)
            late += lag > 1.0 / rate
        for c, pub in enumerate(pubs):
            msg = msgs[c][(tick + c) % len(msgs[c])]
            msg.header.frame_id = f'{prefix}{tick}'
            stamp = time.time_ns()
            msg.header.stamp = Time(sec=stamp // 1_000_000_000, nanosec=stamp % 1_000_000_000)
            pub.publish(msg)
            counts[c] += 1
        tick += 1
    return counts, {'start_ns': start_ns, 'end_ns': time.time_ns(), 'ticks': tick,
                    'late_ticks': late, 'max_late_ms': 1e3 * max_late}


def run_publisher(args):
    """
    Publish cameras at a rate, driven by stdin (``warmup N HZ``, ``go HZ SECONDS``).

    Answers JSON lines on stdout (ready, warmup_done, report) and keeps its
    writers alive until stdin closes, so that reliable samples still in
    flight reach the node.
    """
    ros_environment(args.domain_id, args.dds_profile)
    import rclpy
    from rclpy.duration import Duration
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from xfeat_ros.image_codec import image_msg
    width, height = parse_resolutions(args.resolution)[0]
    images = [fit_resolution(img, width, height)
              for img in load_images(args.images, args.num_images)]
    cameras = [c for c in args.cameras.split(',') if c]
    rclpy.init()
    node = rclpy.create_node('xfeat_bench_camera')
    qos = QoSProfile(depth=args.depth, reliability=ReliabilityPolicy.RELIABLE)
    pubs = [node.create_publisher(Image, f'{c}/image', qos) for c in cameras]
    if args.encoding == 'mono8':
        import cv2
        images = [cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)[..., None] for img in images]
    msgs = [[image_msg(img, args.encoding, None, '') for img in images] for _ in cameras]
    try:
        deadline = time.monotonic() + args.wait_subscribers
        while (any(p.get_subscription_count() == 0 for p in pubs)
               and time.monotonic() < deadline):
            time.sleep(0.05)
        time.sleep(NODE_SETTLE_S)  # counted readers may not be matched on the writer side yet
        _emit('ready', cameras=cameras,
              subscribers=[p.get_subscription_count() for p in pubs])
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == 'warmup':
                counts, stats = _publish_loop(pubs, msgs, float(words[2]),
                                              frames=int(words[1]), prefix='w')
                _emit('warmup_done', published=counts, **stats)
            elif words[0] == 'go':
                counts, stats = _publish_loop(pubs, msgs, float(words[1]),
                                              duration=float(words[2]))
                # Reliable: the last images are delivered only while this writer lives.
                acked = all(p.wait_for_all_acked(Duration(seconds=ACK_TIMEOUT_S)) for p in pubs)
                _emit('report', cameras=cameras, published=counts, all_acked=acked, **stats)
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


# -- command line --------------------------------------------------------------------------------

def _pipeline_args(parser, cpu):
    parser.add_argument('--resolutions', default='640x480' if cpu else DEFAULT_RESOLUTIONS,
                        help='WxH list (default: %(default)s)')
    parser.add_argument('--backend', default='onnxruntime' if cpu else 'auto',
                        choices=BACKENDS)
    parser.add_argument('--in-flight', default='1' if cpu else DEFAULT_IN_FLIGHT,
                        help='frames per synchronization for ours (GPU only; default '
                             '%(default)s)')
    parser.add_argument('--baseline-in-flight', default='1' if cpu
                        else DEFAULT_BASELINE_IN_FLIGHT,
                        help='batch sizes for the reference and upstream (default %(default)s)')
    parser.add_argument('--frames', type=int, default=30 if cpu else 240,
                        help='measured frames per row (default %(default)s)')
    parser.add_argument('--warmup', type=int, default=3 if cpu else 32,
                        help='warm-up frames per row (default %(default)s)')
    parser.add_argument('--upstream', help='upstream XFeat checkout (holds modules/; needs tqdm)')
    parser.add_argument('--interleave', action='store_true',
                        help='contenders take turns group by group (default: one block each)')
    parser.add_argument('--no-machine-rates', action='store_true',
                        help='skip measuring the GPU FP32 matmul and copy rates')


def build_parser():
    """Build the argument parser of every mode."""
    parser = argparse.ArgumentParser(prog='xfeat_bench',
                                     description=__doc__.strip().splitlines()[0])
    modes = parser.add_subparsers(dest='mode', required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument('--images', default=str(default_images()),
                        help='image folder or sequence (default: ../shared TUM fr2/desk)')
    common.add_argument('--num-images', type=int, default=8,
                        help='images to rotate (default %(default)s)')
    common.add_argument('--weights', default='', help='weights (.pt or .npz); default: '
                        '../shared/models/xfeat_backbone.npz, else the weights lookup')
    common.add_argument('--gpu', type=int, default=0)
    common.add_argument('--threads', type=int, default=0, help='CPU threads (0: all / default)')
    common.add_argument('--top-k', type=int, default=TOP_K)
    common.add_argument('--json', help='write the results here')
    common.add_argument('-v', '--verbose', action='store_true')
    detect = argparse.ArgumentParser(add_help=False)
    detect.add_argument('--threshold', type=float, default=THRESHOLD)
    detect.add_argument('--min-cossim', type=float, default=MIN_COSSIM)
    for name, cpu, text in (('pipeline', False, 'time the pipeline at several resolutions '
                             'and frames in flight'),
                            ('cpu', True, 'time the ONNX Runtime path on the CPU')):
        sub = modes.add_parser(name, parents=[common, detect], help=text, description=text)
        _pipeline_args(sub, cpu)
    node = modes.add_parser('node', parents=[common], help='time xfeat_node through ROS 2',
                            description='time xfeat_node through ROS 2 transport')
    node.add_argument('--configs', default=DEFAULT_NODE_CONFIGS,
                      help='CAMERASxHZ list, HZ "max" = as fast as possible '
                           '(default %(default)s)')
    node.add_argument('--duration', type=float, default=10.0, help='seconds per configuration')
    node.add_argument('--resolution', default='640x480', help='camera images')
    node.add_argument('--encoding', default='rgb8', choices=ENCODINGS,
                      help='camera image encoding (default %(default)s)')
    node.add_argument('--backend', default='auto', choices=BACKENDS)
    node.add_argument('--max-frames-in-flight', type=int,
                      default=SchedulerConfig.max_frames_in_flight,
                      help="the node parameter (default: the node's, %(default)s)")
    node.add_argument('--queue-size', type=int, default=SchedulerConfig.queue_size,
                      help="the node parameter (default: the node's, %(default)s)")
    node.add_argument('--warmup-frames', type=int, default=10,
                      help='per camera, before measuring (default %(default)s)')
    node.add_argument('--warmup-rate', type=float, default=20.0)
    node.add_argument('--publisher-processes', type=int,
                      default=max(1, min(4, (os.cpu_count() or 2) // 4)),
                      help='camera processes the cameras are dealt over (default %(default)s)')
    node.add_argument('--start-timeout', type=float, default=120.0)
    node.add_argument('--drain-timeout', type=float, default=20.0)
    node.add_argument('--drain-idle', type=float, default=3.0,
                      help='stop draining after this long without a new Keypoints (s)')
    node.add_argument('--domain-id', type=int, help='ROS_DOMAIN_ID (default: kept, else '
                      'from the process id)')
    node.add_argument('--log-dir', help='node and publisher logs (default: a temporary folder)')
    dds.add_profile_argument(node)
    node.add_argument('--png', help='write the latency histogram here')
    pub = modes.add_parser('publisher', parents=[common],
                           help='camera process of the node mode (driven over stdin)')
    pub.add_argument('--cameras', required=True, help='comma-separated camera names')
    pub.add_argument('--resolution', default='640x480')
    pub.add_argument('--encoding', default='rgb8', choices=ENCODINGS)
    pub.add_argument('--depth', type=int, default=RELIABLE_DEPTH)
    pub.add_argument('--wait-subscribers', type=float, default=60.0)
    pub.add_argument('--domain-id', type=int)
    dds.add_profile_argument(pub)
    plot = modes.add_parser('plot', help='latency histogram PNG of a node JSON')
    plot.add_argument('json_file')
    plot.add_argument('--png', required=True)
    return parser


@one_line_errors('xfeat_bench')
def main(argv=None):
    """Command-line entry point of ``xfeat_bench``."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, 'verbose', False) else logging.WARNING,
                        format='%(name)s: %(message)s')
    if args.mode in ('pipeline', 'cpu') and not Path(args.images).is_dir():
        raise XFeatError(f'no images at {args.images} (the default is ../shared/data/'
                         'tum_fr2_desk beside the repository): give --images DIR')
    if args.mode in ('pipeline', 'cpu'):
        args.weights = args.weights or default_weights()
        return run_pipeline(args)
    if args.mode == 'node':
        return run_node(args)
    if args.mode == 'publisher':
        return run_publisher(args)
    plot_latencies(json.loads(Path(args.json_file).read_text()), args.png)
    return 0


if __name__ == '__main__':
    sys.exit(main())
