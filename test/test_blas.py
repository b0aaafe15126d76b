# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_ros.blas: NumPy's OpenBLAS given one thread in the node (no workers spinning)."""

import os
import subprocess
import sys

import pytest

from xfeat_ros import blas

# In a fresh process, so that this test process keeps its own BLAS settings.
PROBE = r"""
import sys
import numpy
from xfeat_ros import blas
before = blas.current_threads()
line = blas.limit_threads(1, environ={'XFEAT_ROS_BLAS_THREADS': sys.argv[1]})
print(repr((before, line, blas.current_threads())))
"""


def probe(env_value, start_threads=2):
    env = {k: v for k, v in os.environ.items() if k != blas.ENV}
    env['OPENBLAS_NUM_THREADS'] = str(start_threads)
    done = subprocess.run([sys.executable, '-c', PROBE, env_value], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return eval(done.stdout.strip())  # noqa: S307 - our own probe's repr


def openblas_present():
    import numpy  # noqa: F401
    return bool(blas.blas_libraries())


needs_openblas = pytest.mark.skipif(not openblas_present(),
                                    reason="this NumPy's BLAS is not an OpenBLAS")


@needs_openblas
def test_every_openblas_gets_one_thread():
    _, line, after = probe('')
    assert after and set(after.values()) == {1}, after
    assert line.startswith('1 thread(s) in ')


@needs_openblas
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason='OpenBLAS caps its threads at the cores')
def test_a_count_from_the_environment():
    before, line, after = probe('2', start_threads=1)
    assert set(before.values()) == {1}
    assert set(after.values()) == {2} and line.startswith('2 thread(s)')


@needs_openblas
@pytest.mark.parametrize('value,said', [('default', 'left alone'), ('many', 'is not a number')])
def test_left_alone_when_asked_or_unreadable(value, said):
    before, line, after = probe(value)
    assert said in line and after == before


def test_no_openblas_mapped(tmp_path):
    maps = tmp_path / 'maps'
    maps.write_text('7f00-7f01 r-xp 00000000 08:01 12 /usr/lib/libc.so.6\n'
                    '7f02-7f03 rw-p 00000000 00:00 0\n')
    assert blas.blas_libraries(maps) == []
    assert blas.limit_threads(1, environ={}, maps=maps) == 'no OpenBLAS found (left alone)'
    assert blas.current_threads(maps) == {}
    assert blas.blas_libraries(tmp_path / 'missing') == []
