# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The PyTorch backbone's speed-ups and ``kernels/backbone.cu`` against plain PyTorch.

* every option (fused conv + ReLU, parallel keypoint head, fused scales,
  direct convolutions of block1, cuDNN autotuning) against the plain folded
  network, captured and replayed;
* ``fuse_scales`` and the four direct 3x3 convolutions against PyTorch's own
  operators on the same GPU tensors;
* CuPy launches on PyTorch's streams (no deprecated ``ExternalStream``) and
  the graph launch without PyTorch's context managers.

GPU tests carry ``@pytest.mark.gpu`` and are skipped (with the reason) where
CuPy or a CUDA device is missing.
"""

import warnings

from golden_util import GOLDEN_IMAGES
import numpy as np
import pytest
from test_gpu_kernels import poison
from xfeat_ros.features.gpu import kernels, ops
from xfeat_ros.tools.image_files import read_image


PLAIN = {'fused_relu': False, 'parallel_heads': False, 'fused_scales': False,
         'direct_convs': 0, 'wide_convs': False, 'fused_norm': False}
WIDE_LAYERS = 6  # 3x3 layers of blocks 4 and 5
ALL_WIDE = ('block2', 'block3', 'block4', 'block5', 'block_fusion')  # 12 3x3 layers


def run_backbone(cp, backbone, images):
    """Capture, then replay ``backbone`` on host ``images`` [B, 1, 480, 640]; host outputs."""
    stream = cp.cuda.Stream(non_blocking=True)
    image = cp.asarray(images)
    frames = images.shape[0]
    out = tuple(poison(cp, (frames, c, 60, 80), np.float32) for c in (64, 65, 1))
    for _ in range(2):
        backbone.run(image, out, stream)
    stream.synchronize()
    return [o.get() for o in out]


@pytest.mark.gpu
@pytest.mark.parametrize('options', [{}, {**PLAIN, 'fused_relu': True},
                                     {**PLAIN, 'parallel_heads': True},
                                     {**PLAIN, 'fused_scales': True},
                                     {**PLAIN, 'direct_convs': 4},
                                     {**PLAIN, 'wide_convs': True},
                                     {**PLAIN, 'wide_convs': ALL_WIDE},
                                     {**PLAIN, 'fused_norm': True},
                                     {'direct_convs': 2},
                                     {'wide_convs': False},
                                     {'cudnn_benchmark': True}],
                         ids=['defaults', 'fused_relu', 'parallel_heads', 'fused_scales',
                              'direct_convs', 'wide_convs', 'wide_convs=all', 'fused_norm',
                              'defaults+direct_convs=2',
                              'defaults-wide_convs', 'defaults+cudnn_benchmark'])
@pytest.mark.parametrize('frames', [1, 3])
def test_backbone_options_agree_with_plain(cp, weights, shared_dir, options, frames):
    """Every speed-up of the PyTorch backbone against the plain folded network."""
    from xfeat_ros.features.gpu.backbone import TorchBackbone
    pixels, _ = read_image(shared_dir / 'data' / GOLDEN_IMAGES['oxford_graf_img1'])
    grey = (pixels.astype(np.float32) / 255).mean(axis=2)[:480, :640]
    rng = np.random.default_rng(frames)
    images = np.stack([grey] + [rng.random((480, 640), np.float32)
                                for _ in range(frames - 1)])[:, None]
    plain = TorchBackbone(weights, 0, **PLAIN)
    fast = TorchBackbone(weights, 0, **options)
    assert fast.direct_convs == options.get('direct_convs', 4) and plain.direct_convs == 0
    wide = options.get('wide_convs', True)
    assert fast.wide_convs == (12 if wide == ALL_WIDE else WIDE_LAYERS if wide else 0)
    assert plain.wide_convs == 0
    assert fast.fused_norm == options.get('fused_norm', True) and not plain.fused_norm
    for want, got in zip(run_backbone(cp, plain, images), run_backbone(cp, fast, images)):
        assert np.all(np.isfinite(got))
        scale = np.max(np.abs(want))
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * scale)


@pytest.mark.gpu
@pytest.mark.parametrize('shape', [(1, 64, 60, 80), (3, 64, 36, 44), (2, 5, 8, 12)])
def test_fuse_scales_equals_interpolate_and_add(shape):
    """backbone.cu's fuse_scales against F.interpolate + additions on the same GPU tensors."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from xfeat_ros.features.gpu.backbone_kernels import launch_fuse_scales
    kernel = ops.function(kernels.backbone_module(0), 'fuse_scales')
    gen = torch.Generator(device='cuda').manual_seed(shape[2])
    b, c, h, w = shape
    x3, x4, x5 = (torch.randn(b, c, h // k, w // k, device='cuda', generator=gen)
                  for k in (1, 2, 4))
    want = (x3 + F.interpolate(x4, (h, w), mode='bilinear', align_corners=False)
            + F.interpolate(x5, (h, w), mode='bilinear', align_corners=False))
    with warnings.catch_warnings():
        warnings.simplefilter('error', DeprecationWarning)  # no ExternalStream
        got = launch_fuse_scales(kernel, x3, x4, x5, torch)
    torch.cuda.synchronize()
    np.testing.assert_allclose(got.cpu().numpy(), want.cpu().numpy(), rtol=0, atol=2e-6)


@pytest.mark.gpu
@pytest.mark.parametrize('shape', [(1, 1, 480, 640), (3, 1, 37, 50), (2, 1, 8, 9),
                                   (1, 1, 1, 1), (1, 1, 720, 1280)])
def test_fused_instance_norm_equals_torch(shape):
    """backbone.cu's two-launch instance norm against F.instance_norm on the same frames."""
    import torch
    from xfeat_ros.features.gpu.backbone_kernels import launch_instance_norm
    from xfeat_ros.features.network_onnx import BN_EPS
    module = kernels.backbone_module(0)
    stats = ops.function(module, 'instance_stats')
    normalize = ops.function(module, 'instance_normalize')
    gen = torch.Generator(device='cuda').manual_seed(shape[-1])
    # images in [0, 1] with a per-frame offset and contrast, as grey inputs are
    x = torch.rand(shape, device='cuda', generator=gen)
    x = x * torch.linspace(0.2, 1.0, shape[0], device='cuda').view(-1, 1, 1, 1) + 0.05
    # the reference in float64 on the host (F.instance_norm refuses a 1 x 1 frame)
    grey = x.cpu().numpy().astype(np.float64)
    mean = grey.mean(axis=(2, 3), keepdims=True)
    want = (grey - mean) / np.sqrt(((grey - mean) ** 2).mean(axis=(2, 3), keepdims=True) + BN_EPS)
    got = launch_instance_norm(stats, normalize, x, BN_EPS, torch)
    again = launch_instance_norm(stats, normalize, x, BN_EPS, torch)
    alone = launch_instance_norm(stats, normalize, x[-1:], BN_EPS, torch)
    torch.cuda.synchronize()
    assert got.shape == x.shape and got.dtype == torch.float32
    # float rounding of the centred value and the division; |out| is a few units at most
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=0, atol=4e-6)
    assert torch.equal(got, again)  # fixed reduction order: bitwise repeatable
    assert torch.equal(got[-1:], alone)  # and the same frame alone or in a batch


