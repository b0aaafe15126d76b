# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The ``sensor_msgs/Image`` codec, both directions (host, NumPy).

Decoding: image bytes to a grey float image (:func:`decode_image`,
:func:`decode_image_msg`, :func:`image_array`, :func:`validate_layout`).
Encoding: pixel arrays to messages (:func:`raw_image`, a ROS-free message-like
object, and :func:`image_msg`, a ``sensor_msgs/Image``), and conversion of
pixels between the encodings a player publishes (:func:`convert_pixels`).

Semantics follow cv_bridge: ``step`` is the row length in bytes (padding after
``width * pixel_size`` bytes is ignored), ``is_bigendian`` applies to 16-bit
data, and the byte count must be exactly ``step * height``. The header is
validated before anything of its claimed size is allocated.

Grey = the MEAN of R, G and B (alpha ignored), scaled to [0, 1] exactly once
(8-bit: /255, 16-bit: /65535), as upstream XFeat does inside its network.
"""

import array
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from xfeat_ros.errors import ImageLayoutError, UnsupportedEncodingError


@dataclass(frozen=True)
class EncodingInfo:
    """
    Layout of one supported encoding.

    ``colour`` lists the byte offsets of the three colour channels inside a
    pixel (empty for mono); ``channels`` counts every channel, alpha included.
    """

    channels: int
    bytes_per_channel: int
    colour: tuple

    @property
    def pixel_bytes(self):
        """Bytes of one pixel."""
        return self.channels * self.bytes_per_channel


ENCODINGS = {
    'mono8': EncodingInfo(1, 1, ()),
    'mono16': EncodingInfo(1, 2, ()),
    'rgb8': EncodingInfo(3, 1, (0, 1, 2)),
    'bgr8': EncodingInfo(3, 1, (2, 1, 0)),
    'rgba8': EncodingInfo(4, 1, (0, 1, 2)),
    'bgra8': EncodingInfo(4, 1, (2, 1, 0)),
}


def encoding_info(encoding):
    """Return the :class:`EncodingInfo` of ``encoding`` or raise a typed error."""
    info = ENCODINGS.get(encoding) if isinstance(encoding, str) else None
    if info is None:
        raise UnsupportedEncodingError(encoding, tuple(ENCODINGS))
    return info


def validate_layout(encoding, height, width, step, nbytes):
    """
    Check an image header against its byte count, without allocating.

    Returns the encoding's :class:`EncodingInfo`. Raises
    :class:`UnsupportedEncodingError` or :class:`ImageLayoutError`.
    """
    info = encoding_info(encoding)
    for name, value in (('height', height), ('width', width), ('step', step)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise ImageLayoutError(f'{name} must be an integer, got {value!r}')
    # Python ints: no wrap-around of step * height for numpy uint32 header fields.
    height, width, step = int(height), int(width), int(step)
    if height <= 0 or width <= 0:
        raise ImageLayoutError(f'empty image: {width}x{height}')
    row_bytes = width * info.pixel_bytes
    if step < row_bytes:
        raise ImageLayoutError(
            f'step {step} is smaller than width {width} x {info.pixel_bytes} '
            f'bytes per {encoding} pixel = {row_bytes}')
    if nbytes != step * height:
        raise ImageLayoutError(
            f'data has {nbytes} bytes, header says step {step} x height {height} '
            f'= {step * height}')
    return info


def image_array(data, encoding, height, width, step, is_bigendian=False):
    """
    View image bytes as a native-order array of shape [H, W, C].

    ``data`` is any buffer (bytes, bytearray, array.array, memoryview, uint8
    ndarray). The result is uint8 or uint16; it may share memory with ``data``.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    info = validate_layout(encoding, height, width, step, buf.size)
    rows = buf.reshape(height, step)[:, :width * info.pixel_bytes]
    if info.bytes_per_channel == 2:
        dtype = np.dtype('>u2' if is_bigendian else '<u2')
        rows = np.ascontiguousarray(rows).view(dtype).astype(np.uint16)
    return rows.reshape(height, width, info.channels)


def decode_image(data, encoding, height, width, step, is_bigendian=False):
    """
    Decode image bytes to grey float32 [H, W] in [0, 1] (host memory).

    Raises :class:`UnsupportedEncodingError` or :class:`ImageLayoutError`.
    """
    return grey_pixels(image_array(data, encoding, height, width, step, is_bigendian), encoding)


def grey_pixels(pixels, encoding):
    """
    Grey float32 [H, W] in [0, 1] of native pixels [H, W, C] of ``encoding``.

    The mean of R, G and B (alpha ignored), each scaled to [0, 1] first.
    """
    info = encoding_info(encoding)
    scale = np.float32(255.0 if info.bytes_per_channel == 1 else 65535.0)
    if not info.colour:
        return pixels[:, :, 0].astype(np.float32) / scale
    colour = pixels[:, :, list(info.colour)].astype(np.float32) / scale
    return colour.mean(axis=2, dtype=np.float32)


