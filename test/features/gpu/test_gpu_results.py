# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
How the GPU engine's result copies are split between two streams (host only, no GPU).

The copies themselves (pinned memory, device arrays) are exercised by the GPU
tests (``test_gpu_batch.py``: a group's results right after its submission
equal those fetched after it has finished); here ``copy_to_host`` is replaced
by a recorder, so that only the split is under test; and that a slot whose
copies were enqueued with its armed chain (``prefetched``) is only waited for.
"""

from types import SimpleNamespace

import numpy as np
import pytest
from xfeat_ros.features.gpu import results


class RecordingStream:
    """A stream that records the events it was told to wait for."""

    def __init__(self, name):
        self.name = name
        self.waited = []

    def wait_event(self, event):
        self.waited.append(event)


def test_described_features_leave_early_the_rest_in_stream_order(monkeypatch):
    monkeypatch.setattr(results, 'copy_to_host',
                        lambda requests, stream: (stream.name, [r[0] for r in requests]))
    described = SimpleNamespace(described='event of slot a')
    host_set = SimpleNamespace(described=None)  # features set from the host
    requests = [(results.FEATURES, described, []), (results.MATCHES, described, []),
                (results.FEATURES, host_set, []), (results.MATCHES, host_set, [])]
    early, late = RecordingStream('copy'), RecordingStream('engine')
    copies = results.copy_early_and_late(requests, early, late)
    assert [(r, out) for r, out in copies] == [
        ([requests[0]], ('copy', [results.FEATURES])),
        (requests[1:], ('engine', [results.MATCHES, results.FEATURES, results.MATCHES]))]
    assert early.waited == ['event of slot a'] and late.waited == []


def test_nothing_to_copy_enqueues_nothing(monkeypatch):
    monkeypatch.setattr(results, 'copy_to_host', lambda requests, stream: 1 / 0)
    assert results.copy_early_and_late([], RecordingStream('a'), RecordingStream('b')) == []


class Event:
    """A CUDA event stand-in that counts the host's waits."""

    def __init__(self):
        self.waits = 0

    def synchronize(self):
        self.waits += 1


def prefetched_slot(capacity=4, keypoints=3, matches=2):
    """Return (slot, event): a slot whose whole capacity was copied with its chain."""
    rng = np.random.default_rng(0)
    slot = SimpleNamespace(submitted=True, matched=True, image_hw=(48, 64),
                           host_counts=SimpleNamespace(array=np.array([keypoints, matches])),
                           keypoint_count=lambda: keypoints)
    features = [rng.random((capacity, 2), np.float32), rng.random(capacity, np.float32),
                rng.random((capacity, 64), np.float32)]
    pairs = [np.arange(capacity, dtype=np.int32), np.arange(capacity, dtype=np.int32)[::-1],
             rng.random(capacity, np.float32), np.array([1, 0, 1, 1], np.uint8)]
    event = Event()
    requests = [(results.FEATURES, slot, []), (results.MATCHES, slot, [])]
    slot.prefetched = (requests, (event, [features, pairs]))
    return slot, event


@pytest.mark.parametrize('kinds', [(results.FEATURES, results.MATCHES), (results.FEATURES,)])
def test_a_prefetched_slot_is_waited_for_not_copied_again(monkeypatch, kinds):
    monkeypatch.setattr(results, 'copy_early_and_late', lambda *args, **kwargs: 1 / 0)
    slot, event = prefetched_slot()

    def flush(s):
        raise AssertionError('a prefetched slot was flushed')
    found = results.fetch([slot], kinds, RecordingStream('copy'), RecordingStream('engine'),
                          flush)
    assert event.waits == 1
    assert sorted(kind for _, kind in found) == sorted(kinds)
    features = found[(id(slot), results.FEATURES)]
    assert len(features.keypoints) == len(features.scores) == len(features.descriptors) == 3
    assert features.image_hw == (48, 64)
    _, (_, (arrays, pairs)) = slot.prefetched
    np.testing.assert_array_equal(features.descriptors, arrays[2][:3])
    if results.MATCHES in kinds:
        match = found[(id(slot), results.MATCHES)]
        np.testing.assert_array_equal(match.idx0, [0, 1])
        np.testing.assert_array_equal(match.idx1, [3, 2])
        np.testing.assert_array_equal(match.verified, [True, False])


def test_slots_without_copies_of_their_own_are_copied_beside_a_prefetched_one(monkeypatch):
    calls = []

    def split(requests, early, late, behind_done=False):
        calls.append([kind for kind, _, _ in requests])
        return []
    monkeypatch.setattr(results, 'copy_early_and_late', split)
    monkeypatch.setattr(results, 'result_parts', lambda slot, kinds, finished: [
        (kind, slot, []) for kind in kinds])
    slot, event = prefetched_slot()
    other = SimpleNamespace(submitted=True, matched=False, prefetched=None,
                            done=SimpleNamespace(done=True))
    flushed = []
    found = results.fetch([slot, other], (results.FEATURES, results.MATCHES),
                          RecordingStream('copy'), RecordingStream('engine'), flushed.append)
    assert calls == [[results.FEATURES]] and flushed == [other] and event.waits == 1
    assert set(found) == {(id(slot), results.FEATURES), (id(slot), results.MATCHES)}
