# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Image stamps through a real node process: a jump back restarts the stream, a repeat is refused.

After frames with live stamps, a bag of another year replayed into the same topic (or a
camera restarted on another clock) must not stop the node: the first frame of the new
timeline is published with an empty Matches and new track ids, matching resumes with the
next one, one WARN says so and ``/diagnostics`` counts it.
"""

import numpy as np
import pytest

from ros_harness import Client, start_node, stop_node
from xfeat_ros.features.image_codec import image_msg
from xfeat_ros.tools.play import stamp_msg
from xfeat_ros.tools.plumbing import parse_final_counts

pytestmark = pytest.mark.ros

LIVE_NS = 1796451675035557349   # the stamps of the issue: live ones, then a replayed bag's
BAG_NS = 1311868169163497984
PERIOD_NS = 100_000_000


def texture(i, shape=(96, 128)):
    """Return a textured mono8 frame shifted by ``i`` pixels (cheap to process, well matched)."""
    base = np.random.default_rng(7).integers(0, 256, (shape[0], shape[1] + 64), np.uint8)
    return np.ascontiguousarray(base[:, i:i + shape[1], None])


def stamp_of(msg):
    return msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec


def test_a_stamp_that_jumps_back_restarts_the_stream(weights_npz, tmp_path):
    log = tmp_path / 'node.log'
    process = start_node({'weights': str(weights_npz), 'input_qos_reliability': 'reliable',
                          'diagnostics_period_s': 0.2}, log)
    client = Client()
    got, matched = client.keypoints[''], client.matches['']

    def diagnostics(key):
        return client.node_side.get('', {}).get(key)
    try:
        assert client.wait_connected(process), log.read_text()
        live = [LIVE_NS + i * PERIOD_NS for i in range(3)]
        bag = [BAG_NS + i * PERIOD_NS for i in range(3)]
        for i, stamp in enumerate(live):
            client.publish('', image_msg(texture(i), 'mono8', stamp_msg(stamp)))
            assert client.spin_until(lambda: len(got) == i + 1, 60, process), log.read_text()
        client.publish('', image_msg(texture(3), 'mono8', stamp_msg(live[-1])))  # repeated
        assert client.spin_until(lambda: diagnostics('rejected_StampOrderError') == '1', 30,
                                 process), log.read_text()
        for i, stamp in enumerate(bag):
            client.publish('', image_msg(texture(4 + i), 'mono8', stamp_msg(stamp)))
            assert client.spin_until(lambda: len(got) == 4 + i and len(matched) == 3 + i, 60,
                                     process), log.read_text()
        assert client.spin_until(lambda: diagnostics('published') == '6', 30, process)
        assert diagnostics('stamp_jumps_back') == '1' and diagnostics('accepted') == '6'
    finally:
        client.close()
        code = stop_node(process)
    text = log.read_text()
    assert code == 0, text
    final = parse_final_counts(text)['']
    assert final['stamp_jumps_back'] == 1 and final['rejected_StampOrderError'] == 1
    assert final['received'] == 7 and final['published'] == 6
    assert [stamp_of(m) for m in got] == live + bag  # processing went on past the jump
    # the first frame after the jump: an empty Matches against the last live frame
    jump = matched[2]
    assert stamp_of(jump) == bag[0] and len(jump.current_indices) == 0
    assert jump.previous_stamp.sec * 1_000_000_000 + jump.previous_stamp.nanosec == live[-1]
    assert all(len(matched[i].current_indices) > 50 for i in (0, 1, 3, 4))  # within timelines
    ids = [np.frombuffer(m.track_ids, np.uint64) for m in got]
    ages = [np.frombuffer(m.track_ages, np.uint32) for m in got]
    assert ids[3].min() > max(i.max() for i in ids[:3])  # new tracks, no id reused
    assert ages[2].max() == 3 and ages[3].max() == 1 and ages[5].max() == 3
    warnings = [line for line in text.splitlines() if 'image stamp jumped back' in line]
    assert len(warnings) == 1, text
    assert 'WARN' in warnings[0] and '/image: ' in warnings[0]
    assert f'from {live[-1]} ns to {bag[0]} ns' in warnings[0]
