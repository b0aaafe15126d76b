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
``synchronize`` is a no-op; the GPU engine (``xfeat_ros.features.gpu``) enqueues device
work on one stream and copies only the final results down.

:class:`EngineConfig` is the one engine configuration (its defaults come from
:mod:`xfeat_ros.defaults`), :func:`create_engine` the one factory with the
``auto`` rule, :func:`add_engine_args` the options of every command line.
"""

from dataclasses import dataclass
import sys
from typing import Protocol

from xfeat_ros.defaults import MIN_COSSIM, THRESHOLD, TOP_K
from xfeat_ros.errors import BackendError, DeviceError
from xfeat_ros.features.image_codec import decode_image_msg
from xfeat_ros.features.match import mutual_nn_match
from xfeat_ros.features.pipeline import CpuPipeline, MatchResult
from xfeat_ros.features.spread import NO_SPREAD, Spread
from xfeat_ros.logs import package_logger

LOG = package_logger(__name__)

CPU_BACKEND = 'onnxruntime'
GPU_BACKENDS = ('tensorrt', 'pytorch', 'onnxruntime_cuda')  # auto tries tensorrt, then pytorch
BACKENDS = ('auto', CPU_BACKEND) + GPU_BACKENDS


@dataclass(frozen=True)
class Capabilities:
    """
    What an engine offers beyond the core calls; each true flag promises its methods.

    ``groups``: ``submit_group(msgs, slots, previous=None, chain=False)`` (a
    whole group's detection in one call, see :func:`group_submit`) and
    ``expect_groups(frames)``; ``arming``: ``arm(like, slot, previous=None,
    placement=None, tracks=None)`` and ``disarm()`` (a camera's next frame
    enqueued before it comes, :mod:`xfeat_ros.runtime.arming`);
    ``image_buffers``: ``image_buffer(nbytes)`` (memory an image is taken
    into straight from the middleware); ``epipolar``: the engine verifies
    frame-to-frame matches itself (else the tracks' check runs on the host);
    ``jpeg_decoder``: ``jpeg_decoder()`` returns a decoder of JPEG payloads
    whose images the engine takes (:mod:`xfeat_ros.features.gpu.jpeg`), or None
    where it has none (compressed images are then decoded on the CPU).
    """

    groups: bool = False
    arming: bool = False
    image_buffers: bool = False
    epipolar: bool = False
    jpeg_decoder: bool = False


NO_CAPABILITIES = Capabilities()


class Engine(Protocol):
    """The frame engine contract (see the module docstring); ``device`` 'cpu' or 'cuda:N'."""

    name: str
    device: str
    capabilities: Capabilities

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
        """Host :class:`xfeat_ros.features.pipeline.Features` of a submitted slot."""

    def matches(self, slot):
        """Host :class:`xfeat_ros.features.pipeline.MatchResult` of a matched slot, else None."""

    def results(self, slots):
        """``[(features(slot), matches(slot))]`` of ``slots`` (an engine may batch the copies)."""

    def match_features(self, features0, features1):
        """Match two host Features now; return a :class:`MatchResult`."""


def group_submit(engine):
    """
    Return the engine's ``submit_group(msgs, slots)`` (:attr:`Capabilities.groups`), or None.

    What ``submit`` would do for each ``(msg, slot)`` pair, in one call, so a
    batched backbone runs the whole group at once (the GPU engine's
    :meth:`xfeat_ros.features.gpu.engine.GpuEngine.submit_group`); matches follow with
    ``submit_match``. It raises the :class:`xfeat_ros.errors.ImageError` of a
    bad frame before enqueuing anything (the scheduler then submits frame by
    frame to reject just that one).
    """
    return engine.submit_group if engine.capabilities.groups else None


def expect_groups(engine, frames):
    """
    Tell ``engine`` the most frames it may be given as one group (its optional hook).

    The GPU engine readies its backbone for every batch size up to that at
    once (:meth:`xfeat_ros.features.gpu.engine.GpuEngine.expect_groups`); engines
    without :attr:`Capabilities.groups` have nothing to ready.
    """
    if engine.capabilities.groups:
        engine.expect_groups(frames)


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
    """Engine over :class:`xfeat_ros.features.pipeline.CpuPipeline` (ONNX Runtime + NumPy)."""

    device = 'cpu'
    capabilities = NO_CAPABILITIES

    def __init__(self, backbone, top_k=TOP_K, threshold=THRESHOLD, min_cossim=MIN_COSSIM,
                 spread=NO_SPREAD):
        """
        Build on a host backbone; thresholds can be changed between frames.

        An active ``spread`` (:class:`xfeat_ros.features.spread.Spread`) makes
        each frame's features the candidates of the spread selection.
        """
        self.pipeline = CpuPipeline(backbone, top_k, threshold, spread, min_cossim)
        self.name = backbone.name

    @property
    def min_cossim(self):
        """Return the matching threshold (the pipeline tells it to a frame's selection)."""
        return self.pipeline.min_cossim

    def configure(self, top_k=None, threshold=None, min_cossim=None):
        """Change detection or matching settings; takes effect on the next submit."""
        if top_k is not None:
            self.pipeline.top_k = int(top_k)
        if threshold is not None:
            self.pipeline.threshold = float(threshold)
        if min_cossim is not None:
            self.pipeline.min_cossim = float(min_cossim)

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
        """Host :class:`xfeat_ros.features.pipeline.Features` of a submitted slot."""
        return slot.features

    def matches(self, slot):
        """Host :class:`~xfeat_ros.features.pipeline.MatchResult` of a slot (None: unmatched)."""
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
    of :func:`xfeat_ros.features.weights.resolve_weights`) or a loaded weights dict;
    ``gpu`` the CUDA device index; ``num_threads`` ONNX Runtime's CPU threads
    (0: its default); ``min_distance``, ``grid_cell_px``, ``max_per_cell`` the
    keypoints' spread and ``carry_frames`` the tracks carried through the
    dense descriptor map (:class:`xfeat_ros.features.spread.Spread`; all 0:
    off, upstream's keypoints).
    """

    backend: str = 'auto'
    weights: object = ''
    gpu: int = 0
    num_threads: int = 0
    top_k: int = TOP_K
    threshold: float = THRESHOLD
    min_cossim: float = MIN_COSSIM
    min_distance: float = 0.0
    grid_cell_px: int = 0
    max_per_cell: int = 0
    carry_frames: int = 0

    def __post_init__(self):
        """Check the spread settings (:class:`xfeat_ros.errors.ParameterError`)."""
        self.spread  # building it validates

    @property
    def spread(self):
        """Return the :class:`xfeat_ros.features.spread.Spread` of these settings."""
        return Spread(float(self.min_distance), int(self.grid_cell_px), int(self.max_per_cell),
                      int(self.carry_frames))
