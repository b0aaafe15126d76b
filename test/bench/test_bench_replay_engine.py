# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/replay_engine.py keeps the engine contract with results that cost nothing."""

from types import SimpleNamespace

import numpy as np
from script_loader import load_script


def load_tool():
    """Import bench/replay_engine.py as a module."""
    return load_script('bench/replay_engine.py', 'bench_replay_engine')


def test_replayed_results_have_the_engine_shapes():
    tool = load_tool()
    engine = tool.ReplayEngine(top_k=512, matches=300)
    first, second = engine.alloc_slot(), engine.alloc_slot()
    msg = SimpleNamespace(height=480, width=640)
    engine.submit(msg, first)
    engine.submit(msg, second)
    engine.submit_match(first, second)
    engine.synchronize()
    (f0, m0), (f1, m1) = engine.results([first, second])
    assert m0 is None and len(m1) == 300
    for features in (f0, f1):
        assert len(features) == 512 and features.image_hw == (480, 640)
        assert features.keypoints.dtype == np.float32
        assert (features.keypoints >= 0).all()
        assert (features.keypoints[:, 0] <= 639).all() and (features.keypoints[:, 1] <= 479).all()
        np.testing.assert_allclose(np.linalg.norm(features.descriptors, axis=1), 1, atol=1e-5)
        assert (np.diff(features.scores) <= 0).all()
    assert m1.verified.dtype == bool and 0 < m1.verified.mean() < 1
    assert len(set(m1.idx0.tolist())) == len(set(m1.idx1.tolist())) == 300
    assert (m1.idx0 < 512).all() and (m1.idx1 < 512).all()


def test_node_arguments_follow_the_node_module():
    tool = load_tool()
    argv = ['python3', '-m', 'xfeat_ros.ros.node', '--ros-args', '-p', 'top_k:=8']
    assert tool.node_arguments(argv) == ['--ros-args', '-p', 'top_k:=8']
    assert tool.node_arguments(['--ros-args']) == ['--ros-args']


def test_buffered_engine_offers_reusable_image_buffers():
    tool = load_tool()
    engine = tool.BufferedReplayEngine(top_k=64)
    buffer = engine.image_buffer(1000)
    assert buffer.dtype == np.uint8 and buffer.size >= 1000
    address = buffer.__array_interface__['data'][0]
    del buffer  # nothing refers to it any more: handed out again
    again = engine.image_buffer(1000)
    assert again.__array_interface__['data'][0] == address
    other = engine.image_buffer(1000)  # while the first is held: another one
    assert other.__array_interface__['data'][0] != address
    assert not hasattr(tool.ReplayEngine(top_k=64), 'image_buffer')
