# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Build the XFeat backbone as an ONNX graph straight from NumPy weights.

No PyTorch is needed: the graph is assembled node by node from the spec
(``shared/docs/xfeat-spec.md`` section 2), BatchNorm folded into the
preceding convolution. The graph holds exactly the network:

* input ``image`` float32 [1, 1, H, W]: grey in [0, 1] at model size (H and W
  multiples of 32; dynamic unless a fixed size is asked for);
* outputs ``feats`` [1, 64, H/8, W/8] (not normalised), ``keypoint_logits``
  [1, 65, H/8, W/8] and ``reliability`` [1, 1, H/8, W/8] (after the sigmoid).

Decoding, resizing, softmax, NMS and sampling stay outside, shared by every
backend (the GPU kernels re-implement them on the device).
"""

import numpy as np

from xfeat_ros.errors import ModelExportError

BN_EPS = 1e-5
OPSET = 17
INPUT_NAME = 'image'
OUTPUT_NAMES = ('feats', 'keypoint_logits', 'reliability')

# Stride of every BasicLayer, per block, in weight order (kernel sizes come
# from the weights; padding is kernel // 2).
STRIDES = {
    'block1': (1, 2, 1, 2),
    'block2': (1, 1),
    'block3': (2, 1, 1),
    'block4': (2, 1, 1),
    'block5': (2, 1, 1, 1),
    'block_fusion': (1, 1),
    'heatmap_head': (1, 1),
    'keypoint_head': (1, 1, 1),
}


def fold_batchnorm(weight, mean, var, eps=BN_EPS):
    """Fold an affine-free BatchNorm into the conv before it: ``(weight, bias)``."""
    scale = 1.0 / np.sqrt(var.astype(np.float64) + eps)
    folded = weight.astype(np.float64) * scale[:, None, None, None]
    return folded.astype(np.float32), (-mean.astype(np.float64) * scale).astype(np.float32)


class _Graph:
    """Small helper that accumulates ONNX nodes and initializers."""

    def __init__(self, onnx_module):
        self.onnx = onnx_module
        self.nodes = []
        self.inits = []
        self.count = 0

    def name(self, hint):
        self.count += 1
        return f'{hint}_{self.count}'

    def const(self, hint, array):
        name = self.name(hint)
        self.inits.append(self.onnx.numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type, inputs, hint=None, **attrs):
        out = self.name(hint or op_type.lower())
        self.nodes.append(self.onnx.helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def conv(self, x, weight, bias, stride=1, hint='conv'):
        k = weight.shape[-1]
        pad = k // 2
        return self.op('Conv', [x, self.const(hint + '_w', weight), self.const(hint + '_b', bias)],
                       hint=hint, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad, pad, pad, pad])


def _basic_layer(graph, x, weights, prefix, stride):
    weight, bias = fold_batchnorm(weights[f'{prefix}.layer.0.weight'],
                                  weights[f'{prefix}.layer.1.running_mean'],
                                  weights[f'{prefix}.layer.1.running_var'])
    return graph.op('Relu', [graph.conv(x, weight, bias, stride, hint=prefix)])


def _block(graph, x, weights, block):
    for i, stride in enumerate(STRIDES[block]):
        x = _basic_layer(graph, x, weights, f'{block}.{i}', stride)
    return x


def _plain_conv(graph, x, weights, prefix):
    return graph.conv(x, weights[f'{prefix}.weight'], weights[f'{prefix}.bias'], hint=prefix)


def _resize_like(graph, x, like):
    """Bilinear resize of ``x`` to the spatial size of ``like`` (align_corners=False)."""
    n_c = graph.op('Slice', [graph.op('Shape', [x]), graph.const('s0', np.array([0])),
                             graph.const('s2', np.array([2]))])
    h_w = graph.op('Slice', [graph.op('Shape', [like]), graph.const('s2', np.array([2])),
                             graph.const('s4', np.array([4]))])
    sizes = graph.op('Concat', [n_c, h_w], axis=0)
    return graph.op('Resize', [x, '', '', sizes], mode='linear',
                    coordinate_transformation_mode='pytorch_half_pixel')


def _mean_hw(graph, x):
    """
    Mean over H and W as a mean of row means (equal counts, so exact).

    One flat ReduceMean over a whole image sums ~10^5 float32 values in a row
    and was measured here at 4e-5 error; two short reductions keep it at 1e-7.
    """
    rows = graph.op('ReduceMean', [x], axes=[3], keepdims=1)
    return graph.op('ReduceMean', [rows], axes=[2], keepdims=1)


def _instance_norm(graph, x):
    """
    ``(x - mean) / sqrt(var + eps)`` per image, biased variance.

    Written with reductions rather than ONNX Runtime's fused
    InstanceNormalization, whose statistics were measured here at 4e-5 absolute
    error against float64 (PyTorch: 2e-7): enough to push low keypoint scores
    past the 1e-4 relative parity bound.
    """
    centred = graph.op('Sub', [x, _mean_hw(graph, x)])
    var = _mean_hw(graph, graph.op('Mul', [centred, centred]))
    std = graph.op('Sqrt', [graph.op('Add', [var, graph.const('eps', np.float32(BN_EPS))])])
    return graph.op('Div', [centred, std])


def build_model(weights, height=None, width=None):
    """
    Return an ``onnx.ModelProto`` of the backbone.

    ``weights`` is the dict of :func:`xfeat_ros.features.weights.load_weights`. With
    ``height``/``width`` (multiples of 32) the input size is fixed; otherwise
    it is dynamic.
    """
    try:
        import onnx
        import onnx.helper  # noqa: F401
        import onnx.numpy_helper  # noqa: F401
    except ImportError as exc:
        raise ModelExportError('the onnx package is needed to build the model') from exc
    for side in (height, width):
        if side is not None and (side <= 0 or side % 32):
            raise ModelExportError(f'fixed input sides must be positive multiples of 32: {side}')
    g = _Graph(onnx)
    image = INPUT_NAME
    x = _instance_norm(g, image)
    skip = g.op('AveragePool', [x], kernel_shape=[4, 4], strides=[4, 4])
    skip = _plain_conv(g, skip, weights, 'skip1.1')
    x1 = _block(g, x, weights, 'block1')
    x2 = _block(g, g.op('Add', [x1, skip]), weights, 'block2')
    x3 = _block(g, x2, weights, 'block3')
    x4 = _block(g, x3, weights, 'block4')
    x5 = _block(g, x4, weights, 'block5')
    fused = g.op('Add', [g.op('Add', [x3, _resize_like(g, x4, x3)]), _resize_like(g, x5, x3)])
    feats = _plain_conv(g, _block(g, fused, weights, 'block_fusion'), weights, 'block_fusion.2')
    rel = _plain_conv(g, _block(g, feats, weights, 'heatmap_head'), weights, 'heatmap_head.2')
    rel = g.op('Sigmoid', [rel])
    cells = g.op('SpaceToDepth', [x], blocksize=8)
    logits = _plain_conv(g, _block(g, cells, weights, 'keypoint_head'), weights,
                         'keypoint_head.3')
    for src, dst in zip((feats, logits, rel), OUTPUT_NAMES):
        g.nodes.append(onnx.helper.make_node('Identity', [src], [dst]))

    h = height if height is not None else 'height'
    w = width if width is not None else 'width'
    oh = height // 8 if height is not None else 'height_8'
    ow = width // 8 if width is not None else 'width_8'
    f32 = onnx.TensorProto.FLOAT
    graph = onnx.helper.make_graph(
        g.nodes, 'xfeat_backbone',
        [onnx.helper.make_tensor_value_info(image, f32, [1, 1, h, w])],
        [onnx.helper.make_tensor_value_info('feats', f32, [1, 64, oh, ow]),
         onnx.helper.make_tensor_value_info('keypoint_logits', f32, [1, 65, oh, ow]),
         onnx.helper.make_tensor_value_info('reliability', f32, [1, 1, oh, ow])],
        g.inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid('', OPSET)],
                                   producer_name='xfeat_ros')
    model.ir_version = 8
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise ModelExportError(f'generated ONNX model is invalid: {exc}') from exc
    return model
