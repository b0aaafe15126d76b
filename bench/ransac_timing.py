# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Cost and agreement of the track epipolar check: OpenCV on the host vs the device RANSAC.

On the GPU machine (device check, OpenCV, agreement, track numbers)::

    python3 bench/ransac_timing.py --shared .devshared --matches matches.npz --out ransac.json

On a machine without a GPU ``--cpu`` measures the host side only (OpenCV, the
NumPy reference of the device algorithm); ``--save-matches FILE`` writes the
matches it used (so both machines time the same inputs).

Inputs: the CPU pipeline's features (ONNX Runtime, top_k 4096) and mutual-NN
matches (min_cossim 0.82) of consecutive frames of TUM fr2/desk (20 frames)
and EuRoC V1_01 cam0 (20 frames), plus a synthetic pair at the bound: 4096
matches of a 3-D scene with 15% outliers. Per pair:

* ``opencv_ms``: ``cv2.findFundamentalMat(FM_RANSAC, 3 px, 0.999)``, the CPU
  path's check, median of ``--reps`` calls;
* ``device_ms``: GPU time (CUDA events) of the three launches with the match
  count on the device and a bound of 4096 (as the engine would enqueue them),
  back to back, median of ``--reps``; ``graph_ms`` the same replayed as one
  CUDA graph; ``stages_ms`` per kernel (events between launches);
  ``enqueue_host_ms`` the host's time to launch the three; ``fit_wall_ms``
  host wall time of ``EpipolarRansac.fit`` (upload, launches, sync, download);
* agreement of the inlier decisions: device vs OpenCV, device vs the NumPy
  reference, OpenCV vs itself on the matches in another order (how far two
  OpenCV fits disagree), and inlier counts;
* ``--save-fits FILE``: the device's mask, model and hypotheses (every
  7-point model) of every pair, so that two versions of the kernels can be
  compared bit for bit.

``cpu_path`` (``--tracks-before``): the CPU path's ``next_tracks`` of this
tree against an older ``tracks.py``, interleaved, outputs checked equal.

``tracks``: the numbers test_node_tracks checks, with each check deciding which
matches continue a track (EuRoC: the 500 strongest first-frame tracks alive
after 20 frames, tracks of length 20; TUM 8 frames: largest id jump, share of
continued tracks a separate OpenCV fit keeps).
"""

import argparse
import json
from pathlib import Path
import platform
import statistics
import sys
import time
from types import SimpleNamespace

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SEQUENCES = (('tum', 'tum_fr2_desk', 20), ('euroc', 'euroc_v101_stereo', 20))
BOUND = 4096
THRESHOLD_PX = 3.0


def extract(shared):
    """Keypoints, scores and matches of every sequence with the CPU pipeline."""
    from xfeat_ros.backbone import OnnxRuntimeBackbone
    from xfeat_ros.image_files import list_sequence, read_grey
    from xfeat_ros.network_onnx import build_model
    from xfeat_ros.pipeline import CpuPipeline
    from xfeat_ros.weights import load_weights
    pipeline = CpuPipeline(OnnxRuntimeBackbone(build_model(load_weights(
        Path(shared) / 'models' / 'xfeat_backbone.npz'))), BOUND, 0.05)
    out = {}
    for name, folder, count in SEQUENCES:
        previous = None
        for i, (_, path) in enumerate(list_sequence(Path(shared) / 'data' / folder)[:count]):
            features = pipeline.extract(read_grey(path))
            out[f'{name}_keypoints_{i}'] = features.keypoints
            if previous is not None:
                m = pipeline.match(previous, features)
                out[f'{name}_matches_{i}'] = np.stack([m.idx0, m.idx1], axis=1)
            previous = features
    return out


def sequence(data, name):
    """``(keypoints per frame, [idx0, idx1] per consecutive pair)`` of one sequence."""
    frames = []
    while f'{name}_keypoints_{len(frames)}' in data:
        frames.append(np.asarray(data[f'{name}_keypoints_{len(frames)}'], np.float32))
    matches = [np.asarray(data[f'{name}_matches_{i}'], np.int64) for i in range(1, len(frames))]
    return frames, matches


def synthetic_pair(count=BOUND, outlier_share=0.15, seed=11):
    """Return a 3-D scene seen twice (3 deg yaw, 20 cm move), ``outlier_share`` moved."""
    rng = np.random.default_rng(seed)
    points = rng.uniform([0, 0, 2], [640, 480, 6], (count, 3))
    rays = np.c_[(points[:, 0] - 320) / 500, (points[:, 1] - 240) / 500, np.ones(count)]
    angle = np.radians(3.0)
    rotation = np.array([[np.cos(angle), 0, np.sin(angle)], [0, 1, 0],
                         [-np.sin(angle), 0, np.cos(angle)]])
    k = np.array([[500.0, 0, 320], [0, 500.0, 240], [0, 0, 1]])
    image1 = (rays * points[:, 2:3] @ rotation.T + [0.2, 0.05, 0.0]) @ k.T
    p0 = points[:, :2].astype(np.float32)
    p1 = (image1[:, :2] / image1[:, 2:]).astype(np.float32)
    p1 += rng.normal(0, 0.5, p1.shape).astype(np.float32)
    bad = rng.choice(count, int(outlier_share * count), replace=False)
    p1[bad] += rng.uniform(20, 150, (len(bad), 2)).astype(np.float32)
    return p0, p1


def opencv_mask(p0, p1, order=None):
    """Return OpenCV's FM_RANSAC inlier mask (optionally of the matches taken in ``order``)."""
    import cv2
    if order is None:
        order = np.arange(len(p0))
    _, mask = cv2.findFundamentalMat(p0[order].astype(np.float64),
                                     p1[order].astype(np.float64), cv2.FM_RANSAC,
                                     THRESHOLD_PX, 0.999)
    out = np.zeros(len(p0), bool)
    if mask is not None:
        out[order] = mask.ravel() > 0
    return out


