# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""SIGINT / SIGTERM while frames are queued and in flight: no hang, no traceback, all counted."""

import ast
import re
import signal
import time

import pytest
from ros_harness import Client, start_node, stop_node
from xfeat_ros.features.image_codec import image_msg
from xfeat_ros.tools.image_files import list_sequence, read_image
from xfeat_ros.tools.play import stamp_msg

pytestmark = pytest.mark.ros


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM])
def test_signal_while_busy(sig, data_dir, weights_npz, tmp_path):
    frames = [read_image(p) for _, p in list_sequence(data_dir / 'data' / 'tum_fr2_desk')]
    frames = (frames * 3)[:20]  # enough work in hand for the signal (the fixtures have 8)
    log = tmp_path / 'node.log'
    process = start_node({'weights': str(weights_npz), 'input_qos_reliability': 'reliable',
                          'input_qos_depth': 100, 'queue_size': 100,
                          'max_frames_in_flight': 4}, log)
    client = Client()
    try:
        assert client.wait_connected(process), log.read_text()
        for i, frame in enumerate(frames):
            client.publish('', image_msg(*frame, stamp=stamp_msg(10 ** 9 * (i + 1))))
        assert client.spin_until(lambda: len(client.keypoints['']) >= 2, 60, process)
        process.send_signal(sig)
        start = time.monotonic()
        assert process.wait(30) == 0, log.read_text()
        assert time.monotonic() - start < 30
        client.spin_until(lambda: False, 0.5)
    finally:
        client.close()
        stop_node(process)
    text = log.read_text()
    assert 'Traceback' not in text, text
    counts = ast.literal_eval(re.search(r'final counts: (.*)', text).group(1))['']
    assert counts['accepted'] == len(frames)
    assert counts['accepted'] == counts['published'] + counts.get('dropped_shutdown', 0), counts
    assert len(client.keypoints['']) <= counts['published']
    if not counts.get('dropped_shutdown', 0):
        # The clean exit and the counts above hold either way; only the busy path was not
        # reached: on the 16-core GPU machine the CPU engine finished all 20 (and 60) frames
        # before this client had read two Keypoints.
        pytest.skip('the node finished every frame before the signal: shutdown while busy '
                    'not exercised on this machine')
