# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_tracks``: keypoint spread and track length vs KLT.

Runs image sequences (a TUM RGB-D folder with ``rgb/``, a EuRoC folder with
``cam0/`` or ``mav0/cam0/data/``, or a plain folder of images in name order)
frame by frame through

* the XFeat engine exactly as the node runs one camera: each image is
  checked by :class:`~xfeat_ros.runtime.stream.CameraStream`, goes through
  the :class:`~xfeat_ros.runtime.scheduler.Scheduler` (features, matches to
  the previous frame) and :class:`~xfeat_ros.runtime.frontend.FrontEnd`
  (epipolar-verified matches continue the tracks,
  :mod:`xfeat_ros.features.tracks`), one frame a group; once per ``--top-k``,
  ``--min-distance`` and ``--carry-frames`` (lost tracks carried through the
  dense descriptor map, :mod:`xfeat_ros.features.carry`);
* a KLT tracker with VINS-Fusion's settings
  (:mod:`xfeat_ros.tools.evaluation.klt`) on the same frames (``--no-klt``
  leaves it out);

and reports per run the metrics of :mod:`xfeat_ros.tools.evaluation.track_metrics`:
keypoints per frame, coverage of an 8 x 6 grid, the closest pair and the 1st
percentile of nearest-keypoint distances, track length (median and 90th
percentile over tracks), the median keypoint age of a frame, and the cost of
a frame (XFeat: from the image to its tracks; KLT: one ``track`` call).
Where the sequence has ground-truth poses and a known camera (TUM), how well
the tracks follow their points: the epipolar distance under the true relative
pose of every continuation from one frame to the next (carried keypoints
apart) and of the two ends of every track that lived 5 frames or more
(:func:`ground_truth_errors`).
A markdown table goes to stdout, every number (per frame too) to ``--out``.
"""

import argparse
from dataclasses import fields
import json
import logging
import os
from pathlib import Path
import platform
import sys
import time
from types import SimpleNamespace

import numpy as np

from xfeat_ros.cli import one_line_errors
from xfeat_ros.defaults import MIN_COSSIM, THRESHOLD
from xfeat_ros.errors import CameraModelError, DatasetError, ParameterError
from xfeat_ros.logs import package_logger
from xfeat_ros.tools.evaluation.klt import KltSettings, KltTracker
from xfeat_ros.tools.evaluation.track_metrics import (continuation_pairs, frame_stats, GRID,
                                                      stat, summarize, track_ends)
from xfeat_ros.tools.image_files import list_sequence, read_image
from xfeat_ros.tools.plumbing import git_commit, versions

PROG = 'xfeat_tracks'
LOG = package_logger('xfeat_tracks')
FRAME_PERIOD_NS = 50_000_000  # stamps of a folder without them: 20 Hz


def sequence_camera(folder):
    """
    Return the camera model of a sequence folder, or None where none is known.

    TUM fr1-fr3 by the folder's name (or its parent's, for ``.../rgb``); EuRoC
    from ``cam0_sensor.yaml`` beside ``cam0/`` or ``mav0/cam0/sensor.yaml``.
    """
    from xfeat_ros.features.camera import CameraModel
    from xfeat_ros.tools.evaluation.datasets import tum_camera
    folder = Path(folder)
    base = folder.parent if folder.name in ('rgb', 'cam0', 'data') else folder
    for candidate in (base / 'cam0_sensor.yaml', base / 'sensor.yaml',
                      base / 'mav0' / 'cam0' / 'sensor.yaml'):
        if candidate.is_file():
            return CameraModel.from_yaml(candidate)
    return tum_camera(base)


def load_sequence(folder, count=0):
    """
    Return ``[(stamp_ns, pixels, encoding)]`` of the first ``count`` frames (0: all).

    Folders without stamps get one every :data:`FRAME_PERIOD_NS`. Raises
    :class:`DatasetError` for a folder without images.
    """
    from xfeat_ros.errors import ImageError
    try:
        listed = list_sequence(folder)
    except ImageError as exc:
        raise DatasetError(str(exc)) from exc
    if count:
        listed = listed[:count]
    if len(listed) < 2:
        raise DatasetError(f'{folder}: {len(listed)} image(s); tracks need 2 or more')
    frames = []
    for k, (stamp, path) in enumerate(listed):
        pixels, encoding = read_image(path)
        frames.append((stamp if stamp else (k + 1) * FRAME_PERIOD_NS, pixels, encoding))
    return frames


def grey_u8(pixels, encoding):
    """Return the grey uint8 [H, W] image a mono camera would give (OpenCV's RGB weights)."""
    import cv2
    if encoding == 'rgb8':
        return cv2.cvtColor(pixels, cv2.COLOR_RGB2GRAY)
    if encoding == 'mono16':
        return (pixels[:, :, 0] // 257).astype(np.uint8)
    return np.ascontiguousarray(pixels[:, :, 0])


def image_message(stamp_ns, pixels, encoding):
    """Return a ``sensor_msgs/Image``-like object (no ROS) of pixels at ``stamp_ns``."""
    from xfeat_ros.features.image_codec import raw_image
    msg = raw_image(pixels, encoding)
    msg.header = SimpleNamespace(
        stamp=SimpleNamespace(sec=int(stamp_ns // 10 ** 9), nanosec=int(stamp_ns % 10 ** 9)),
        frame_id='camera')
    return msg


class RecordingSink:
    """The front-end's :class:`~xfeat_ros.runtime.frontend.Sink`: keeps each frame's tracks."""

    def __init__(self):
        """Start with no frames."""
        self.frames = []  # (keypoints float [N, 2], ids, ages, carried bool [N] or None)

    def topic_name(self, camera, name):
        """Return the name of an output, for log lines."""
        return f'{camera}/{name}'

    def publish_keypoints(self, out):
        """Record a finished frame's keypoints, track ids and ages."""
        frame = out.frame
        carried = None if frame.track_carried is None else np.asarray(frame.track_carried) > 0
        self.frames.append((np.array(frame.features.keypoints, np.float64).reshape(-1, 2),
                            np.array(frame.track_ids), np.array(frame.track_ages), carried))

    def publish_matches(self, out):
        """Nothing: the tracks say what the matches did."""

    def publish_cloud(self, out):
        """Never called (no keypoint cloud)."""

    def publish_feature(self, camera, header, columns, camera_ids):
        """Never called (no VINS features)."""

    def publish_stereo(self, left_camera, left, right, result):
        """Never called (no stereo pairs)."""

    def wants_debug(self, camera):
        """Tell that no debug picture is wanted."""
        return False

    def publish_debug(self, out, canvas):
        """Never called (see :meth:`wants_debug`)."""


def engine_config(weights, top_k, min_distance, threshold=THRESHOLD, min_cossim=MIN_COSSIM,
                  threads=0, carry_frames=0):
    """
    Return the CPU :class:`~xfeat_ros.features.engine.EngineConfig` of one XFeat run.

    ``min_distance`` and ``carry_frames`` go to the config's fields of those
    names; a build whose EngineConfig lacks one supports 0 only for it
    (:class:`ParameterError` otherwise), so older builds can be measured too.
    """
    from xfeat_ros.features.engine import CPU_BACKEND, EngineConfig
    settings = {'backend': CPU_BACKEND, 'weights': weights, 'num_threads': threads,
                'top_k': top_k, 'threshold': threshold, 'min_cossim': min_cossim}
    known = {f.name for f in fields(EngineConfig)}
    for name, value, flag in (('min_distance', float(min_distance), '--min-distance'),
                              ('carry_frames', int(carry_frames), '--carry-frames')):
        if name in known:
            settings[name] = value
        elif value:
            raise ParameterError(f'{flag} {value}: this build of xfeat_ros has no {name} '
                                 'setting (only 0)')
    return EngineConfig(**settings)


def run_xfeat(frames, config, grid=GRID):
    """
    Run ``frames`` through the node's one-camera path with the CPU engine of ``config``.

    Returns ``(per-frame records, per-frame track ids, trace)`` (``trace``:
    per frame keypoints, ids and the carried mask or None, for
    :func:`ground_truth_errors`); a frame's cost is from its acceptance to
    its tracks (engine, matching, verification, tracks).
    """
    from xfeat_ros.features.factory import cpu_engine
    from xfeat_ros.runtime.frontend import FrontEnd, OutputConfig
    from xfeat_ros.runtime.report import Reporter
    from xfeat_ros.runtime.scheduler import Scheduler, SchedulerConfig
    from xfeat_ros.runtime.stream import CameraStream
    engine = cpu_engine(config)
    streams = {'camera': CameraStream('camera')}
    report = Reporter(LOG)
    scheduler = Scheduler(engine, streams, SchedulerConfig(max_frames_in_flight=1), config,
                          report)
    sink = RecordingSink()
    frontend = FrontEnd(streams, OutputConfig(descriptor_encoding='none'), sink, report)
    records, frames_ids, trace = [], [], []
    for stamp, pixels, encoding in frames:
        msg = image_message(stamp, pixels, encoding)
        start = time.perf_counter()
        item = streams['camera'].accept(msg, time.monotonic())
        for done in scheduler.process([item]):
            frontend.finish(done)
        cost_ms = (time.perf_counter() - start) * 1000.0
        if len(sink.frames) != len(records) + 1:
            raise DatasetError(f'frame {len(records)}: the engine gave no output '
                               f'({dict(streams["camera"].counts())})')
        points, ids, ages, carried = sink.frames[-1]
        records.append(frame_stats(points, ages, pixels.shape[1], pixels.shape[0], cost_ms,
                                   grid))
        frames_ids.append(ids)
        trace.append((points, ids, carried))
    return records, frames_ids, trace


def run_klt(frames, settings=KltSettings(), camera=None, grid=GRID):
    """Run ``frames`` through :class:`KltTracker`; returns records, track ids and trace."""
    tracker = KltTracker(settings, camera)
    records, frames_ids, trace = [], [], []
    for _, pixels, encoding in frames:
        grey = grey_u8(pixels, encoding)
        start = time.perf_counter()
        points, ids, ages = tracker.track(grey)
        cost_ms = (time.perf_counter() - start) * 1000.0
        records.append(frame_stats(points, ages, grey.shape[1], grey.shape[0], cost_ms, grid))
        frames_ids.append(ids)
        trace.append((np.asarray(points, np.float64).reshape(-1, 2), ids, None))
    return records, frames_ids, trace


def sequence_truth(folder, stamps):
    """
    Return ``(camera, poses)`` of a sequence with ground truth, else None.

    ``poses``: per frame stamp the true camera pose (R_wc, t_wc) or None.
    TUM folders only (``groundtruth.txt`` and a camera known by name).
    """
    from xfeat_ros.tools.evaluation.datasets import associate, read_tum_trajectory, tum_camera
    folder = Path(folder)
    base = folder.parent if folder.name == 'rgb' else folder
    camera = tum_camera(base)
    if camera is None or not (base / 'groundtruth.txt').is_file():
        return None
    truth = read_tum_trajectory(base / 'groundtruth.txt')
    poses = []
    for stamp in stamps:
        matrix = associate(stamp, truth)
        poses.append(None if matrix is None else (matrix[:3, :3], matrix[:3, 3]))
    return camera, poses


def _spread_of(values):
    return {'pairs': int(np.isfinite(np.asarray(values, np.float64)).sum()),
            'median_px': stat(values, np.median), 'p90_px': stat(values, np.percentile, 90)}


def ground_truth_errors(trace, camera, poses, min_frames=5):
    """
    Return how far a run's tracks stray from the epipolar geometry of the true poses.

    ``trace`` per frame ``(keypoints [N, 2], ids, carried bool [N] or None)``;
    ``camera``/``poses`` of :func:`sequence_truth`. Pixels of one track in
    consecutive frames: ``detected`` (the current keypoint detected) and
    ``carried`` (carried through the dense map); ``track_ends``: the first
    and last keypoint of each track seen in ``min_frames`` frames or more.
    Each with its pair count, median and 90th percentile in pixels.
    """
    from xfeat_ros.features.geometry import epipolar_errors, relative_pose
    detected, carried_errors, ends = [], [], []
    for index in range(1, len(trace)):
        pose0, pose1 = poses[index - 1], poses[index]
        if pose0 is None or pose1 is None:
            continue
        points0, ids0, _ = trace[index - 1]
        points1, ids1, carried = trace[index]
        index0, index1 = continuation_pairs(ids0, ids1)
        if not len(index0):
            continue
        rotation, translation = relative_pose(pose0, pose1)
        errors = epipolar_errors(camera, camera, rotation, translation, points0[index0],
                                 points1[index1])
        mask = np.zeros(len(index1), bool) if carried is None else carried[index1]
        detected.extend(errors[~mask].tolist())
        carried_errors.extend(errors[mask].tolist())
    where = [{int(t): k for k, t in enumerate(np.asarray(ids).reshape(-1).tolist())}
             for _, ids, _ in trace]
    for track, first, last in track_ends([ids for _, ids, _ in trace], min_frames):
        if poses[first] is None or poses[last] is None:
            continue
        rotation, translation = relative_pose(poses[first], poses[last])
        ends.extend(epipolar_errors(
            camera, camera, rotation, translation,
            trace[first][0][where[first][int(track)]][None],
            trace[last][0][where[last][int(track)]][None]).tolist())
    return {'detected': _spread_of(detected), 'carried': _spread_of(carried_errors),
            'track_ends': _spread_of(ends), 'track_ends_min_frames': int(min_frames)}


def rounded(value, digits=4):
    """Return ``value`` (nested dicts and lists) with its floats rounded to ``digits``."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value


def _cell(value, digits=1):
    return '-' if value is None else f'{value:.{digits}f}'


def markdown_table(runs):
    """Return the markdown table of the runs' summaries (one row a run)."""
    lines = ['| sequence | front-end | top_k | min_distance | keypoints | grid coverage | '
             'closest pair px | 1st pct nearest px | track length median | p90 | '
             'median age | frame-0 alive at end | ms/frame |',
             '|---|---|---|---|---|---|---|---|---|---|---|---|---|']
    with_carry = any(run.get('carry_frames') for run in runs)
    if with_carry:
        lines = [lines[0].replace('| min_distance |', '| min_distance | carry_frames |'),
                 lines[1] + '---|']
    for run in runs:
        s = run['summary']
        lines.append(
            f"| {run['sequence']} ({s['frames']} frames) | {run['front_end']} | "
            f"{run.get('top_k', '-')} | {run.get('min_distance', '-')} | "
            + (f"{run.get('carry_frames', '-')} | " if with_carry else '') +
            f"{_cell(s['keypoints_median'], 0)} | {_cell(s['grid_coverage_median'], 2)} | "
            f"{_cell(s['min_distance_px'])} | {_cell(s['p1_distance_px_median'])} | "
            f"{_cell(s['track_length_median'], 0)} | {_cell(s['track_length_p90'], 0)} | "
            f"{_cell(s['median_age'], 1)} | {_cell(s['first_frame_survival'], 2)} | "
            f"{_cell(s['cost_ms_median'])} |")
    return '\n'.join(lines) + '\n'


def ground_truth_table(runs):
    """Return the markdown table of the runs' ground-truth errors ('' where none has any)."""
    rows = [run for run in runs if run.get('ground_truth')]
    if not rows:
        return ''
    lines = ['| sequence | front-end | top_k | min_distance | carry_frames | '
             'frame to frame, detected: pairs, median / p90 px | carried: pairs, median / p90 px '
             '| track ends (5+ frames): tracks, median / p90 px |',
             '|---|---|---|---|---|---|---|---|']

    def cell(part):
        return (f"{part['pairs']}, {_cell(part['median_px'], 2)} / {_cell(part['p90_px'], 2)}"
                if part['pairs'] else '0')
    for run in rows:
        truth = run['ground_truth']
        lines.append(f"| {run['sequence']} | {run['front_end']} | {run.get('top_k', '-')} | "
                     f"{run.get('min_distance', '-')} | {run.get('carry_frames', '-')} | "
                     f"{cell(truth['detected'])} | {cell(truth['carried'])} | "
                     f"{cell(truth['track_ends'])} |")
    return '\n'.join(lines) + '\n'


def build_parser():
    """Return the command line."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split('\n\n')[0].split(
        ': ', 1)[1].strip(), formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('sequences', nargs='+', type=Path,
                        help='sequence folders (TUM rgb/, EuRoC cam0/, or plain images)')
    parser.add_argument('--frames', type=int, default=0, help='first frames of each (0: all)')
    parser.add_argument('--top-k', type=int, nargs='+', default=[150, 300])
    parser.add_argument('--min-distance', type=float, nargs='+', default=[0.0],
                        help='XFeat min_distance values (px; 0: off)')
    parser.add_argument('--carry-frames', type=int, nargs='+', default=[0],
                        help='XFeat carry_frames values (lost tracks looked for in the dense '
                             'descriptor map, up to this many frames in a row; 0: off)')
    parser.add_argument('--threshold', type=float, default=THRESHOLD)
    parser.add_argument('--min-cossim', type=float, default=MIN_COSSIM)
    parser.add_argument('--weights', default='', help='weights .pt/.npz (default: lookup)')
    parser.add_argument('--threads', type=int, default=0, help='ONNX Runtime threads (0: auto)')
    parser.add_argument('--grid', type=int, nargs=2, default=list(GRID), metavar=('COLS', 'ROWS'))
    parser.add_argument('--no-klt', action='store_true', help='leave the KLT tracker out')
    parser.add_argument('--no-xfeat', action='store_true', help='leave XFeat out')
    parser.add_argument('--no-klt-f-check', action='store_true',
                        help="KLT without the fundamental-matrix rejection (VINS-Fusion's "
                             'own default: the call is commented out there)')
    parser.add_argument('--camera', type=Path,
                        help="camera YAML for KLT's F check (default: from the folder)")
    parser.add_argument('--out', type=Path, help='JSON file with every number')
    return parser


def check_args(args):
    """Raise :class:`ParameterError` for settings that cannot run."""
    if args.frames < 0 or args.frames == 1:
        raise ParameterError(f'--frames must be 0 (all) or 2 or more, got {args.frames}')
    if any(k < 1 for k in args.top_k):
        raise ParameterError(f'--top-k must be positive, got {args.top_k}')
    if any(not d >= 0 for d in args.min_distance):
        raise ParameterError(f'--min-distance must be >= 0, got {args.min_distance}')
    if any(c < 0 for c in args.carry_frames):
        raise ParameterError(f'--carry-frames must be >= 0, got {args.carry_frames}')
    if min(args.grid) < 1:
        raise ParameterError(f'--grid needs at least one cell each way, got {args.grid}')
    if args.no_klt and args.no_xfeat:
        raise ParameterError('--no-klt and --no-xfeat leave nothing to run')
    for folder in args.sequences:
        if not folder.is_dir():
            raise DatasetError(f'{folder} is not a folder')


def run(args, command=PROG):
    """Run every sequence through every front-end; return the results dict."""
    from xfeat_ros.features.camera import CameraModel
    from xfeat_ros.features.weights import load_weights, resolve_weights
    check_args(args)
    grid = tuple(args.grid)
    klt = KltSettings(reject_with_f=not args.no_klt_f_check)
    weights_path = weights = None
    if not args.no_xfeat:
        weights_path = resolve_weights(args.weights)
        weights = load_weights(weights_path)
        for top_k in args.top_k:  # every setting checked before the first long run
            for distance in args.min_distance:
                for carry in args.carry_frames:
                    engine_config(weights, top_k, distance, carry_frames=carry)
    results = {'command': command, 'date': time.strftime('%Y-%m-%d %H:%M:%S %z'),
               'machine': {'platform': platform.platform(), 'processor': platform.processor(),
                           'cores': os.cpu_count(), 'load_average': list(os.getloadavg())},
               'versions': versions(['numpy', 'cv2', 'onnxruntime']),
               'commit': git_commit(), 'weights': None if weights_path is None
               else weights_path.name, 'grid': list(grid), 'threshold': args.threshold,
               'min_cossim': args.min_cossim, 'klt': klt.describe(), 'runs': []}
    for folder in args.sequences:
        frames = load_sequence(folder, args.frames)
        name = folder.name if folder.name not in ('rgb', 'cam0') else folder.parent.name
        LOG.info('%s: %d frames', name, len(frames))
        truth = sequence_truth(folder, [stamp for stamp, _, _ in frames])
        if not args.no_xfeat:
            for top_k, distance, carry in ((k, d, c) for k in args.top_k
                                           for d in args.min_distance
                                           for c in args.carry_frames):
                config = engine_config(weights, top_k, distance, args.threshold,
                                       args.min_cossim, args.threads, carry)
                records, ids, trace = run_xfeat(frames, config, grid)
                results['runs'].append({
                    'sequence': name, 'path': str(folder), 'front_end': 'xfeat cpu',
                    'top_k': top_k, 'min_distance': distance, 'carry_frames': carry,
                    'summary': summarize(records, ids), 'per_frame': records,
                    'ground_truth': None if truth is None
                    else ground_truth_errors(trace, *truth)})
                LOG.info('%s xfeat top_k %d min_distance %g carry_frames %d done', name,
                         top_k, distance, carry)
        if not args.no_klt:
            try:
                camera = (CameraModel.from_yaml(args.camera) if args.camera
                          else sequence_camera(folder))
            except CameraModelError as exc:
                raise DatasetError(f'{folder}: {exc}') from exc
            records, ids, trace = run_klt(frames, klt, camera, grid)
            results['runs'].append({
                'ground_truth': None if truth is None else ground_truth_errors(trace, *truth),
                'sequence': name, 'path': str(folder), 'front_end': 'klt (vins settings)'
                if klt.reject_with_f else 'klt (vins settings, no F check)',
                'top_k': klt.max_cnt, 'min_distance': klt.min_dist,
                'f_check_points': None if not klt.reject_with_f
                else 'undistorted, focal 460' if camera is not None else 'pixels',
                'summary': summarize(records, ids), 'per_frame': records})
    truth_table = ground_truth_table(results['runs'])
    results['markdown'] = markdown_table(results['runs']) + ('\n' + truth_table
                                                             if truth_table else '')
    return results


@one_line_errors('xfeat_tracks')
def main(argv=None):
    """Command-line entry point; returns the exit status."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')
    results = run(args, ' '.join([PROG] + argv))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, 'w') as handle:
            json.dump(rounded({k: v for k, v in results.items() if k != 'markdown'}), handle,
                      indent=1, allow_nan=False)
    sys.stdout.write(results['markdown'])
    return 0


if __name__ == '__main__':
    sys.exit(main())
