# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Host logic of xfeat_ros.features.gpu.ops that needs no GPU: the graph cache and the batch decode.

The kernels themselves are tested against the CPU reference in the GPU suite
(test_gpu_kernels.py, test_gpu_engine.py); here fakes stand in for the stream
and the two decode launches, so that which launches are made, and how
often a graph is captured, are checked on CI.
"""

from collections import OrderedDict
from types import SimpleNamespace

from xfeat_ros.features.gpu import ops


class FakeStream:
    """Records captures and launches; a captured graph replays what was enqueued."""

    def __init__(self):
        self.log = []
        self.capturing = False

    def begin_capture(self):
        self.capturing = True
        self.log.append('begin')

    def end_capture(self):
        self.capturing = False
        self.log.append('end')
        stream = self
        return SimpleNamespace(launch=lambda on: stream.log.append(('launch', on is stream)),
                               upload=lambda on: stream.log.append(('upload', on is stream)))


def test_launch_cached_captures_once_replays_and_keeps_the_newest():
    stream = FakeStream()
    cache = OrderedDict()
    enqueued = []

    def enqueue(key):
        return lambda: enqueued.append((key, stream.capturing))

    for key in ('a', 'a', 'b', 'c', 'a'):
        ops.launch_cached(cache, key, enqueue(key), stream, max_graphs=2)
    # captured (never run outside a capture) on first use: a, b, c, then a again (evicted)
    assert enqueued == [('a', True), ('b', True), ('c', True), ('a', True)]
    assert stream.log.count('begin') == 4 and stream.log.count(('launch', True)) == 5
    assert stream.log.count(('upload', True)) == 4  # each new graph uploaded at its capture
    assert list(cache) == ['c', 'a']


def test_a_graph_without_upload_is_captured_all_the_same():
    stream = FakeStream()
    stream.end_capture = lambda: SimpleNamespace(launch=lambda on: stream.log.append('launch'))
    ops.launch_cached(OrderedDict(), 'k', lambda: None, stream, max_graphs=2)
    assert stream.log == ['begin', 'launch']


def test_capture_cached_captures_and_uploads_without_launching():
    stream = FakeStream()
    cache = OrderedDict()
    for key in ('a', 'a'):
        ops.capture_cached(cache, key, lambda: None, stream, max_graphs=2)
    assert stream.log == ['begin', 'end', ('upload', True)] and list(cache) == ['a']
    ops.launch_cached(cache, 'a', lambda: None, stream, max_graphs=2)
    assert stream.log[3:] == [('launch', True)]  # replayed, not captured again


def test_launch_cached_ends_a_failed_capture():
    stream = FakeStream()

    def failing():
        raise RuntimeError('launch refused')

    try:
        ops.launch_cached(OrderedDict(), 'k', failing, stream, max_graphs=4)
    except RuntimeError:
        pass
    assert stream.log == ['begin', 'end'] and not stream.capturing


def test_decode_batch_one_launch_for_one_layout_else_one_per_row(monkeypatch):
    calls = []
    monkeypatch.setattr(ops, 'decode_frames', lambda *args: calls.append(('frames', args)))
    monkeypatch.setattr(ops, 'decode_resize', lambda *args: calls.append(('resize', args)))
    ws = SimpleNamespace(raw=list(range(30)), raw_stride=10, image=['img0', 'img1', 'img2'])
    same = [('slot0', 480, 640, 'rgb8', 1920, False), ('slot1', 480, 640, 'rgb8', 1920, False)]
    ops.decode_batch(ws, same, 'stream')
    assert calls == [('frames', (ws.raw, 10, 'rgb8', 480, 640, 1920, False, ws.image,
                                 'stream', 2))]
    calls.clear()
    mixed = same[:1] + [('slot1', 240, 320, 'mono8', 320, False),
                        ('slot2', 480, 640, 'rgb8', 1920, True)]
    ops.decode_batch(ws, mixed, 'stream')
    assert [kind for kind, _ in calls] == ['resize'] * 3
    assert [args[0][0] for _, args in calls] == [0, 10, 20]   # each row's bytes
    assert [args[6] for _, args in calls] == ['img0', 'img1', 'img2']
    assert [args[1:6] for _, args in calls] == [frame[3:4] + frame[1:3] + frame[4:]
                                                for frame in mixed]
