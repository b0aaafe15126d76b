# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
CDR bytes straight from NumPy buffers, and a zero-copy view of raw Image payloads.

ROS 2 (rmw_fastrtps) carries a message as plain CDR (XCDR1): a 4-byte
encapsulation header (``00 01 00 00``: CDR, little endian), then the fields in
declaration order. Every primitive is aligned to its own size (1, 2, 4 or 8
bytes) counted from the end of the encapsulation header; a string is a uint32
length that counts its NUL, the UTF-8 bytes and the NUL; a sequence is a
uint32 element count, then (aligned to the element size when not empty) the
elements. Nested messages (``std_msgs/Header``, ``builtin_interfaces/Time``)
are their fields in place. rclpy's serializer (Fast CDR through
rosidl_typesupport_fastrtps) sizes its buffer with an estimate that also
aligns empty sequences, so its output can end in a few unused bytes; the
writer here reproduces that length. Alignment gaps and those tail bytes are
zeros here (rclpy leaves them uninitialized: readers never look at them).

Writing (publish with ``publisher.publish(data)``: rclpy takes ``bytes`` as a
serialized message):

* :func:`keypoints_cdr` - the ``xfeat_ros_msgs/Keypoints`` that
  :func:`xfeat_ros.ros.messages.keypoints_msg` builds, same arguments;
* :func:`matches_cdr` - the ``xfeat_ros_msgs/Matches`` of
  :func:`xfeat_ros.ros.messages.matches_msg`, same arguments.

Each array is copied once, into the ``bytes`` object handed to rclpy, or
(:meth:`CdrWriter.write_into`) into the buffer that
:class:`xfeat_ros.ros.transport.rcl_io.SerializedPublisher` keeps across messages.

Reading: :func:`parse_image` turns the payload of a raw subscription
(``create_subscription(Image, topic, callback, qos, raw=True)``: the callback
receives ``bytes``) into an :class:`ImageView` whose ``data`` is a memoryview
into that payload (no copy), ready for :func:`xfeat_ros.features.image_codec.image_array`.
No rclpy import here: the module is plain Python + NumPy.
"""

from collections import namedtuple
import struct

import numpy as np

from xfeat_ros.errors import ImageLayoutError
from xfeat_ros.features.descriptor_format import encode_descriptors

ENCAPSULATION_LE = b'\x00\x01\x00\x00'
_CDR_BE, _CDR_LE = 0, 1
_ZEROS = bytes(8)
_FLOAT32 = np.dtype('<f4')
_UINT32 = np.dtype('<u4')
_UINT64 = np.dtype('<u8')
_UINT8 = np.dtype('u1')

Time = namedtuple('Time', 'sec nanosec')
Time.__doc__ = 'builtin_interfaces/Time fields (int sec, int nanosec).'
Header = namedtuple('Header', 'stamp frame_id')
Header.__doc__ = 'std_msgs/Header fields: stamp (a Time), frame_id (str).'


class CdrWriter:
    """
    Accumulate the pieces of one CDR message; :meth:`to_bytes` joins them once.

    ``padding`` lists the ``(offset, length)`` of every alignment gap and of
    the unused tail, offsets counted in the final bytes (encapsulation
    included): the only bytes that may differ from rclpy's output.
    """

    def __init__(self):
        """Start after the little-endian encapsulation header."""
        self.parts = [ENCAPSULATION_LE]
        self.position = 0  # bytes written after the encapsulation header
        self.estimate = 0  # the same, as Fast CDR's size estimate counts them
        self.padding = []

    def _gap(self, size):
        gap = -self.position % size
        if gap:
            self.padding.append((self.position + len(ENCAPSULATION_LE), gap))
            self.parts.append(_ZEROS[:gap])
            self.position += gap

    def _put(self, data, size, align):
        self._gap(align)
        self.estimate += -self.estimate % align + size
        self.parts.append(data)
        self.position += size

    def uint32(self, value):
        """Write a uint32."""
        self._put(struct.pack('<I', value), 4, 4)

    def time(self, stamp):
        """Write a builtin_interfaces/Time (int32 sec, uint32 nanosec)."""
        self._put(struct.pack('<iI', stamp.sec, stamp.nanosec), 8, 4)

    def string(self, text):
        """Write a string: uint32 length with the NUL, UTF-8 bytes, NUL."""
        data = text.encode('utf-8')
        self.uint32(len(data) + 1)
        self._put(data + b'\0', len(data) + 1, 1)

    def header(self, header):
        """Write a std_msgs/Header (any object with ``stamp.sec/nanosec`` and ``frame_id``)."""
        self.time(header.stamp)
        self.string(header.frame_id)

    def sequence(self, values, dtype):
        """Write a sequence of a primitive ``dtype`` from any array-like (one copy at join)."""
        array = np.ascontiguousarray(values, dtype=dtype).reshape(-1)
        self.uint32(array.size)
        if array.size:
            self._put(array.view(np.uint8), array.nbytes, dtype.itemsize)
        else:  # not written, but counted by the size estimate
            self.estimate += -self.estimate % dtype.itemsize

    def _finish(self):
        """Append the unused tail that Fast CDR's size estimate leaves (once)."""
        tail = self.estimate - self.position
        if tail > 0:
            self.padding.append((self.position + len(ENCAPSULATION_LE), tail))
            self.parts.append(bytes(tail))
            self.position = self.estimate

    def size(self):
        """Return the message's length in bytes (encapsulation header and tail included)."""
        self._finish()
        return self.position + len(ENCAPSULATION_LE)

    def to_bytes(self):
        """Return the message as ``bytes`` (the one copy of every array)."""
        self._finish()
        return b''.join(self.parts)

    def write_into(self, view):
        """
        Copy the message to the start of ``view`` (a writable byte memoryview); its length.

        The one copy of every array, as :meth:`to_bytes` makes, into memory
        the caller keeps (:class:`xfeat_ros.ros.transport.rcl_io.SerializedPublisher`).
        """
        size = self.size()
        if len(view) < size:
            raise ValueError(f'a buffer of {len(view)} bytes cannot hold a message of {size}')
        offset = 0
        for part in self.parts:
            end = offset + len(part)
            view[offset:end] = part
            offset = end
        return size


