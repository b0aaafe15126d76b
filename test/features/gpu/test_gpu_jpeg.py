# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
JPEG payloads decoded on the device (``features/gpu/jpeg.py``, nvJPEG through torchvision).

nvJPEG and libjpeg (OpenCV) are both exact to the JPEG standard's IDCT accuracy, not to
each other, and may upsample chroma differently: the pixels are compared with explicit
tolerances (mean and 99th percentile of the absolute difference in 8-bit levels), and the
GPU engine's keypoints of both decodes by the share found within 0.5 px. Marked ``gpu``;
the tests that need torchvision skip, with the reason, where it is missing.
"""

from types import SimpleNamespace

import numpy as np
import pytest
from test_gpu_armed import tum_messages
from test_gpu_engine import single
from xfeat_ros.errors import CompressedImageError
from xfeat_ros.features.compressed import compressed_image, encode_compressed
from xfeat_ros.features.image_codec import (convert_pixels, decode_image_msg, ImageLayout,
                                            raw_image)

MEAN_ABS_MAX = 1.5      # 8-bit levels, over the image
P99_ABS_MAX = 8         # 8-bit levels: chroma upsampling differs at colour edges
HEADER = SimpleNamespace(frame_id='cam', stamp=SimpleNamespace(sec=1, nanosec=0))


@pytest.fixture(scope='module')
def engine(weights_npz):
    """Build one PyTorch-backed GPU engine for the module."""
    from xfeat_ros.features.gpu.factory import create_gpu_engine
    return create_gpu_engine('pytorch', str(weights_npz), 0, 4096, 0.05, 0.82)


@pytest.fixture(scope='module')
def decoder(engine):
    """Return the nvJPEG decoder the engine offers (skipped where torchvision is missing)."""
    pytest.importorskip('torchvision', reason='torchvision (nvJPEG) is not installed')
    found = engine.jpeg_decoder()
    assert found is not None
    return found


def tum_rgb(shared_dir):
    """Return the first TUM golden frame's rgb8 pixels [480, 640, 3]."""
    msg = tum_messages(shared_dir)[0]
    return np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.width, 3)


def jpeg_pair(pixels, encoding, decoder):
    """Return (device image, OpenCV image) of ``pixels`` compressed as image_transport does."""
    fmt, payload = encode_compressed(pixels, encoding, 'jpeg', 90)
    return compressed_image(HEADER, fmt, payload, decoder), compressed_image(HEADER, fmt, payload)


@pytest.mark.gpu
@pytest.mark.parametrize('encoding', ['rgb8', 'mono8'])
def test_device_pixels_equal_opencv_within_tolerance(decoder, shared_dir, encoding):
    pixels, _ = convert_pixels(tum_rgb(shared_dir), 'rgb8', encoding)
    device, host = jpeg_pair(pixels, encoding, decoder)
    assert device.encoding == encoding and (device.height, device.width) == pixels.shape[:2]
    assert device.header is HEADER and device.step == device.width * pixels.shape[2]
    got = np.frombuffer(device.data, np.uint8).reshape(pixels.shape)
    want = np.frombuffer(host.data, np.uint8).reshape(pixels.shape)
    if encoding == 'rgb8':
        want = want[:, :, ::-1]   # OpenCV decodes to bgr8
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    assert diff.mean() <= MEAN_ABS_MAX and np.percentile(diff, 99) <= P99_ABS_MAX, \
        (float(diff.mean()), float(np.percentile(diff, 99)))
    grey_diff = np.abs(decode_image_msg(device) - decode_image_msg(host))
    assert grey_diff.mean() <= MEAN_ABS_MAX / 255


@pytest.mark.gpu
def test_engine_takes_device_pixels_without_the_host(engine, decoder, shared_dir):
    """The device image's features equal those of its own pixels sent from the host."""
    device, _ = jpeg_pair(tum_rgb(shared_dir), 'rgb8', decoder)
    on_device = single(engine, device)
    assert device._host is None  # the upload never read the pixels back
    pixels = np.frombuffer(device.data, np.uint8).reshape(device.height, device.width, 3)
    from_host = single(engine, raw_image(pixels.copy(), 'rgb8'))
    assert len(on_device) > 1000
    np.testing.assert_array_equal(on_device.keypoints, from_host.keypoints)
    np.testing.assert_array_equal(on_device.scores, from_host.scores)
    np.testing.assert_allclose(on_device.descriptors, from_host.descriptors, atol=1e-6)


@pytest.mark.gpu
def test_a_device_image_is_never_armed(engine, decoder, shared_dir):
    device, _ = jpeg_pair(tum_rgb(shared_dir), 'rgb8', decoder)
    layout = ImageLayout.of(device)
    assert layout.on_device
    slot, previous = engine.alloc_slot(), engine.alloc_slot()
    engine.submit(device, previous)
    engine.synchronize()
    assert not engine.arm(layout, slot, previous=previous)


@pytest.mark.gpu
def test_a_corrupt_payload_past_the_checks_is_a_typed_error(decoder, shared_dir):
    fmt, payload = encode_compressed(tum_rgb(shared_dir), 'rgb8', 'jpeg', 90)
    broken = bytearray(payload)
    start = len(broken) // 3
    broken[start:start + 4096] = bytes(4096)  # zeroed entropy-coded data, markers kept
    marker = bytes(payload[:2]) + b'\xff\xd9'  # start then end of image: no frame at all
    with pytest.raises(CompressedImageError):
        compressed_image(HEADER, fmt, marker, decoder)
    for data in (bytes(broken),):
        try:
            image = compressed_image(HEADER, fmt, data, decoder)
        except CompressedImageError:
            continue
        # nvJPEG, like libjpeg, may decode damaged scan data to wrong pixels without an
        # error; what it returns must still be a whole image of the declared size
        assert (image.height, image.width) == (480, 640)


@pytest.mark.gpu
def test_warm_up_decodes_on_the_device(decoder):
    decoder.warm_up()  # no error, and the decoder still decodes afterwards
    import cv2
    ok, encoded = cv2.imencode('.jpg', np.full((32, 48, 3), 128, np.uint8))
    image = decoder.decode(None, np.frombuffer(encoded.tobytes(), np.uint8))
    image.ready.synchronize()
    assert (image.height, image.width, image.encoding) == (32, 48, 'rgb8')
