# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Track ids continued on the device (``kernels/tracks.cu``, ``ops.continue_tracks``).

Ids and ages are integers: the kernel must equal the host reference
:func:`xfeat_ros.features.tracks.propagate_tracks` exactly (tolerance zero), for any
mask, any count, the uint32 wrap of an age included. GPU tests carry
``@pytest.mark.gpu`` and are skipped (with the reason) where CuPy or a CUDA
device is missing.
"""

import zlib

import numpy as np
import pytest
from xfeat_ros.features.tracks import propagate_tracks

CAPACITY = 4096


def case(name, rng):
    """Return ``(prev_count, count, idx0, idx1, verified, capacity)`` of a named case."""
    prev_count, count, capacity = 3000, 4096, CAPACITY
    if name == 'no keypoints':
        count = 0
    if name == 'clamped to capacity':
        prev_count, count, capacity = 1000, 5000, 1500
    m = {'no matches': 0, 'one match': 1}.get(name, min(prev_count, count, 2500))
    idx0 = rng.choice(prev_count, m, replace=False).astype(np.int32)
    idx1 = rng.choice(max(count, 1), m, replace=False).astype(np.int32) if count else \
        np.zeros(0, np.int32)
    verified = rng.random(m) < 0.8
    if name == 'all verified':
        verified[:] = True
    if name == 'none verified':
        verified[:] = False
    return prev_count, count, idx0, idx1, verified, capacity


def reference(prev_ids, prev_ages, count, idx0, idx1, verified, capacity, next_id):
    """Return the host's ids and ages of the keypoints the device holds (``capacity`` at most)."""
    n = min(count, capacity)
    keep = verified & (idx1 < n)
    return propagate_tracks(n, next_id, prev_ids, prev_ages, idx0[keep], idx1[keep])


@pytest.mark.gpu
@pytest.mark.parametrize('name', ['random', 'all verified', 'none verified', 'no matches',
                                  'one match', 'no keypoints', 'clamped to capacity'])
def test_continued_tracks_equal_the_host_reference(cp, stream, name):
    from xfeat_ros.features.gpu import ops
    from xfeat_ros.features.gpu.matching import MatchOutput
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    prev_count, count, idx0, idx1, verified, capacity = case(name, rng)
    prev_ids = rng.integers(0, 2**63, prev_count, dtype=np.uint64)
    prev_ages = rng.integers(1, 1000, prev_count, dtype=np.uint32)
    prev_ages[idx0[:3]] = np.iinfo(np.uint32).max   # wraps to 0, as NumPy's does
    next_id = 2**40 + 17
    out = ops.alloc_track_output(capacity)
    out.prev_ids[:prev_count] = cp.asarray(prev_ids)
    out.prev_ages[:prev_count] = cp.asarray(prev_ages)
    m = len(idx0)
    matches = MatchOutput(cp.asarray(np.pad(idx0, (0, 4))), cp.asarray(np.pad(idx1, (0, 4))),
                          cp.zeros(m + 4, cp.float32), cp.asarray(np.array([m], np.int32)))
    ops.continue_tracks(out.prev_ids, out.prev_ages, prev_count, matches,
                        cp.asarray(np.pad(verified, (0, 4)).astype(np.uint8)),
                        cp.asarray(np.array([count], np.int32)), next_id, out, stream)
    stream.synchronize()
    ids, ages, after = reference(prev_ids, prev_ages, count, idx0, idx1, verified, capacity,
                                 next_id)
    n = len(ids)
    np.testing.assert_array_equal(cp.asnumpy(out.ids[:n]), ids)
    np.testing.assert_array_equal(cp.asnumpy(out.ages[:n]), ages)
    assert int(out.next_after.get()[0]) == after
    if name == 'all verified':
        assert (ages == 0).sum() == 3   # the wrapped ages were carried over


def test_reference_keeps_only_verified_matches_in_range():
    """The host reference used above: unverified and out-of-range matches start new tracks."""
    ids, ages, after = reference(np.array([7, 8, 9], np.uint64), np.array([1, 2, 3], np.uint32),
                                 4, np.array([0, 1, 2]), np.array([3, 0, 9]),
                                 np.array([True, False, True]), 4, 100)
    np.testing.assert_array_equal(ids, [100, 101, 102, 7])
    np.testing.assert_array_equal(ages, [1, 1, 1, 2])
    assert after == 103
