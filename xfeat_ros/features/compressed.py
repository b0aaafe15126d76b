# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``sensor_msgs/CompressedImage`` payloads (jpeg, png) to the raw images the pipeline takes.

A compressed image is decoded once, on receipt, into an ``Image``-like object
(:func:`compressed_image`: header kept, ``mono8``/``mono16``/``bgr8``/``bgra8``
pixels as OpenCV returns them), which then takes the raw image's path unchanged:
the stream's checks, the scheduler, either engine's decode to grey
(:func:`xfeat_ros.features.image_codec.decode_image`: the same normalisation and
the same mean of the colour channels). :func:`decode_compressed` is the one
function that decodes on the CPU (OpenCV's ``imdecode``); a GPU engine's JPEG
decoder (nvJPEG, :mod:`xfeat_ros.features.gpu.jpeg`) takes its place for JPEG
payloads where the engine offers one, after the same checks (:func:`checked_payload`).

``format`` follows image_transport's compressed transport: ``jpeg`` or ``png``
alone, or ``<raw encoding>; <jpeg|png> compressed <encoding compressed>``
(``rgb8; jpeg compressed bgr8``, ``mono8; png compressed mono8``). The
compressed bytes decide the channels (a grey JPEG decodes to one channel);
the raw encoding named before ``;`` is not needed for grey. Anything else
(``compressedDepth``, an empty format) raises :class:`UnsupportedCompressionError`;
a payload that is not a whole JPEG / PNG, or declares more than
:data:`MAX_PIXELS` pixels, raises :class:`CompressedImageError`.
"""

from types import SimpleNamespace

import numpy as np

from xfeat_ros.errors import CompressedImageError, UnsupportedCompressionError

COMPRESSIONS = ('jpeg', 'png')
_ALIASES = {'jpeg': 'jpeg', 'jpg': 'jpeg', 'png': 'png'}
_MAGIC = {'jpeg': b'\xff\xd8\xff', 'png': b'\x89PNG\r\n\x1a\n'}
_JPEG_END = b'\xff\xd9'
# Largest image decoded (pixels, 8K UHD is 33 M): a small payload can claim a huge size, and
# OpenCV would allocate it (its own limit is 2^30 pixels, 3 GiB of colour).
MAX_PIXELS = 1 << 26
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start-of-frame markers
# OpenCV's result: (dimensions, channels, dtype) -> the raw encoding of its bytes
_ENCODINGS = {(2, 1, 'uint8'): 'mono8', (2, 1, 'uint16'): 'mono16',
              (3, 3, 'uint8'): 'bgr8', (3, 4, 'uint8'): 'bgra8'}


def compression(fmt):
    """
    Return ``'jpeg'`` or ``'png'``: the compression a ``CompressedImage.format`` names.

    Raises :class:`UnsupportedCompressionError` for any other format.
    """
    text = fmt.strip().lower() if isinstance(fmt, str) else ''
    if ';' in text:  # image_transport: '<raw encoding>; <jpeg|png> compressed <encoding>'
        words = text.split(';', 1)[1].split()
        name = words[0] if len(words) >= 2 and words[1] == 'compressed' else ''
    else:
        name = text
    if name not in _ALIASES:
        raise UnsupportedCompressionError(
            f'unsupported compressed image format {fmt!r} (supported: jpeg, png, or '
            "image_transport's '<encoding>; jpeg compressed <encoding>' / '... png ...')")
    return _ALIASES[name]


def declared_size(buf, kind):
    """
    Return ``(width, height)`` a jpeg / png payload (uint8 array) declares, or None.

    Read from the PNG header chunk or the JPEG start-of-frame segment, before
    anything is decoded; None where the payload ends before saying it.
    """
    if kind == 'png':
        if buf.size < 24 or buf[12:16].tobytes() != b'IHDR':
            return None
        return (int.from_bytes(buf[16:20].tobytes(), 'big'),
                int.from_bytes(buf[20:24].tobytes(), 'big'))
    offset = 2
    while offset + 4 <= buf.size:
        if buf[offset] != 0xFF:
            return None
        marker = int(buf[offset + 1])
        if marker == 0xFF:  # fill byte
            offset += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a segment
            offset += 2
            continue
        if marker in _JPEG_SOF:
            if offset + 9 > buf.size:
                return None
            segment = buf[offset + 5:offset + 9].tobytes()
            return int.from_bytes(segment[2:], 'big'), int.from_bytes(segment[:2], 'big')
        if marker == 0xDA:  # scan data before any frame header
            return None
        offset += 2 + int.from_bytes(buf[offset + 2:offset + 4].tobytes(), 'big')
    return None


def _cv2():
    import cv2  # OpenCV: loaded on the first compressed image only
    return cv2


def checked_payload(data, fmt):
    """
    Check a compressed payload before any decoder sees it; return ``(uint8 [N], kind)``.

    ``data`` is any buffer (bytes, memoryview, array.array, uint8 ndarray);
    ``kind`` ``'jpeg'`` or ``'png'``. Raises :class:`UnsupportedCompressionError`
    for another format, :class:`CompressedImageError` where the bytes do not start
    like the format named, a JPEG lacks its end-of-image marker, or the declared
    size passes :data:`MAX_PIXELS`.
    """
    kind = compression(fmt)
    buf = np.frombuffer(data, dtype=np.uint8)
    magic = _MAGIC[kind]
    if buf.size < len(magic) or buf[:len(magic)].tobytes() != magic:
        raise CompressedImageError(
            f'{kind} payload of {buf.size} bytes does not start like a {kind} '
            f'({buf[:8].tobytes().hex() or "empty"})')
    # libjpeg decodes a cut-off JPEG with only a warning (grey rows at the bottom): a
    # JPEG must end with its end-of-image marker (trailing zero padding allowed).
    if kind == 'jpeg' and np.trim_zeros(buf[-64:], 'b')[-2:].tobytes() != _JPEG_END:
        raise CompressedImageError(f'jpeg payload of {buf.size} bytes is truncated '
                                   '(no end-of-image marker)')
    size = declared_size(buf, kind)
    if size is not None and size[0] * size[1] > MAX_PIXELS:
        raise CompressedImageError(
            f'{kind} payload of {buf.size} bytes declares {size[0]}x{size[1]} pixels, more '
            f'than {MAX_PIXELS} (not decoded)')
    return buf, kind


def decode_compressed(data, fmt):
    """
    Decode a compressed payload on the CPU; return ``(pixels [H, W, C], encoding)``.

    ``data`` as :func:`checked_payload` takes it; ``encoding`` is ``mono8``,
    ``mono16``, ``bgr8`` or ``bgra8`` (OpenCV's channel order, unchanged: no
    EXIF rotation, no conversion). Raises what :func:`checked_payload` raises,
    and :class:`CompressedImageError` for a payload OpenCV cannot decode.
    """
    buf, kind = checked_payload(data, fmt)
    cv2 = _cv2()
    try:
        pixels = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    except cv2.error as exc:
        raise CompressedImageError(f'{kind} payload of {buf.size} bytes cannot be decoded: '
                                   f'{str(exc).strip().splitlines()[-1]}') from exc
    if pixels is None:
        raise CompressedImageError(f'{kind} payload of {buf.size} bytes is corrupt '
                                   '(OpenCV cannot decode it)')
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    encoding = _ENCODINGS.get((pixels.ndim, channels, pixels.dtype.name))
    if encoding is None:
        raise UnsupportedCompressionError(
            f'{kind} image of {channels} channel(s) of {pixels.dtype.name} is not supported '
            '(grey 8 or 16 bit, colour 8 bit)')
    return pixels.reshape(pixels.shape[0], pixels.shape[1], channels), encoding


def compressed_image(header, fmt, data, jpeg_decoder=None):
    """
    Return an ``Image``-like object (``header`` kept) of a compressed payload.

    Fields ``header``, ``height``, ``width``, ``encoding``, ``is_bigendian``,
    ``step`` and ``data`` (a memoryview of the decoded pixels), as the raw
    path reads them. ``jpeg_decoder`` (a GPU engine's, None: OpenCV) decodes
    a checked JPEG payload instead; its image keeps the pixels on the device
    (:class:`xfeat_ros.features.gpu.jpeg.DeviceImage`). Raises what
    :func:`decode_compressed` raises.
    """
    if jpeg_decoder is not None:
        buf, kind = checked_payload(data, fmt)
        if kind == 'jpeg':
            return jpeg_decoder.decode(header, buf)
    pixels, encoding = decode_compressed(data, fmt)
    height, width = pixels.shape[:2]
    return SimpleNamespace(header=header, height=int(height), width=int(width),
                           encoding=encoding, is_bigendian=0,
                           step=int(width * pixels.shape[2] * pixels.dtype.itemsize),
                           data=memoryview(np.ascontiguousarray(pixels)).cast('B'))


def compressed_image_msg(msg):
    """Return the ``Image``-like object of a ``sensor_msgs/CompressedImage`` (or alike)."""
    return compressed_image(msg.header, msg.format, msg.data)


def encode_compressed(pixels, encoding, kind='jpeg', quality=90, png_level=3):
    """
    Compress pixels [H, W, C] of ``encoding``; return ``(format, bytes)``.

    ``encoding`` mono8, mono16 (png), rgb8 or bgr8; ``format`` as image_transport
    writes it (``rgb8; jpeg compressed bgr8``). For tests, benchmarks and players;
    JPEG at ``quality`` (0-100), PNG lossless at zlib level ``png_level``
    (image_transport's default: 3).
    """
    cv2 = _cv2()
    kind = compression(kind)
    pixels = np.asarray(pixels)
    if encoding == 'rgb8':
        pixels = pixels[:, :, ::-1]
    target = 'bgr8' if pixels.shape[2] == 3 else encoding
    params = ([cv2.IMWRITE_JPEG_QUALITY, int(quality)] if kind == 'jpeg'
              else [cv2.IMWRITE_PNG_COMPRESSION, int(png_level)])
    ok, data = cv2.imencode('.jpg' if kind == 'jpeg' else '.png',
                            np.ascontiguousarray(pixels), params)
    if not ok:
        raise CompressedImageError(f'OpenCV cannot encode {encoding} pixels as {kind}')
    return f'{encoding}; {kind} compressed {target}', data.tobytes()
