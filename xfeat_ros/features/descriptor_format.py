# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Descriptor wire format: float32, float16 and symmetric int8 encodings (pure NumPy).

A descriptor set is float32 [N, D] with unit-length rows. It is carried as a
flat uint8 array of ``N * D * itemsize`` bytes, row-major, every value
little-endian whatever the host byte order:

* ``float32``: 4 bytes a value (``<f4``), exact;
* ``float16``: 2 bytes a value (``<f2``), IEEE half precision; a component of
  a unit vector (|d| <= 1) comes back within 2**-11 of the original
  (round to nearest, 10-bit mantissa; smaller values more closely);
* ``int8``: 1 byte a value (``<i1``), symmetric quantisation with scale
  :data:`INT8_SCALE` = 127 and no zero point::

      q = clip(round(127 * d), -127, 127)      # round half to even

  -128 is never written. A decoder recovers ``d ~ q / 127`` (each component
  within 0.5 / 127 of the original) and then re-normalizes every row to unit
  length, so that a dot product of two decoded descriptors is again a cosine
  (an all-zero row stays zero).

Malformed buffers and descriptor arrays raise
:class:`xfeat_ros.errors.DescriptorLayoutError`; an unknown encoding name raises
:class:`xfeat_ros.errors.ParameterError`.
"""

import numpy as np

from xfeat_ros.errors import DescriptorLayoutError, ParameterError

ENCODINGS = ('float32', 'float16', 'int8')
INT8_SCALE = 127

_WIRE_DTYPES = {
    'float32': np.dtype('<f4'),
    'float16': np.dtype('<f2'),
    'int8': np.dtype('<i1'),
}


def check_encoding(name):
    """Return None when ``name`` is one of :data:`ENCODINGS`; else raise ParameterError."""
    if name not in _WIRE_DTYPES:
        raise ParameterError(
            f'unknown descriptor encoding {name!r} (choices: {", ".join(ENCODINGS)})')


def _check_dim(dim):
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim <= 0:
        raise DescriptorLayoutError(f'descriptor width must be a positive integer, got {dim!r}')
    return int(dim)


def bytes_per_descriptor(encoding, dim):
    """Return the bytes (int) one descriptor of width ``dim`` takes in ``encoding``."""
    check_encoding(encoding)
    return _check_dim(dim) * _WIRE_DTYPES[encoding].itemsize


def encode_descriptors(descriptors, encoding):
    """
    Encode descriptors float32 [N, D] (unit-length rows) for the wire.

    Returns a new C-contiguous uint8 array [N * D * itemsize] of little-endian
    values (itemsize 4 for float32, 2 for float16, 1 for int8; see the module
    docstring for the int8 rule). Raises :class:`ParameterError` for an unknown
    encoding and :class:`DescriptorLayoutError` when ``descriptors`` is not a
    2-D real array with a positive width, or holds NaN or infinity.
    """
    check_encoding(encoding)
    values = np.asarray(descriptors)
    if values.ndim != 2:
        raise DescriptorLayoutError(
            f'descriptors must be a 2-D [N, D] array, got shape {values.shape}')
    if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
        raise DescriptorLayoutError(f'descriptors must be real numbers, got {values.dtype}')
    _check_dim(values.shape[1])
    values = values.astype(np.float32, copy=False)
    if not np.all(np.isfinite(values)):
        raise DescriptorLayoutError('descriptors hold NaN or infinity')
    if encoding == 'int8':
        scaled = np.rint(values * np.float32(INT8_SCALE))
        wire = np.clip(scaled, -INT8_SCALE, INT8_SCALE).astype(_WIRE_DTYPES['int8'])
    else:
        wire = values.astype(_WIRE_DTYPES[encoding])
    return np.ascontiguousarray(wire).view(np.uint8).reshape(-1)


def _byte_view(data):
    """Return ``data`` (bytes-like or uint8 array) as a flat read-only uint8 array."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise DescriptorLayoutError(f'encoded descriptors must be uint8, got {data.dtype}')
        return np.ascontiguousarray(data).reshape(-1)
    try:
        view = memoryview(data)
    except TypeError as exc:
        raise DescriptorLayoutError(
            f'encoded descriptors must be bytes-like, got {type(data).__name__}') from exc
    return np.frombuffer(view.cast('B') if view.ndim == 1 else view.tobytes(), dtype=np.uint8)


def decode_descriptors(data, encoding, dim):
    """
    Decode wire bytes into descriptors float32 [N, dim].

    ``data`` is bytes-like (bytes, bytearray, memoryview, array.array) or a
    uint8 array of ``N * dim * itemsize`` bytes, as written by
    :func:`encode_descriptors`. float32 comes back exactly, float16 is cast to
    float32, int8 becomes ``q / 127`` with every row then L2-normalized (an
    all-zero row stays zero). The result is a new writable array; N = 0 gives
    shape (0, dim). Raises :class:`ParameterError` for an unknown encoding and
    :class:`DescriptorLayoutError` when the byte count is not a multiple of
    ``dim * itemsize`` or ``dim`` is not a positive integer.
    """
    check_encoding(encoding)
    row_bytes = bytes_per_descriptor(encoding, dim)
    raw = _byte_view(data)
    if raw.size % row_bytes:
        raise DescriptorLayoutError(
            f'{raw.size} bytes of {encoding} descriptors is not a multiple of {row_bytes} '
            f'(width {dim} x {_WIRE_DTYPES[encoding].itemsize} bytes)')
    count = raw.size // row_bytes
    values = raw.view(_WIRE_DTYPES[encoding]).reshape(count, int(dim))
    if encoding != 'int8':
        return values.astype(np.float32)  # a copy in native order, never a view of ``data``
    decoded = values.astype(np.float32) / np.float32(INT8_SCALE)
    norms = np.sqrt(np.sum(np.square(decoded), axis=1, keepdims=True))
    np.divide(decoded, norms, out=decoded, where=norms > 0)
    return decoded