def median_ms(fn, reps):
    """Median wall milliseconds of ``fn()`` over ``reps`` calls."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times)


class DeviceBench:
    """The device check laid out as the engine holds it: bound 4096, device count, indices."""

    def __init__(self):
        """Compile, allocate the bound-sized buffers and a stream."""
        import cupy
        from xfeat_ros.gpu.ransac import alloc_epipolar_output, EpipolarRansac
        self.cp = cupy
        self.check = EpipolarRansac(THRESHOLD_PX)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.kp0 = cupy.zeros((BOUND, 2), cupy.float32)
        self.kp1 = cupy.zeros((BOUND, 2), cupy.float32)
        self.idx0 = cupy.zeros(BOUND, cupy.int32)
        self.idx1 = cupy.zeros(BOUND, cupy.int32)
        self.count = cupy.zeros(1, cupy.int32)
        self.out = alloc_epipolar_output(BOUND)

    def load(self, kp0, kp1, idx0, idx1):
        """Upload one frame pair's keypoints and matches (rows past them stay as they are)."""
        cp = self.cp
        with self.stream:
            self.kp0[:len(kp0)] = cp.asarray(kp0)
            self.kp1[:len(kp1)] = cp.asarray(kp1)
            self.idx0[:len(idx0)] = cp.asarray(idx0.astype(np.int32))
            self.idx1[:len(idx1)] = cp.asarray(idx1.astype(np.int32))
            self.count[:] = len(idx0)
        self.stream.synchronize()

    def stages(self):
        """Return the check's launches on the loaded pair."""
        from xfeat_ros.gpu.ops import DeviceCount
        return self.check.stages(self.kp0, self.kp1, DeviceCount(self.count, BOUND), self.out,
                                 self.stream, self.idx0, self.idx1)

    def time(self, reps):
        """GPU milliseconds: launches back to back, as a graph, and per stage (medians)."""
        cp, stream = self.cp, self.stream
        stages = self.stages()
        events = [cp.cuda.Event() for _ in range(len(stages) + 1)]
        direct, host, per_stage = [], [], {name: [] for name, _ in stages}
        for _ in range(reps):
            events[0].record(stream)
            t0 = time.perf_counter()
            for k, (_, launch) in enumerate(stages):
                launch()
                events[k + 1].record(stream)
            host.append(time.perf_counter() - t0)
            events[-1].synchronize()
            direct.append(cp.cuda.get_elapsed_time(events[0], events[-1]))
            for k, (name, _) in enumerate(stages):
                per_stage[name].append(cp.cuda.get_elapsed_time(events[k], events[k + 1]))
        stream.begin_capture()
        for _, launch in stages:
            launch()
        graph = stream.end_capture()
        graphed = []
        for _ in range(reps):
            events[0].record(stream)
            graph.launch(stream)
            events[1].record(stream)
            events[1].synchronize()
            graphed.append(cp.cuda.get_elapsed_time(events[0], events[1]))
        mask = self.out.mask.get()[:int(self.count.get()[0])].astype(bool)
        self.fundamental = self.out.fundamental.get()
        self.models = self.check.models.get()
        self.scores = self.check.scores.get()
        return {'device_ms': statistics.median(direct), 'graph_ms': statistics.median(graphed),
                'enqueue_host_ms': 1000.0 * statistics.median(host),
                'graph_p90_ms': float(np.percentile(graphed, 90)),
                'stages_ms': {k: statistics.median(v) for k, v in per_stage.items()}}, mask


