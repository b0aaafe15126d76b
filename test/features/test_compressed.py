# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Unit tests of xfeat_ros.features.compressed: CompressedImage payloads to the raw image path.

A real TUM frame is compressed with OpenCV (jpeg quality 90, png) as
image_transport would, decoded, and its grey compared with the grey of the
same pixels sent raw: png exactly, jpeg within its quantisation error.
"""

import array
from types import SimpleNamespace

import numpy as np
import pytest

from xfeat_ros.errors import CompressedImageError, ImageError, UnsupportedCompressionError
from xfeat_ros.features.compressed import (compressed_image, compressed_image_msg, compression,
                                           decode_compressed, encode_compressed)
from xfeat_ros.features.image_codec import (convert_pixels, decode_image_msg, raw_image,
                                            validate_layout)
from xfeat_ros.tools.image_files import list_sequence, read_image

# JPEG quality 90 of a natural image: the grey differs by about one level on average
JPEG_MEAN_ATOL = 3.0 / 255
JPEG_MAX_ATOL = 48.0 / 255


@pytest.fixture(scope='module')
def frame(data_dir):
    """Return the first TUM frame's rgb8 pixels [H, W, 3]."""
    pixels, encoding = read_image(list_sequence(data_dir / 'data' / 'tum_fr2_desk')[0][1])
    assert encoding == 'rgb8'
    return pixels


@pytest.mark.parametrize('kind', ['jpeg', 'png'])
@pytest.mark.parametrize('encoding', ['rgb8', 'bgr8', 'mono8'])
def test_decoded_grey_equals_raw_grey(frame, kind, encoding):
    pixels, encoding = convert_pixels(frame, 'rgb8', encoding)
    fmt, data = encode_compressed(pixels, encoding, kind)
    assert fmt == f'{encoding}; {kind} compressed {"mono8" if encoding == "mono8" else "bgr8"}'
    header = SimpleNamespace(stamp=SimpleNamespace(sec=5, nanosec=7), frame_id='cam')
    msg = compressed_image(header, fmt, data)
    assert msg.header is header
    assert (msg.height, msg.width) == pixels.shape[:2]
    assert msg.encoding == ('mono8' if encoding == 'mono8' else 'bgr8')
    # the raw path's receipt checks pass on it
    validate_layout(msg.encoding, msg.height, msg.width, msg.step, len(msg.data))
    grey, expected = decode_image_msg(msg), decode_image_msg(raw_image(pixels, encoding))
    assert grey.dtype == np.float32 and grey.shape == expected.shape
    if kind == 'png':
        np.testing.assert_array_equal(grey, expected)
    else:
        error = np.abs(grey - expected)
        assert error.mean() < JPEG_MEAN_ATOL and error.max() < JPEG_MAX_ATOL, \
            (error.mean() * 255, error.max() * 255)


def test_png_mono16_and_alpha_exact():
    rng = np.random.default_rng(3)
    mono16 = rng.integers(0, 65536, (40, 50, 1), dtype=np.uint16)
    fmt, data = encode_compressed(mono16, 'mono16', 'png')
    msg = compressed_image(None, fmt, data)
    assert msg.encoding == 'mono16'
    np.testing.assert_array_equal(decode_image_msg(msg),
                                  decode_image_msg(raw_image(mono16, 'mono16')))
    bgra = rng.integers(0, 256, (40, 50, 4), dtype=np.uint8)
    import cv2
    msg = compressed_image(None, 'png', cv2.imencode('.png', bgra)[1].tobytes())
    assert msg.encoding == 'bgra8'
    np.testing.assert_array_equal(decode_image_msg(msg),
                                  decode_image_msg(raw_image(bgra, 'bgra8')))


def test_message_fields_and_buffers(frame):
    fmt, data = encode_compressed(frame, 'rgb8', 'png')
    expected = decode_image_msg(raw_image(frame, 'rgb8'))
    for payload in (data, memoryview(data), array.array('B', data),
                    np.frombuffer(data, np.uint8)):
        msg = compressed_image_msg(SimpleNamespace(header=None, format=fmt, data=payload))
        np.testing.assert_array_equal(decode_image_msg(msg), expected)


