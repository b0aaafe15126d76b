# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_map``: a COLMAP reconstruction of a recorded sequence from XFeat features.

``xfeat_map SOURCE --out DIR`` reads SOURCE (an image folder: plain, TUM,
EuRoC, KITTI; a rosbag2 bag with an image topic; or a bag written by
``xfeat_offline``, whose Keypoints and Matches are used as they are, see
:mod:`xfeat_ros.tools.map_sources`), writes a COLMAP database with the known
intrinsics, this package's keypoints and mutual-NN matches of the chosen image
pairs, runs COLMAP's geometric verification and incremental mapping (pycolmap,
fixed intrinsics, fixed seeds) and writes into DIR:

* ``database.db``, ``pairs.txt``, ``sparse/<k>/`` (COLMAP models),
* ``trajectory.txt`` (TUM format, the largest model's camera poses),
* ``summary.json`` (registered and total images, mean reprojection error,
  mean track length, seconds, the cameras written and those read back from
  the reconstruction, and with ground truth ``ape_rmse_m`` and
  ``rpe_rotation_deg`` computed by evo after Sim(3) alignment),
* ``trajectory.png`` (estimate vs ground truth).

Pairs (``sequential``): every frame with the frames up to ``--window``
instants before it and those a power of two instants before it up to
``--max-gap`` (long baselines; without them the short baselines of video leave
COLMAP's scale/rotation ambiguity unresolved, see docs/mapping.md), or every
pair (``exhaustive``; the ``auto`` choice for small sets). With
``--features sift`` COLMAP's own SIFT runs on the same frames, cameras and
pairs instead, for comparison. Needs the ``map`` extra (pycolmap, evo).

The intrinsics are the source's calibration and stay as they are: a
reconstruction whose cameras read back different is an error (exit 1, the
outputs written, the difference in ``summary.json`` and on stderr). A source
without ground truth says so in one line (where it was looked for).
"""

import argparse
from collections import deque
import json
import logging
from pathlib import Path
import platform
import sys
import time

import numpy as np

from xfeat_ros.cli import one_line_errors
from xfeat_ros.defaults import MIN_COSSIM, THRESHOLD, TOP_K
from xfeat_ros.errors import ImageError, XFeatError
from xfeat_ros.features.camera import CameraModel, MODELS
from xfeat_ros.features.match import mutual_nn_match
from xfeat_ros.logs import package_logger
from xfeat_ros.tools import colmap_db, trajectory
from xfeat_ros.tools.evaluation.datasets import read_tum_trajectory
from xfeat_ros.tools.map_sources import is_image_folder, MappingError, open_folder, reject

LOG = package_logger('xfeat_map')
FEATURES = ('xfeat', 'sift')
PAIRINGS = ('auto', 'sequential', 'exhaustive')
BACKENDS = ('onnxruntime', 'auto', 'pytorch', 'tensorrt', 'onnxruntime_cuda')
# Measured on TUM fr2/desk (docs/mapping.md): the window, long gaps and starting-pair
# angle that registered every frame with the lowest APE; every pair up to
# EXHAUSTIVE_MAX_FRAMES frames.
DEFAULT_WINDOW = 4
DEFAULT_MAX_GAP = 128
DEFAULT_INIT_MIN_TRI_ANGLE = 16.0
EXHAUSTIVE_MAX_FRAMES = 20
EXIT_ERROR = 1
EXIT_NO_MODEL = 3


def choose_pairing(pairing, count, window):
    """Return ``(mode, window)``: ``auto`` is exhaustive up to EXHAUSTIVE_MAX_FRAMES frames."""
    if pairing == 'auto':
        pairing = 'exhaustive' if count <= EXHAUSTIVE_MAX_FRAMES else 'sequential'
    return pairing, (None if pairing == 'exhaustive' else int(window))


def is_partner(gap, window, max_gap):
    """
    Whether frames ``gap`` instants apart are paired.

    ``window`` None: every pair (exhaustive). Else the frames up to ``window``
    instants apart, and those a power of two apart up to ``max_gap`` (the long
    baselines that fix the scale-rotation ambiguity of short ones).
    """
    if window is None:
        return True
    return gap <= window or (gap <= max_gap and gap & (gap - 1) == 0)


def sequential_pairs(ranks, window, max_gap=0):
    """Return index pairs ``(i, j)``, i < j, of frames with time ranks ``ranks``."""
    return [(i, j) for j in range(len(ranks)) for i in range(j)
            if is_partner(ranks[j] - ranks[i], window, max_gap)]


class FeatureStage:
    """Extract (or take from a features bag) and match the frames of a source into a database."""

    def __init__(self, source, database, engine, pairing, min_cossim, image_dir=None):
        """
        ``pairing``: ``(window, max_gap)`` (window None: every pair, see :func:`is_partner`).

        ``engine`` None: features come from the source (features bag) or from SIFT.
        """
        self.source, self.db, self.engine = source, database, engine
        self.window, self.max_gap = pairing
        self.min_cossim, self.image_dir = min_cossim, image_dir
        self.frames, self.pairs = [], []
        self.kept = deque()  # (FrameInfo, image_id, Features or None) of possible partners
        self.counts = {'keypoints': 0, 'matches': 0, 'pairs_without_descriptors': 0}
        self.slot = engine.alloc_slot() if engine is not None else None

    def run(self, with_features):
        """Process every frame; returns the frames written."""
        for item in self.source.items():
            frame = item.frame
            features = item.features
            try:
                if with_features and features is None:
                    self.engine.submit(item.image, self.slot)
                    self.engine.synchronize()
                    features = self.engine.features(self.slot)
                if self.image_dir is not None:
                    self._export(frame.name, item.image)
            except ImageError as exc:
                reject(self.source, frame.name, exc)
                continue
            self._add(frame, item, features)
        return self.frames

    def _add(self, frame, item, features):
        if frame.camera not in self.db.cameras:
            h, w = (features.image_hw if item.image is None
                    else (item.image.height, item.image.width))
            self.db.add_camera(frame.camera, self.source.cameras[frame.camera], w, h)
        image_id = self.db.add_image(frame.name, frame.camera)
        if features is not None:
            self.db.write_keypoints(image_id, features.keypoints)
            self.counts['keypoints'] += len(features)
        reach = None if self.window is None else max(self.window, self.max_gap)
        while self.kept and reach is not None and frame.rank - self.kept[0][0].rank > reach:
            self.kept.popleft()
        for earlier, earlier_id, earlier_features in self.kept:
            if not is_partner(frame.rank - earlier.rank, self.window, self.max_gap):
                continue
            if features is None:
                self.pairs.append((earlier.name, frame.name))
                continue
            matches = self._match(earlier, earlier_features, frame, features)
            if matches is not None:
                self.counts['matches'] += self.db.write_matches(earlier_id, image_id, *matches)
                self.pairs.append((earlier.name, frame.name))
        self.kept.append((frame, image_id, features))
        self.frames.append(frame)

    def _match(self, earlier, f0, frame, f1):
        """(idx0, idx1) of a pair: the bag's own Matches, else mutual NN; None if impossible."""
        recorded = self.source.bag_matches.get((earlier.stamp_ns, frame.stamp_ns))
        if recorded is not None:
            return recorded
        if self.engine is not None:
            result = self.engine.match_features(f0, f1)
            return result.idx0, result.idx1
        if f0.descriptors.shape[1] == 0 or f1.descriptors.shape[1] == 0:
            self.counts['pairs_without_descriptors'] += 1
            return None
        idx0, idx1, _ = mutual_nn_match(f0.descriptors, f1.descriptors, self.min_cossim)
        return idx0, idx1

    def _export(self, name, image):
        """Write a bag image as a file COLMAP can read (SIFT needs image files)."""
        import cv2
        from xfeat_ros.features.image_codec import decode_image_msg
        grey = decode_image_msg(image)
        path = self.image_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(path), np.clip(np.rint(grey * 255), 0, 255).astype(np.uint8))


def open_any(args):
    """Open SOURCE as a folder or a bag, with the camera and ground truth of the command line."""
    from xfeat_ros.tools.bag import is_bag
    intrinsics = None
    if args.camera_yaml:
        intrinsics = CameraModel.from_yaml(args.camera_yaml)
    elif args.intrinsics:
        coeffs = args.distortion or ()
        intrinsics = CameraModel.from_parameters(
            args.intrinsics, args.distortion_model or ('plumb_bob' if coeffs else 'none'),
            coeffs)
    truth = read_tum_trajectory(args.groundtruth) if args.groundtruth else None
    if is_bag(args.source):
        if args.stereo:
            raise MappingError('--stereo is for EuRoC folders; a bag gives one image topic')
        from xfeat_ros.tools.map_bags import open_bag
        source = open_bag(args.source, args.topic, intrinsics, truth, args.max_frames,
                          prefer_features=args.features == 'xfeat')
    elif is_image_folder(args.source):
        if args.topic:
            raise MappingError('--topic is for bags; SOURCE is an image folder')
        source = open_folder(args.source, intrinsics, args.stereo, truth, args.max_frames)
    else:
        raise MappingError(f'{args.source} is neither an image folder (plain, TUM, EuRoC, '
                           'KITTI) nor a rosbag2 bag')
    if args.groundtruth:
        source.truth = str(args.groundtruth)
    return source


def _versions(pycolmap, evo):
    import xfeat_ros
    return {'pycolmap': pycolmap.__version__, 'colmap': pycolmap.COLMAP_version,
            'evo': evo.__version__, 'numpy': np.__version__,
            'xfeat_ros': getattr(xfeat_ros, '__version__', 'source'),
            'python': platform.python_version()}


def _reconstruction_summary(models, frames, source):
    """Summary fields of the largest model (or of none) and its trajectory rows."""
    if not models:
        return {'registered_images': 0, 'num_models': 0, 'model': None,
                'mean_reprojection_error_px': None, 'mean_track_length': None,
                'num_points3D': 0}, []
    index, model = models[0]
    rows = trajectory.estimated_poses(model, frames, source.trajectory_camera)
    registered = {image.name for image in model.images.values() if image.has_pose}
    return {'registered_images': model.num_reg_images(), 'num_models': len(models),
            'model': f'sparse/{index}',
            'mean_reprojection_error_px': float(model.compute_mean_reprojection_error()),
            'mean_track_length': float(model.compute_mean_track_length()),
            'num_points3D': model.num_points3D(),
            'unregistered_images': [f.name for f in frames if f.name not in registered][:50]
            }, rows


def run(args, command='xfeat_map'):
    """Build the reconstruction of ``args.source`` into ``args.out``; returns the summary."""
    started = time.perf_counter()
    pycolmap, evo = colmap_db.require_backends()
    if not args.verbose:
        pycolmap.logging.minloglevel = 2  # COLMAP's warnings and errors only
    source = open_any(args)
    mode, window = choose_pairing(args.pairing, source.count, args.window)
    if args.features == 'sift' and source.kind == 'features-bag':
        raise MappingError('--features sift needs images; this bag holds Keypoints only')
    engine = None
    if args.features == 'xfeat' and source.kind != 'features-bag':
        from xfeat_ros.features.weights import resolve_weights
        args.weights = str(resolve_weights(args.weights))
        from xfeat_ros.features.engine import EngineConfig
        from xfeat_ros.features.factory import create_engine
        # The package's one factory (no silent GPU->CPU switch).
        engine = create_engine(EngineConfig(args.backend, args.weights, args.gpu,
                                            max(args.threads, 0), args.top_k, args.threshold,
                                            args.min_cossim))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    database = colmap_db.MapDatabase(out / 'database.db')
    image_root = source.image_root
    export = None
    if args.features == 'sift' and image_root is None:
        image_root = export = out / 'images'
    stage = FeatureStage(source, database, engine, (window, args.max_gap), args.min_cossim,
                         export)
    seconds = {}
    tick = time.perf_counter()
    frames = stage.run(with_features=args.features == 'xfeat')
    database.close()
    seconds['features_and_matching'] = time.perf_counter() - tick
    with_truth = sum(f.pose is not None for f in frames)
    if frames and not with_truth:
        LOG.warning('%s: no frame has a ground-truth pose (%s): APE and RPE not computed',
                    source.path, source.truth)
    if len(frames) < 2:
        raise MappingError(f'{source.path}: {len(frames)} usable frame(s); mapping needs 2 '
                           'or more')
    pairs_path = colmap_db.write_pairs(out / 'pairs.txt', stage.pairs)
    settings = {'seed': args.seed, 'threads': args.threads if args.threads > 0 else -1,
                'init_min_tri_angle': args.init_min_tri_angle}
    tick = time.perf_counter()
    if args.features == 'sift':
        colmap_db.sift(pycolmap, database.path, image_root, [f.name for f in frames],
                       pairs_path, args.seed, settings['threads'])
    else:
        colmap_db.verify(pycolmap, database.path, pairs_path, args.seed)
    seconds['colmap_features_or_verification'] = time.perf_counter() - tick
    tick = time.perf_counter()
    written = database.written_cameras()
    models = colmap_db.incremental_mapping(pycolmap, database.path, image_root,
                                           out / 'sparse', settings,
                                           [c.camera_id for c in written.values()])
    seconds['mapping'] = time.perf_counter() - tick
    read_back, changed = colmap_db.read_back_cameras(models, written)
    found, rows = _reconstruction_summary(models, frames, source)
    scores = trajectory.score(rows) if rows else None
    (out / 'trajectory.txt').write_text(trajectory.tum_text(rows))
    summary = {
        'command': command, 'date': time.strftime('%Y-%m-%d %H:%M:%S %z'),
        'source': str(source.path), 'kind': source.kind, 'topic': source.topic or None,
        'features': args.features, 'total_images': len(frames), **found,
        'seconds': None, 'seconds_by_stage': seconds,
        'ape_rmse_m': None, 'rpe_rotation_deg': None,
        'ground_truth': source.truth if with_truth else None,
        'ground_truth_frames': with_truth,
        'seed': args.seed, 'pairing': mode, 'window': window,
        'max_gap': None if window is None else args.max_gap, 'pairs': len(stage.pairs),
        'database': colmap_db.database_counts(pycolmap, database.path),
        'mapper': {'init_min_tri_angle': args.init_min_tri_angle,
                   'constant_cameras': sorted(c.camera_id for c in written.values()),
                   'fixed_intrinsics': (not changed) if models else None,
                   'threads': settings['threads']},
        'cameras': {key: colmap_db.camera_record(camera) for key, camera in written.items()},
        'reconstruction_cameras': read_back, 'intrinsics_changed': changed,
        'engine': None if engine is None else {
            'name': engine.name, 'device': engine.device,
            'top_k': args.top_k, 'threshold': args.threshold, 'weights': args.weights},
        'min_cossim': args.min_cossim, 'counts': {**stage.counts, **source.counts},
        'versions': _versions(pycolmap, evo), 'machine': platform.platform()}
    if scores is not None:
        summary.update({k: v for k, v in scores.items()
                        if k not in ('times', 'reference_xyz', 'aligned_xyz', 'ape_m')})
    if not args.no_plot and rows:
        title = (f'{Path(source.path).name}: {args.features}, {mode}'
                 + (f' {window}' if window else '') + f', seed {args.seed}, '
                 f"{found['registered_images']}/{len(frames)} registered")
        trajectory.plot(out / 'trajectory.png', rows, scores, title)
    summary['seconds'] = time.perf_counter() - started
    with open(out / 'summary.json', 'w') as handle:
        json.dump(summary, handle, indent=1)
    if changed:
        raise MappingError(f'COLMAP changed the intrinsics ({"; ".join(changed)}): the '
                           f'trajectory is not trustworthy (see {out / "summary.json"})')
    return summary


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose mistakes are answered with one line."""

    def error(self, message):
        """Print one line and exit with status 2."""
        self.exit(2, f'{self.prog}: error: {message} (see {self.prog} --help)\n')


def _positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f'must be positive, got {text}')
        return value
    parse.__name__ = kind.__name__
    return parse


def build_parser():
    """Return the ``xfeat_map`` argument parser."""
    parser = OneLineParser(prog='xfeat_map', description=__doc__.split('\n\n')[0].split(': ')[1],
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('source', type=Path, help='image folder (plain, TUM, EuRoC, KITTI) or '
                        'rosbag2 bag (image topic, or xfeat_offline Keypoints/Matches)')
    parser.add_argument('--out', type=Path, required=True, help='output folder (new or empty)')
    parser.add_argument('--features', choices=FEATURES, default='xfeat',
                        help="xfeat, or COLMAP's own SIFT on the same frames")
    parser.add_argument('--pairing', choices=PAIRINGS, default='auto',
                        help=f'auto: exhaustive up to {EXHAUSTIVE_MAX_FRAMES} frames, '
                             'else sequential')
    parser.add_argument('--window', type=_positive(int), default=DEFAULT_WINDOW,
                        help='sequential: pair each frame with those up to this many '
                             'instants before')
    parser.add_argument('--max-gap', type=int, default=DEFAULT_MAX_GAP,
                        help='sequential: also pair frames 2^k instants apart up to this gap '
                             '(0: window only)')
    parser.add_argument('--seed', type=int, default=0, help='COLMAP random seed')
    parser.add_argument('--init-min-tri-angle', type=_positive(float),
                        default=DEFAULT_INIT_MIN_TRI_ANGLE,
                        help="starting pair's minimum triangulation angle, degrees "
                             '(COLMAP relaxes it twice, to a quarter, if none is found)')
    parser.add_argument('--threads', type=int, default=0,
                        help='CPU threads of ONNX Runtime and COLMAP (0: all)')
    parser.add_argument('--max-frames', type=int, default=0,
                        help='first N instants of the sequence only (0: all)')
    camera = parser.add_argument_group('camera (default: the dataset calibration or CameraInfo)')
    camera.add_argument('--intrinsics', type=float, nargs=4, metavar=('FX', 'FY', 'CX', 'CY'),
                        help='pinhole intrinsics, pixel centres at integers (as CameraInfo)')
    camera.add_argument('--distortion', type=float, nargs='+', metavar='K',
                        help='distortion coefficients (plumb_bob: k1 k2 p1 p2 [k3])')
    camera.add_argument('--distortion-model', choices=MODELS, help='default plumb_bob')
    camera.add_argument('--camera-yaml', type=Path,
                        help='EuRoC/Kalibr sensor.yaml, or fx, fy, cx, cy, dist')
    camera.add_argument('--stereo', action='store_true',
                        help='EuRoC: cam1 too, as a second camera (trajectory: cam0)')
    parser.add_argument('--groundtruth', type=Path,
                        help='TUM trajectory file (camera-to-world) to score against')
    parser.add_argument('--topic', default='', help='bag topic (Image or Keypoints)')
    xfeat = parser.add_argument_group('XFeat')
    xfeat.add_argument('--backend', choices=BACKENDS, default='onnxruntime',
                       help='onnxruntime (CPU), or a GPU engine')
    xfeat.add_argument('--gpu', type=int, default=0, help='CUDA device of GPU backends')
    xfeat.add_argument('--weights', default='', help='weights .pt/.npz (default: lookup)')
    xfeat.add_argument('--top-k', type=_positive(int), default=TOP_K)
    xfeat.add_argument('--threshold', type=float, default=THRESHOLD)
    xfeat.add_argument('--min-cossim', type=float, default=MIN_COSSIM)
    parser.add_argument('--no-plot', action='store_true', help='no trajectory.png')
    parser.add_argument('--verbose', action='store_true', help="COLMAP's log too")
    return parser


def check_args(parser, args):
    """Reject combinations argparse cannot see, with one line."""
    if not args.source.exists():
        parser.error(f'SOURCE {args.source} does not exist')
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        parser.error(f'--out {args.out} exists and is not an empty folder')
    if args.camera_yaml and (args.intrinsics or args.distortion):
        parser.error('give either --camera-yaml or --intrinsics/--distortion')
    if (args.distortion or args.distortion_model) and not args.intrinsics:
        parser.error('--distortion and --distortion-model need --intrinsics')
    if args.max_frames < 0 or args.seed < 0 or args.max_gap < 0:
        parser.error('--max-frames, --max-gap and --seed must be 0 or more')
    if args.groundtruth and not args.groundtruth.is_file():
        parser.error(f'--groundtruth {args.groundtruth} is not a file')


@one_line_errors('xfeat_map')
def main(argv=None):
    """Entry point of ``xfeat_map``; returns the exit status."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')
    try:
        summary = run(args, ' '.join(['xfeat_map'] + argv))
    except XFeatError as exc:
        sys.stderr.write(f'xfeat_map: error: {exc}\n')
        return EXIT_ERROR
    line = (f"{summary['registered_images']}/{summary['total_images']} images registered, "
            f"{summary['num_points3D']} points, {summary['seconds']:.1f} s")
    if summary['ape_rmse_m'] is not None:
        line += (f", APE {summary['ape_rmse_m'] * 100:.2f} cm, "
                 f"RPE {summary['rpe_rotation_deg']:.2f} deg")
    sys.stdout.write(f'{line} -> {args.out}\n')
    return 0 if summary['registered_images'] else EXIT_NO_MODEL


if __name__ == '__main__':
    sys.exit(main())
