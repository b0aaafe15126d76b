# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
A float32 Keypoints message written around arrays that already lie where its CDR puts them.

:func:`xfeat_ros.ros.transport.cdr.write_keypoints` copies a frame's keypoints, scores and
descriptors (~1.1 MB at 4096 keypoints) into the message. Where the GPU engine
copied them from the device straight to the places a Keypoints message of that
size has for them (:func:`layout`, given to the engine as a placement when a
frame is armed), :func:`write_around` writes only the rest (encapsulation,
header, sizes, counts, the descriptor encoding, track ids and ages) into the
same block, which is then published as it is: one 1.1 MB host copy fewer
(docs/design-notes.md). The bytes equal
:func:`xfeat_ros.ros.transport.cdr.keypoints_cdr` of the same message
(``test/ros/test_keypoints_wire.py``), alignment gaps zero included.

Plain Python and NumPy, no rclpy.
"""

from collections import namedtuple
import functools
import struct

import numpy as np

from xfeat_ros.ros.transport.cdr import ENCAPSULATION_LE

ENCODING = 'float32'   # the one descriptor encoding laid out here (the float32 field)

Layout = namedtuple('Layout', 'frame_id rows dim keypoints scores descriptors track_ids '
                              'track_ages size')
Layout.__doc__ = """\
Byte offsets (encapsulation included) of a Keypoints message's arrays, and its size.

For ``rows`` keypoints of ``dim`` float32 descriptor components, header
``frame_id``, with track ids and ages, descriptors in the float32 field.
"""


class _Cursor:
    """Positions after the encapsulation header, aligned as CDR aligns them."""

    def __init__(self):
        self.position = 0

    def field(self, size, align):
        """Return the message offset of a ``size``-byte field aligned to ``align``."""
        self.position += -self.position % align
        offset = self.position + len(ENCAPSULATION_LE)
        self.position += size
        return offset


@functools.lru_cache(maxsize=32)   # one camera asks for the same layout every frame
def layout(frame_id, rows, dim):
    """Return the :class:`Layout` of a float32 Keypoints message (``rows`` >= 1)."""
    cursor = _Cursor()
    cursor.field(8, 4)                                   # header.stamp
    cursor.field(4, 4)                                   # header.frame_id
    cursor.field(len(frame_id.encode('utf-8')) + 1, 1)
    cursor.field(8, 4)                                   # image_width, image_height
    cursor.field(4, 4)
    keypoints = cursor.field(rows * 8, 4)
    cursor.field(4, 4)
    scores = cursor.field(rows * 4, 4)
    cursor.field(4, 4)                                   # descriptor_size
    cursor.field(4 + len(ENCODING) + 1, 4)               # descriptor_encoding
    cursor.field(4, 4)
    descriptors = cursor.field(rows * dim * 4, 4)
    cursor.field(4, 4)                                   # descriptor_data: empty
    cursor.field(4, 4)
    track_ids = cursor.field(rows * 8, 8)
    cursor.field(4, 4)
    track_ages = cursor.field(rows * 4, 4)
    return Layout(frame_id, rows, dim, keypoints, scores, descriptors, track_ids, track_ages,
                  cursor.position + len(ENCAPSULATION_LE))


def placement(frame_id):
    """
    Return ``place(rows, dim)`` for the GPU engine's arm(): ``(size, offsets)``.

    ``offsets`` are those of the keypoints, scores, descriptors, track ids
    and track ages in a Keypoints message of ``rows`` keypoints with header
    ``frame_id`` (the camera's last one: a frame with another frame_id or
    fewer keypoints is written the ordinary way).
    """
    def place(rows, dim):
        if rows < 1:
            return None
        found = layout(frame_id, rows, dim)
        return found.size, (found.keypoints, found.scores, found.descriptors, found.track_ids,
                            found.track_ages)
    return place


def _put(block, offset, values, dtype):
    """Copy ``values`` to ``block[offset:]`` as ``dtype`` unless they lie there already."""
    values = np.asarray(values)
    if values.dtype == dtype and values.ctypes.data == block.ctypes.data + offset:
        return  # the engine copied them to their place (tracks continued on the device)
    block[offset:offset + values.size * dtype.itemsize].view(dtype)[:] = values


def fits(block, found, features):
    """Tell whether ``features``' arrays lie in ``block`` exactly where ``found`` puts them."""
    if block is None or block.size < found.size or len(features) != found.rows:
        return False
    base = block.ctypes.data
    return all(array.dtype == np.float32 and array.flags.c_contiguous
               and array.ctypes.data == base + offset
               for array, offset in ((features.keypoints, found.keypoints),
                                     (features.scores, found.scores),
                                     (features.descriptors, found.descriptors)))


def write_around(block, found, header, image_hw, track_ids, track_ages):
    """
    Write everything of the Keypoints message but its three arrays into ``block``.

    ``block`` uint8, holding the keypoints, scores and descriptors at
    ``found``'s offsets (:func:`fits`); ``header`` has ``stamp.sec``,
    ``stamp.nanosec`` and ``frame_id`` (the layout's). Returns the message
    size: ``block[:size]`` is the serialized message.
    """
    view = memoryview(block)
    rows, dim = found.rows, found.dim
    name = header.frame_id.encode('utf-8')
    height, width = (int(v) for v in image_hw)
    view[:4] = ENCAPSULATION_LE
    struct.pack_into('<iII', view, 4, header.stamp.sec, header.stamp.nanosec, len(name) + 1)
    end = 16 + len(name)
    view[16:end] = name
    view[end:found.keypoints - 12] = bytes(found.keypoints - 12 - end)  # NUL, alignment
    struct.pack_into('<III', view, found.keypoints - 12, width, height, rows * 2)
    struct.pack_into('<I', view, found.scores - 4, rows)
    at = found.scores + rows * 4
    struct.pack_into('<II8sI', view, at, dim, len(ENCODING) + 1, ENCODING.encode() + b'\0',
                     rows * dim)
    at = found.descriptors + rows * dim * 4
    struct.pack_into('<II', view, at, 0, rows)          # descriptor_data, track_ids counts
    view[at + 8:found.track_ids] = bytes(found.track_ids - at - 8)
    _put(block, found.track_ids, track_ids, np.dtype(np.uint64))
    struct.pack_into('<I', view, found.track_ages - 4, rows)
    _put(block, found.track_ages, track_ages, np.dtype(np.uint32))
    return found.size


def publish_in_place(publisher, frame, encoding):
    """
    Publish ``frame``'s Keypoints from the block its features lie in; return whether it did.

    Only for the float32 ``encoding``, a publisher that sends a block as it
    lies (:meth:`xfeat_ros.ros.transport.rcl_io.SerializedPublisher.publish_block`), and
    features at the places of this message (:func:`fits`: same frame_id and
    as many keypoints as the placement assumed); otherwise nothing is written
    and the caller publishes the ordinary way.
    """
    features = frame.features
    block = getattr(features, 'wire', None)
    if (block is None or encoding != ENCODING or not len(features)
            or getattr(publisher, 'publish_block', None) is None):
        return False
    found = layout(frame.header.frame_id, len(features), features.descriptors.shape[1])
    if not fits(block, found, features):
        return False
    size = write_around(block, found, frame.header, features.image_hw, frame.track_ids,
                        frame.track_ages)
    publisher.publish_block(block, size)
    return True
