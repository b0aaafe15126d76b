# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The XFeat backbone in PyTorch, written from the spec (needs torch).

Same network and same outputs as :mod:`xfeat_ros.features.network_onnx`: input grey
[B, 1, H, W] in [0, 1] at model size; outputs ``(feats [B, 64, H/8, W/8],
keypoint_logits [B, 65, H/8, W/8], reliability [B, 1, H/8, W/8])``. Module
names equal upstream's ``XFeatModel`` so upstream state dicts load directly.
Used by the GPU (PyTorch CUDA) backend and as a cross-check of the ONNX graph.
"""

import torch
from torch import nn
import torch.nn.functional as F  # noqa: N812

from xfeat_ros.features.network_onnx import BN_EPS, STRIDES


class BasicLayer(nn.Module):
    """Conv2d (no bias) -> BatchNorm2d (affine=False) -> ReLU."""

    def __init__(self, cin, cout, stride=1, kernel=3):
        super().__init__()
        self.layer = nn.Sequential(
            nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False),
            nn.BatchNorm2d(cout, affine=False, eps=BN_EPS),
            nn.ReLU(inplace=True))

    def forward(self, x):
        """Apply the layer."""
        return self.layer(x)


def _stack(channels, block, kernels):
    return [BasicLayer(cin, cout, stride, k) for (cin, cout), stride, k
            in zip(channels, STRIDES[block], kernels)]


class XFeatNet(nn.Module):
    """XFeat backbone and heads (no fine matcher)."""

    def __init__(self):
        super().__init__()
        self.norm = nn.InstanceNorm2d(1, eps=BN_EPS)
        self.skip1 = nn.Sequential(nn.AvgPool2d(4, stride=4), nn.Conv2d(1, 24, 1))
        self.block1 = nn.Sequential(*_stack(((1, 4), (4, 8), (8, 8), (8, 24)), 'block1',
                                            (3, 3, 3, 3)))
        self.block2 = nn.Sequential(*_stack(((24, 24), (24, 24)), 'block2', (3, 3)))
        self.block3 = nn.Sequential(*_stack(((24, 64), (64, 64), (64, 64)), 'block3',
                                            (3, 3, 1)))
        self.block4 = nn.Sequential(*_stack(((64, 64),) * 3, 'block4', (3, 3, 3)))
        self.block5 = nn.Sequential(*_stack(((64, 128), (128, 128), (128, 128), (128, 64)),
                                            'block5', (3, 3, 3, 1)))
        self.block_fusion = nn.Sequential(*_stack(((64, 64),) * 2, 'block_fusion', (3, 3)),
                                          nn.Conv2d(64, 64, 1))
        self.heatmap_head = nn.Sequential(*_stack(((64, 64),) * 2, 'heatmap_head', (1, 1)),
                                          nn.Conv2d(64, 1, 1), nn.Sigmoid())
        self.keypoint_head = nn.Sequential(*_stack(((64, 64),) * 3, 'keypoint_head',
                                                   (1, 1, 1)),
                                           nn.Conv2d(64, 65, 1))

    @staticmethod
    def unfold8(x):
        """Each 8x8 block of [B, 1, H, W] -> 64 channels (8 * row + col)."""
        b, _, h, w = x.shape
        x = x.reshape(b, h // 8, 8, w // 8, 8).permute(0, 2, 4, 1, 3)
        return x.reshape(b, 64, h // 8, w // 8)

    def forward(self, image):
        """Run the network on grey [B, 1, H, W] in [0, 1]."""
        x = self.norm(image)
        x1 = self.block1(x)
        x2 = self.block2(x1 + self.skip1(x))
        x3 = self.block3(x2)
        x4 = self.block4(x3)
        x5 = self.block5(x4)
        size = x3.shape[-2:]
        x4 = F.interpolate(x4, size, mode='bilinear', align_corners=False)
        x5 = F.interpolate(x5, size, mode='bilinear', align_corners=False)
        feats = self.block_fusion(x3 + x4 + x5)
        reliability = self.heatmap_head(feats)
        logits = self.keypoint_head(self.unfold8(x))
        return feats, logits, reliability

    @classmethod
    def from_weights(cls, weights):
        """Build the network from the dict of :func:`xfeat_ros.features.weights.load_weights`."""
        net = cls()
        state = {k: torch.from_numpy(v) for k, v in weights.items()}
        net.load_state_dict(state, strict=False)
        missing = {k for k in net.state_dict() if not k.endswith('num_batches_tracked')}
        if missing - set(state):
            raise KeyError(f'weights lack {sorted(missing - set(state))[:3]}')
        return net.eval()
