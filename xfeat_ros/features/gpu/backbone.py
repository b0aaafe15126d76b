# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
GPU backbone backends: the XFeat network on device buffers, on the caller's stream.

One interface for every backend::

    backbone.name                       'pytorch' | 'tensorrt' | 'onnxruntime_cuda'
    backbone.run(image, outputs, stream)
    backbone.release(image)             forget state bound to that buffer set

``image`` is a CuPy float32 device array [B, 1, mh, mw] (B frames, grey in
[0, 1], model size, ``mh``/``mw`` multiples of 32); ``outputs`` is the tuple
of CuPy float32 device arrays ``(feats [B, 64, h, w], logits [B, 65, h, w],
reliability [B, 1, h, w])`` with ``h = mh / 8``, ``w = mw / 8``; ``stream`` is
the ``cupy.cuda.Stream`` all work is enqueued on. ``run`` returns without
synchronizing (except the ONNX Runtime backend, see its docstring). Buffers
are expected to be reused frame after frame, so per-buffer state (PyTorch
views and CUDA graphs per batch size, TensorRT contexts) is built once and
kept until ``release``.

The TensorRT and ONNX Runtime CUDA backends live in
:mod:`xfeat_ros.features.gpu.backbone_onnx` (both run the project's ONNX graph; both
unverified here).
"""

import contextlib
import hashlib

import numpy as np

from xfeat_ros.errors import BackendError
from xfeat_ros.features.gpu.backbone_kernels import (launch_fuse_scales, raw_graph_launcher,
                                                     use_direct_convs, use_fused_norm,
                                                     use_wide_convs, WIDE_BLOCKS)
from xfeat_ros.logs import package_logger

LOG = package_logger(__name__)

PRECISIONS = ('fp32', 'fp16')
FEATURE_CHANNELS = 64
LOGIT_CHANNELS = 65
WARMUP_RUNS = 3
DIRECT_LAYERS = 4  # leading block1 layers run by backbone.cu's direct kernels (0: cuDNN)


def buffer_key(image, outputs):
    """Identity of a buffer set: device pointers and the input shape."""
    return (int(image.data.ptr), tuple(int(o.data.ptr) for o in outputs), tuple(image.shape))


def expected_output_shapes(mh, mw, batch=1):
    """Map output role -> shape for ``batch`` frames of model size ``mh x mw``."""
    h, w = mh // 8, mw // 8
    return {'feats': (batch, FEATURE_CHANNELS, h, w),
            'keypoint_logits': (batch, LOGIT_CHANNELS, h, w), 'reliability': (batch, 1, h, w)}


def weights_digest(weights):
    """Short SHA-256 over a weights dict (names and float32 bytes), for cache names."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(weights[name], dtype=np.float32).tobytes())
    return digest.hexdigest()[:12]


# -- PyTorch ------------------------------------------------------------------------------------

@contextlib.contextmanager
def exact_convolutions(torch, benchmark=False):
    """
    Run cuDNN convolutions in IEEE FP32 (no TF32) inside the block, then restore.

    PyTorch's default lets cuDNN use TF32 for FP32 convolutions (10-bit
    mantissa), which breaks parity. Uses the per-backend ``fp32_precision``
    API where it exists (PyTorch >= 2.9), else the legacy ``allow_tf32`` flag,
    never both (PyTorch rejects a mix).
    """
    cudnn = torch.backends.cudnn
    conv = getattr(cudnn, 'conv', None)
    new_api = conv is not None and hasattr(conv, 'fp32_precision')
    saved_benchmark = cudnn.benchmark
    if new_api:
        saved = conv.fp32_precision
        conv.fp32_precision = 'ieee'
    else:
        saved = cudnn.allow_tf32
        cudnn.allow_tf32 = False
    cudnn.benchmark = bool(benchmark)
    try:
        yield
    finally:
        cudnn.benchmark = saved_benchmark
        if new_api:
            conv.fp32_precision = saved
        else:
            cudnn.allow_tf32 = saved


def _instance_norm_module(torch, eps):
    """Return an instance norm over one image that reduces with all SMs (PyTorch module)."""
    class _InstanceNorm(torch.nn.Module):
        def forward(self, x):
            mean = x.mean(dim=(2, 3), keepdim=True)
            centred = x - mean
            var = (centred * centred).mean(dim=(2, 3), keepdim=True)
            return centred / torch.sqrt(var + eps)

    return _InstanceNorm()


