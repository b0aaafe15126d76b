# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Pinned buffers that images are taken into, so that the GPU engine uploads them as they are.

The node's image thread takes each sample (:class:`xfeat_ros.ros.transport.rcl_io.SerializedTaker`)
into a buffer from :meth:`ImagePool.get`; the image it parses points into that
buffer, and the engine, finding its pixels there (:meth:`ImagePool.owns`),
uploads from it instead of copying them into a slot's staging buffer first.

A buffer is handed out again only when nothing refers to it any more: no
view of it (the payload, the parsed image, the engine's upload source) is
alive, which its reference count tells. The engine keeps a reference to an
image's pixels until their upload has passed, and the node keeps the image
until the frame's outputs are sent. Nothing waits: with :data:`LIMIT_BYTES`
pinned in buffers that are all in use, :meth:`get` returns plain memory and
the engine copies it as before.

The image thread asks for the buffer of its next sample right after taking
one, so between two frames of a camera :meth:`newest` names the buffer that
camera's next image will land in: an armed chain (:mod:`xfeat_ros.features.gpu.armed`)
uploads from there, at the offset the pixels had in the previous one.
"""

import sys
import threading

import numpy as np

GRAIN = 1 << 16            # buffer sizes are rounded up to this many bytes
LIMIT_BYTES = 256 << 20    # pinned memory the pool holds at most


class _Entry:
    """One buffer: its array and the address range of its memory."""

    __slots__ = ('array', 'start', 'end')

    def __init__(self, array):
        self.array = array
        self.start = array.__array_interface__['data'][0]
        self.end = self.start + array.nbytes


_PROBE = _Entry(np.empty(1, np.uint8))
_FREE_REFS = sys.getrefcount(_PROBE.array)  # a buffer's count when only its entry holds it


def _free(entry):
    """Tell whether only ``entry`` refers to its array."""
    return sys.getrefcount(entry.array) <= _FREE_REFS


class ImagePool:
    """Reusable host buffers for taken images (pinned ones from ``allocate``)."""

    def __init__(self, allocate, limit_bytes=LIMIT_BYTES):
        """``allocate(nbytes)``: a uint8 array of ``nbytes`` (pinned), or None when it cannot."""
        self._allocate = allocate
        self._limit = int(limit_bytes)
        self._entries = []
        self._bytes = 0
        self._newest = None   # the entry get() handed out last
        self._lock = threading.Lock()

    def get(self, nbytes):
        """Return a free uint8 buffer of at least ``nbytes`` bytes (the whole buffer)."""
        nbytes = max(int(nbytes), 1)
        with self._lock:
            for entry in self._entries:
                if entry.end - entry.start >= nbytes and _free(entry):
                    self._newest = entry
                    return entry.array
            size = -(-nbytes // GRAIN) * GRAIN
            array = self._allocate(size) if self._bytes + size <= self._limit else None
            if array is None:
                return np.empty(nbytes, np.uint8)  # not pooled: the engine copies it
            entry = _Entry(array)
            self._entries = self._entries + [entry]  # readers iterate a list never changed
            self._bytes += size
            self._newest = entry
            return entry.array

    def locate(self, view):
        """Return ``(buffer, offset)`` of the memory of ``view`` (an array); None if not pooled."""
        start = view.__array_interface__['data'][0]
        end = start + view.nbytes
        for entry in self._entries:
            if entry.start <= start and end <= entry.end:
                return entry.array, start - entry.start
        return None

    def owns(self, view):
        """Tell whether the memory of ``view`` (an array) lies inside one of the buffers."""
        return self.locate(view) is not None

    def newest(self):
        """Return the buffer :meth:`get` handed out last if someone still holds it, else None."""
        with self._lock:
            entry = self._newest
            if entry is None or _free(entry):
                return None
            return entry.array

    def stats(self):
        """Return ``(buffers, bytes, in use)``."""
        with self._lock:
            return (len(self._entries), self._bytes,
                    sum(not _free(e) for e in self._entries))
