# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The ONNX backbone graph (network_onnx) against the PyTorch XFeatNet (model).

Both are written from the spec independently; the ONNX one folds BatchNorm into
the convolutions and computes the instance norm with reductions. Outputs must
agree within 1e-4 (absolute) at every model size, dynamic or fixed.
"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from xfeat_ros.errors import ModelExportError, XFeatError
from xfeat_ros.features.backbone import OnnxRuntimeBackbone
from xfeat_ros.features.model import XFeatNet
from xfeat_ros.features.network_onnx import (BN_EPS, build_model, fold_batchnorm, INPUT_NAME,
                                             OUTPUT_NAMES)
from xfeat_ros.features.preprocess import to_model_space
from xfeat_ros.tools.image_files import read_grey

OUTPUT_ATOL = 1e-4
FOLD_ATOL = 1e-5

REAL_IMAGES = ['tum_fr2_desk/rgb/1311868169.163498.png',
               'euroc_v101_stereo/cam0/1403715273262142976.png',
               'oxford_graf/img1.ppm']


@pytest.fixture(scope='module')
def onnx_dynamic(weights):
    """ONNX Runtime backbone on the dynamic-size graph."""
    return OnnxRuntimeBackbone(build_model(weights))


@pytest.fixture(scope='module')
def torch_net(weights):
    """Return the PyTorch network in eval mode."""
    return XFeatNet.from_weights(weights)


def run_torch(net, image):
    with torch.inference_mode():
        feats, logits, rel = net(torch.from_numpy(image)[None, None])
    return feats[0].numpy(), logits[0].numpy(), rel[0, 0].numpy()


def assert_outputs_close(onnx_out, torch_out, model_hw):
    h, w = model_hw[0] // 8, model_hw[1] // 8
    shapes = [(64, h, w), (65, h, w), (h, w)]
    for name, a, b, shape in zip(OUTPUT_NAMES, onnx_out, torch_out, shapes):
        assert a.shape == shape and b.shape == shape, name
        assert a.dtype == np.float32, name
        assert np.all(np.isfinite(a)), name
        diff = float(np.max(np.abs(a - b)))
        assert diff <= OUTPUT_ATOL, f'{name}: max abs diff {diff:.3g} at {model_hw}'


@pytest.mark.parametrize('model_hw', [(32, 32), (64, 96), (96, 64), (480, 640)],
                         ids=lambda hw: f'{hw[0]}x{hw[1]}')
def test_dynamic_graph_matches_torch_on_random_images(onnx_dynamic, torch_net, model_hw):
    rng = np.random.default_rng(list(model_hw))
    # Smooth-ish random image in [0, 1]: noise plus a gradient, like a real frame.
    image = rng.random(model_hw, dtype=np.float32) * 0.5
    image += np.linspace(0, 0.5, model_hw[1], dtype=np.float32)[None, :]
    assert_outputs_close(onnx_dynamic.run(image), run_torch(torch_net, image), model_hw)


@pytest.mark.parametrize('rel', REAL_IMAGES, ids=lambda p: p.split('/')[0])
def test_dynamic_graph_matches_torch_on_real_images(onnx_dynamic, torch_net, shared_dir, rel):
    image, _ = to_model_space(read_grey(shared_dir / 'data' / rel))
    assert_outputs_close(onnx_dynamic.run(image), run_torch(torch_net, image), image.shape)


def test_constant_image_is_finite(onnx_dynamic, torch_net):
    """Zero variance: the instance norm divides by sqrt(eps), never by zero."""
    image = np.full((64, 64), 0.5, dtype=np.float32)
    assert_outputs_close(onnx_dynamic.run(image), run_torch(torch_net, image), (64, 64))


@pytest.mark.parametrize('model_hw', [(64, 96), (480, 640)], ids=lambda hw: f'{hw[0]}x{hw[1]}')
def test_fixed_size_export(weights, torch_net, model_hw):
    model = build_model(weights, *model_hw)
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 1, *model_hw]
    h, w = model_hw[0] // 8, model_hw[1] // 8
    out_dims = {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim]
                for o in model.graph.output}
    assert out_dims == {'feats': [1, 64, h, w], 'keypoint_logits': [1, 65, h, w],
                        'reliability': [1, 1, h, w]}
    backbone = OnnxRuntimeBackbone(model)
    rng = np.random.default_rng(list(model_hw))
    image = rng.random(model_hw, dtype=np.float32)
    assert_outputs_close(backbone.run(image), run_torch(torch_net, image), model_hw)
    with pytest.raises(Exception):
        backbone.run(np.zeros((model_hw[0] + 32, model_hw[1]), dtype=np.float32))


