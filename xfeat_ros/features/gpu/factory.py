# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Build a :class:`~xfeat_ros.features.gpu.engine.GpuEngine`: device, backbone, weights."""

from xfeat_ros.defaults import MIN_COSSIM, THRESHOLD, TOP_K
from xfeat_ros.errors import BackendError
from xfeat_ros.features.engine import GPU_BACKENDS
from xfeat_ros.features.gpu.backbone import TorchBackbone
from xfeat_ros.features.gpu.backbone_onnx import OnnxRuntimeCudaBackbone, TensorRTBackbone
from xfeat_ros.features.gpu.buffers import cupy_module
from xfeat_ros.features.gpu.engine import ENGINE_BACKENDS, GpuEngine, MAX_BATCH
from xfeat_ros.features.spread import NO_SPREAD
from xfeat_ros.features.weights import load_weights, resolve_weights
from xfeat_ros.logs import package_logger

LOG = package_logger('xfeat_ros.features.gpu.engine')

AUTO_ORDER = ('tensorrt', 'pytorch')


def _check_device(gpu):
    cupy = cupy_module()
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise BackendError(f'no usable CUDA device: {exc}') from exc
    if not 0 <= int(gpu) < count:
        raise BackendError(f'no CUDA device {gpu} ({count} visible)')


def select_backend(backend, weights, gpu=0, options=None):
    """
    Create the GPU backbone for ``backend`` ('auto': TensorRT, then PyTorch CUDA).

    ``weights`` is a loaded weights dict; ``options`` maps a backend name to
    keyword arguments for its class. Raises :class:`BackendError` (with every
    reason) when none is usable.
    """
    if backend not in ENGINE_BACKENDS:
        raise BackendError(f'unknown GPU backend {backend!r} (choose from {ENGINE_BACKENDS})')
    options = options or {}
    order = AUTO_ORDER if backend == 'auto' else (backend,)
    reasons = []
    for name in order:
        try:
            return create_gpu_backbone(name, weights, gpu, **options.get(name, {}))
        except BackendError as exc:
            LOG.info('GPU backend %s unavailable: %s', name, exc)
            reasons.append(f'{name}: {exc}')
    raise BackendError('no usable GPU backend (' + '; '.join(reasons) + ')')


def create_gpu_engine(backend='auto', weights='', gpu=0, top_k=TOP_K, threshold=THRESHOLD,
                      min_cossim=MIN_COSSIM, options=None, max_batch=MAX_BATCH,
                      spread=NO_SPREAD):
    """
    Build a :class:`GpuEngine` for the node.

    ``backend`` is one of :data:`ENGINE_BACKENDS`; ``weights`` a path ('' for
    the lookup of :func:`xfeat_ros.features.weights.resolve_weights`) or a loaded dict.
    Raises :class:`BackendError` when CuPy, the device or every candidate
    backend is unusable (the node then falls back to the CPU engine), and
    :class:`xfeat_ros.errors.WeightsError` for unusable weights. ``spread``: the
    keypoints' spread (:class:`xfeat_ros.features.spread.Spread`; off by default).
    """
    if backend not in ENGINE_BACKENDS:
        raise BackendError(f'unknown GPU backend {backend!r} (choose from {ENGINE_BACKENDS})')
    _check_device(gpu)
    if not isinstance(weights, dict):
        weights = load_weights(resolve_weights(weights))
    backbone = select_backend(backend, weights, gpu, options)
    engine = GpuEngine(backbone, gpu, top_k, threshold, min_cossim, max_batch=max_batch,
                       spread=spread)
    LOG.info('GPU engine: backend %s on cuda:%d (asked for %s)', engine.name, int(gpu), backend)
    return engine


def create_gpu_backbone(backend, weights, gpu=0, **options):
    """Instantiate one GPU backbone by name (see :data:`GPU_BACKENDS`)."""
    classes = {'tensorrt': TensorRTBackbone, 'pytorch': TorchBackbone,
               'onnxruntime_cuda': OnnxRuntimeCudaBackbone}
    if backend not in classes:
        raise BackendError(f'unknown GPU backend {backend!r} (choose from {GPU_BACKENDS})')
    return classes[backend](weights, gpu=gpu, **options)