def decode_image_msg(msg):
    """Decode a ``sensor_msgs/Image`` (or any object with its fields)."""
    return decode_image(msg.data, msg.encoding, msg.height, msg.width, msg.step,
                        bool(msg.is_bigendian))


# -- encoding: pixels to messages -----------------------------------------------------------------

def _check_pixels(pixels, encoding):
    """Raise :class:`ImageLayoutError` unless ``pixels`` fit ``encoding`` (when it is known)."""
    if pixels.ndim != 3:
        raise ImageLayoutError(f'pixels must be [H, W, C], got shape {pixels.shape}')
    info = ENCODINGS.get(encoding)
    if info is None:
        return  # an encoding this package does not decode is sent as given
    if pixels.shape[2] != info.channels or pixels.dtype.itemsize != info.bytes_per_channel \
            or pixels.dtype.kind != 'u':
        raise ImageLayoutError(
            f'{encoding} needs {info.channels} channel(s) of uint{8 * info.bytes_per_channel}, '
            f'got {pixels.shape[2]} of {pixels.dtype}')


def raw_image(pixels, encoding, bigendian=False, pad=0, pad_byte=0):
    """
    Return a ``sensor_msgs/Image``-like object of pixels [H, W, C] uint8/uint16 (no ROS).

    Fields ``height``, ``width``, ``encoding``, ``is_bigendian`` (int),
    ``step`` and ``data`` (bytes), as a driver would send them: 16-bit values
    in the byte order ``bigendian`` says, each row followed by ``pad`` bytes
    of ``pad_byte`` (the decoder skips them). Raises :class:`ImageLayoutError`
    when the array does not fit a known ``encoding``.
    """
    pixels = np.asarray(pixels)
    _check_pixels(pixels, encoding)
    height, width = int(pixels.shape[0]), int(pixels.shape[1])
    order = '>' if bigendian else '<'
    stored = np.ascontiguousarray(pixels).astype(pixels.dtype.newbyteorder(order), copy=False)
    rows = stored.reshape(height, width * pixels.shape[2]).view(np.uint8)
    if pad:
        rows = np.concatenate([rows, np.full((height, int(pad)), pad_byte, np.uint8)], axis=1)
    return SimpleNamespace(height=height, width=width, encoding=encoding,
                           is_bigendian=int(bool(bigendian)), step=int(rows.shape[1]),
                           data=rows.tobytes())


def image_msg(pixels, encoding, stamp=None, frame_id='', bigendian=False, pad=0):
    """
    ``sensor_msgs/Image`` of pixels [H, W, C] uint8/uint16 (little-endian by default).

    ``stamp`` a ``builtin_interfaces/Time`` (None: zero); layout as
    :func:`raw_image` makes it. Raises :class:`ImageLayoutError` when the
    array does not fit a known ``encoding``.
    """
    from sensor_msgs.msg import Image
    raw = raw_image(pixels, encoding, bigendian, pad)
    msg = Image()
    if stamp is not None:
        msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    msg.height, msg.width, msg.encoding = raw.height, raw.width, encoding
    msg.is_bigendian, msg.step = raw.is_bigendian, raw.step
    # The generated setter takes an array.array as it is; it checks other
    # sequences (a NumPy array: 19 ms for 1 MB) element by element in Python.
    data = array.array('B')
    data.frombytes(raw.data)
    msg.data = data
    return msg


def convert_pixels(pixels, encoding, target):
    """
    Convert ``rgb8``/``mono8`` pixels to ``target`` (``rgb8``, ``bgr8``, ``mono8``; ``keep``).

    Returns ``(pixels, encoding)``; grey from colour is the rounded mean of R, G, B.
    """
    if target in ('keep', encoding):
        return pixels, encoding
    if encoding == 'mono8':
        pixels = pixels.repeat(3, axis=2)
    if target == 'bgr8':
        return pixels[:, :, ::-1].copy(), target
    if target == 'mono8':
        return pixels.mean(axis=2, keepdims=True).round().astype('uint8'), target
    return pixels, 'rgb8'


@dataclass(frozen=True)
class ImageLayout:
    """An image message's layout fields without its pixels (what a GPU chain is armed for)."""

    height: int
    width: int
    step: int
    encoding: str
    is_bigendian: int
    on_device: bool = False  # pixels decoded on the GPU (no host bytes to upload)

    @classmethod
    def of(cls, msg):
        """Return the layout of an ``Image`` message or of a parsed CDR image (``ImageView``)."""
        return cls(int(msg.height), int(msg.width), int(msg.step), str(msg.encoding),
                   int(msg.is_bigendian), getattr(msg, 'device_pixels', None) is not None)
