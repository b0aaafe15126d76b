# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The one engine factory: :func:`create_engine` with the ``auto`` rule, the CPU engine's builder.

Also the engine options of every command line (:func:`add_engine_args`,
:func:`engine_config`). The GPU engine is imported on demand: CuPy and
PyTorch are optional dependencies of the CPU path.
"""

from dataclasses import fields

from xfeat_ros.defaults import MIN_COSSIM, THRESHOLD, TOP_K
from xfeat_ros.errors import BackendError
from xfeat_ros.features.backbone import OnnxRuntimeBackbone
from xfeat_ros.features.engine import BACKENDS, CPU_BACKEND, CpuEngine, EngineConfig
from xfeat_ros.features.network_onnx import build_model
from xfeat_ros.features.weights import load_weights, resolve_weights
from xfeat_ros.logs import package_logger

LOG = package_logger('xfeat_ros.features.engine')


def cpu_engine(config):
    """Build the ONNX Runtime engine of ``config`` (any backend field)."""
    weights = config.weights
    if not isinstance(weights, dict):
        weights = load_weights(resolve_weights(weights))
    return CpuEngine(OnnxRuntimeBackbone(build_model(weights), config.num_threads),
                     config.top_k, config.threshold, config.min_cossim, config.spread)


def create_engine(config=EngineConfig(), logger=None):
    """
    Create the engine of ``config``: the one factory of the package.

    ``onnxruntime``: the CPU engine. A GPU backend: that GPU engine, or
    :class:`xfeat_ros.errors.BackendError` when it is unusable. ``auto``: the
    GPU engine when one is usable (TensorRT, then PyTorch CUDA), else the CPU
    engine, saying why in ``logger`` (a ``logging`` or rclpy logger).
    Weights problems raise :class:`xfeat_ros.errors.WeightsError` whatever the
    backend; invalid spread settings (``min_distance``, the grid) raise
    :class:`xfeat_ros.errors.ParameterError` before any engine is built.
    """
    log = logger or LOG
    if config.backend not in BACKENDS:
        raise BackendError(f'unknown backend {config.backend!r} (choose from '
                           f'{", ".join(BACKENDS)})')
    if config.backend == CPU_BACKEND:
        return cpu_engine(config)
    spread = config.spread  # validates the spread settings first
    try:
        from xfeat_ros.features.gpu.factory import create_gpu_engine  # CuPy, PyTorch: optional
        engine = create_gpu_engine(config.backend, config.weights, config.gpu, config.top_k,
                                   config.threshold, config.min_cossim, spread=spread)
    except (ImportError, BackendError) as exc:
        if config.backend != 'auto':
            if isinstance(exc, BackendError):
                raise
            raise BackendError(f'backend {config.backend}: the GPU engine cannot be '
                               f'imported ({exc})') from exc
        log.info(f'backend auto: no GPU engine ({exc}); using {CPU_BACKEND} on the CPU')
        return cpu_engine(config)
    if config.backend == 'auto':
        log.info(f'backend auto: chose {engine.name} on {engine.device}')
    return engine


def add_engine_args(parser, backend='auto'):
    """Add the engine options (one spelling for every command line) to ``parser``."""
    group = parser.add_argument_group('engine')
    group.add_argument('--backend', choices=BACKENDS, default=backend,
                       help='auto tries the GPU engines, then ONNX Runtime on the CPU '
                            '(default %(default)s)')
    group.add_argument('--weights', default='',
                       help='weights .pt/.npz (default: $XFEAT_ROS_WEIGHTS, the cache, the '
                            'packaged copy)')
    group.add_argument('--gpu', type=int, default=0, help='CUDA device for GPU backends')
    group.add_argument('--num-threads', type=int, default=0,
                       help='ONNX Runtime CPU threads (0: its default)')
    group.add_argument('--top-k', type=int, default=TOP_K,
                       help='keypoints per image (default %(default)s)')
    group.add_argument('--threshold', type=float, default=THRESHOLD,
                       help='heatmap detection threshold (default %(default)s)')
    group.add_argument('--min-cossim', type=float, default=MIN_COSSIM,
                       help='matches need cosine above this; <= 0: no filter '
                            '(default %(default)s)')
    group.add_argument('--min-distance', type=float, default=0.0,
                       help='spread: no two keypoints closer than this many pixels, tracked '
                            'ones placed first (0: off, upstream keypoints)')
    group.add_argument('--grid-cell-px', type=int, default=0,
                       help='spread grid: cell size in pixels (with --max-per-cell; 0: off)')
    group.add_argument('--max-per-cell', type=int, default=0,
                       help='spread grid: most keypoints per cell (with --grid-cell-px; 0: off)')
    group.add_argument('--carry-frames', type=int, default=0,
                       help='longer tracks: a lost track is looked for in the dense descriptor '
                            'map, up to this many frames in a row (0: off)')
    return group


def engine_config(args):
    """
    Return the :class:`EngineConfig` of options added by :func:`add_engine_args`.

    Invalid spread settings raise :class:`xfeat_ros.errors.ParameterError`.
    """
    return EngineConfig(**{f.name: getattr(args, f.name) for f in fields(EngineConfig)})
