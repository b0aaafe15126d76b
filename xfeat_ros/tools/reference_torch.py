# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
A PyTorch reference of upstream XFeat's sparse detection and matching (needs torch).

Written here from the algorithm (``../shared/docs/xfeat-spec.md``) with the
same operations upstream uses, so that ``xfeat_bench`` can time "the obvious
PyTorch implementation" next to this package's pipelines on the same device:
``F.interpolate`` (model-size resize), the network of :class:`xfeat_ros.features.model.XFeatNet`,
``F.normalize``, ``softmax`` + pixel shuffle (heatmap), 5x5 max-pool NMS,
``nonzero``, ``grid_sample`` (nearest / bilinear scores, bicubic descriptors),
``argsort`` (top-K) and a matrix product with mutual arg-max (matching).
Eager PyTorch, FP32, no CUDA graphs, no custom kernels.

Input: uint8 images [B, H, W, 3] (RGB) or [B, H, W] (grey) on the device.
Output per image: keypoints [N, 2] (x, y in original pixels), scores [N]
(descending), descriptors [N, 64] (unit length), all on the device.
"""

import torch
import torch.nn.functional as F  # noqa: N812

from xfeat_ros.defaults import MIN_COSSIM, THRESHOLD, TOP_K
from xfeat_ros.features.model import XFeatNet
from xfeat_ros.features.weights import load_weights, resolve_weights

NMS_KERNEL = 5


def sample(values, keypoints, model_hw, mode):
    """
    Sample a map [C, h, w] at model-pixel keypoints [N, 2] with upstream's convention.

    Positions are normalized by (mw - 1, mh - 1) of the MODEL size and read by
    ``grid_sample`` with ``align_corners=False`` (zeros outside); returns [N, C].
    """
    mh, mw = model_hw
    scale = torch.tensor([mw - 1, mh - 1], dtype=keypoints.dtype, device=keypoints.device)
    grid = (2.0 * keypoints / scale - 1.0)[None, None]
    out = F.grid_sample(values[None], grid, mode=mode, align_corners=False)
    return out[0, :, 0].t()


def heatmap(logits):
    """Keypoint logits [B, 65, h, w] -> heatmap [B, 1, 8h, 8w] (softmax, no dustbin)."""
    return F.pixel_shuffle(F.softmax(logits, dim=1)[:, :64], 8)


def nms_positions(heat, threshold):
    """Per image, (x, y) model pixels [N, 2] that are 5x5 local maxima above ``threshold``."""
    local_max = F.max_pool2d(heat, NMS_KERNEL, stride=1, padding=NMS_KERNEL // 2)
    keep = (heat == local_max) & (heat > threshold)
    return [keep[b, 0].nonzero().flip(-1).to(heat.dtype) for b in range(heat.shape[0])]


class ReferenceXFeat:
    """Upstream's detectAndCompute + match in plain PyTorch, batched like upstream."""

    def __init__(self, weights='', device='cpu', top_k=TOP_K, threshold=THRESHOLD,
                 min_cossim=MIN_COSSIM):
        """Build the network from ``weights`` (path or loaded dict) on ``device``."""
        if not isinstance(weights, dict):
            weights = load_weights(resolve_weights(weights))
        self.device = torch.device(device)
        self.net = XFeatNet.from_weights(weights).to(self.device).eval()
        self.top_k = int(top_k)
        self.threshold = float(threshold)
        self.min_cossim = float(min_cossim)

    @torch.inference_mode()
    def detect_and_compute(self, images):
        """Detect and describe uint8 images [B, H, W(, C)]; returns a list of dicts."""
        x = images.float() / 255.0
        grey = x.mean(dim=-1) if x.dim() == 4 else x
        grey = grey[:, None]
        height, width = grey.shape[-2:]
        mh, mw = (height // 32) * 32, (width // 32) * 32
        if (mh, mw) != (height, width):
            grey = F.interpolate(grey, (mh, mw), mode='bilinear', align_corners=False)
        feats, logits, reliability = self.net(grey)
        feats = F.normalize(feats, dim=1)
        heat = heatmap(logits)
        out = []
        scale = torch.tensor([width / mw, height / mh], device=feats.device)
        for b, positions in enumerate(nms_positions(heat, self.threshold)):
            scores = (sample(heat[b], positions, (mh, mw), 'nearest')
                      * sample(reliability[b], positions, (mh, mw), 'bilinear'))[:, 0]
            scores[torch.all(positions == 0, dim=-1)] = -1.0
            order = torch.argsort(-scores)[:self.top_k]
            positions, scores = positions[order], scores[order]
            descriptors = F.normalize(sample(feats[b], positions, (mh, mw), 'bicubic'), dim=-1)
            valid = scores > 0
            out.append({'keypoints': positions[valid] * scale, 'scores': scores[valid],
                        'descriptors': descriptors[valid]})
        return out

    @torch.inference_mode()
    def match(self, descriptors0, descriptors1, min_cossim=None):
        """Mutual nearest neighbours (cosine > ``min_cossim`` when positive): (idx0, idx1)."""
        min_cossim = self.min_cossim if min_cossim is None else min_cossim
        if len(descriptors0) == 0 or len(descriptors1) == 0:
            empty = torch.zeros(0, dtype=torch.long, device=descriptors0.device)
            return empty, empty
        cossim = descriptors0 @ descriptors1.t()
        best, match01 = cossim.max(dim=1)
        # Like upstream, the other direction is a second product (a column-wise
        # max of the first is several times slower on the CPU).
        match10 = (descriptors1 @ descriptors0.t()).max(dim=1).indices
        idx0 = torch.arange(len(match01), device=cossim.device)
        mutual = match10[match01] == idx0
        if min_cossim > 0:
            mutual &= best > min_cossim
        return idx0[mutual], match01[mutual]
