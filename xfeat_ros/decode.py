# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Decode ``sensor_msgs/Image`` bytes into a grey float image (CPU).

Semantics follow cv_bridge: ``step`` is the row length in bytes (padding after
``width * pixel_size`` bytes is ignored), ``is_bigendian`` applies to 16-bit
data, and the byte count must be exactly ``step * height``. The header is
validated before anything of its claimed size is allocated.

Grey = the MEAN of R, G and B (alpha ignored), scaled to [0, 1] exactly once
(8-bit: /255, 16-bit: /65535), as upstream XFeat does inside its network.
"""

from dataclasses import dataclass

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
    info = encoding_info(encoding)
    pixels = image_array(data, encoding, height, width, step, is_bigendian)
    scale = np.float32(255.0 if info.bytes_per_channel == 1 else 65535.0)
    if not info.colour:
        return pixels[:, :, 0].astype(np.float32) / scale
    colour = pixels[:, :, list(info.colour)].astype(np.float32) / scale
    return colour.mean(axis=2, dtype=np.float32)


def decode_image_msg(msg):
    """Decode a ``sensor_msgs/Image`` (or any object with its fields)."""
    return decode_image(msg.data, msg.encoding, msg.height, msg.width, msg.step,
                        bool(msg.is_bigendian))
