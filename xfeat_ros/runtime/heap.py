# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
A process's heap for large messages: glibc's thresholds, and the start-up objects frozen.

Every large sample a Python ROS process takes or publishes passes through fresh
buffers: rclpy's raw take copies the payload twice (into rmw's serialized
message, then into ``bytes``), and a CDR publish joins one ``bytes`` object.
glibc serves a request above its mmap threshold (128 KiB at start, raised only
after a larger mmapped block is freed) with a new mapping, so each 0.9-1.2 MB
buffer is zero-filled page by page on first touch: ~780 page faults per 640x480
rgb8 image taken on the CPU machine, 3.2 -> 1.6 ms of transport
(docs/design-notes.md). :func:`keep_large_buffers` raises the threshold
to glibc's maximum, so such buffers come from the heap and are reused.

:func:`freeze_startup_objects` is the other half: what start-up built (PyTorch,
CuPy, the weights) lives as long as the process, so after one collection it is
frozen and no later full collection walks it (one takes 60-90 ms with PyTorch
imported, holding the GIL; in the node's measured runs they all fell in start-up,
so this is a safeguard, not a measured gain).

``XFEAT_ROS_MALLOC=default`` leaves glibc's settings alone (for A/B runs).
"""

import ctypes
import ctypes.util
import gc
import os

ENV = 'XFEAT_ROS_MALLOC'
M_TRIM_THRESHOLD = -1   # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024   # glibc's largest on 64-bit: a 4K rgb8 image fits
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES   # the ratio glibc's own adjustment keeps


def keep_large_buffers(environ=None):
    """
    Serve buffers up to 32 MiB from the heap (glibc ``mallopt``); returns what was done.

    One of ``'tuned'``, ``'left alone'`` (``XFEAT_ROS_MALLOC=default``), or
    ``'not glibc'`` (no ``mallopt``: musl, macOS), so callers can log it.
    """
    environ = os.environ if environ is None else environ
    if environ.get(ENV, '') == 'default':
        return 'left alone'
    mallopt = _mallopt()
    if mallopt is None:
        return 'not glibc'
    ok = (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
          and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1)
    return 'tuned' if ok else 'not glibc'


def freeze_startup_objects():
    """Collect once, then keep everything alive now out of later collections (``gc.freeze``)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def _mallopt():
    """Return the C library's ``mallopt`` function, or None where it has none."""
    name = ctypes.util.find_library('c')
    try:
        libc = ctypes.CDLL(name)
        function = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int)
    function.restype = ctypes.c_int
    return function
