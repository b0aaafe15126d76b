# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The PyTorch backbone's own kernels and launches (``kernels/backbone.cu``), on PyTorch's streams.

* :func:`cupy_stream` - a CuPy stream object for a stream PyTorch owns (the
  CUDA stream protocol, one object per stream);
* :func:`launch_fuse_scales` - ``x3 + up(x4) + up(x5)`` in one kernel;
* :func:`launch_conv3x3_relu` / :func:`use_direct_convs` - direct FP32
  3x3 convolutions + bias + ReLU for block1's small-channel layers;
* :func:`launch_conv3x3_relu_wide` / :func:`use_wide_convs` - the same for
  the 3x3 layers of blocks 2-5 and the fusion block (small maps; used on
  blocks 4 and 5 by default);
* :func:`launch_instance_norm` / :func:`use_fused_norm` - the input's
  instance norm in two launches (PyTorch's mean / variance take ten);
* :func:`raw_graph_launcher` - a captured graph launched without PyTorch.

Every launch goes to PyTorch's current stream, so it is captured when a
CUDA graph capture is under way; outputs come from PyTorch's allocator.
"""

import numpy as np

from xfeat_ros.features.gpu.kernels import (CONV_BLOCK, CONV_CO, INORM_ITEMS, INORM_PARTS,
                                            INORM_THREADS, WIDE_CO, WIDE_SPLIT)

FUSE_THREADS = 256
FUSE_MAX_BLOCKS = 4096


class _StreamHandle:
    """A raw ``cudaStream_t`` behind the CUDA stream protocol (``__cuda_stream__``)."""

    def __init__(self, ptr):
        self.ptr = int(ptr)

    def __cuda_stream__(self):
        return (0, self.ptr)


_CUPY_STREAMS = {}


def cupy_stream(ptr):
    """
    Return a CuPy stream object for the raw stream handle ``ptr`` owned elsewhere.

    ``cupy.cuda.Stream.from_external`` where CuPy has it (>= 14; ``ExternalStream``
    is deprecated there), else ``cupy.cuda.ExternalStream``. One object per
    handle (e.g. a PyTorch stream), kept for the process's life: no
    per-launch wrapper, and never a destructor run on a stream CuPy does not
    own.
    """
    stream = _CUPY_STREAMS.get(ptr)
    if stream is None:
        import cupy
        from_external = getattr(cupy.cuda.Stream, 'from_external', None)
        stream = (from_external(_StreamHandle(ptr)) if from_external is not None
                  else cupy.cuda.ExternalStream(ptr))
        _CUPY_STREAMS[ptr] = stream
    return stream


def _current_cupy_stream(torch):
    return cupy_stream(torch.cuda.current_stream().cuda_stream)


def launch_fuse_scales(kernel, x3, x4, x5, torch):
    """
    ``(x3 + up(x4)) + up(x5)`` in one launch of ``backbone.cu``'s ``fuse_scales``.

    On PyTorch's current stream (so inside a CUDA graph capture when one is
    under way); the output comes from PyTorch's allocator (the graph's pool).
    """
    x3, x4, x5 = (x.contiguous() for x in (x3, x4, x5))
    out = torch.empty_like(x3)
    planes = x3.shape[0] * x3.shape[1]
    (height, width), (h4, w4), (h5, w5) = x3.shape[-2:], x4.shape[-2:], x5.shape[-2:]
    total = planes * height * width
    blocks = max(1, min((total + FUSE_THREADS - 1) // FUSE_THREADS, FUSE_MAX_BLOCKS))
    with _current_cupy_stream(torch):
        kernel((blocks,), (FUSE_THREADS,),
               (np.uint64(x3.data_ptr()), np.uint64(x4.data_ptr()), np.uint64(x5.data_ptr()),
                np.int32(planes), np.int32(height), np.int32(width), np.int32(h4),
                np.int32(w4), np.int32(h5), np.int32(w5), np.uint64(out.data_ptr())))
    return out


# (in channels, out channels, stride) -> backbone.cu entry point
DIRECT_CONVS = {(1, 4, 1): 'conv3x3_relu_1x4', (4, 8, 2): 'conv3x3_relu_4x8_s2',
                (8, 8, 1): 'conv3x3_relu_8x8', (8, 24, 2): 'conv3x3_relu_8x24_s2'}


def _launch_conv(kernel, grid, block, x, weight, bias, stride, torch):
    """
    One 3x3 conv + bias + ReLU kernel of ``backbone.cu`` on PyTorch's current stream.

    ``grid(frames, cout, ho, wo)`` gives the launch grid; the output comes from
    PyTorch's allocator (the graph's pool during a capture).
    """
    x = x.contiguous()
    frames, _, height, width = x.shape
    cout = weight.shape[0]
    ho, wo = (height - 1) // stride + 1, (width - 1) // stride + 1
    out = torch.empty((frames, cout, ho, wo), device=x.device, dtype=x.dtype)
    with _current_cupy_stream(torch):
        kernel(grid(frames, cout, ho, wo), block,
               (np.uint64(x.data_ptr()), np.uint64(weight.data_ptr()),
                np.uint64(bias.data_ptr()), np.int32(height), np.int32(width), np.int32(ho),
                np.int32(wo), np.uint64(out.data_ptr())))
    return out


def launch_conv3x3_relu(kernel, x, weight, bias, stride, torch):
    """
    ``relu(conv3x3(x, weight, bias, stride, padding=1))`` by a ``backbone.cu`` kernel.

    ``x`` [B, CIN, H, W] float32 CUDA, ``weight`` [COUT, CIN, 3, 3], ``bias``
    [COUT] (contiguous); on PyTorch's current stream, the output from PyTorch's
    allocator (as :func:`launch_fuse_scales`).
    """
    return _launch_conv(kernel, lambda frames, cout, ho, wo: (
        -(-wo // CONV_BLOCK[0]), -(-ho // CONV_BLOCK[1]), frames * (cout // min(cout, CONV_CO))),
        CONV_BLOCK, x, weight, bias, stride, torch)


def _direct_conv_module(torch, launch, kernel, weight, bias, stride):
    """Return a module running a folded conv + bias + ReLU by ``launch`` (one of the above)."""
    class _DirectConvReLU(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(weight.detach().contiguous(), requires_grad=False)
            self.bias = torch.nn.Parameter(bias.detach().contiguous(), requires_grad=False)

        def forward(self, x):
            return launch(kernel, x, self.weight, self.bias, stride, torch)

    return _DirectConvReLU()


def _replace_convs(layers, names, launch, gpu, torch, stop_at_other=False):
    """
    Run each BasicLayer of ``layers`` whose 3x3 conv has a shape in ``names`` by ``launch``.

    ``names``: (in channels, out channels, stride) -> ``backbone.cu`` entry point.
    With ``stop_at_other`` the first layer of another shape ends the walk.
    Returns how many layers were replaced.
    """
    from xfeat_ros.features.gpu import kernels, ops
    module = kernels.backbone_module(gpu)
    done = 0
    for layer in layers:
        conv = layer.layer[0]
        stride = int(conv.stride[0])
        name = names.get((conv.weight.shape[1], conv.weight.shape[0], stride))
        if name is None or tuple(conv.weight.shape[2:]) != (3, 3) or conv.bias is None:
            if stop_at_other:
                break
            continue
        layer.layer = torch.nn.Sequential(_direct_conv_module(
            torch, launch, ops.function(module, name), conv.weight, conv.bias, stride))
        done += 1
    return done


def use_direct_convs(net, layers, gpu, torch):
    """
    Run the first ``layers`` of ``net.block1`` (folded, on the GPU) with ``backbone.cu``.

    Each must be a 3x3 conv + bias + ReLU of a shape in :data:`DIRECT_CONVS`;
    returns how many were replaced (stops at the first that is not).
    """
    return _replace_convs(list(net.block1)[:max(0, int(layers))], DIRECT_CONVS,
                          launch_conv3x3_relu, gpu, torch, stop_at_other=True)


# (in channels, out channels, stride) -> backbone.cu entry point (blocks 2-5, fusion)
WIDE_CONVS = {(24, 24, 1): 'conv3x3_relu_24x24', (24, 64, 2): 'conv3x3_relu_24x64_s2',
              (64, 64, 1): 'conv3x3_relu_64x64', (64, 64, 2): 'conv3x3_relu_64x64_s2',
              (64, 128, 2): 'conv3x3_relu_64x128_s2', (128, 128, 1): 'conv3x3_relu_128x128'}
# Blocks 4 and 5 only (maps of 30x40 and 15x20 at 640x480): there the kernels beat
# cuDNN at one frame (2-3.5x per layer) and match it at 8; on block 2, 3 and the
# fusion block's larger maps they lose at 8 frames (docs/design-notes.md).
WIDE_BLOCKS = ('block4', 'block5')


def launch_conv3x3_relu_wide(kernel, x, weight, bias, stride, torch):
    """
    :func:`launch_conv3x3_relu` for the ``conv3x3_relu_wide`` kernels of :data:`WIDE_CONVS`.

    A block per 32 output pixels and :data:`WIDE_CO` channels, its
    :data:`WIDE_SPLIT` warps splitting the input channels; same arguments,
    stream and allocator.
    """
    return _launch_conv(kernel, lambda frames, cout, ho, wo: (
        -(-(ho * wo) // 32), cout // WIDE_CO, frames), (32 * WIDE_SPLIT,),
        x, weight, bias, stride, torch)


def use_wide_convs(net, gpu, torch, blocks=WIDE_BLOCKS):
    """
    Run the 3x3 layers of :data:`WIDE_BLOCKS` (folded, on the GPU) with ``backbone.cu``.

    The kernels cover every 3x3 shape of blocks 2-5 and the fusion block
    (:data:`WIDE_CONVS`, all tested against cuDNN); ``blocks`` picks where
    they run (default :data:`WIDE_BLOCKS`).

    Every BasicLayer there whose conv has a shape in :data:`WIDE_CONVS` is
    replaced (the 1x1 layers stay with cuDNN); returns how many.
    """
    from xfeat_ros.features.model import BasicLayer
    layers = [layer for block in blocks for layer in getattr(net, block)
              if isinstance(layer, BasicLayer)]
    return _replace_convs(layers, WIDE_CONVS, launch_conv3x3_relu_wide, gpu, torch)


def launch_instance_norm(stats, normalize, x, eps, torch):
    """
    ``(x - mean) / sqrt(var + eps)`` per frame of ``x`` [B, 1, H, W] float32 CUDA.

    ``backbone.cu``'s ``instance_stats`` (partial sums, double) then
    ``instance_normalize``, on PyTorch's current stream; the partial sums and
    the output come from PyTorch's allocator (the graph's pool in a capture).
    """
    x = x.contiguous()
    frames = x.shape[0]
    n = x[0].numel()
    partial = torch.empty((frames, INORM_PARTS, 2), device=x.device, dtype=torch.float64)
    out = torch.empty_like(x)
    per_block = INORM_THREADS * INORM_ITEMS
    with _current_cupy_stream(torch):
        stats((INORM_PARTS, frames), (INORM_THREADS,),
              (np.uint64(x.data_ptr()), np.int32(n), np.uint64(partial.data_ptr())))
        normalize((-(-n // per_block), frames), (INORM_THREADS,),
                  (np.uint64(x.data_ptr()), np.int32(n), np.uint64(partial.data_ptr()),
                   np.float32(eps), np.uint64(out.data_ptr())))
    return out


def use_fused_norm(net, gpu, torch, eps):
    """
    Run ``net.norm`` (the one-channel input's instance norm) with ``backbone.cu``.

    Same maths as :func:`xfeat_ros.features.gpu.backbone.fold_for_inference`'s module
    (biased variance, ``eps`` inside the square root), another summation
    order (double partial sums); two launches instead of ten.
    """
    from xfeat_ros.features.gpu import kernels, ops
    module = kernels.backbone_module(gpu)
    stats = ops.function(module, 'instance_stats')
    normalize = ops.function(module, 'instance_normalize')

    class _FusedInstanceNorm(torch.nn.Module):
        def forward(self, x):
            return launch_instance_norm(stats, normalize, x, eps, torch)

    net.norm = _FusedInstanceNorm()
    return net


def raw_graph_launcher(graph):
    """
    Return ``launch(stream_ptr)`` of a captured ``torch.cuda.CUDAGraph``, or None.

    One ``cudaGraphLaunch`` of its executable graph through CuPy's runtime
    bindings: the replay without PyTorch's stream and device context managers
    (tens of microseconds of host time per call). The graph holds no random
    number state, so a plain launch is all its ``replay`` does. None where
    PyTorch (``raw_cuda_graph_exec``, >= 2.7) or CuPy (``graphLaunch``) lack it.
    """
    try:
        import cupy
        graph_launch = cupy.cuda.runtime.graphLaunch
        executable = int(graph.raw_cuda_graph_exec())
    except (ImportError, AttributeError, RuntimeError, TypeError):
        return None
    return lambda stream_ptr: graph_launch(executable, stream_ptr)