def write_keypoints(writer, header, features, tracks=None, encoding='float32'):
    """Write the fields of ``xfeat_ros_msgs/Keypoints`` (see :func:`keypoints_cdr`)."""
    writer.header(header)
    height, width = (int(v) for v in features.image_hw)
    writer.uint32(width)
    writer.uint32(height)
    writer.sequence(features.keypoints, _FLOAT32)
    writer.sequence(features.scores, _FLOAT32)
    descriptors = features.descriptors
    writer.uint32(int(descriptors.shape[1]))
    writer.string(encoding)
    empty = np.zeros(0, np.uint8)
    if encoding == 'float32':
        writer.sequence(descriptors, _FLOAT32)
        writer.sequence(empty, _UINT8)
    else:
        writer.sequence(empty, _FLOAT32)
        data = empty if encoding == 'none' else encode_descriptors(descriptors, encoding)
        writer.sequence(data, _UINT8)
    if tracks is None:
        writer.sequence(empty, _UINT64)
        writer.sequence(empty, _UINT32)
    else:
        writer.sequence(tracks[0], _UINT64)
        writer.sequence(tracks[1], _UINT32)
    return writer


def keypoints_cdr(header, features, tracks=None, encoding='float32'):
    """
    CDR ``bytes`` of the Keypoints :func:`xfeat_ros.ros.messages.keypoints_msg` would build.

    Same arguments: ``header`` (a std_msgs/Header or a :class:`Header`),
    :class:`xfeat_ros.features.pipeline.Features`, ``tracks`` ``(ids uint64 [N], ages
    uint32 [N])`` or None, ``encoding`` float32 / float16 / int8 / none.
    Publish it with ``publisher.publish(data)`` on a Keypoints publisher.
    """
    return write_keypoints(CdrWriter(), header, features, tracks, encoding).to_bytes()


def write_matches(writer, header, previous_stamp, previous, current, matches):
    """Write the fields of ``xfeat_ros_msgs/Matches`` (see :func:`matches_cdr`)."""
    writer.header(header)
    writer.time(previous_stamp)
    if matches is None or len(matches) == 0:
        idx0 = idx1 = np.zeros(0, dtype=np.int64)
        similarity = np.zeros(0, dtype=np.float32)
    else:
        idx0, idx1, similarity = matches.idx0, matches.idx1, matches.similarity
    writer.sequence(idx0, _UINT32)
    writer.sequence(idx1, _UINT32)
    writer.sequence(similarity, _FLOAT32)
    writer.sequence(previous.keypoints[idx0] if len(idx0) else np.zeros(0), _FLOAT32)
    writer.sequence(current.keypoints[idx1] if len(idx1) else np.zeros(0), _FLOAT32)
    return writer


