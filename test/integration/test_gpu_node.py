# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The node end to end on a GPU: several cameras, frames in flight, nothing lost.

Marked gpu and ros: it needs CuPy, a CUDA device and the ROS wheels, so CI (no
GPU) skips it with that reason; bench/gpu_node_check.sh runs it on the GPU
machine with the cp312 ROS wheels carried there.
"""

import re

from golden_util import parity
import numpy as np
import pytest
from ros_harness import Client, start_node, stop_node
from xfeat_ros.features.image_codec import image_msg
from xfeat_ros.ros.messages import features_from_msg
from xfeat_ros.tools.image_files import list_sequence, read_grey, read_image
from xfeat_ros.tools.play import stamp_msg

pytestmark = [pytest.mark.gpu, pytest.mark.ros]

CAMERAS = ('cam0', 'cam1', 'cam2')
FRAMES = 8  # the TUM frames carried to the GPU machine


@pytest.mark.parametrize('in_flight', [1, 8])
def test_gpu_node_three_cameras(in_flight, shared_dir, weights_npz, cpu_pipeline, tmp_path):
    paths = [p for _, p in list_sequence(shared_dir / 'data' / 'tum_fr2_desk')[:FRAMES]]
    frames = [read_image(p) for p in paths]
    log = tmp_path / 'node.log'
    process = start_node({'weights': str(weights_npz), 'backend': 'auto',
                          'cameras': list(CAMERAS), 'max_frames_in_flight': in_flight,
                          'queue_size': 100,
                          'input_qos_reliability': 'reliable', 'input_qos_depth': 100}, log)
    client = Client(cameras=CAMERAS)
    try:
        assert client.wait_connected(process, timeout=120), log.read_text()
        # As fast as possible: every camera's frames back to back, interleaved.
        for i, frame in enumerate(frames):
            for c, cam in enumerate(CAMERAS):
                client.publish(cam, image_msg(*frame, stamp=stamp_msg(10 ** 9 * (i + 1) + c)))
        done = client.spin_until(
            lambda: all(len(client.keypoints[c]) == FRAMES and len(client.matches[c]) ==
                        FRAMES - 1 for c in CAMERAS), 120, process)
        assert done, log.read_text()
        client.spin_until(lambda: False, 0.5)
    finally:
        client.close()
        assert stop_node(process) == 0, log.read_text()
    text = log.read_text()
    assert re.search(r'engine: \w+ on cuda:0', text), text
    counts = re.search(r'final counts: (.*)', text).group(1)
    assert 'dropped' not in counts and 'rejected' not in counts and 'lost' not in counts
    for c, cam in enumerate(CAMERAS):
        keypoints, matches = client.keypoints[cam], client.matches[cam]
        assert len(keypoints) == FRAMES and len(matches) == FRAMES - 1
        stamps = [(m.header.stamp.sec, m.header.stamp.nanosec) for m in keypoints]
        assert stamps == [(i + 1, c) for i in range(FRAMES)]
        for prev, cur, match in zip(keypoints, keypoints[1:], matches):
            assert match.previous_stamp == prev.header.stamp
            assert match.header.stamp == cur.header.stamp
            i0 = np.frombuffer(match.previous_indices, np.uint32)
            i1 = np.frombuffer(match.current_indices, np.uint32)
            assert len(i0) > 300
            f0, f1 = features_from_msg(prev), features_from_msg(cur)
            sim = np.sum(f0.descriptors[i0] * f1.descriptors[i1], axis=1)
            np.testing.assert_allclose(np.frombuffer(match.similarities, np.float32), sim,
                                       atol=1e-4)
    # The GPU node's output equals the CPU reference (parity bounds of the golden tests).
    for i in (0, FRAMES - 1):
        reference = cpu_pipeline.extract(read_grey(paths[i]))
        got = features_from_msg(client.keypoints['cam1'][i])
        golden = {'keypoints': reference.keypoints, 'scores': reference.scores,
                  'descriptors': reference.descriptors}
        p = parity(golden, got.keypoints, got.scores, got.descriptors)
        assert p.found >= 0.99 and p.min_cosine >= 0.999 and p.max_score_rel <= 1e-4, p
