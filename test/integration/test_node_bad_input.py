# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Malformed images are rejected, counted and logged; the stream goes on correctly."""

import ast
import itertools
import re
from types import SimpleNamespace

import numpy as np
import pytest

import rclpy
from rclpy.parameter import Parameter
from ros_harness import Client, start_node, stop_node
from xfeat_ros.features.image_codec import image_msg
from xfeat_ros.ros.messages import features_from_msg
from xfeat_ros.runtime.report import Reporter
from xfeat_ros.tools.image_files import list_sequence, read_image

pytestmark = pytest.mark.ros


def malformed(good):
    """(label, message, expected reason text) for each malformed kind."""
    cases = []
    for encoding in ('yuv422', '32FC1', 'bayer_rggb8'):  # each a reason of its own
        msg = image_msg(*good)
        msg.encoding = encoding
        cases.append(('unknown encoding', msg, f"unsupported image encoding '{encoding}'"))
    msg = image_msg(*good)
    msg.step = msg.width * 3 - 1
    cases.append(('step too small', msg, 'is smaller than width'))
    msg = image_msg(*good)
    msg.data = bytes(msg.data)[:-100]
    cases.append(('truncated data', msg, 'data has'))
    msg = image_msg(*good)
    msg.height = msg.height + 1
    cases.append(('height mismatch', msg, 'data has'))
    small = image_msg(np.zeros((20, 40, 1), np.uint8), 'mono8')
    cases.append(('smaller than 32 px', small, 'smaller than 32 px'))
    empty = image_msg(np.zeros((0, 0, 1), np.uint8), 'mono8')
    cases.append(('empty image', empty, 'empty image'))
    return cases


def test_bad_images_rejected_node_keeps_working(data_dir, weights_npz, cpu_pipeline,
                                                tmp_path):
    frames = [read_image(p) for _, p in list_sequence(data_dir / 'data' / 'tum_fr2_desk')[:3]]
    log = tmp_path / 'node.log'
    # Remapped topics: log lines must name them as resolved (/cam/image), as /diagnostics does.
    remaps = [arg for name in ('image', 'keypoints', 'matches')
              for arg in ('-r', f'{name}:=/cam/{name}')]
    process = start_node({'weights': str(weights_npz), 'input_qos_reliability': 'reliable'},
                         log, extra_args=['--log-level', 'xfeat:=info', *remaps])
    client = Client(cameras=('cam',))
    got, matched = client.keypoints['cam'], client.matches['cam']
    try:
        assert client.wait_connected(process), log.read_text()
        client.publish('cam', image_msg(*frames[0]))
        assert client.spin_until(lambda: len(got) == 1, 60, process), log.read_text()
        cases = malformed(frames[1])
        for label, msg, _ in cases:
            client.publish('cam', msg)
            client.spin_until(lambda: False, 0.3)
        assert process.poll() is None, log.read_text()
        assert len(got) == 1, 'a malformed image produced output'
        client.publish('cam', image_msg(*frames[1]))
        assert client.spin_until(lambda: len(got) == 2 and len(matched) == 1, 60, process)
        # The good frame after the bad ones is processed exactly as offline and
        # matched against the last good frame.
        offline = cpu_pipeline.extract(
            (frames[1][0].astype(np.float32) / 255).mean(axis=2, dtype=np.float32))
        online = features_from_msg(got[1])
        # The same keypoints and scores; keypoints whose scores tie to float rounding may
        # swap places (the node's ONNX Runtime threads round differently: seen on the
        # 16-core GPU machine), so rows are compared in position order.
        assert online.keypoints.shape == offline.keypoints.shape
        on, off = (np.lexsort(f.keypoints.T) for f in (online, offline))
        np.testing.assert_allclose(online.keypoints[on], offline.keypoints[off], atol=1e-4)
        np.testing.assert_allclose(online.scores[on], offline.scores[off], atol=1e-5)
        assert matched[0].previous_stamp == got[0].header.stamp
        assert len(matched[0].current_indices) > 300
    finally:
        client.close()
        assert stop_node(process) == 0
    text = log.read_text()
    # Logs are throttled per camera and reason: each new reason shows at once.
    for _, _, reason in cases:
        assert '/cam/image: rejected image' in text and reason in text, \
            f'no log line with {reason!r}\n{text}'
    rejects = [line for line in text.splitlines() if 'rejected image' in line]
    assert all('/cam/image: ' in line for line in rejects), rejects  # resolved names only
    for _, _, reason in cases:  # counted per reason, not per error class
        first = next(line for line in rejects if reason in line)
        assert '(1 so far for this reason)' in first, first
    assert 'Traceback' not in text
    # the final counts line (a GPU engine adds counts of its own, e.g. next_frame_armed)
    counts = ast.literal_eval(re.search(r'final counts: (.*)', text).group(1))['']
    expected = {'received': 10, 'accepted': 2, 'published': 2, 'rejected': 8,
                'rejected_UnsupportedEncodingError': 3, 'rejected_ImageLayoutError': 4,
                'rejected_ImageTooSmallError': 1}
    assert {key: counts.get(key) for key in expected} == expected, text


@pytest.fixture
def scripted_node():
    """Yield an in-process node over the scripted engine (no network), in its own context."""
    from core_fakes import ScriptedEngine
    from xfeat_ros.ros.node import XFeatNode
    context = rclpy.Context()
    rclpy.init(context=context)
    node = XFeatNode(engine=ScriptedEngine({}), context=context,
                     parameter_overrides=[Parameter('diagnostics_period_s', value=0.0)])
    yield node
    node.stop()
    node.destroy_node()
    rclpy.shutdown(context=context)


def test_reject_lines_count_per_reason(scripted_node):
    lines = []
    ticks = itertools.count(step=10.0)  # every line comes: none is throttled
    scripted_node.report = Reporter(SimpleNamespace(error=lines.append),
                                    clock=lambda: next(ticks))
    cases = malformed((np.zeros((48, 64, 3), np.uint8), 'rgb8'))
    empty = next(msg for label, msg, _ in cases if label == 'empty image')
    for _, msg, _ in cases + [('again', empty, None)]:
        scripted_node.on_image('', msg)
    assert len(lines) == len(cases) + 1, lines
    counts = scripted_node.stats()['']
    assert counts['rejected_ImageLayoutError'] == 5  # step, data twice, empty twice: one class
    [first_empty, again] = [line for line in lines if 'empty image' in line]
    assert '(1 so far for this reason)' in first_empty, lines  # not the class's 4
    assert '(2 so far for this reason)' in again
    for _, _, reason in cases:
        assert '(1 so far' in next(line for line in lines if reason in line), lines