def _conv_relu_module(torch, conv):
    """One cuDNN call for conv + bias + ReLU (``torch.cudnn_convolution_relu``)."""
    class _ConvReLU(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = conv.weight
            self.bias = conv.bias
            self.stride = list(conv.stride)
            self.padding = list(conv.padding)

        def forward(self, x):
            return torch.cudnn_convolution_relu(x, self.weight, self.bias, self.stride,
                                                self.padding, [1, 1], 1)

    return _ConvReLU()


def fold_for_inference(net, torch, fused_relu=False):
    """
    Rewrite an :class:`xfeat_ros.features.model.XFeatNet` (CPU, eval) for fast GPU inference.

    Every BasicLayer's BatchNorm is folded into its convolution with
    :func:`xfeat_ros.features.network_onnx.fold_batchnorm` (the very weights of the
    ONNX graph the CPU path runs), which removes 24 BatchNorm kernels per
    frame; ``InstanceNorm2d(1)``, which PyTorch reduces in one thread block,
    becomes mean / variance reductions that use the whole GPU. Same maths:
    ``(x - mean) / sqrt(var + eps)``, biased variance. With ``fused_relu``
    each folded conv, its bias and its ReLU are one cuDNN call (CUDA only).
    Returns ``net``.
    """
    from xfeat_ros.features.model import BasicLayer
    from xfeat_ros.features.network_onnx import BN_EPS, fold_batchnorm
    for layer in net.modules():
        if not isinstance(layer, BasicLayer):
            continue
        conv, norm = layer.layer[0], layer.layer[1]
        weight, bias = fold_batchnorm(conv.weight.detach().cpu().numpy(),
                                      norm.running_mean.detach().cpu().numpy(),
                                      norm.running_var.detach().cpu().numpy(), norm.eps)
        fused = torch.nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size,
                                stride=conv.stride, padding=conv.padding, bias=True)
        with torch.no_grad():
            fused.weight.copy_(torch.from_numpy(weight))
            fused.bias.copy_(torch.from_numpy(bias))
        if fused_relu:
            layer.layer = torch.nn.Sequential(_conv_relu_module(torch, fused))
        else:
            layer.layer = torch.nn.Sequential(fused, torch.nn.ReLU(inplace=True))
    net.norm = _instance_norm_module(torch, BN_EPS)
    return net.eval()


def forward_folded(net, image, torch, side=None, fuse=None):
    """
    :meth:`xfeat_ros.features.model.XFeatNet.forward`, with two optional speed-ups.

    ``side`` (a CUDA stream): the keypoint head, which depends only on the
    normalised image, runs there beside blocks 1-5, the fusion and the heatmap
    head (a fork and a join that a CUDA graph keeps as parallel branches).
    ``fuse`` (``fuse(x3, x4, x5)``): the two bilinear resizes and two additions
    before the fusion block in one kernel (:func:`launch_fuse_scales`).
    Same operations otherwise, same results up to rounding.
    """
    import torch.nn.functional as F  # noqa: N812
    main = torch.cuda.current_stream()
    x = net.norm(image)
    if side is not None:
        side.wait_stream(main)
        with torch.cuda.stream(side):
            logits = net.keypoint_head(net.unfold8(x))
        x.record_stream(side)
    x1 = net.block1(x)
    x2 = net.block2(x1 + net.skip1(x))
    x3 = net.block3(x2)
    x4 = net.block4(x3)
    x5 = net.block5(x4)
    if fuse is not None:
        fused = fuse(x3, x4, x5)
    else:
        size = x3.shape[-2:]
        fused = (x3 + F.interpolate(x4, size, mode='bilinear', align_corners=False)
                 + F.interpolate(x5, size, mode='bilinear', align_corners=False))
    feats = net.block_fusion(fused)
    reliability = net.heatmap_head(feats)
    if side is not None:
        main.wait_stream(side)
        logits.record_stream(main)
    else:
        logits = net.keypoint_head(net.unfold8(x))
    return feats, logits, reliability


class _TorchBinding:
    """Torch views of one buffer set and, when captured, its CUDA graph."""

    def __init__(self, image, feats, logits, reliability):
        self.image = image
        self.feats = feats
        self.logits = logits
        self.reliability = reliability
        self.graph = None
        self.launch = None  # launch(stream pointer): the graph's executable, without PyTorch