@pytest.mark.parametrize('fmt, kind', [
    ('jpeg', 'jpeg'), ('JPG', 'jpeg'), (' png ', 'png'), ('rgb8; jpeg compressed bgr8', 'jpeg'),
    ('mono8; png compressed ', 'png'), ('bgr8; PNG compressed bgr8', 'png'),
    ('mono16; png compressed mono16', 'png')])
def test_format_names(fmt, kind):
    assert compression(fmt) == kind


@pytest.mark.parametrize('fmt', ['', 'bmp', 'tiff', '16UC1; compressedDepth png',
                                 '32FC1; compressedDepth', 'rgb8; tiff compressed bgr8',
                                 'rgb8;', 'jpeg compressed', None, 7])
def test_unknown_format_is_a_typed_error(frame, fmt):
    _, data = encode_compressed(frame, 'rgb8', 'jpeg')
    with pytest.raises(UnsupportedCompressionError, match='unsupported compressed image format'):
        decode_compressed(data, fmt)


def _corrupt_cases(frame):
    _, jpeg = encode_compressed(frame, 'rgb8', 'jpeg')
    _, png = encode_compressed(frame, 'rgb8', 'png')
    flipped = bytearray(png)
    flipped[len(png) // 2:len(png) // 2 + 64] = bytes(64)  # inside IDAT: CRC and zlib fail
    return [('jpeg', jpeg[:len(jpeg) // 2], 'truncated'),
            ('jpeg', jpeg[:3] + jpeg[3:40][::-1] + jpeg[40:], 'corrupt'),
            ('png', png[:len(png) // 2], 'corrupt'),
            ('png', bytes(flipped), 'corrupt'),
            ('jpeg', b'', 'does not start like a jpeg'),
            ('jpeg', b'\x00' * 100, 'does not start like a jpeg'),
            ('png', jpeg, 'does not start like a png'),
            ('rgb8; jpeg compressed bgr8', png, 'does not start like a jpeg')]


def test_corrupt_payload_is_a_typed_error(frame):
    for fmt, data, reason in _corrupt_cases(frame):
        with pytest.raises(CompressedImageError, match=reason) as caught:
            compressed_image(None, fmt, data)
        assert not isinstance(caught.value, UnsupportedCompressionError)
        assert isinstance(caught.value, ImageError)  # counted and logged like every reject


def test_colour_16_bit_png_is_unsupported():
    import cv2
    data = cv2.imencode('.png', np.zeros((40, 40, 3), np.uint16))[1].tobytes()
    with pytest.raises(UnsupportedCompressionError, match='3 channel'):
        decode_compressed(data, 'png')


def _claiming(data, kind, width, height):
    """Return ``data`` with its header changed to declare ``width`` x ``height``."""
    import zlib
    data = bytearray(data)
    if kind == 'png':  # IHDR fields at 16..24, its CRC (type + fields) at 29..33
        data[16:24] = width.to_bytes(4, 'big') + height.to_bytes(4, 'big')
        data[29:33] = zlib.crc32(bytes(data[12:29])).to_bytes(4, 'big')
    else:
        offset = next(i for i in range(2, len(data) - 1)
                      if data[i] == 0xFF and data[i + 1] == 0xC0)  # baseline frame header
        data[offset + 5:offset + 9] = height.to_bytes(2, 'big') + width.to_bytes(2, 'big')
    return bytes(data)


@pytest.mark.parametrize('kind', ['jpeg', 'png'])
def test_declared_size_is_checked_before_decoding(frame, kind):
    from xfeat_ros.features.compressed import declared_size, MAX_PIXELS
    fmt, data = encode_compressed(frame, 'rgb8', kind)
    assert declared_size(np.frombuffer(data, np.uint8), kind) == (640, 480)
    huge = _claiming(data, kind, 30000, 30000)  # 0.9 G pixels: under OpenCV's own limit
    assert declared_size(np.frombuffer(huge, np.uint8), kind) == (30000, 30000)
    assert 30000 * 30000 > MAX_PIXELS
    with pytest.raises(CompressedImageError, match='declares 30000x30000 pixels'):
        decode_compressed(huge, fmt)
    assert declared_size(np.frombuffer(data[:10], np.uint8), kind) is None
