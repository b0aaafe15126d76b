# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
rcl's own serialized calls: samples taken into engine memory, messages sent from kept buffers.

Taking. rclpy's raw take (``take_message(type, raw=True)``) has rmw copy the
sample into a fresh buffer and then copies that into a new ``bytes``; the GPU
engine then copies those bytes once more, into pinned memory, before its
upload. :class:`SerializedTaker` calls ``rcl_take_serialized_message``
through :mod:`ctypes` (the interpreter lock is released for the call) with a
buffer from ``buffers(nbytes)``: for the GPU engine a pinned buffer of its
:class:`xfeat_ros.features.gpu.image_pool.ImagePool`, which it then uploads from as it
is, so two whole-image copies of every frame are saved. rmw grows a buffer
that is too small through the rcutils allocator given with it, which asks
``buffers`` for a larger one. Only the GPU engine offers buffers; with the CPU
engine rclpy's take stays (a new array per sample gains nothing there:
``docs/design-notes.md``).

Publishing. rclpy's ``publish(data)`` takes the message as a new ``bytes``
(the CDR's pieces joined) and copies it into a new C++ string before
``rcl_publish_serialized_message``, under the interpreter lock.
:class:`SerializedPublisher` copies a :class:`xfeat_ros.ros.transport.cdr.CdrWriter`'s
pieces into a buffer it keeps across messages and publishes it from there
through the same rcl call (the lock released while Fast DDS writes).

Payloads, message info and published bytes equal rclpy's
(``test/ros/test_rcl_io.py``). :func:`load` returns None, and the node keeps
rclpy's calls (:class:`RclpyTaker`, :class:`RclpyPublisher`), where rcl's
libraries cannot be loaded, for an entity without an rcl handle, or with
``XFEAT_ROS_RCL_IO=rclpy`` (the base arm of A/B runs).
"""

import ctypes
import os
import threading

import numpy as np

from xfeat_ros.errors import TransportError

ENV = 'XFEAT_ROS_RCL_IO'
RCL_RET_OK = 0
RCL_RET_SUBSCRIPTION_TAKE_FAILED = 401   # rcl/types.h: nothing to take
SEQUENCE_UNSUPPORTED = 2**64 - 1  # rmw/types.h: RMW_MESSAGE_INFO_SEQUENCE_NUMBER_UNSUPPORTED
GID_STORAGE_SIZE = 16                    # rmw/types.h: RMW_GID_STORAGE_SIZE (since Iron)
ERROR_MESSAGE_MAX = 1024                 # rcutils/error_handling.h
GROWTH = 1.25                            # a publisher's buffer grows to 1.25x the message

_ALLOCATE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_DEALLOCATE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_REALLOCATE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                               ctypes.c_void_p)
_ZERO_ALLOCATE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                  ctypes.c_void_p)


class _Allocator(ctypes.Structure):
    """rcutils_allocator_t."""

    _fields_ = [('allocate', _ALLOCATE), ('deallocate', _DEALLOCATE),
                ('reallocate', _REALLOCATE), ('zero_allocate', _ZERO_ALLOCATE),
                ('state', ctypes.c_void_p)]


class _SerializedMessage(ctypes.Structure):
    """rcl_serialized_message_t (rcutils_uint8_array_t)."""

    _fields_ = [('buffer', ctypes.c_void_p), ('buffer_length', ctypes.c_size_t),
                ('buffer_capacity', ctypes.c_size_t), ('allocator', _Allocator)]


class _Gid(ctypes.Structure):
    """rmw_gid_t."""

    _fields_ = [('implementation_identifier', ctypes.c_char_p),
                ('data', ctypes.c_uint8 * GID_STORAGE_SIZE)]


class _MessageInfo(ctypes.Structure):
    """rmw_message_info_t."""

    _fields_ = [('source_timestamp', ctypes.c_int64), ('received_timestamp', ctypes.c_int64),
                ('publication_sequence_number', ctypes.c_uint64),
                ('reception_sequence_number', ctypes.c_uint64),
                ('publisher_gid', _Gid), ('from_intra_process', ctypes.c_bool)]


class _MessageInfoRoom(ctypes.Structure):
    """
    A message info with room behind it: an rmw whose info is larger never writes past it.

    (Humble's gid holds 24 bytes, not 16: its later fields would land in ``reserve``.)
    """

    _fields_ = [('info', _MessageInfo), ('reserve', ctypes.c_uint8 * 64)]


class _ErrorString(ctypes.Structure):
    """rcutils_error_string_t."""

    _fields_ = [('str', ctypes.c_char * ERROR_MESSAGE_MAX)]


class Rcl:
    """rcl's serialized take and publish and rcutils' error state, from the loaded libraries."""

    def __init__(self, rcl, rcutils):
        """Bind ``rcl`` (librcl) and ``rcutils`` (librcutils) CDLLs."""
        self.publish = rcl.rcl_publish_serialized_message
        self.publish.argtypes = (ctypes.c_void_p, ctypes.POINTER(_SerializedMessage),
                                 ctypes.c_void_p)
        self.publish.restype = ctypes.c_int
        self.take = rcl.rcl_take_serialized_message
        self.take.argtypes = (ctypes.c_void_p, ctypes.POINTER(_SerializedMessage),
                              ctypes.POINTER(_MessageInfo), ctypes.c_void_p)
        self.take.restype = ctypes.c_int
        self._error = rcutils.rcutils_get_error_string
        self._error.restype = _ErrorString
        self._reset = rcutils.rcutils_reset_error
        self._reset.restype = None

    def error(self):
        """Return rcl's error message of this thread, and clear it."""
        text = self._error().str.decode('utf-8', 'replace')
        self._reset()
        return text or 'no message'


def load(environ=None):
    """Return :class:`Rcl`, or None (rclpy's calls then): ``XFEAT_ROS_RCL_IO=rclpy``, no librcl."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV, '') == 'rclpy':
        return None
    try:
        return Rcl(ctypes.CDLL('librcl.so'), ctypes.CDLL('librcutils.so'))
    except (OSError, AttributeError):
        return None


def _pointer(entity):
    """Return the rcl handle address of an rclpy subscription or publisher, or None."""
    return getattr(entity.handle, 'pointer', None)


def new_array(nbytes):
    """Return a new uint8 array of ``nbytes`` (the default ``buffers``)."""
    return np.empty(nbytes, np.uint8)


class _Buffers:
    """An rcutils allocator whose blocks come from ``buffers(nbytes)``; the newest is kept."""

    def __init__(self, buffers):
        self.buffers = buffers
        self.newest = None
        self.allocator = _Allocator(_ALLOCATE(self._allocate), _DEALLOCATE(self._deallocate),
                                    _REALLOCATE(self._reallocate),
                                    _ZERO_ALLOCATE(self._zero_allocate), None)

    def new(self, nbytes):
        """Return a buffer of at least ``nbytes`` (and one) bytes; keep it as the newest."""
        self.newest = self.buffers(max(int(nbytes), 1))
        return self.newest

    def _allocate(self, size, state):
        return self.new(size).ctypes.data

    def _deallocate(self, pointer, state):
        """Do nothing: a buffer is free once its last Python owner lets go."""

    def _reallocate(self, pointer, size, state):
        # rmw only grows a buffer before copying a whole sample into it: nothing to keep
        return self.new(size).ctypes.data

    def _zero_allocate(self, count, size, state):
        array = self.new(count * size)
        array[:count * size] = 0
        return array.ctypes.data


def _info_dict(info):
    """Return the message info as rclpy's ``take_message`` gives it."""
    gid = info.publisher_gid
    identifier = gid.implementation_identifier

    def sequence(number):
        return None if number == SEQUENCE_UNSUPPORTED else int(number)

    return {
        'source_timestamp': int(info.source_timestamp),
        'received_timestamp': int(info.received_timestamp),
        'publication_sequence_number': sequence(info.publication_sequence_number),
        'reception_sequence_number': sequence(info.reception_sequence_number),
        'publisher_gid': {
            'implementation_identifier': identifier.decode() if identifier else None,
            'data': bytes(gid.data)},
    }


class SerializedTaker:
    """Take one rclpy subscription's samples, each into a buffer of ``buffers`` (rmw's copy)."""

    def __init__(self, subscription, rcl, buffers=None):
        """
        Wrap ``subscription`` (rclpy, ``raw=True``) with the bound :class:`Rcl` ``rcl``.

        ``buffers(nbytes)`` returns a writable uint8 array of at least
        ``nbytes`` that no one else uses until the payload taken into it is
        let go (default: a new array each time).
        """
        self.subscription = subscription
        self._rcl = rcl
        self._buffers = _Buffers(buffers or new_array)
        self._message = _SerializedMessage()
        self._message.allocator = self._buffers.allocator
        self._room = _MessageInfoRoom()
        self._info = self._room.info
        self._info_pointer = ctypes.cast(ctypes.pointer(self._room), ctypes.POINTER(_MessageInfo))
        self._capacity = 0

    def take(self):
        """
        Return ``(payload, info)`` of the next sample, or None when there is none.

        ``payload`` is a uint8 array view of the serialized message (readable
        through the buffer protocol, like rclpy's ``bytes``), ``info`` the
        dict rclpy gives. Raises :class:`TransportError` on an rcl failure.
        """
        array = self._buffers.newest
        if array is None or array.size < self._capacity:
            array = self._buffers.new(self._capacity)
        message = self._message
        message.buffer = array.ctypes.data
        message.buffer_length = 0
        message.buffer_capacity = array.size
        with self.subscription.handle:
            ret = self._rcl.take(self.subscription.handle.pointer, ctypes.byref(message),
                                 self._info_pointer, None)
        if ret == RCL_RET_SUBSCRIPTION_TAKE_FAILED:
            return None   # the buffer stays the newest, for the next sample
        if ret != RCL_RET_OK:
            raise TransportError(f'taking from {self.subscription.topic_name} failed '
                                 f'({ret}): {self._rcl.error()}')
        array = self._buffers.newest   # rmw may have grown the buffer into a new one
        self._buffers.newest = None    # the payload's buffer belongs to the caller now
        length = int(message.buffer_length)
        self._capacity = max(self._capacity, length)
        return array[:length], _info_dict(self._info)


class RclpyTaker:
    """The same interface through rclpy's own ``take_message(type, raw=True)``."""

    def __init__(self, subscription):
        """Wrap ``subscription`` (rclpy, ``raw=True``)."""
        self.subscription = subscription

    def take(self):
        """Return ``(bytes, info)`` of the next sample, or None."""
        return self.subscription.handle.take_message(self.subscription.msg_type, True)


def serialized_taker(subscription, rcl=None, buffers=None):
    """
    Return a :class:`SerializedTaker` for ``subscription``, or an :class:`RclpyTaker`.

    rcl's take is used only with both ``rcl`` (:func:`load`) and ``buffers``.
    """
    if rcl is None or buffers is None or _pointer(subscription) is None:
        return RclpyTaker(subscription)
    return SerializedTaker(subscription, rcl, buffers)


class SerializedPublisher:
    """Publish :class:`~xfeat_ros.ros.transport.cdr.CdrWriter` messages from one kept buffer."""

    def __init__(self, publisher, rcl):
        """Wrap ``publisher`` (rclpy, any message type) with the bound :class:`Rcl` ``rcl``."""
        self.publisher = publisher
        self._rcl = rcl
        self._lock = threading.Lock()   # one buffer: one message at a time
        self._buffer = np.zeros(0, np.uint8)
        self._message = _SerializedMessage()
        # rcl does not allocate while publishing; a valid allocator all the same
        self._spare = _Buffers(new_array)
        self._message.allocator = self._spare.allocator

    def publish(self, writer):
        """
        Publish the message that ``writer`` (a :class:`~.cdr.CdrWriter`) holds.

        Raises :class:`TransportError` with rcl's message when rcl refuses it.
        """
        with self._lock:
            size = writer.size()
            if self._buffer.size < size:
                self._buffer = np.zeros(int(size * GROWTH), np.uint8)
            writer.write_into(memoryview(self._buffer))
            self._send(self._buffer, size)

    def publish_block(self, block, size):
        """
        Publish ``block[:size]`` (uint8: one whole serialized message) as it lies, no copy.

        For a message written in place (:mod:`xfeat_ros.ros.transport.keypoints_wire`).
        Raises :class:`TransportError` with rcl's message when rcl refuses it.
        """
        if not 0 < size <= block.size:
            raise ValueError(f'a message of {size} bytes in a block of {block.size}')
        with self._lock:
            self._send(block, size)

    def _send(self, block, size):
        """Publish the first ``size`` bytes of ``block`` (under the lock)."""
        message = self._message
        message.buffer = block.ctypes.data
        message.buffer_length = size
        message.buffer_capacity = block.size
        with self.publisher.handle:
            ret = self._rcl.publish(self.publisher.handle.pointer, ctypes.byref(message),
                                    None)
        if ret != RCL_RET_OK:
            raise TransportError(f'publishing on {self.publisher.topic_name} failed '
                                 f'({ret}): {self._rcl.error()}')


class RclpyPublisher:
    """The same interface through rclpy's own ``publish(bytes)``."""

    def __init__(self, publisher):
        """Wrap ``publisher`` (rclpy)."""
        self.publisher = publisher

    def publish(self, writer):
        """Publish the message that ``writer`` holds, joined into ``bytes``."""
        self.publisher.publish(writer.to_bytes())


def publishing(rcl):
    """Say how :func:`serialized_publisher` with ``rcl`` publishes."""
    return "rcl's publish, from kept buffers" if rcl is not None else "rclpy's publish"


def serialized_publisher(publisher, rcl=None):
    """Return a :class:`SerializedPublisher` for ``publisher``, or an :class:`RclpyPublisher`."""
    if rcl is None or _pointer(publisher) is None:
        return RclpyPublisher(publisher)
    return SerializedPublisher(publisher, rcl)
