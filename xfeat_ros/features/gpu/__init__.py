# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The GPU path of xfeat_ros: CuPy/NVRTC kernels and GPU backbones.

* :mod:`xfeat_ros.features.gpu.kernels` - one memoized loader per ``kernels/*.cu``;
* :mod:`xfeat_ros.features.gpu.ops` - launch wrappers (decode + resize, heatmap / NMS /
  scores, top-K, descriptors, mutual-NN matching), one stream, no sync;
* :mod:`xfeat_ros.features.gpu.backbone` - PyTorch CUDA, TensorRT and ONNX Runtime CUDA
  backbones behind one interface;
* :mod:`xfeat_ros.features.gpu.engine` - :class:`~xfeat_ros.features.gpu.engine.GpuEngine` (the
  frame-engine contract of :mod:`xfeat_ros.features.engine`) and
  :func:`~xfeat_ros.features.gpu.factory.create_gpu_engine` for the node.

Importing this package needs only NumPy; CuPy (and PyTorch or TensorRT) are
imported when an engine, a backbone or a kernel module is created.
"""


def unavailable_reason(gpu=0):
    """Why the GPU path cannot run here (a sentence), or None when it can."""
    try:
        import cupy
    except ImportError:
        return 'cupy is not installed'
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        return f'no usable CUDA device ({exc})'
    if not 0 <= int(gpu) < count:
        return f'no CUDA device {gpu} ({count} visible)'
    return None