def conv_against_cudnn(name, launch, cin, cout, stride, shape, atol):
    """Run ``backbone.cu``'s ``name`` by ``launch`` and F.conv2d + relu on the same data."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from xfeat_ros.features.gpu.backbone import exact_convolutions
    kernel = ops.function(kernels.backbone_module(0), name)
    gen = torch.Generator(device='cuda').manual_seed(cin * 100 + cout + shape[1])
    frames, h, w = shape
    x = torch.randn(frames, cin, h, w, device='cuda', generator=gen)
    weight = torch.randn(cout, cin, 3, 3, device='cuda', generator=gen) / (3 * cin ** 0.5)
    bias = torch.randn(cout, device='cuda', generator=gen) * 0.1
    with torch.no_grad(), exact_convolutions(torch):
        want = F.relu(F.conv2d(x, weight, bias, stride=stride, padding=1))
    got = launch(kernel, x, weight, bias, stride, torch)
    torch.cuda.synchronize()
    assert got.shape == want.shape
    assert want.numel() < 1000 or torch.count_nonzero(want) > 0.2 * want.numel()
    np.testing.assert_allclose(got.cpu().numpy(), want.cpu().numpy(), rtol=0, atol=atol)


@pytest.mark.gpu
@pytest.mark.parametrize('cin,cout,stride', [(1, 4, 1), (4, 8, 2), (8, 8, 1), (8, 24, 2)])
@pytest.mark.parametrize('shape', [(1, 480, 640), (3, 37, 50), (2, 8, 9), (1, 1, 1)])
def test_direct_conv_equals_cudnn(cin, cout, stride, shape):
    """A direct 3x3 conv + bias + ReLU against F.conv2d (FP32, no TF32) + relu."""
    from xfeat_ros.features.gpu.backbone_kernels import DIRECT_CONVS, launch_conv3x3_relu
    # same products, another summation order: FP32 rounding of up to 72 terms
    conv_against_cudnn(DIRECT_CONVS[(cin, cout, stride)], launch_conv3x3_relu, cin, cout,
                       stride, shape, atol=3e-5)


@pytest.mark.gpu
@pytest.mark.parametrize('cin,cout,stride', [(24, 24, 1), (24, 64, 2), (64, 64, 1), (64, 64, 2),
                                             (64, 128, 2), (128, 128, 1)])
@pytest.mark.parametrize('shape', [(1, 120, 160), (3, 15, 20), (2, 7, 9), (1, 1, 1)])
def test_wide_conv_equals_cudnn(cin, cout, stride, shape):
    """A wide direct 3x3 conv + bias + ReLU (blocks 2-5, fusion) against F.conv2d + relu."""
    from xfeat_ros.features.gpu.backbone_kernels import launch_conv3x3_relu_wide, WIDE_CONVS
    # outputs of order 1, up to 1152 terms summed in another order than cuDNN's
    conv_against_cudnn(WIDE_CONVS[(cin, cout, stride)], launch_conv3x3_relu_wide, cin, cout,
                       stride, shape, atol=1e-4)


@pytest.mark.gpu
def test_cupy_stream_wraps_a_torch_stream_once(cp):
    """One CuPy object per PyTorch stream; kernels on it run in that stream's order."""
    import torch
    from xfeat_ros.features.gpu.backbone_kernels import cupy_stream
    side = torch.cuda.Stream()
    with warnings.catch_warnings():
        warnings.simplefilter('error', DeprecationWarning)
        wrapped = cupy_stream(side.cuda_stream)
    assert wrapped is cupy_stream(side.cuda_stream) and wrapped.ptr == side.cuda_stream
    x = torch.zeros(1 << 20, device='cuda')
    with torch.cuda.stream(side):
        x.add_(1.0)
        with wrapped:
            y = cp.asarray(x)
            y *= 3.0  # after the add, on the same stream
        x.add_(1.0)
    side.synchronize()
    assert float(x.min()) == float(x.max()) == 4.0


