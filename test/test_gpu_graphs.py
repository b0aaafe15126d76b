# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Graphs of the GPU engine: the cache on the host, the group graphs on the device.

:class:`xfeat_ros.gpu.graphs.GraphCache` is tested with a stand-in stream
(CI); the engine's group graphs against direct launches need a device
(``@pytest.mark.gpu``).
"""

import numpy as np
import pytest
from test_gpu_engine import flight_messages
from xfeat_ros.gpu.graphs import GraphCache
from xfeat_ros.preprocess import model_size


class FakeGraph:
    """A captured graph: the launches it holds, and where it was launched."""

    def __init__(self, calls):
        self.calls = calls
        self.launched_on = []

    def launch(self, stream):
        self.launched_on.append(stream)


class FakeStream:
    """Records what is enqueued; a capture collects it into a FakeGraph."""

    def __init__(self):
        self.capturing = None
        self.ran = []
        self.captures = 0

    def enqueue(self, name):
        (self.ran if self.capturing is None else self.capturing).append(name)

    def begin_capture(self):
        assert self.capturing is None
        self.capturing = []

    def end_capture(self):
        calls, self.capturing = self.capturing, None
        self.captures += 1
        return FakeGraph(calls)


def test_a_key_is_captured_once_then_replayed():
    cache, stream = GraphCache(limit=4), FakeStream()
    for _ in range(3):
        cache.launch('k', stream, lambda: stream.enqueue('work'))
    assert stream.captures == 1 and stream.ran == []  # nothing runs eagerly
    graph, _ = cache._graphs['k']
    assert graph.calls == ['work'] and graph.launched_on == [stream] * 3
    assert 'k' in cache and len(cache) == 1


def test_repeated_is_false_only_the_first_time():
    cache, stream = GraphCache(limit=2), FakeStream()
    assert cache.repeated(('a', 1)) is False
    assert cache.repeated(('a', 1)) is True
    assert cache.repeated(('b', 1)) is False
    cache.launch(('c',), stream, lambda: None)
    assert cache.repeated(('c',)) is True  # a captured key needs no first sight


def test_remembered_keys_are_bounded():
    cache = GraphCache(limit=1)  # remembers SEEN_PER_GRAPH keys
    for key in range(10):
        assert cache.repeated(key) is False
    assert len(cache._seen) == 4
    assert cache.repeated(0) is False  # forgotten: the oldest went first
    assert cache.repeated(9) is True


def test_least_recently_used_graphs_are_dropped_with_what_they_keep():
    cache, stream = GraphCache(limit=2), FakeStream()
    kept = {}
    for key in 'abc':
        kept[key] = np.zeros(3)
        cache.launch(key, stream, lambda: None, keep=kept[key])
        if key == 'b':
            cache.launch('a', stream, lambda: None)  # 'a' used again: 'b' is now the oldest
    assert 'a' in cache and 'c' in cache and 'b' not in cache
    assert cache._graphs['c'][1] is kept['c']
    cache.clear()
    assert len(cache) == 0 and cache.repeated('a') is False


def test_a_failed_capture_ends_the_capture_and_caches_nothing():
    cache, stream = GraphCache(), FakeStream()

    def broken():
        stream.enqueue('half')
        raise RuntimeError('capture invalidated')
    with pytest.raises(RuntimeError, match='invalidated'):
        cache.launch('k', stream, broken)
    assert stream.capturing is None and 'k' not in cache
    cache.launch('k', stream, lambda: stream.enqueue('whole'))
    assert cache._graphs['k'][0].calls == ['whole']


# -- the engine's group graphs (device) ---------------------------------------------------------

@pytest.fixture(scope='module')
def engines(weights_npz):
    """Build a graph engine and a direct-launch engine on one PyTorch backbone."""
    from xfeat_ros.gpu.engine import create_gpu_engine, GpuEngine
    graphed = create_gpu_engine('pytorch', str(weights_npz), 0, 4096, 0.05, 0.82)
    direct = GpuEngine(graphed.backbone, 0, 4096, 0.05, 0.82, graphs=False)
    return graphed, direct


def run_rounds(engine, msgs, slots, rounds, grouped):
    """Submit ``msgs`` into the same ``slots`` ``rounds`` times; return the last results."""
    for _ in range(rounds):
        if grouped:
            engine.submit_group(msgs, slots, chain=True)
        else:
            for i, (msg, slot) in enumerate(zip(msgs, slots)):
                engine.submit(msg, slot)
                if i:
                    engine.submit_match(slots[i - 1], slot)
        engine.synchronize()
        out = engine.results(slots)
    return out


def assert_same(got, want):
    for (fa, ma), (fb, mb) in zip(got, want):
        for name in ('keypoints', 'scores', 'descriptors'):
            np.testing.assert_array_equal(getattr(fa, name), getattr(fb, name))
        assert (ma is None) == (mb is None)
        if ma is not None:
            for name in ('idx0', 'idx1', 'similarity', 'verified'):
                np.testing.assert_array_equal(getattr(ma, name), getattr(mb, name))


@pytest.mark.gpu
@pytest.mark.parametrize('nest', [True, False], ids=['backbone-inside', 'backbone-apart'])
@pytest.mark.parametrize('frames,grouped', [(1, True), (3, True), (3, False)])
def test_group_graphs_equal_direct_launches(engines, shared_dir, nest, frames, grouped):
    """
    Run the same slots again and again; every round equals the direct launches.

    The first batch runs the shared graphs, the second captures the batch's own
    graph, the later ones replay it; results equal bit for bit (three frames:
    three layouts).
    """
    from xfeat_ros.gpu.graphs import child_graphs_supported
    graphed, direct = engines
    graphed.nest_backbone = nest and child_graphs_supported()
    msgs = flight_messages(shared_dir)[:frames]  # TUM: rgb8, padded bgr8, mono16
    slots = [graphed.alloc_slot() for _ in msgs]
    want = run_rounds(direct, msgs, [direct.alloc_slot() for _ in msgs], 1, grouped)
    assert len(want[0][0]) > 100
    for rounds in (1, 1, 2):  # first sight, capture, replays
        assert_same(run_rounds(graphed, msgs, slots, rounds, grouped), want)
    ws = graphed._workspaces[model_size(msgs[0].height, msgs[0].width)]
    tokens = [s.token for s in slots]
    keys = [key for key in ws.graphs._graphs
            if key[0] == 'group' and [frame[0] for frame in key[5]] == tokens]
    assert len(keys) == 1
    assert (keys[0][-1] is not None) == graphed.nest_backbone
    # the counts came through the slots' own pinned words
    assert all(s.count_ref[0] is s.host_counts for s in slots)
    assert [s.keypoint_count() for s in slots] == [len(f) for f, _ in want]


@pytest.mark.gpu
def test_settings_change_captures_a_new_group_graph(engines, shared_dir):
    graphed, direct = engines
    msg = flight_messages(shared_dir)[0]
    slot, other = graphed.alloc_slot(), direct.alloc_slot()
    for k, threshold in ((4096, 0.05), (512, 0.05), (4096, 0.2), (4096, 0.05)):
        for engine in (graphed, direct):
            engine.configure(top_k=k, threshold=threshold)
        want = run_rounds(direct, [msg], [other], 1, True)
        assert_same(run_rounds(graphed, [msg], [slot], 3, True), want)
        if k == 512:
            assert len(want[0][0]) == 512
