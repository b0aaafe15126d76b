# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""End to end: a real xfeat_node process fed TUM fr2/desk frames through rclpy.

All the frames of ../shared (20), else of the fixtures in test/data (8).
"""

import re

from builtin_interfaces.msg import Time
import numpy as np
import pytest
from ros_harness import Client, start_node, stop_node
from xfeat_ros.features.geometry import (essential_pose, quaternion_to_matrix, relative_pose,
                                         rotation_angle_deg)
from xfeat_ros.features.image_codec import image_msg
from xfeat_ros.ros.messages import features_from_msg
from xfeat_ros.tools.image_files import list_sequence, read_image

pytestmark = pytest.mark.ros

K_TUM = np.array([[520.9, 0.0, 325.1], [0.0, 521.0, 249.7], [0.0, 0.0, 1.0]])
DIST_TUM = np.array([0.2312, -0.7849, -0.0033, -0.0001, 0.9172])  # k1 k2 p1 p2 k3
MIN_MATCHES = 300
MIN_INLIER_RATIO = 0.45  # RANSAC at 1 px epipolar distance
MAX_ROT_ERR_DEG = 2.5
MAX_MEDIAN_ROT_ERR_DEG = 1.0


def load_poses(path):
    """Map image stamp strings to (R_wc, t_wc) from the TUM ground truth file."""
    poses = {}
    for line in path.read_text().splitlines():
        if line.startswith('#') or not line.strip():
            continue
        fields = line.split()
        t = np.array([float(v) for v in fields[2:5]])
        poses[fields[0]] = (quaternion_to_matrix(*[float(v) for v in fields[5:9]]), t)
    return poses


def stamp_of(ns):
    return Time(sec=ns // 10 ** 9, nanosec=ns % 10 ** 9)


@pytest.fixture(scope='module')
def tum_run(data_dir, weights_npz, tmp_path_factory):
    """Feed all TUM frames through a node; return frames, outputs and the node log."""
    frames = list_sequence(data_dir / 'data' / 'tum_fr2_desk')
    log = tmp_path_factory.mktemp('node') / 'node.log'
    process = start_node({'weights': str(weights_npz), 'input_qos_reliability': 'reliable',
                          'input_qos_depth': 100, 'queue_size': 100}, log)
    client = Client()
    try:
        assert client.wait_connected(process), log.read_text()
        for stamp, path in frames:
            pixels, encoding = read_image(path)
            client.publish('', image_msg(pixels, encoding, stamp_of(stamp), 'tum_rgb'))
            client.spin_until(lambda: False, 0.1)
        done = client.spin_until(lambda: len(client.keypoints['']) == len(frames)
                                 and len(client.matches['']) == len(frames) - 1, 120, process)
        assert done, log.read_text()
        client.spin_until(lambda: False, 0.5)  # anything extra would arrive now
        yield frames, client.keypoints[''], client.matches[''], log
    finally:
        client.close()
        assert stop_node(process) == 0, log.read_text()


def test_one_output_per_frame(tum_run):
    frames, keypoints, matches, _ = tum_run
    assert len(keypoints) == len(frames)
    assert len(matches) == len(frames) - 1
    sent = [(s // 10 ** 9, s % 10 ** 9) for s, _ in frames]
    assert [(m.header.stamp.sec, m.header.stamp.nanosec) for m in keypoints] == sent
    assert [(m.header.stamp.sec, m.header.stamp.nanosec) for m in matches] == sent[1:]
    assert [(m.previous_stamp.sec, m.previous_stamp.nanosec) for m in matches] == sent[:-1]
    assert all(m.header.frame_id == 'tum_rgb' for m in keypoints + matches)


def test_keypoints_well_formed(tum_run):
    _, keypoints, _, _ = tum_run
    for msg in keypoints:
        f = features_from_msg(msg)
        assert (msg.image_width, msg.image_height, msg.descriptor_size) == (640, 480, 64)
        assert 1000 < len(f) <= 4096
        assert len(f.scores) == len(f) and f.descriptors.shape == (len(f), 64)
        np.testing.assert_allclose(np.linalg.norm(f.descriptors, axis=1), 1.0, atol=1e-5)
        assert np.all((f.keypoints >= 0) & (f.keypoints < [640, 480]))
        assert np.all(np.diff(f.scores) <= 0) and np.all(f.scores > 0)


def test_matches_consistent_and_geometric(tum_run, data_dir):
    frames, keypoints, matches, _ = tum_run
    poses = load_poses(data_dir / 'data' / 'tum_fr2_desk' / 'groundtruth.txt')
    names = [path.stem for _, path in frames]
    errors = []
    ratios = []
    for i, msg in enumerate(matches):
        prev = features_from_msg(keypoints[i])
        cur = features_from_msg(keypoints[i + 1])
        i0 = np.frombuffer(msg.previous_indices, dtype=np.uint32)
        i1 = np.frombuffer(msg.current_indices, dtype=np.uint32)
        sim = np.frombuffer(msg.similarities, dtype=np.float32)
        p0 = np.frombuffer(msg.previous_keypoints, dtype=np.float32).reshape(-1, 2)
        p1 = np.frombuffer(msg.current_keypoints, dtype=np.float32).reshape(-1, 2)
        assert len(i0) == len(i1) == len(sim) == len(p0) == len(p1) >= MIN_MATCHES
        assert len(set(i0.tolist())) == len(i0) and len(set(i1.tolist())) == len(i1)
        np.testing.assert_array_equal(p0, prev.keypoints[i0])
        np.testing.assert_array_equal(p1, cur.keypoints[i1])
        assert np.all(sim > 0.82)
        np.testing.assert_allclose(sim, np.sum(prev.descriptors[i0] * cur.descriptors[i1], 1),
                                   atol=1e-5)
        rotation, _, inliers = essential_pose(p0, p1, K_TUM, DIST_TUM)
        ratios.append(inliers.mean())
        gt_rotation, _ = relative_pose(poses[names[i]], poses[names[i + 1]])
        errors.append(rotation_angle_deg(rotation.T @ gt_rotation))
    print(f'e2e: {len(matches)} pairs, matches {[len(m.current_indices) for m in matches]}, '
          f'inlier ratio min {min(ratios):.3f} median {np.median(ratios):.3f}, rotation error '
          f'median {np.median(errors):.3f} max {max(errors):.3f} deg')
    assert min(ratios) >= MIN_INLIER_RATIO, ratios
    assert max(errors) <= MAX_ROT_ERR_DEG, errors
    assert float(np.median(errors)) <= MAX_MEDIAN_ROT_ERR_DEG, errors


def test_node_log_clean(tum_run):
    _, _, _, log = tum_run
    text = log.read_text()
    # The CPU engine here; the GPU machine runs this test on its CUDA engine.
    assert re.search(r'engine: (onnxruntime on cpu|\w+ on cuda:\d+)', text), text
    assert 'rejected' not in text and 'Traceback' not in text