def pair_report(p0, p1, reps, device, reference, loaded=None):
    """Time one pair of matched points and compare the decisions."""
    from xfeat_ros.ransac import ransac_fundamental
    count = len(p0)
    cv_mask = opencv_mask(p0, p1)
    shuffled = opencv_mask(p0, p1, np.random.default_rng(0).permutation(count))
    row = {'matches': count, 'opencv_inliers': int(cv_mask.sum()),
           'opencv_ms': median_ms(lambda: opencv_mask(p0, p1), reps),
           'opencv_vs_opencv_shuffled': float((cv_mask == shuffled).mean())}
    ref = ransac_fundamental(p0, p1, THRESHOLD_PX) if reference else None
    if ref is not None:
        row.update(reference_inliers=ref.count,
                   reference_vs_opencv=float((ref.mask == cv_mask).mean()))
    if device is not None:
        if loaded is None:
            device.load(p0, p1, np.arange(count), np.arange(count))
        else:
            device.load(*loaded)
        timing, mask = device.time(reps)
        row.update(timing)
        row['fit_wall_ms'] = median_ms(lambda: device.check.fit(p0, p1), reps)
        row.update(device_inliers=int(mask.sum()),
                   device_vs_opencv=float((mask == cv_mask).mean()),
                   device_keeps_of_opencv_inliers=float(mask[cv_mask].mean()))
        if ref is not None:
            row['device_vs_reference'] = float((mask == ref.mask).mean())
        row['device_mask'] = mask
        row['device_fundamental'] = device.fundamental
        row['device_models'] = device.models
        row['device_scores'] = device.scores
    return row


def keep_fits(fits, key, row):
    """Move the device's mask, model, hypotheses and their scores of a pair into ``fits``."""
    for name in ('mask', 'fundamental', 'models', 'scores'):
        value = row.pop(f'device_{name}', None)
        if value is not None:
            fits[f'{key}_{name}'] = value


