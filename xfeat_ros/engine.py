# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The one engine contract, its CPU implementation, and the one engine factory.

An engine processes frames into pre-allocated *slots* (one per frame in
flight). Every front-end (the node, ``xfeat_offline``, the benchmark, the
evaluation) drives it the same way, through :class:`Engine`::

    slot = engine.alloc_slot()             # once per in-flight position
    engine.submit(image_msg, slot)         # raises ImageError, enqueues nothing then
    engine.submit_match(prev_slot, slot)   # frame-to-frame, same camera
    ...                                    # up to max_frames_in_flight frames
    engine.synchronize()                   # one sync for the whole group
    engine.results(slots)                  # [(Features, MatchResult or None)], one copy pass
    engine.features(slot), engine.matches(slot)   # the same, one slot at a time
    engine.match_features(f0, f1)          # two host Features (stereo), synchronous
    engine.configure(top_k=..., threshold=..., min_cossim=...)  # between groups

An engine may also offer ``submit_group(msgs, slots)`` (see
:func:`group_submit`): the detection of a whole group in one call, for a
batched backbone; the group's matches are then enqueued with ``submit_match``.

On the CPU everything happens inside ``submit``/``submit_match`` and
``synchronize`` is a no-op; the GPU engine (``xfeat_ros.gpu``) enqueues device
work on one stream and copies only the final results down.

