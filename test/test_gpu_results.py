# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
How the GPU engine's result copies are split between two streams (host only, no GPU).

The copies themselves (pinned memory, device arrays) are exercised by the GPU
tests (``test_gpu_batch.py``: a group's results right after its submission
equal those fetched after it has finished); here ``copy_to_host`` is replaced
by a recorder, so that only the split is under test.
"""

from types import SimpleNamespace

from xfeat_ros.gpu import results


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