def track_numbers(frames, matches, verify):
    """Ids over a sequence with ``verify(p0, p1) -> mask`` deciding the continued matches."""
    import cv2
    from xfeat_ros.pipeline import MatchResult
    from xfeat_ros.tracks import next_tracks
    ids, ages, next_id, _ = next_tracks(_Features(frames[0]), 0)
    history = [(ids, ages)]
    for i in range(1, len(frames)):
        m = matches[i - 1]
        previous = SimpleNamespace(features=_Features(frames[i - 1]), track_ids=ids,
                                   track_ages=ages)
        mask = verify(frames[i - 1][m[:, 0]], frames[i][m[:, 1]])
        result = MatchResult(m[:, 0], m[:, 1], np.ones(len(m), np.float32))
        ids, ages, next_id, _ = next_tracks(_Features(frames[i]), next_id, previous, result,
                                            mask)
        history.append((ids, ages))
    survive = np.isin(history[0][0], history[-1][0])
    jumps, agreement = [], []
    for i in range(len(frames) - 1):
        common, a, b = np.intersect1d(history[i][0], history[i + 1][0], return_indices=True)
        p0, p1 = frames[i][a].astype(np.float64), frames[i + 1][b].astype(np.float64)
        jumps.append(float(np.linalg.norm(p1 - p0, axis=1).max()) if len(common) else 0.0)
        if len(common) >= 15:
            _, mask = cv2.findFundamentalMat(p0, p1, cv2.FM_RANSAC, 3.0, 0.999)
            agreement.append(float(mask.mean()))
    return {'strongest_500_survive': float(survive[:500].mean()),
            'tracks_of_full_length': int(np.sum(history[-1][1] == len(frames))),
            'max_jump_px': max(jumps), 'opencv_agreement_min': min(agreement),
            'opencv_agreement_mean': float(np.mean(agreement))}


class _Features:
    """Keypoints with a length (what next_tracks reads of a Features)."""

    def __init__(self, keypoints):
        self.keypoints = keypoints

    def __len__(self):
        return len(self.keypoints)


def cpu_path(data, before_file, reps):
    """
    ``next_tracks`` (the CPU path: OpenCV check + propagation) of this tree vs ``before_file``.

    Interleaved calls on every real pair, the order alternating; the outputs
    must be equal. Returns median and mean milliseconds of each.
    """
    import importlib.util
    from xfeat_ros import tracks
    from xfeat_ros.pipeline import MatchResult
    spec = importlib.util.spec_from_file_location('tracks_before', before_file)
    before = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(before)
    times = {'before': [], 'now': []}
    for name, _, _ in SEQUENCES:
        frames, matches = sequence(data, name)
        for i, m in enumerate(matches):
            previous = SimpleNamespace(features=_Features(frames[i]),
                                       track_ids=np.arange(len(frames[i]), dtype=np.uint64),
                                       track_ages=np.ones(len(frames[i]), np.uint32))
            args = (_Features(frames[i + 1]), 10 ** 6, previous,
                    MatchResult(m[:, 0], m[:, 1], np.ones(len(m), np.float32)))
            for rep in range(reps):
                order = (('now', tracks), ('before', before))
                for label, module in (order if rep % 2 else order[::-1]):
                    t0 = time.perf_counter()
                    module.next_tracks(*args)
                    times[label].append(time.perf_counter() - t0)
            same = zip(tracks.next_tracks(*args), before.next_tracks(*args))
            if not all(np.array_equal(a, b) for a, b in same):
                raise SystemExit(f'next_tracks differs from {before_file} on {name} {i + 1}')
    return {label: {'median_ms': 1000.0 * statistics.median(v),
                    'mean_ms': 1000.0 * statistics.mean(v), 'calls': len(v)}
            for label, v in times.items()}


def summary(rows, key):
    """Median, min, max and 90th percentile of ``key`` over the rows that have it."""
    values = [r[key] for r in rows if key in r]
    if not values:
        return None
    return {'median': float(np.median(values)), 'min': float(np.min(values)),
            'max': float(np.max(values)), 'p90': float(np.percentile(values, 90))}


def versions():
    """Versions and machine of this run."""
    import cv2
    out = {'python': platform.python_version(), 'numpy': np.__version__,
           'opencv': cv2.__version__, 'machine': platform.machine(),
           'processor': platform.processor(), 'cpu_count': __import__('os').cpu_count()}
    try:
        import cupy
        props = cupy.cuda.runtime.getDeviceProperties(0)
        out.update(cupy=cupy.__version__, gpu=props['name'].decode(),
                   driver=cupy.cuda.runtime.driverGetVersion(),
                   runtime=cupy.cuda.runtime.runtimeGetVersion())
    except ImportError:
        out['cupy'] = None
    return out


