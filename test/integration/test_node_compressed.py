# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Compressed images in, end to end: a node with ``input_transport: compressed``.

The node subscribes image_transport's compressed topic of its (remapped) image
topic; jpeg and png frames give Keypoints and Matches (png: the features of
the raw frame); corrupt payloads and an unknown format are counted by class on
/diagnostics and logged, and the node goes on.
"""

import ast
import re

from builtin_interfaces.msg import Time
import numpy as np
import pytest
from ros_harness import Client, start_node, stop_node
from sensor_msgs.msg import CompressedImage

from xfeat_ros.features.compressed import encode_compressed
from xfeat_ros.ros.messages import features_from_msg
from xfeat_ros.tools.image_files import list_sequence, read_image

pytestmark = pytest.mark.ros


def compressed(pixels, encoding, kind, sec):
    """Return a CompressedImage of ``pixels`` stamped ``sec`` s."""
    fmt, data = encode_compressed(pixels, encoding, kind)
    msg = CompressedImage(format=fmt, data=data)
    msg.header.stamp = Time(sec=sec)
    msg.header.frame_id = 'cam'
    return msg


def test_compressed_input_end_to_end(data_dir, weights_npz, cpu_pipeline, tmp_path):
    frames = [read_image(p) for _, p in list_sequence(data_dir / 'data' / 'tum_fr2_desk')[:3]]
    log = tmp_path / 'node.log'
    # The raw topic remapped: the node hears image_transport's /cam/image/compressed.
    remaps = [arg for name in ('image', 'keypoints', 'matches')
              for arg in ('-r', f'{name}:=/cam/{name}')]
    process = start_node({'weights': str(weights_npz), 'input_qos_reliability': 'reliable',
                          'input_transport': 'compressed'},
                         log, extra_args=['--log-level', 'xfeat:=info', *remaps])
    client = Client(cameras=('cam',), compressed=True)
    got, matched = client.keypoints['cam'], client.matches['cam']
    try:
        assert client.wait_connected(process), log.read_text()
        client.publish('cam', compressed(*frames[0], 'jpeg', 1))
        assert client.spin_until(lambda: len(got) == 1, 60, process), log.read_text()
        good = compressed(*frames[1], 'jpeg', 2)
        truncated = compressed(*frames[1], 'jpeg', 2)
        truncated.data = bytes(good.data)[:len(good.data) // 2]
        garbage = compressed(*frames[1], 'png', 2)
        garbage.data = bytes(200)
        unknown = compressed(*frames[1], 'png', 2)
        unknown.format = 'rgb8; tiff compressed bgr8'
        for msg in (truncated, garbage, unknown):
            client.publish('cam', msg)
        assert client.spin_until(
            lambda: int(client.node_side.get('cam', {}).get('rejected', 0)) == 3, 30, process), \
            log.read_text()
        values = client.node_side['cam']
        assert values['rejected_CompressedImageError'] == '2', values
        assert values['rejected_UnsupportedCompressionError'] == '1', values
        assert len(got) == 1, 'a corrupt payload produced output'
        client.publish('cam', compressed(*frames[1], 'png', 3))
        assert client.spin_until(lambda: len(got) == 2 and len(matched) == 1, 60, process), \
            log.read_text()
        # png is lossless: the features of the raw frame, as offline
        offline = cpu_pipeline.extract(
            (frames[1][0].astype(np.float32) / 255).mean(axis=2, dtype=np.float32))
        online = features_from_msg(got[1])
        assert online.keypoints.shape == offline.keypoints.shape
        on, off = (np.lexsort(f.keypoints.T) for f in (online, offline))
        np.testing.assert_allclose(online.keypoints[on], offline.keypoints[off], atol=1e-4)
        assert (got[1].header.stamp.sec, got[1].header.frame_id) == (3, 'cam')
        assert matched[0].previous_stamp == got[0].header.stamp
        assert len(matched[0].current_indices) > 300  # a jpeg frame matched to a png one
    finally:
        client.close()
        assert stop_node(process) == 0
    text = log.read_text()
    for reason in ('truncated (no end-of-image marker)', 'does not start like a png',
                   "unsupported compressed image format 'rgb8; tiff compressed bgr8'"):
        assert any('rejected image' in line and reason in line for line in text.splitlines()), \
            f'no log line with {reason!r}\n{text}'
    assert 'Traceback' not in text
    counts = ast.literal_eval(re.search(r'final counts: (.*)', text).group(1))['']
    expected = {'received': 5, 'accepted': 2, 'published': 2, 'rejected': 3}
    assert {key: counts.get(key) for key in expected} == expected, text
