# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The command line of ``xfeat_eval``: its parser, :func:`run` over every dataset, ``main``."""

import argparse
import json
import logging
import os
from pathlib import Path
import platform
import sys
import time

from xfeat_ros.cli import error_line, one_line_errors
from xfeat_ros.defaults import MIN_COSSIM, THRESHOLD, TOP_K
from xfeat_ros.errors import DatasetError, ParameterError, XFeatError
from xfeat_ros.features.camera import CameraModel
from xfeat_ros.features.geometry import HOMOGRAPHY_METHODS
from xfeat_ros.logs import package_logger
from xfeat_ros.tools.evaluation import __doc__ as DOC
from xfeat_ros.tools.evaluation.datasets import describe_camera, LAYOUTS, load_dataset, TUM_FR2
from xfeat_ros.tools.evaluation.methods import (create_engine_method, descriptor_encodings,
                                                EncodedMethod, UpstreamMethod)
from xfeat_ros.tools.evaluation.plots import (draw_best_and_worst, plot_mha, plot_pose_along,
                                              plot_pose_cdf)
from xfeat_ros.tools.evaluation.protocol import (evaluate_homography, evaluate_pair_list,
                                                 evaluate_pose, opencv_distortion, Settings)
from xfeat_ros.tools.evaluation.report import (json_ready, markdown_tables, slug,
                                               summarize_homography, summarize_pose)
from xfeat_ros.tools.plumbing import git_commit, versions

LOG = package_logger('xfeat_eval')


