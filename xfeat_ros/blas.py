# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
NumPy's BLAS threads in the node: one.

The node's only BLAS call is the CPU matcher's similarity product (1.5 ms at
1024 x 1024 on the CPU machine). OpenBLAS runs it on a thread per core, and its
workers then spin for a while waiting for more work: paced at 30 Hz, the CPU
engine (320x240, top_k 1024) kept 154-157% of a core busy with OpenBLAS's
default threads and 71-74% with one, at the same time a frame (18.0-19.3 ms;
bench/NOTES.md, fifteenth session). On a small machine that spinning takes the
cores from ONNX Runtime and the camera driver.

:func:`limit_threads` sets the thread count of every OpenBLAS mapped into the
process (NumPy's bundled ``scipy_openblas`` or a system ``libopenblas``) through
its own ``*_set_num_threads`` call. ``XFEAT_ROS_BLAS_THREADS`` sets another
count, or ``default`` leaves the library alone (for A/B runs).
"""

import ctypes
import os

ENV = 'XFEAT_ROS_BLAS_THREADS'
MAPS = '/proc/self/maps'
# OpenBLAS's entry points under the names its builds export (NumPy's wheels prefix them)
_PREFIXES = ('scipy_openblas', 'openblas')
_SUFFIXES = ('64_', '')


def blas_libraries(maps=MAPS):
    """Paths of the mapped shared libraries whose file name mentions OpenBLAS."""
    try:
        with open(maps) as handle:
            paths = {line.split(maxsplit=5)[-1].strip() for line in handle
                     if len(line.split(maxsplit=5)) == 6}
    except OSError:
        return []
    return sorted(p for p in paths if 'openblas' in os.path.basename(p).lower()
                  and '.so' in os.path.basename(p))


def _entry(library, verb):
    """Return OpenBLAS's ``<prefix>_<verb>_num_threads<suffix>`` in ``library``, or None."""
    for prefix in _PREFIXES:
        for suffix in _SUFFIXES:
            function = getattr(library, f'{prefix}_{verb}_num_threads{suffix}', None)
            if function is not None:
                return function
    return None


def _opened(maps):
    libraries = []
    for path in blas_libraries(maps):
        try:
            libraries.append((path, ctypes.CDLL(path)))  # already loaded: the same handle
        except OSError:
            continue
    return libraries


def current_threads(maps=MAPS):
    """Return ``{library path: threads}`` of the mapped OpenBLAS libraries."""
    out = {}
    for path, library in _opened(maps):
        get = _entry(library, 'get')
        if get is not None:
            get.restype = ctypes.c_int
            out[path] = get()
    return out


def limit_threads(count=1, environ=None, maps=MAPS):
    """
    Give every mapped OpenBLAS ``count`` threads (NumPy imported first); return a line to log.

    ``XFEAT_ROS_BLAS_THREADS`` in ``environ`` overrides ``count`` (``default``:
    nothing is changed). An unreadable value leaves the library alone too, and
    says so.
    """
    import numpy  # noqa: F401 - maps NumPy's BLAS into the process
    environ = os.environ if environ is None else environ
    wanted = environ.get(ENV, '').strip()
    if wanted == 'default':
        return 'left alone'
    if wanted:
        try:
            count = int(wanted)
        except ValueError:
            return f'left alone ({ENV}={wanted!r} is not a number)'
    count = max(int(count), 1)
    done = []
    for path, library in _opened(maps):
        set_threads = _entry(library, 'set')
        if set_threads is not None:
            set_threads.argtypes = (ctypes.c_int,)
            set_threads(count)
            done.append(os.path.basename(path))
    if not done:
        return 'no OpenBLAS found (left alone)'
    return f'{count} thread(s) in {", ".join(done)}'