def main(argv=None):
    """Measure; print one line a pair; write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--shared', default=str(REPO.parent / 'shared'),
                        help='folder with models/ and data/ (default ../shared)')
    parser.add_argument('--matches', help='npz of saved keypoints and matches (skips extraction)')
    parser.add_argument('--save-matches', help='write the keypoints and matches used here')
    parser.add_argument('--cpu', action='store_true', help='host side only (no CuPy needed)')
    parser.add_argument('--reps', type=int, default=20, help='repetitions per timing')
    parser.add_argument('--no-reference', action='store_true',
                        help='skip the NumPy reference (0.4 s a pair)')
    parser.add_argument('--tracks-before', help='an older xfeat_ros/tracks.py: time the CPU '
                        "path's next_tracks against it (e.g. from git show BASE:xfeat_ros/...)")
    parser.add_argument('--save-fits', help="npz of the device's masks, models and hypotheses "
                        'per pair (to compare two versions of the kernels bit for bit)')
    parser.add_argument('--out', help='JSON results file')
    args = parser.parse_args(argv)
    try:
        data = dict(np.load(args.matches)) if args.matches else extract(args.shared)
    except (OSError, ValueError, KeyError) as exc:
        parser.exit(2, f'ransac_timing: cannot read the inputs: {exc}\n')
    if args.save_matches:
        np.savez_compressed(args.save_matches, **data)
    device = None
    if not args.cpu:
        from xfeat_ros.gpu import unavailable_reason
        reason = unavailable_reason()
        if reason:
            parser.exit(2, f'ransac_timing: no device ({reason}); use --cpu\n')
        device = DeviceBench()
    reference = not args.no_reference
    fits = {}
    result = {'command': ' '.join([sys.executable] + sys.argv), 'versions': versions(),
              'bound': BOUND, 'threshold_px': THRESHOLD_PX, 'pairs': {}, 'tracks': {}}
    for name, _, _ in SEQUENCES:
        frames, matches = sequence(data, name)
        rows = []
        for i, m in enumerate(matches):
            p0, p1 = frames[i][m[:, 0]], frames[i + 1][m[:, 1]]
            row = pair_report(p0, p1, args.reps, device, reference,
                              (frames[i], frames[i + 1], m[:, 0], m[:, 1]))
            keep_fits(fits, f'{name}_{i + 1}', row)
            rows.append(row)
            print(name, i + 1, {k: (round(v, 4) if isinstance(v, float) else v)
                                for k, v in row.items() if k != 'stages_ms'}, flush=True)
        result['pairs'][name] = rows
        result[f'{name}_summary'] = {key: summary(rows, key) for key in (
            'matches', 'opencv_ms', 'device_ms', 'graph_ms', 'enqueue_host_ms', 'fit_wall_ms',
            'device_vs_opencv', 'opencv_vs_opencv_shuffled', 'reference_vs_opencv',
            'device_vs_reference', 'device_keeps_of_opencv_inliers')}
        checks = {'opencv': lambda a, b: opencv_mask(a, b)}
        if device is not None:
            checks['device'] = lambda a, b: device.check.fit(a, b).mask
        elif reference:
            from xfeat_ros.ransac import ransac_fundamental
            checks['reference'] = lambda a, b: ransac_fundamental(a, b).mask
        count = 20 if name == 'euroc' else 8
        result['tracks'][name] = {label: track_numbers(frames[:count], matches[:count - 1], fn)
                                  for label, fn in checks.items()}
        print(name, 'tracks', result['tracks'][name], flush=True)
    if args.tracks_before:
        result['cpu_path'] = cpu_path(data, args.tracks_before, args.reps)
        print('cpu path next_tracks', result['cpu_path'], flush=True)
    p0, p1 = synthetic_pair()
    row = pair_report(p0, p1, args.reps, device, reference)
    keep_fits(fits, 'synthetic_4096', row)
    result['synthetic_4096'] = row
    print('synthetic 4096', row, flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    if args.save_fits:
        np.savez_compressed(args.save_fits, **fits)
    return 0


if __name__ == '__main__':
    sys.exit(main())
