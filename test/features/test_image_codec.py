# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Unit tests of xfeat_ros.features.image_codec: sensor_msgs/Image bytes to grey float32 and back.

The reference grey is computed independently in float64 from the raw
channel values (mean of R, G, B divided by 255 or 65535), so the only
tolerance is float32 rounding (a few ulp of 1.0).
"""

import array
import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest

from xfeat_ros.errors import ImageError, ImageLayoutError, UnsupportedEncodingError
from xfeat_ros.features.image_codec import (convert_pixels, decode_image, decode_image_msg,
                                            grey_pixels, image_array, image_msg, raw_image,
                                            validate_layout)

# float32 spacing at 1.0 is 1.19e-7; two roundings (scale, mean) stay below this.
GREY_ATOL = 2.5e-7

SIZES = [(1, 1), (1, 7), (5, 1), (3, 5), (17, 31), (32, 32), (37, 53)]

# encoding -> (channels, bytes per channel, index of R, G, B within a pixel)
LAYOUTS = {
    'mono8': (1, 1, None),
    'mono16': (1, 2, None),
    'rgb8': (3, 1, (0, 1, 2)),
    'bgr8': (3, 1, (2, 1, 0)),
    'rgba8': (4, 1, (0, 1, 2)),
    'bgra8': (4, 1, (2, 1, 0)),
}


def make_image(rng, encoding, height, width, pad=0, bigendian=False):
    """Random raw image: (pixels [H, W, C] native ints, bytes with ``pad`` garbage per row)."""
    channels, depth, _ = LAYOUTS[encoding]
    dtype = np.uint16 if depth == 2 else np.uint8
    pixels = rng.integers(0, np.iinfo(dtype).max + 1, size=(height, width, channels),
                          dtype=dtype)
    stored = pixels.astype('>u2' if bigendian else '<u2') if depth == 2 else pixels
    rows = stored.reshape(height, -1).view(np.uint8)
    garbage = rng.integers(0, 256, size=(height, pad), dtype=np.uint8)
    data = np.concatenate([rows, garbage], axis=1).tobytes()
    return pixels, data, width * channels * depth + pad


def reference_grey(pixels, encoding):
    """Independent float64 reference: mean of R, G, B (alpha ignored) / full scale."""
    _, depth, colour = LAYOUTS[encoding]
    scale = 65535.0 if depth == 2 else 255.0
    values = pixels.astype(np.float64)
    if colour is None:
        return values[:, :, 0] / scale
    r, g, b = (values[:, :, i] for i in colour)
    return (r + g + b) / 3.0 / scale


@pytest.mark.parametrize('encoding', ['mono8', 'rgb8', 'bgr8', 'rgba8', 'bgra8'])
@pytest.mark.parametrize('height,width', SIZES)
def test_8bit_encodings_match_reference(encoding, height, width):
    rng = np.random.default_rng([sum(map(ord, encoding)), height, width])
    pixels, data, step = make_image(rng, encoding, height, width)
    grey = decode_image(data, encoding, height, width, step)
    assert grey.dtype == np.float32
    assert grey.shape == (height, width)
    np.testing.assert_allclose(grey, reference_grey(pixels, encoding), rtol=0, atol=GREY_ATOL)


@pytest.mark.parametrize('bigendian', [False, True])
@pytest.mark.parametrize('height,width', SIZES)
def test_mono16_both_endiannesses(bigendian, height, width):
    rng = np.random.default_rng(1000 + height * 97 + width + bigendian)
    pixels, data, step = make_image(rng, 'mono16', height, width, bigendian=bigendian)
    grey = decode_image(data, 'mono16', height, width, step, is_bigendian=bigendian)
    assert grey.dtype == np.float32
    np.testing.assert_allclose(grey, reference_grey(pixels, 'mono16'), rtol=0, atol=GREY_ATOL)


def test_mono16_endianness_is_not_ignored():
    # 0x0102 big-endian is 258; read little-endian it would be 513.
    data = bytes([0x01, 0x02])
    assert decode_image(data, 'mono16', 1, 1, 2, is_bigendian=True)[0, 0] == \
        np.float32(258) / np.float32(65535)
    assert decode_image(data, 'mono16', 1, 1, 2, is_bigendian=False)[0, 0] == \
        np.float32(513) / np.float32(65535)


def test_mono_exact_values():
    data = bytes(range(256))
    grey = decode_image(data, 'mono8', 1, 256, 256)
    expected = np.arange(256, dtype=np.float32) / np.float32(255)
    np.testing.assert_array_equal(grey[0], expected)
    assert grey[0, 0] == 0.0 and grey[0, 255] == 1.0
    full = decode_image(b'\xff\xff\x00\x00', 'mono16', 1, 2, 4)
    np.testing.assert_array_equal(full[0], np.array([1.0, 0.0], dtype=np.float32))


def test_8bit_is_big_endian_flag_is_irrelevant():
    rng = np.random.default_rng(7)
    _, data, step = make_image(rng, 'rgb8', 9, 11)
    a = decode_image(data, 'rgb8', 9, 11, step, is_bigendian=False)
    b = decode_image(data, 'rgb8', 9, 11, step, is_bigendian=True)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('encoding', ['rgba8', 'bgra8'])
def test_alpha_is_ignored(encoding):
    rng = np.random.default_rng(3)
    pixels, _, step = make_image(rng, encoding, 6, 10)
    opaque = pixels.copy()
    opaque[:, :, 3] = 255
    clear = pixels.copy()
    clear[:, :, 3] = 0
    a = decode_image(opaque.tobytes(), encoding, 6, 10, step)
    b = decode_image(clear.tobytes(), encoding, 6, 10, step)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, reference_grey(opaque, encoding), rtol=0, atol=GREY_ATOL)


def test_single_channel_colour_images():
    """A pure red/green/blue pixel gives 1/3 whatever the channel order."""
    for encoding in ('rgb8', 'bgr8', 'rgba8', 'bgra8'):
        channels = LAYOUTS[encoding][0]
        for c in range(3):
            px = np.zeros(channels, dtype=np.uint8)
            px[c] = 255
            grey = decode_image(px.tobytes(), encoding, 1, 1, channels)
            assert abs(float(grey[0, 0]) - 1.0 / 3.0) <= GREY_ATOL


@pytest.mark.parametrize('encoding', list(LAYOUTS))
@pytest.mark.parametrize('pad', [1, 3, 64])
@pytest.mark.parametrize('bigendian', [False, True])
def test_step_padding_is_honoured(encoding, pad, bigendian):
    rng = np.random.default_rng(pad * 31 + len(encoding) + bigendian)
    height, width = 13, 7
    pixels, data, step = make_image(rng, encoding, height, width, pad=pad, bigendian=bigendian)
    assert len(data) == step * height
    grey = decode_image(data, encoding, height, width, step, is_bigendian=bigendian)
    np.testing.assert_allclose(grey, reference_grey(pixels, encoding), rtol=0, atol=GREY_ATOL)
    # The same image with different garbage in the padding decodes identically.
    rows = np.frombuffer(data, np.uint8).reshape(height, step).copy()
    rows[:, step - pad:] = 255 - rows[:, step - pad:]
    again = decode_image(rows.tobytes(), encoding, height, width, step, is_bigendian=bigendian)
    np.testing.assert_array_equal(grey, again)


@pytest.mark.parametrize('encoding', list(LAYOUTS))
def test_image_array_returns_native_pixels(encoding):
    rng = np.random.default_rng(11)
    pixels, data, step = make_image(rng, encoding, 4, 5, pad=2, bigendian=True)
    got = image_array(data, encoding, 4, 5, step, is_bigendian=True)
    assert got.shape == (4, 5, LAYOUTS[encoding][0])
    assert got.dtype == pixels.dtype
    np.testing.assert_array_equal(got, pixels)


@pytest.mark.parametrize('encoding', ['16UC1', 'yuv422', '', 'garbage', 'MONO8', 'rgb16',
                                      '32FC1', 'bayer_rggb8', 'mono8 '])
def test_unsupported_encoding_names_it(encoding):
    with pytest.raises(UnsupportedEncodingError) as info:
        decode_image(b'\x00' * 64, encoding, 8, 8, 8)
    assert info.value.encoding == encoding
    assert repr(encoding) in str(info.value)
    assert isinstance(info.value, ImageError)


@pytest.mark.parametrize('encoding', [None, b'mono8', 8])
def test_non_string_encoding_is_unsupported(encoding):
    with pytest.raises(UnsupportedEncodingError):
        decode_image(b'\x00' * 64, encoding, 8, 8, 8)


@pytest.mark.parametrize('encoding,width,step', [
    ('mono8', 8, 7), ('mono16', 8, 15), ('rgb8', 8, 23), ('bgra8', 8, 31), ('rgba8', 8, 0),
])
def test_step_smaller_than_row_raises(encoding, width, step):
    height = 4
    with pytest.raises(ImageLayoutError, match='step'):
        decode_image(b'\x00' * (step * height), encoding, height, width, step)


@pytest.mark.parametrize('delta', [-1, 1, -24, 100])
@pytest.mark.parametrize('encoding', ['mono8', 'mono16', 'rgb8'])
def test_data_length_must_equal_step_times_height(delta, encoding):
    height, width = 6, 4
    step = width * LAYOUTS[encoding][0] * LAYOUTS[encoding][1] + 2
    with pytest.raises(ImageLayoutError, match='bytes'):
        decode_image(b'\x00' * (step * height + delta), encoding, height, width, step)


@pytest.mark.parametrize('height,width', [(0, 8), (8, 0), (0, 0), (-1, 8), (8, -2)])
def test_empty_or_negative_size_raises(height, width):
    with pytest.raises(ImageLayoutError):
        decode_image(b'', 'mono8', height, width, max(width, 0))


@pytest.mark.parametrize('bad', [8.0, '8', None, True])
def test_non_integer_header_fields_raise(bad):
    with pytest.raises(ImageLayoutError):
        decode_image(b'\x00' * 64, 'mono8', bad, 8, 8)
    with pytest.raises(ImageLayoutError):
        decode_image(b'\x00' * 64, 'mono8', 8, bad, 8)
    with pytest.raises(ImageLayoutError):
        decode_image(b'\x00' * 64, 'mono8', 8, 8, bad)


def test_numpy_integer_header_fields_are_accepted():
    data = bytes(range(12))
    grey = decode_image(data, 'mono8', np.uint32(3), np.int64(4), np.uint32(4))
    np.testing.assert_array_equal(grey.ravel(), np.arange(12, dtype=np.float32) / 255)


@pytest.mark.parametrize('encoding', ['rgba8', 'mono16'])
def test_huge_header_with_short_data_raises_without_allocating(encoding):
    side = 16384
    channels, depth, _ = LAYOUTS[encoding]
    step = side * channels * depth
    data = bytes(1000)
    tracemalloc.start()
    try:
        with pytest.raises(ImageLayoutError):
            decode_image(data, encoding, side, side, step)
        with pytest.raises(ImageLayoutError):
            validate_layout(encoding, side, side, step, len(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The claimed image is 1-4 GiB; anything above 1 MiB would mean it was allocated.
    assert peak < 1 << 20, f'peak traced allocation {peak} bytes'


def test_huge_header_with_numpy_uint32_fields_raises():
    # 65536 x 65536 overflows a 32-bit product; the check must not wrap to 0.
    side = np.uint32(65536)
    with pytest.raises(ImageLayoutError):
        decode_image(b'', 'mono8', side, side, side)


@pytest.mark.parametrize('wrap', ['bytes', 'bytearray', 'array', 'memoryview', 'ndarray'])
def test_buffer_types_are_accepted(wrap):
    rng = np.random.default_rng(5)
    pixels, data, step = make_image(rng, 'bgr8', 5, 9, pad=3)
    buffers = {
        'bytes': lambda: data,
        'bytearray': lambda: bytearray(data),
        'array': lambda: array.array('B', data),
        'memoryview': lambda: memoryview(data),
        'ndarray': lambda: np.frombuffer(data, dtype=np.uint8).copy(),
    }
    grey = decode_image(buffers[wrap](), 'bgr8', 5, 9, step)
    np.testing.assert_allclose(grey, reference_grey(pixels, 'bgr8'), rtol=0, atol=GREY_ATOL)


def test_decode_image_msg_reads_message_fields():
    rng = np.random.default_rng(9)
    pixels, data, step = make_image(rng, 'mono16', 7, 3, pad=4, bigendian=True)
    msg = SimpleNamespace(data=array.array('B', data), encoding='mono16', height=7, width=3,
                          step=step, is_bigendian=1)
    grey = decode_image_msg(msg)
    np.testing.assert_allclose(grey, reference_grey(pixels, 'mono16'), rtol=0, atol=GREY_ATOL)


def test_decoded_image_does_not_alias_input():
    data = bytearray(range(16))
    grey = decode_image(data, 'mono8', 4, 4, 4)
    before = grey.copy()
    data[:] = bytes(16)
    np.testing.assert_array_equal(grey, before)


# -- encoding: pixels to messages -----------------------------------------------------------------

@pytest.mark.parametrize('encoding', list(LAYOUTS))
@pytest.mark.parametrize('pad', [0, 3])
@pytest.mark.parametrize('bigendian', [False, True])
def test_raw_image_round_trips_through_the_decoder(encoding, pad, bigendian):
    rng = np.random.default_rng(11)
    pixels, data, step = make_image(rng, encoding, 7, 9, pad, bigendian)
    raw = raw_image(pixels, encoding, bigendian, pad, pad_byte=0xAB)
    assert (raw.height, raw.width, raw.encoding, raw.step) == (7, 9, encoding, step)
    assert raw.is_bigendian == int(bigendian) and isinstance(raw.data, bytes)
    rows = np.frombuffer(raw.data, np.uint8).reshape(7, step)
    reference = np.frombuffer(data, np.uint8).reshape(7, step)  # the test's own packing
    np.testing.assert_array_equal(rows[:, :step - pad], reference[:, :step - pad])
    assert np.all(rows[:, step - pad:] == 0xAB)
    np.testing.assert_array_equal(image_array(raw.data, encoding, 7, 9, step, bigendian),
                                  pixels)
    np.testing.assert_array_equal(decode_image_msg(raw), grey_pixels(pixels, encoding))
    np.testing.assert_allclose(decode_image_msg(raw), reference_grey(pixels, encoding),
                               atol=GREY_ATOL, rtol=0)


def test_raw_image_of_no_pixels_and_unknown_encodings():
    empty = raw_image(np.zeros((0, 0, 1), np.uint8), 'mono8')
    assert (empty.height, empty.width, empty.step, empty.data) == (0, 0, 0, b'')
    float_image = raw_image(np.zeros((2, 3, 1), np.float32), '32FC1')  # sent as given
    assert float_image.step == 12 and len(float_image.data) == 24
    with pytest.raises(UnsupportedEncodingError):
        decode_image_msg(float_image)


@pytest.mark.parametrize('pixels,encoding', [
    (np.zeros((4, 4, 1), np.uint8), 'rgb8'), (np.zeros((4, 4, 3), np.uint16), 'rgb8'),
    (np.zeros((4, 4, 1), np.uint8), 'mono16'), (np.zeros((4, 4, 1), np.int8), 'mono8'),
    (np.zeros((4, 4), np.uint8), 'mono8')], ids=['channels', 'depth', 'mono16', 'signed', '2d'])
def test_raw_image_refuses_pixels_that_do_not_fit(pixels, encoding):
    with pytest.raises(ImageLayoutError):
        raw_image(pixels, encoding)


@pytest.mark.parametrize('bigendian', [False, True])
def test_image_msg_is_the_raw_layout(bigendian):
    msg_module = pytest.importorskip('sensor_msgs.msg', reason='sensor_msgs (ROS 2) is missing')
    from builtin_interfaces.msg import Time
    pixels = np.random.default_rng(5).integers(0, 65536, (5, 6, 1), dtype=np.uint16)
    msg = image_msg(pixels, 'mono16', Time(sec=3, nanosec=4), 'cam', bigendian, pad=2)
    assert isinstance(msg, msg_module.Image)
    raw = raw_image(pixels, 'mono16', bigendian, pad=2)
    assert (msg.height, msg.width, msg.encoding, msg.is_bigendian, msg.step) == (
        raw.height, raw.width, raw.encoding, raw.is_bigendian, raw.step)
    assert bytes(msg.data) == raw.data
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id) == (3, 4, 'cam')
    np.testing.assert_array_equal(decode_image_msg(msg), grey_pixels(pixels, 'mono16'))


def test_convert_encodings():
    rgb = np.random.default_rng(0).integers(0, 256, (4, 5, 3), dtype=np.uint8)
    bgr, enc = convert_pixels(rgb, 'rgb8', 'bgr8')
    assert enc == 'bgr8' and np.array_equal(bgr[:, :, ::-1], rgb)
    mono, enc = convert_pixels(rgb, 'rgb8', 'mono8')
    assert enc == 'mono8' and mono.shape == (4, 5, 1)
    np.testing.assert_array_equal(mono[:, :, 0], np.round(rgb.mean(axis=2)))
    assert convert_pixels(rgb, 'rgb8', 'keep')[0] is rgb
    grey = rgb[:, :, :1]
    colour, enc = convert_pixels(grey, 'mono8', 'rgb8')
    assert enc == 'rgb8' and np.array_equal(colour, grey.repeat(3, axis=2))
