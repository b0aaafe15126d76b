# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Unit tests of xfeat_ros.features.preprocess: model size and the bilinear resize.

The resize is checked against PyTorch ``F.interpolate(mode='bilinear',
align_corners=False, antialias=False)``, which upstream XFeat uses.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from xfeat_ros.errors import ImageError, ImageTooSmallError
from xfeat_ros.features.preprocess import model_size, resize_bilinear, to_model_space

RESIZE_ATOL = 1e-6


def torch_resize(image, out_h, out_w):
    """Upstream's resize of a [H, W] float32 image."""
    x = torch.from_numpy(np.ascontiguousarray(image))[None, None]
    y = F.interpolate(x, (out_h, out_w), mode='bilinear', align_corners=False, antialias=False)
    return y[0, 0].numpy()


@pytest.mark.parametrize('hw,expected', [
    ((32, 32), (32, 32)),
    ((33, 47), (32, 32)),
    ((63, 64), (32, 64)),
    ((64, 95), (64, 64)),
    ((480, 640), (480, 640)),
    ((480, 752), (480, 736)),
    ((481, 639), (480, 608)),
    ((1536, 2048), (1536, 2048)),
    ((1080, 1920), (1056, 1920)),
    ((31 + 32 * 7, 32 * 9 + 1), (32 * 7, 32 * 9)),
])
def test_model_size_floors_to_32(hw, expected):
    assert model_size(*hw) == expected
    mh, mw = model_size(*hw)
    assert mh % 32 == 0 and mw % 32 == 0
    assert 0 <= hw[0] - mh < 32 and 0 <= hw[1] - mw < 32


@pytest.mark.parametrize('hw', [(31, 32), (32, 31), (31, 31), (0, 100), (100, 0), (1, 1),
                                (31, 4000), (4000, 31)])
def test_model_size_rejects_small_images(hw):
    with pytest.raises(ImageTooSmallError) as info:
        model_size(*hw)
    assert isinstance(info.value, ImageError)
    assert f'{hw[1]}x{hw[0]}' in str(info.value)


def test_to_model_space_rejects_small_images():
    with pytest.raises(ImageTooSmallError):
        to_model_space(np.zeros((31, 64), dtype=np.float32))


@pytest.mark.parametrize('src,dst', [
    ((33, 47), (32, 32)),          # odd downscale by a little
    ((480, 752), (480, 736)),      # width only
    ((481, 639), (480, 608)),
    ((100, 70), (64, 32)),         # strong downscale
    ((1536, 2048), (480, 640)),    # 3.2x downscale
    ((1536, 2048), (1024, 1536)),
    ((40, 50), (96, 160)),         # upscale
    ((7, 5), (32, 64)),            # strong upscale
    ((1, 1), (4, 3)),
    ((64, 96), (64, 96)),          # identity
    ((37, 53), (37, 53)),
    ((64, 96), (32, 192)),         # down in one axis, up in the other
], ids=lambda hw: f'{hw[0]}x{hw[1]}')
def test_resize_matches_torch_interpolate(src, dst):
    rng = np.random.default_rng([src[0], src[1], dst[0], dst[1]])
    image = rng.random(src, dtype=np.float32)
    got = resize_bilinear(image, *dst)
    assert got.dtype == np.float32
    assert got.shape == dst
    np.testing.assert_allclose(got, torch_resize(image, *dst), rtol=0, atol=RESIZE_ATOL)


def test_resize_identity_is_exact_copy():
    rng = np.random.default_rng(1)
    image = rng.random((64, 96), dtype=np.float32)
    got = resize_bilinear(image, 64, 96)
    np.testing.assert_array_equal(got, image)


def test_resize_non_contiguous_input():
    rng = np.random.default_rng(2)
    image = rng.random((90, 140), dtype=np.float32)[::2, ::-1]
    got = resize_bilinear(image, 32, 64)
    np.testing.assert_allclose(got, torch_resize(image.copy(), 32, 64), rtol=0,
                               atol=RESIZE_ATOL)


def test_resize_constant_image_stays_constant():
    image = np.full((77, 131), 0.375, dtype=np.float32)
    np.testing.assert_allclose(resize_bilinear(image, 64, 128), 0.375, rtol=0, atol=1e-7)


def test_resize_of_structured_image():
    """A step edge and a ramp (not only noise) agree with torch."""
    y, x = np.mgrid[0:121, 0:173].astype(np.float32)
    image = ((x > 60).astype(np.float32) * 0.5 + x / 400.0 + y / 300.0).astype(np.float32)
    np.testing.assert_allclose(resize_bilinear(image, 96, 160), torch_resize(image, 96, 160),
                               rtol=0, atol=RESIZE_ATOL)


@pytest.mark.parametrize('hw', [(32, 32), (33, 47), (480, 640), (480, 752), (100, 1000),
                                (1536, 2048)], ids=lambda hw: f'{hw[0]}x{hw[1]}')
def test_to_model_space(hw):
    rng = np.random.default_rng(list(hw))
    grey = rng.random(hw, dtype=np.float32)
    model_image, (rh, rw) = to_model_space(grey)
    mh, mw = model_size(*hw)
    assert model_image.shape == (mh, mw)
    assert model_image.dtype == np.float32
    assert rh == hw[0] / mh and rw == hw[1] / mw
    np.testing.assert_allclose(model_image, torch_resize(grey, mh, mw), rtol=0,
                               atol=RESIZE_ATOL)
