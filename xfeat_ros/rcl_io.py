# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Serialized messages through rcl's own C calls: one copy less each way, the interpreter free.

rclpy's serialized paths each copy the whole message once more than the
middleware needs, and hold the interpreter lock while Fast DDS works:

* ``publisher.publish(data)`` converts the ``bytes`` into a C++ string (a copy
  of the 1.15 MB Keypoints of 4096 keypoints) before
  ``rcl_publish_serialized_message``;
* ``take_message(type, raw=True)`` has rmw copy the sample into a fresh
  buffer, then copies that into a new ``bytes``.

Here the same two rcl functions are called through :mod:`ctypes` (which
releases the interpreter lock for the call):

* :class:`SerializedPublisher` writes a :class:`xfeat_ros.cdr.CdrWriter`'s
  pieces into a buffer kept across messages (grown when a message is larger)
  and publishes it from there;
* :class:`SerializedTaker` has rmw copy each sample straight into a new NumPy
  array, which is the payload handed on (the array's owner keeps it alive).
  rmw grows a too-small buffer through the allocator it is given; that
  allocator hands out NumPy arrays too.

Both sides carry the same bytes and message info as rclpy's
(``test/test_rcl_io.py``). :func:`load` returns None, and the node keeps
rclpy's calls (:class:`RclpyPublisher`, :class:`RclpyTaker`), where rcl's
libraries or an entity's ``pointer`` cannot be found, or with
``XFEAT_ROS_RCL_IO=rclpy`` (for A/B runs).
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


class _ErrorString(ctypes.Structure):
    """rcutils_error_string_t."""

    _fields_ = [('str', ctypes.c_char * ERROR_MESSAGE_MAX)]


class Rcl:
    """The two rcl functions, and rcutils' error state, from the loaded libraries."""

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
    """Return the rcl handle address of an rclpy publisher or subscription, or None."""
    return getattr(entity.handle, 'pointer', None)


class _Arrays:
    """An rcutils allocator whose blocks are NumPy arrays; the newest one is kept."""

    def __init__(self):
        self.newest = None
        self.allocator = _Allocator(_ALLOCATE(self._allocate), _DEALLOCATE(self._deallocate),
                                    _REALLOCATE(self._reallocate),
                                    _ZERO_ALLOCATE(self._zero_allocate), None)

    def new(self, nbytes):
        """Return a new uint8 array of ``nbytes`` (at least one) and keep it as the newest."""
        self.newest = np.empty(max(int(nbytes), 1), np.uint8)
        return self.newest

    def _allocate(self, size, state):
        return self.new(size).ctypes.data

    def _deallocate(self, pointer, state):
        """Do nothing: the array is freed when its last Python owner lets go."""

    def _reallocate(self, pointer, size, state):
        # rmw only grows a buffer before copying a whole sample into it: nothing to keep
        return self.new(size).ctypes.data

    def _zero_allocate(self, count, size, state):
        array = self.new(count * size)
        array[:] = 0
        return array.ctypes.data


class SerializedPublisher:
    """Publish CDR messages on one rclpy publisher from a buffer kept across messages."""

    def __init__(self, publisher, rcl):
        """Wrap ``publisher`` (rclpy, any message type) with the bound :class:`Rcl` ``rcl``."""
        self.publisher = publisher
        self._rcl = rcl
        self._lock = threading.Lock()
        self._buffer = np.zeros(0, np.uint8)
        self._message = _SerializedMessage()
        self._arrays = _Arrays()   # never called: the buffer is large enough before a publish
        self._message.allocator = self._arrays.allocator

    def publish(self, writer):
        """
        Publish the message of ``writer`` (a finished :class:`xfeat_ros.cdr.CdrWriter`).

        Raises :class:`TransportError` with rcl's message when rcl refuses it.
        """
        with self._lock:
            size = writer.size()
            if self._buffer.size < size:
                self._buffer = np.zeros(int(size * GROWTH), np.uint8)
            writer.write_into(self._buffer)
            message = self._message
            message.buffer = self._buffer.ctypes.data
            message.buffer_length = size
            message.buffer_capacity = self._buffer.size
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
        """Publish the message of ``writer`` (a finished CdrWriter)."""
        self.publisher.publish(writer.to_bytes())


def serialized_publisher(publisher, rcl=None):
    """Return a :class:`SerializedPublisher` for ``publisher``, or an :class:`RclpyPublisher`."""
    if rcl is None or _pointer(publisher) is None:
        return RclpyPublisher(publisher)
    return SerializedPublisher(publisher, rcl)


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
    """Take one rclpy subscription's samples, each into a new NumPy array (rmw's one copy)."""

    def __init__(self, subscription, rcl):
        """Wrap ``subscription`` (rclpy, ``raw=True``) with the bound :class:`Rcl` ``rcl``."""
        self.subscription = subscription
        self._rcl = rcl
        self._arrays = _Arrays()
        self._message = _SerializedMessage()
        self._message.allocator = self._arrays.allocator
        self._info = _MessageInfo()
        self._capacity = 0

    def take(self):
        """
        Return ``(payload, info)`` of the next sample, or None when there is none.

        ``payload`` is a uint8 array of the serialized message (readable
        through the buffer protocol, like rclpy's ``bytes``), ``info`` the
        dict rclpy gives. Raises :class:`TransportError` on an rcl failure.
        """
        array = self._arrays.newest
        if array is None or array.size < self._capacity:
            array = self._arrays.new(self._capacity)
        message = self._message
        message.buffer = array.ctypes.data
        message.buffer_length = 0
        message.buffer_capacity = array.size
        with self.subscription.handle:
            ret = self._rcl.take(self.subscription.handle.pointer, ctypes.byref(message),
                                 ctypes.byref(self._info), None)
        if ret == RCL_RET_SUBSCRIPTION_TAKE_FAILED:
            return None   # the array stays the newest, for the next sample
        if ret != RCL_RET_OK:
            raise TransportError(f'taking from {self.subscription.topic_name} failed '
                                 f'({ret}): {self._rcl.error()}')
        array = self._arrays.newest   # rmw may have grown the buffer into a new array
        self._arrays.newest = None    # the payload's array belongs to the caller now
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


def serialized_taker(subscription, rcl=None):
    """Return a :class:`SerializedTaker` for ``subscription``, or an :class:`RclpyTaker`."""
    if rcl is None or _pointer(subscription) is None:
        return RclpyTaker(subscription)
    return SerializedTaker(subscription, rcl)