def test_graph_inputs_and_outputs(weights):
    model = build_model(weights)
    onnx.checker.check_model(model)
    assert [i.name for i in model.graph.input] == [INPUT_NAME] == ['image']
    assert tuple(o.name for o in model.graph.output) == OUTPUT_NAMES
    assert OUTPUT_NAMES == ('feats', 'keypoint_logits', 'reliability')
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims[:2]] == [1, 1]
    assert all(d.dim_param for d in dims[2:])      # dynamic H and W
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=['CPUExecutionProvider'])
    assert [o.name for o in session.get_outputs()] == list(OUTPUT_NAMES)
    outs = session.run(None, {'image': np.zeros((1, 1, 64, 96), np.float32)})
    assert [o.shape for o in outs] == [(1, 64, 8, 12), (1, 65, 8, 12), (1, 1, 8, 12)]
    assert all(o.dtype == np.float32 for o in outs)


def test_reliability_is_a_probability(onnx_dynamic):
    rng = np.random.default_rng(5)
    _, _, rel = onnx_dynamic.run(rng.random((96, 128), dtype=np.float32))
    assert rel.min() >= 0.0 and rel.max() <= 1.0


@pytest.mark.parametrize('hw', [(33, 32), (32, 33), (480, 100), (0, 32), (32, 0), (-32, 32),
                                (16, 16), (31, None), (None, 47)])
def test_fixed_size_must_be_positive_multiple_of_32(weights, hw):
    with pytest.raises(ModelExportError) as info:
        build_model(weights, *hw)
    assert isinstance(info.value, XFeatError)


def test_one_fixed_side_is_allowed(weights):
    model = build_model(weights, 64, None)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[2].dim_value == 64 and dims[3].dim_param


@pytest.mark.parametrize('cin,cout,k,stride', [(1, 4, 3, 1), (8, 24, 3, 2), (64, 65, 1, 1),
                                               (128, 64, 1, 1)])
def test_fold_batchnorm_equals_conv_then_batchnorm(cin, cout, k, stride):
    rng = np.random.default_rng([cin, cout, k, stride])
    weight = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
    mean = rng.standard_normal(cout).astype(np.float32)
    var = rng.uniform(1e-3, 3.0, cout).astype(np.float32)
    var[0] = 0.0                                   # eps alone keeps it finite
    x = torch.from_numpy(rng.standard_normal((1, cin, 24, 40)).astype(np.float32))

    conv = torch.nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)
    bn = torch.nn.BatchNorm2d(cout, affine=False, eps=BN_EPS)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(weight))
        bn.running_mean.copy_(torch.from_numpy(mean))
        bn.running_var.copy_(torch.from_numpy(var))
    bn.eval()
    with torch.inference_mode():
        expected = bn(conv(x)).numpy()

    folded_w, folded_b = fold_batchnorm(weight, mean, var)
    assert folded_w.dtype == np.float32 and folded_b.dtype == np.float32
    assert folded_w.shape == weight.shape and folded_b.shape == (cout,)
    with torch.inference_mode():
        got = F.conv2d(x, torch.from_numpy(folded_w), torch.from_numpy(folded_b),
                       stride=stride, padding=k // 2).numpy()
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(got, expected, rtol=0, atol=FOLD_ATOL * scale)


def test_fold_batchnorm_formula():
    weight = np.ones((2, 1, 1, 1), np.float32)
    mean = np.array([1.0, -2.0], np.float32)
    var = np.array([4.0 - BN_EPS, 0.25 - BN_EPS], np.float32)
    w, b = fold_batchnorm(weight, mean, var)
    np.testing.assert_allclose(w.ravel(), [0.5, 2.0], rtol=1e-6)
    np.testing.assert_allclose(b, [-0.5, 4.0], rtol=1e-6)
