# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_ros.runtime.heap: large buffers reused from the heap (glibc), start-up objects frozen."""

import gc
import os
import platform
import subprocess
import sys

import pytest

from xfeat_ros.runtime import heap

GLIBC = platform.libc_ver()[0] == 'glibc'

# A message's life in a Python ROS process: three ~1 MB buffers (rmw's copy, the Python
# bytes, the CDR join), every page written, then all freed. Minor page faults per round.
ROUNDS = r"""
import resource, sys
from xfeat_ros.runtime import heap
state = heap.keep_large_buffers()
def rounds(n):
    for _ in range(n):
        buffers = [bytearray(1 << 20) for _ in range(3)]
        for b in buffers:
            b[::4096] = b'\x01' * len(b[::4096])
        del buffers
rounds(3)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rounds(50)
print(state, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50, sep='|')
"""


def _rounds(env=None):
    environ = dict(os.environ, **(env or {}))
    out = subprocess.run([sys.executable, '-c', ROUNDS], capture_output=True, text=True,
                         check=True, env=environ).stdout.strip()
    state, faults = out.split('|')
    return state, float(faults)


@pytest.mark.skipif(not GLIBC, reason='mallopt thresholds are glibc settings; this C library '
                                      f'is {platform.libc_ver()[0] or "unknown"}')
def test_tuned_process_reuses_large_buffers_without_page_faults():
    state, faults = _rounds()
    assert state == 'tuned'
    assert faults <= 1.0, f'{faults} page faults per round of three 1 MB buffers'


@pytest.mark.skipif(not GLIBC, reason='mallopt thresholds are glibc settings')
def test_default_setting_leaves_glibc_alone():
    state, _ = _rounds({heap.ENV: 'default'})
    assert state == 'left alone'
    assert heap.keep_large_buffers({heap.ENV: 'default'}) == 'left alone'


def test_thresholds_hold_the_largest_message_the_profile_is_sized_for():
    rgb4k = 3840 * 2160 * 3 + 1024  # a 4K rgb8 image with its header, as in docs/transport.md
    assert heap.MMAP_THRESHOLD_BYTES > rgb4k
    assert heap.MMAP_THRESHOLD_BYTES <= 32 * 1024 * 1024  # glibc refuses more on 64-bit
    assert heap.TRIM_THRESHOLD_BYTES >= heap.MMAP_THRESHOLD_BYTES


def test_freeze_moves_live_objects_out_of_collections():
    keep = [[i] for i in range(1000)]
    try:
        frozen = heap.freeze_startup_objects()
        assert frozen >= len(keep)
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
