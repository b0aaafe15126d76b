# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Model-space preparation: floor-of-32 size and bilinear resize (CPU)."""

import numpy as np

from xfeat_ros.errors import ImageTooSmallError

MODEL_STRIDE = 32


def model_size(height, width):
    """
    Return the network input size ``(mh, mw)`` for an ``height x width`` image.

    Both sides are floored to a multiple of 32; an image smaller than 32 pixels
    on a side has no valid model size and raises :class:`ImageTooSmallError`.
    """
    if height < MODEL_STRIDE or width < MODEL_STRIDE:
        raise ImageTooSmallError(
            f'image {width}x{height} is smaller than {MODEL_STRIDE} px on a side')
    return (height // MODEL_STRIDE) * MODEL_STRIDE, (width // MODEL_STRIDE) * MODEL_STRIDE


def _linear_taps(in_size, out_size):
    """
    Source indices and weights of a 1-D half-pixel linear resize.

    PyTorch ``interpolate(mode='bilinear', align_corners=False)`` semantics:
    ``src = (dst + 0.5) * in / out - 0.5`` clamped at 0, neighbour clamped at
    the last index. Returns ``(i0, i1, w1)`` with float32 weights.
    """
    scale = np.float64(np.float32(in_size / out_size))
    dst = np.arange(out_size, dtype=np.float64)
    # One rounding, like PyTorch's fused multiply-add: scale * (dst + 0.5) - 0.5.
    src = np.maximum((scale * (dst + 0.5) - 0.5).astype(np.float32), np.float32(0.0))
    i0 = np.floor(src).astype(np.int64)
    i0 = np.minimum(i0, in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    w1 = (src - i0).astype(np.float32)
    return i0, i1, w1


def resize_bilinear(image, out_height, out_width):
    """Resize float32 [H, W] to [out_height, out_width] (align_corners=False, no antialias)."""
    in_h, in_w = image.shape
    if (in_h, in_w) == (out_height, out_width):
        return np.ascontiguousarray(image, dtype=np.float32)
    r0, r1, rw = _linear_taps(in_h, out_height)
    c0, c1, cw = _linear_taps(in_w, out_width)
    rows = image[r0] * (np.float32(1.0) - rw)[:, None] + image[r1] * rw[:, None]
    out = rows[:, c0] * (np.float32(1.0) - cw)[None, :] + rows[:, c1] * cw[None, :]
    return out.astype(np.float32, copy=False)


def to_model_space(grey):
    """
    Resize a grey [H, W] float32 image to model size.

    Returns ``(model_image [mh, mw] float32, (rh, rw))`` where ``rh = H / mh``
    and ``rw = W / mw`` scale model pixels back to original pixels.
    """
    height, width = grey.shape
    mh, mw = model_size(height, width)
    return resize_bilinear(grey, mh, mw), (height / mh, width / mw)