def build_parser():
    """Return the ``xfeat_eval`` argument parser."""
    parser = argparse.ArgumentParser(
        prog='xfeat_eval', description=DOC.split('\n\n')[0].split(': ', 1)[1],
        epilog=f'Inputs: {LAYOUTS}.', formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('datasets', nargs='+', type=Path,
                        help='dataset folders or pair list files (layouts below)')
    parser.add_argument('--pairs-root', type=Path,
                        help='folder the images of pair lists are relative to (default: the '
                             "list's folder)")
    parser.add_argument('--out', type=Path, default=Path('eval_output'), help='output folder')
    parser.add_argument('--backend', default='onnxruntime',
                        help='comma-separated xfeat_ros backends to evaluate: onnxruntime, '
                             'pytorch, tensorrt, onnxruntime_cuda, auto; "none" for upstream only')
    parser.add_argument('--weights', default='', help='weights (.pt or .npz); empty: lookup')
    parser.add_argument('--gpu', type=int, default=0, help='CUDA device of GPU backends')
    parser.add_argument('--threads', type=int, default=0, help='ONNX Runtime threads (0: auto)')
    parser.add_argument('--top-k', type=int, default=TOP_K,
                        help='keypoints per image (default %(default)s)')
    parser.add_argument('--threshold', type=float, default=THRESHOLD,
                        help='detection threshold (default %(default)s)')
    parser.add_argument('--min-cossim', type=float, default=MIN_COSSIM,
                        help='matches need cosine above this (default %(default)s)')
    parser.add_argument('--upstream', type=Path,
                        help='upstream XFeat checkout (holds modules/; needs torch, tqdm)')
    parser.add_argument('--upstream-device', default='cpu', help='torch device for upstream')
    parser.add_argument('--max-pairs', type=int, default=0,
                        help='pairs per homography dataset and per pose gap (0: all)')
    parser.add_argument('--frames', type=int, default=0,
                        help='first frames of each pose sequence (0: all)')
    parser.add_argument('--gaps', type=int, nargs='+', default=[1, 2, 4],
                        help='frame gaps of pose pairs')
    parser.add_argument('--homography-method', choices=HOMOGRAPHY_METHODS, default='ransac')
    parser.add_argument('--homography-threshold', type=float, default=3.0, help='px')
    parser.add_argument('--homography-max-iters', type=int, default=10000)
    parser.add_argument('--homography-confidence', type=float, default=0.9999)
    parser.add_argument('--pose-threshold', type=float, default=1.0,
                        help='essential-matrix RANSAC threshold (px)')
    parser.add_argument('--fit-orders', type=int, default=0, metavar='N',
                        help='also fit every pair with its matches in N random orders '
                             '(np.random.default_rng(k), k = 0..N-1) and report the mean and '
                             'std over orders of MHA / AUC; 0: the canonical order only')
    parser.add_argument('--signed-translation', action='store_true',
                        help='score the signed translation direction (default: sign-agnostic)')
    parser.add_argument('--intrinsics', type=Path,
                        help='YAML with fx, fy, cx, cy, dist (TUM sequences; else the flags)')
    for key in ('fx', 'fy', 'cx', 'cy'):
        parser.add_argument(f'--{key}', type=float, default=TUM_FR2[key],
                            help='TUM intrinsics (default: freiburg2)')
    parser.add_argument('--dist', type=float, nargs='+', default=TUM_FR2['dist'],
                        help='TUM distortion k1 k2 p1 p2 [k3] (default: freiburg2)')
    parser.add_argument('--descriptor-encoding', action='append', metavar='ENCODING',
                        help='evaluate the xfeat_ros methods with descriptors sent through '
                             'these wire encodings (float32, float16, int8; repeatable or '
                             'comma-separated), one method each, with bytes per frame and '
                             'agreement with float32 matches; default: the plain engine')
    parser.add_argument('--no-plots', action='store_true', help='tables only')
    return parser


def run(args, command='xfeat_eval'):
    """Evaluate every method on every dataset; write the outputs and return the results dict."""
    from xfeat_ros.features.weights import load_weights, resolve_weights
    camera = (CameraModel.from_yaml(args.intrinsics) if args.intrinsics
              else CameraModel.from_opencv([args.fx, args.fy, args.cx, args.cy], args.dist))
    opencv_distortion(camera)  # a camera the pose fit cannot undistort: said before any work
    datasets = [load_dataset(folder, camera, args.pairs_root) for folder in args.datasets]
    if any(g < 1 for g in args.gaps):
        raise DatasetError(f'gaps must be positive, got {args.gaps}')
    if args.fit_orders < 0:
        raise ParameterError(f'--fit-orders must be 0 or more, got {args.fit_orders}')
    settings = Settings(args.homography_method, args.homography_threshold,
                        args.homography_max_iters, args.homography_confidence,
                        args.pose_threshold, not args.signed_translation, tuple(args.gaps),
                        args.max_pairs, args.frames, args.fit_orders)
    weights_path = resolve_weights(args.weights)
    args.weights = str(weights_path)
    slots = max(2, max(args.gaps) + 1)
    encodings = descriptor_encodings(args.descriptor_encoding)
    methods = [create_engine_method(b.strip(), args, slots)
               for b in args.backend.split(',') if b.strip() and b.strip() != 'none']
    if encodings:
        methods = [EncodedMethod(m, e, args.min_cossim) for m in methods for e in encodings]
    if args.upstream:
        methods.append(UpstreamMethod(args.upstream, load_weights(weights_path), slots,
                                      args.top_k, args.threshold, args.min_cossim,
                                      args.upstream_device))
    if not methods:
        raise XFeatError('nothing to evaluate: no backend and no --upstream')
    args.out.mkdir(parents=True, exist_ok=True)
    results = {
        'command': command,
        'date': time.strftime('%Y-%m-%d %H:%M:%S %z'),
        'machine': {'platform': platform.platform(), 'processor': platform.processor(),
                    'cores': os.cpu_count()},
        'versions': versions(['numpy', 'cv2', 'onnxruntime']
                             + (['torch'] if args.upstream is not None else [])),
        'weights': str(weights_path), 'top_k': args.top_k, 'threshold': args.threshold,
        'min_cossim': args.min_cossim, 'methods': [m.name for m in methods],
        'descriptor_encodings': encodings,
        'upstream': None if not args.upstream else {
            'dir': str(args.upstream), 'commit': git_commit(args.upstream)},
        'settings': settings.describe(), 'datasets': [], 'plots': []}
    for dataset in datasets:
        data = {'name': dataset.name, 'path': str(dataset.path), 'layout': dataset.layout,
                'kind': dataset.kind, 'summary': {}, 'pairs': {}}
        if dataset.kind == 'pose':
            data['camera'] = describe_camera(dataset.camera)
        for method in methods:
            if dataset.kind == 'homography':
                records = evaluate_homography(method, dataset, settings)
                data['summary'][method.name] = summarize_homography(records)
            elif dataset.kind == 'pairs':
                records = evaluate_pair_list(method, dataset, settings)
                data['summary'][method.name] = {'all': summarize_pose(records)}
            else:
                records = evaluate_pose(method, dataset, settings)
                per_gap = {str(g): summarize_pose([r for r in records if r['gap'] == g])
                           for g in settings.gaps}
                data['summary'][method.name] = {**per_gap, 'all': summarize_pose(records)}
            data['pairs'][method.name] = records
        if not args.no_plots:
            stem = args.out / slug(dataset.name)
            if dataset.kind == 'homography':
                plots = [Path(f'{stem}_mha.png')]
                plot_mha(data, plots[0])
            elif dataset.kind == 'pairs':
                plots = [Path(f'{stem}_pose_cdf.png')]
                plot_pose_cdf(data, plots[0])
            else:
                plots = [Path(f'{stem}_pose_cdf.png'), Path(f'{stem}_pose_along.png')]
                plot_pose_cdf(data, plots[0])
                plot_pose_along(data, plots[1])
            plots += draw_best_and_worst(data, dataset, args.out)
            results['plots'] += [p.name for p in plots]
        results['datasets'].append(data)
    results = json_ready(results)
    header = ['# xfeat_eval results', '', f"`{results['command']}`", '',
              f"{results['date']}; {results['machine']['platform']}; methods: "
              + ', '.join(results['methods']), '',
              f'top_k {args.top_k}, detection threshold {args.threshold}, min_cossim '
              f'{args.min_cossim}; weights {weights_path.name}'
              + (f"; descriptor encodings {', '.join(encodings)}" if encodings else ''), '']
    header += [f'- {key}: {value}' for key, value in results['settings'].items()] + ['']
    markdown = '\n'.join(header) + '\n' + markdown_tables(results)
    (args.out / 'results.md').write_text(markdown)
    with open(args.out / 'results.json', 'w') as handle:
        json.dump(results, handle, indent=1, allow_nan=False)
    results['markdown'] = markdown
    return results


@one_line_errors('xfeat_eval')
def main(argv=None):
    """Entry point of ``xfeat_eval``; returns the exit status."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')
    try:
        results = run(args, ' '.join(['xfeat_eval'] + argv))
    except XFeatError as exc:
        print(error_line('xfeat_eval', exc), file=sys.stderr)
        return 2
    sys.stdout.write(results['markdown'])
    sys.stdout.write(f'\nwritten to {args.out}/ (results.md, results.json, '
                     f"{len(results['plots'])} plots)\n")
    return 0