@pytest.mark.gpu
def test_backbone_graph_launches_without_torch(cp, weights):
    """A captured backbone replays through its raw executable graph, same outputs as eager."""
    import torch
    from xfeat_ros.features.gpu.backbone import TorchBackbone
    images = np.random.default_rng(3).random((2, 1, 480, 640), np.float32)
    graphed = TorchBackbone(weights, 0)
    got = run_backbone(cp, graphed, images)
    (binding,) = graphed._bindings.values()
    if hasattr(torch.cuda.CUDAGraph, 'raw_cuda_graph_exec'):
        assert binding.launch is not None
    eager = run_backbone(cp, TorchBackbone(weights, 0, cuda_graphs=False), images)
    for a, b in zip(got, eager):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * np.max(np.abs(b)))


def test_conv_launch_shapes(monkeypatch):
    """Both conv launchers' grids, blocks and arguments (fakes for the kernel and PyTorch)."""
    import contextlib
    from types import SimpleNamespace
    from xfeat_ros.features.gpu import backbone_kernels as bk
    monkeypatch.setattr(bk, '_current_cupy_stream', lambda torch: contextlib.nullcontext())

    def tensor(shape, ptr):
        return SimpleNamespace(shape=shape, contiguous=lambda: tensor(shape, ptr),
                               data_ptr=lambda: ptr, device='cuda', dtype='float32')
    fake_torch = SimpleNamespace(empty=lambda shape, device, dtype: tensor(shape, 4))
    calls = []

    def kernel(grid, block, args):
        calls.append((grid, block, [int(a) for a in args]))
    x, bias = tensor((2, 64, 30, 40), 1), tensor((128,), 3)
    out = bk.launch_conv3x3_relu_wide(kernel, x, tensor((128, 64, 3, 3), 2), bias, 2, fake_torch)
    assert out.shape == (2, 128, 15, 20)
    assert calls[-1] == ((-(-300 // 32), 128 // kernels.WIDE_CO, 2), (32 * kernels.WIDE_SPLIT,),
                         [1, 2, 3, 30, 40, 15, 20, 4])
    out = bk.launch_conv3x3_relu(kernel, tensor((3, 8, 37, 50), 1), tensor((24, 8, 3, 3), 2),
                                 tensor((24,), 3), 2, fake_torch)
    assert out.shape == (3, 24, 19, 25)
    bx, by = kernels.CONV_BLOCK
    assert calls[-1] == ((-(-25 // bx), -(-19 // by), 3 * (24 // kernels.CONV_CO)),
                         kernels.CONV_BLOCK, [1, 2, 3, 37, 50, 19, 25, 4])