:class:`EngineConfig` is the one engine configuration (its defaults come from
:mod:`xfeat_ros.defaults`), :func:`create_engine` the one factory with the
``auto`` rule, :func:`add_engine_args` the options of every command line.
"""

from dataclasses import dataclass, fields
import sys
from typing import Protocol

from xfeat_ros.defaults import MIN_COSSIM, THRESHOLD, TOP_K
from xfeat_ros.errors import BackendError, DeviceError
from xfeat_ros.image_codec import decode_image_msg
from xfeat_ros.logs import package_logger
from xfeat_ros.match import mutual_nn_match
from xfeat_ros.pipeline import CpuPipeline, MatchResult

LOG = package_logger(__name__)

CPU_BACKEND = 'onnxruntime'
GPU_BACKENDS = ('tensorrt', 'pytorch', 'onnxruntime_cuda')  # auto tries tensorrt, then pytorch
BACKENDS = ('auto', CPU_BACKEND) + GPU_BACKENDS


class Engine(Protocol):
    """The frame engine contract (see the module docstring); ``device`` 'cpu' or 'cuda:N'."""

    name: str
    device: str

    def configure(self, top_k=None, threshold=None, min_cossim=None):
        """Change detection or matching settings; takes effect on the next submit."""

    def alloc_slot(self):
        """Return a new slot (one in-flight frame's results)."""

    def submit(self, msg, slot):
        """Enqueue detection of a ``sensor_msgs/Image`` into ``slot`` (ImageError: nothing)."""

    def submit_match(self, previous, slot):
        """Enqueue matching of ``previous``'s descriptors against ``slot``'s."""

    def synchronize(self):
        """Wait for everything enqueued."""

    def features(self, slot):
        """Host :class:`xfeat_ros.pipeline.Features` of a submitted slot."""

    def matches(self, slot):
        """Host :class:`xfeat_ros.pipeline.MatchResult` of a matched slot, else None."""

    def results(self, slots):
        """``[(features(slot), matches(slot))]`` of ``slots`` (an engine may batch the copies)."""

    def match_features(self, features0, features1):
        """Match two host Features now; return a :class:`MatchResult`."""


def group_submit(engine):
    """
    Return the engine's optional ``submit_group(msgs, slots)``, or None.

    What ``submit`` would do for each ``(msg, slot)`` pair, in one call, so a
    batched backbone runs the whole group at once (the GPU engine's
    :meth:`xfeat_ros.gpu.engine.GpuEngine.submit_group`); matches follow with
    ``submit_match``. It raises the :class:`xfeat_ros.errors.ImageError` of a
    bad frame before enqueuing anything (the scheduler then submits frame by
    frame to reject just that one).
    """
    return getattr(engine, 'submit_group', None)


def expect_groups(engine, frames):
    """
    Tell ``engine`` the most frames it may be given as one group (its optional hook).

    The GPU engine readies its backbone for every batch size up to that at
    once (:meth:`xfeat_ros.gpu.engine.GpuEngine.expect_groups`); engines
    without the hook ignore it.
    """
    hook = getattr(engine, 'expect_groups', None)
    if hook is not None:
        hook(frames)


def device_errors(engine):
    """
    Exception types that mean ``engine``'s device failed (the node may fall back).

    :class:`xfeat_ros.errors.DeviceError` for every engine; for a CUDA engine
    also :class:`xfeat_ros.errors.BackendError` raised at run time, CuPy's
    CUDA runtime/driver errors and out-of-memory (a ``MemoryError``), and
    PyTorch's CUDA out-of-memory and accelerator errors. A plain
    ``RuntimeError`` (a fault of the code) is not among them.
    """
    if engine.device == 'cpu':
        return (DeviceError,)
    errors = [DeviceError, BackendError, MemoryError]
    cupy = sys.modules.get('cupy')
    if cupy is not None:
        errors += [cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError]
    torch = sys.modules.get('torch')
    if torch is not None:
        errors.append(torch.cuda.OutOfMemoryError)
        if hasattr(torch, 'AcceleratorError'):  # CUDA errors since PyTorch 2.8
            errors.append(torch.AcceleratorError)
    return tuple(errors)


class Slot:
    """Hold the per-frame results of one in-flight position (host memory on the CPU)."""

    def __init__(self):
        """Start empty."""
        self.features = None
        self.matches = None


class CpuEngine:
    """Engine over :class:`xfeat_ros.pipeline.CpuPipeline` (ONNX Runtime + NumPy)."""

    device = 'cpu'

    def __init__(self, backbone, top_k=TOP_K, threshold=THRESHOLD, min_cossim=MIN_COSSIM):
        """Build on a host backbone; thresholds can be changed between frames."""
        self.pipeline = CpuPipeline(backbone, top_k, threshold)
        self.min_cossim = float(min_cossim)
        self.name = backbone.name

    def configure(self, top_k=None, threshold=None, min_cossim=None):
        """Change detection or matching settings; takes effect on the next submit."""
        if top_k is not None:
            self.pipeline.top_k = int(top_k)
        if threshold is not None:
            self.pipeline.threshold = float(threshold)
        if min_cossim is not None:
            self.min_cossim = float(min_cossim)

    def alloc_slot(self):
        """Return a new slot."""
        return Slot()

    def submit(self, msg, slot):
        """Decode and extract the features of ``msg`` (sensor_msgs/Image) into ``slot``."""
        grey = decode_image_msg(msg)
        slot.features = self.pipeline.extract(grey)
        slot.matches = None

    def submit_match(self, previous, slot):
        """Match ``previous``'s features against ``slot``'s (both already submitted)."""
        slot.matches = self.match_features(previous.features, slot.features)

    def match_features(self, features0, features1):
        """
        Match two host :class:`Features` now (stereo pairs); return a :class:`MatchResult`.

        Mutual nearest neighbours with the engine's ``min_cossim``; synchronous.
        """
        return MatchResult(*mutual_nn_match(features0.descriptors, features1.descriptors,
                                            self.min_cossim))

    def synchronize(self):
        """Nothing is asynchronous on the CPU."""

    def features(self, slot):
        """Host :class:`xfeat_ros.pipeline.Features` of a submitted slot."""
        return slot.features

    def matches(self, slot):
        """Host :class:`xfeat_ros.pipeline.MatchResult` of a slot (None if not matched)."""
        return slot.matches

    def results(self, slots):
        """``[(features, matches)]`` of ``slots`` (host objects already)."""
        return [(slot.features, slot.matches) for slot in slots]


# -- configuration and factory --------------------------------------------------------------------

@dataclass(frozen=True)
class EngineConfig:
    """
    Everything that selects and sets up an engine.

    ``backend`` one of :data:`BACKENDS`; ``weights`` a path ('' for the lookup
    of :func:`xfeat_ros.weights.resolve_weights`) or a loaded weights dict;
    ``gpu`` the CUDA device index; ``num_threads`` ONNX Runtime's CPU threads
    (0: its default).
    """

    backend: str = 'auto'
    weights: object = ''
    gpu: int = 0
    num_threads: int = 0
    top_k: int = TOP_K
    threshold: float = THRESHOLD
    min_cossim: float = MIN_COSSIM


def cpu_engine(config):
    """Build the ONNX Runtime engine of ``config`` (any backend field)."""
    from xfeat_ros.backbone import OnnxRuntimeBackbone
    from xfeat_ros.network_onnx import build_model
    from xfeat_ros.weights import load_weights, resolve_weights
    weights = config.weights
    if not isinstance(weights, dict):
        weights = load_weights(resolve_weights(weights))
    return CpuEngine(OnnxRuntimeBackbone(build_model(weights), config.num_threads),
                     config.top_k, config.threshold, config.min_cossim)


def create_engine(config=EngineConfig(), logger=None):
    """
    Create the engine of ``config``: the one factory of the package.

    ``onnxruntime``: the CPU engine. A GPU backend: that GPU engine, or
    :class:`xfeat_ros.errors.BackendError` when it is unusable. ``auto``: the
    GPU engine when one is usable (TensorRT, then PyTorch CUDA), else the CPU
    engine, saying why in ``logger`` (a ``logging`` or rclpy logger).
    Weights problems raise :class:`xfeat_ros.errors.WeightsError` whatever the
    backend.
    """
    log = logger or LOG
    if config.backend not in BACKENDS:
        raise BackendError(f'unknown backend {config.backend!r} (choose from '
                           f'{", ".join(BACKENDS)})')
    if config.backend == CPU_BACKEND:
        return cpu_engine(config)
    try:
        from xfeat_ros.gpu.engine import create_gpu_engine
        engine = create_gpu_engine(config.backend, config.weights, config.gpu, config.top_k,
                                   config.threshold, config.min_cossim)
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
    return group


def engine_config(args):
    """Return the :class:`EngineConfig` of options added by :func:`add_engine_args`."""
    return EngineConfig(**{f.name: getattr(args, f.name) for f in fields(EngineConfig)})