class TorchBackbone:
    """
    :class:`xfeat_ros.features.model.XFeatNet` on a CUDA device, zero-copy with CuPy.

    Buffers are shared through DLPack (``torch.from_dlpack`` of the CuPy
    arrays, once per buffer set); the network runs on the caller's stream
    through ``torch.cuda.ExternalStream``. With ``fold=True`` (default) the
    network is first rewritten by :func:`fold_for_inference` (BatchNorm folded
    into the convolutions, a parallel instance norm: 1.01 -> 0.54 ms at
    640x480 on an H200). Per buffer set (so per batch size and input size)
    the forward pass is captured as a CUDA graph (``cuda_graphs=True``) after
    a short warm-up and replayed on every later call, which removes
    PyTorch's per-op launch overhead; all graphs of a backbone share one
    memory pool (their replays never overlap: one stream).
    Speed-ups (all on by default, each measured on an H200 in
    ``docs/design-notes.md``; same results up to rounding, golden parity kept):
    ``fused_relu`` runs conv + bias + ReLU as one cuDNN call per layer;
    ``parallel_heads`` runs the keypoint head on a second stream beside the
    rest; ``fused_scales`` adds the three feature scales in one kernel of
    ``kernels/backbone.cu`` (:func:`forward_folded`); ``direct_convs`` runs
    the first that many layers of block1 (1 -> 4, 4 -> 8 / 2, 8 -> 8,
    8 -> 24 / 2 channels; 0 to 4) with ``backbone.cu``'s direct FP32
    convolutions instead of cuDNN (:func:`use_direct_convs`); ``wide_convs``
    runs the 3x3 layers of blocks 4 and 5 with the wide direct kernels
    (:func:`use_wide_convs`; a tuple of block names picks others);
    ``fused_norm`` runs the input's instance norm as two ``backbone.cu``
    launches (:func:`use_fused_norm`) instead of PyTorch's ten. The last
    five need ``fold=True`` (and CuPy, else they are left off) and FP32.
    ``precision='fp32'`` (default) runs FP32 with TF32 disabled in cuDNN
    (parity with the CPU path needs it: scores within 1e-4 relative);
    ``'fp16'`` runs the network in half precision and casts the outputs back
    (0.44 ms, but measured outside parity: scores off by up to 13 %, 98.9 %
    of golden keypoints found, so it is not the default).
    """

    name = 'pytorch'

    def __init__(self, weights, gpu=0, precision='fp32', cuda_graphs=True,
                 cudnn_benchmark=False, channels_last=False, fold=True, fused_relu=True,
                 parallel_heads=True, fused_scales=True, direct_convs=DIRECT_LAYERS,
                 wide_convs=True, fused_norm=True):
        """Build the network from weights (:func:`~xfeat_ros.features.weights.load_weights`)."""
        try:
            import torch
        except ImportError as exc:
            raise BackendError('PyTorch is not installed') from exc
        if precision not in PRECISIONS:
            raise BackendError(f'unknown precision {precision!r} (choose from {PRECISIONS})')
        if not torch.cuda.is_available():
            raise BackendError('PyTorch sees no CUDA device')
        if not 0 <= int(gpu) < torch.cuda.device_count():
            raise BackendError(f'no CUDA device {gpu} ({torch.cuda.device_count()} visible)')
        from xfeat_ros.features.model import XFeatNet
        self.torch = torch
        self.device = torch.device('cuda', int(gpu))
        self.dtype = torch.float16 if precision == 'fp16' else torch.float32
        self.precision = precision
        self.cuda_graphs = bool(cuda_graphs)
        self.cudnn_benchmark = bool(cudnn_benchmark)
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.fused_relu = bool(fused_relu) and bool(fold)
        self.parallel_heads = bool(parallel_heads) and bool(fold)
        self._fuse = None
        if fused_scales and fold and not channels_last and precision == 'fp32':
            self._fuse = self._fuse_scales_kernel(int(gpu), torch)
        net = XFeatNet.from_weights(weights)
        if fold:
            net = fold_for_inference(net, torch, self.fused_relu)
        self.net = net.to(self.device, self.dtype).to(memory_format=self.memory_format).eval()
        self.direct_convs = 0
        if direct_convs and fold and not channels_last and precision == 'fp32':
            try:
                self.direct_convs = use_direct_convs(self.net, direct_convs, int(gpu), torch)
            except (ImportError, BackendError) as exc:
                LOG.info('direct convolutions off (%s)', exc)
        self.wide_convs = 0
        if wide_convs and fold and not channels_last and precision == 'fp32':
            try:
                blocks = wide_convs if isinstance(wide_convs, tuple) else WIDE_BLOCKS
                self.wide_convs = use_wide_convs(self.net, int(gpu), torch, blocks)
            except (ImportError, BackendError) as exc:
                LOG.info('wide direct convolutions off (%s)', exc)
        self.fused_norm = False
        if fused_norm and fold and not channels_last and precision == 'fp32':
            from xfeat_ros.features.network_onnx import BN_EPS
            try:
                use_fused_norm(self.net, int(gpu), torch, BN_EPS)
                self.fused_norm = True
            except (ImportError, BackendError) as exc:
                LOG.info('fused instance norm off (%s)', exc)
        self._bindings = {}
        self._streams = {}
        self._pool = None  # graph memory pool shared by every captured batch/input size
        self._side = None

    @staticmethod
    def _fuse_scales_kernel(gpu, torch):
        """Return ``fuse(x3, x4, x5)`` on ``backbone.cu`` (loaded now), or None without CuPy."""
        try:
            from xfeat_ros.features.gpu import kernels, ops
            kernel = ops.function(kernels.backbone_module(gpu), 'fuse_scales')
        except (ImportError, BackendError) as exc:
            LOG.info('fused feature scales off (%s)', exc)
            return None
        return lambda x3, x4, x5: launch_fuse_scales(kernel, x3, x4, x5, torch)

    def _cudnn(self):
        return exact_convolutions(self.torch, self.cudnn_benchmark)

    def _torch_stream(self, stream):
        ext = self._streams.get(stream.ptr)
        if ext is None:
            ext = self.torch.cuda.ExternalStream(stream.ptr, device=self.device)
            self._streams[stream.ptr] = ext
        return ext

    def _forward_into(self, binding):
        image = binding.image.to(self.dtype, memory_format=self.memory_format)
        if self.parallel_heads and self._side is None:
            self._side = self.torch.cuda.Stream(device=self.device)
        if self.parallel_heads or self._fuse is not None:
            feats, logits, reliability = forward_folded(
                self.net, image, self.torch, self._side if self.parallel_heads else None,
                self._fuse)
        else:
            feats, logits, reliability = self.net(image)
        binding.feats.copy_(feats)
        binding.logits.copy_(logits)
        binding.reliability.copy_(reliability)

    def _bind(self, image, outputs, ext):
        views = [self.torch.from_dlpack(array) for array in (image,) + tuple(outputs)]
        binding = _TorchBinding(*views)
        side = self.torch.cuda.Stream(device=self.device)
        side.wait_stream(ext)
        with self.torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self._forward_into(binding)
        ext.wait_stream(side)
        if self.cuda_graphs:
            graph = self.torch.cuda.CUDAGraph()
            try:
                with self.torch.cuda.graph(graph, pool=self._pool, stream=side,
                                           capture_error_mode='thread_local'):
                    self._forward_into(binding)
                binding.graph = graph
                binding.launch = raw_graph_launcher(graph)
                if self._pool is None:
                    self._pool = graph.pool()
                LOG.info('captured a CUDA graph of the backbone for %d x %dx%d (%s)',
                         image.shape[0], image.shape[-1], image.shape[-2], self.precision)
            except RuntimeError as exc:
                LOG.warning('CUDA graph capture failed (%s); running the backbone eagerly', exc)
            ext.wait_stream(side)
        return binding

    def run(self, image, outputs, stream):
        """Enqueue the network on ``stream``: ``image`` -> ``outputs`` (no sync)."""
        torch = self.torch
        binding = self._bindings.get(buffer_key(image, outputs))
        if binding is not None and binding.launch is not None:
            binding.launch(stream.ptr)  # the per-frame path: one graph launch
            return
        ext = self._torch_stream(stream)
        if binding is not None and binding.graph is not None:
            with torch.cuda.device(self.device), torch.cuda.stream(ext):
                binding.graph.replay()
            return
        with torch.cuda.device(self.device), torch.no_grad(), self._cudnn():
            if binding is None:
                binding = self._bind(image, outputs, ext)
                self._bindings[buffer_key(image, outputs)] = binding
            with torch.cuda.stream(ext):
                if binding.graph is not None:
                    binding.graph.replay()
                else:
                    self._forward_into(binding)

    def ready(self, image, outputs):
        """
        Tell whether :meth:`run` on these buffers is one graph launch (nothing to capture).

        Only then may it be enqueued behind a closed gate (:mod:`xfeat_ros.features.gpu.armed`):
        a capture synchronizes the device.
        """
        binding = self._bindings.get(buffer_key(image, outputs))
        return binding is not None and (binding.launch is not None or binding.graph is not None)

    def release(self, image):
        """Drop the views and graphs bound to ``image``'s buffer set."""
        ptr = int(image.data.ptr)
        for key in [k for k in self._bindings if k[0] == ptr]:
            del self._bindings[key]