def matches_cdr(header, previous_stamp, previous, current, matches):
    """
    CDR ``bytes`` of the Matches :func:`xfeat_ros.ros.messages.matches_msg` would build.

    Same arguments: the current image's ``header``, the previous frame's stamp
    (a builtin_interfaces/Time or a :class:`Time`), the previous and current
    :class:`Features`, and a :class:`MatchResult` or None (all arrays empty).
    """
    return write_matches(CdrWriter(), header, previous_stamp, previous, current,
                         matches).to_bytes()


ImageView = namedtuple('ImageView', 'header height width encoding is_bigendian step data')
ImageView.__doc__ = """\
The fields of a serialized sensor_msgs/Image; ``data`` is a memoryview into the payload.

Duck-types the message for :func:`xfeat_ros.features.image_codec.decode_image_msg`.
"""


class _Reader:
    """Sequential CDR reader over a memoryview; errors become ImageLayoutError."""

    def __init__(self, payload):
        self.view = memoryview(payload).cast('B')
        if len(self.view) < 4:
            raise ImageLayoutError(f'serialized Image of {len(self.view)} bytes has no '
                                   'CDR header')
        kind = self.view[1]
        if self.view[0] != 0 or kind not in (_CDR_BE, _CDR_LE):
            raise ImageLayoutError(
                f'serialized Image: unsupported CDR encapsulation '
                f'{bytes(self.view[:2]).hex()} (expected 0000 or 0001, plain CDR)')
        self.order = '<' if kind == _CDR_LE else '>'
        self.offset = 4

    def _take(self, size, what):
        end = self.offset + size
        if end > len(self.view):
            raise ImageLayoutError(f'serialized Image is truncated in {what} '
                                   f'({len(self.view)} bytes)')
        start, self.offset = self.offset, end
        return start

    def uint(self, fmt, size, what):
        self.offset += -(self.offset - 4) % size
        start = self._take(size, what)
        return struct.unpack_from(self.order + fmt, self.view, start)[0]

    def string(self, what):
        length = self.uint('I', 4, what)
        start = self._take(length, what)
        if length == 0 or self.view[start + length - 1] != 0:
            raise ImageLayoutError(f'serialized Image: {what} is not a NUL-terminated string')
        return bytes(self.view[start:start + length - 1]).decode('utf-8', 'replace')

    def octets(self, what):
        length = self.uint('I', 4, what)
        start = self._take(length, what)
        return self.view[start:start + length]


def parse_image(payload):
    """
    Parse a serialized ``sensor_msgs/Image`` (a raw subscription's ``bytes``).

    Returns an :class:`ImageView`: ``header`` (a :class:`Header`), ``height``,
    ``width``, ``encoding``, ``is_bigendian`` (int), ``step`` and ``data`` (a
    read-only memoryview of the pixel bytes inside ``payload``, no copy).
    Field values are not validated here (:func:`xfeat_ros.features.image_codec.validate_layout`
    does that); a payload that is not a well-formed Image raises
    :class:`ImageLayoutError`.
    """
    reader = _Reader(payload)
    stamp = Time(reader.uint('i', 4, 'header.stamp'), reader.uint('I', 4, 'header.stamp'))
    header = Header(stamp, reader.string('header.frame_id'))
    height = reader.uint('I', 4, 'height')
    width = reader.uint('I', 4, 'width')
    encoding = reader.string('encoding')
    is_bigendian = reader.uint('B', 1, 'is_bigendian')
    step = reader.uint('I', 4, 'step')
    data = reader.octets('data')
    return ImageView(header, height, width, encoding, is_bigendian, step, data.toreadonly())


def header_msg(header):
    """Return the ``std_msgs/Header`` message of a :class:`Header` (imports std_msgs)."""
    from builtin_interfaces.msg import Time as TimeMsg
    from std_msgs.msg import Header as HeaderMsg
    return HeaderMsg(stamp=TimeMsg(sec=header.stamp.sec, nanosec=header.stamp.nanosec),
                     frame_id=header.frame_id)
