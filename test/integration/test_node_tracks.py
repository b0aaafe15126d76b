# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Track ids through the node: long tracks on a static scene, no jumps when moving."""

import cv2
import numpy as np
import pytest
from ros_harness import Client, start_node, stop_node
from xfeat_ros.features.image_codec import image_msg
from xfeat_ros.ros.messages import features_from_msg
from xfeat_ros.tools.image_files import list_sequence, read_image
from xfeat_ros.tools.play import stamp_msg

pytestmark = pytest.mark.ros


def run_sequence(folder, weights_npz, log, count):
    frames = list_sequence(folder)[:count]
    process = start_node({'weights': str(weights_npz), 'input_qos_reliability': 'reliable',
                          'queue_size': 100}, log)
    client = Client()
    try:
        assert client.wait_connected(process), log.read_text()
        for stamp, path in frames:
            client.publish('', image_msg(*read_image(path), stamp=stamp_msg(stamp)))
            client.spin_until(lambda: False, 0.05)
        assert client.spin_until(lambda: len(client.keypoints['']) == len(frames), 120,
                                 process), log.read_text()
    finally:
        client.close()
        assert stop_node(process) == 0
    out = []
    for msg in client.keypoints['']:
        ids = np.frombuffer(msg.track_ids, np.uint64)
        ages = np.frombuffer(msg.track_ages, np.uint32)
        out.append((features_from_msg(msg), ids, ages))
    return out


def check_bookkeeping(frames):
    seen_max = -1
    for i, (features, ids, ages) in enumerate(frames):
        assert len(ids) == len(ages) == len(features)
        assert len(np.unique(ids)) == len(ids)  # unique within a frame
        previous = frames[i - 1] if i else None
        new = ages == 1
        if new.any():  # fresh ids are above every id issued before
            assert ids[new].min() > seen_max
            assert np.all(np.diff(ids[new].astype(np.int64)) > 0)
        seen_max = max(seen_max, int(ids.max()))
        if previous is not None:
            common, a, b = np.intersect1d(previous[1], ids, return_indices=True)
            assert np.all(ages[b] == previous[2][a] + 1)
            assert np.all(ages[~np.isin(ids, common)] == 1)


def test_static_scene_keeps_its_tracks(shared_dir, weights_npz, tmp_path):
    folder = shared_dir / 'data' / 'euroc_v101_stereo'
    available = len(list_sequence(folder))
    if available < 20:  # the GPU machine's carried subset holds 10 frames a camera
        pytest.skip(f'needs 20 EuRoC frames; {folder} holds {available}')
    frames = run_sequence(folder, weights_npz, tmp_path / 'node.log', 20)
    check_bookkeeping(frames)
    first_ids = frames[0][1]
    survive = np.isin(first_ids, frames[-1][1])
    full_length = int(np.sum(frames[-1][2] == 20))
    print(f'euroc cam0: {survive.mean():.3f} of all first-frame tracks and '
          f'{survive[:500].mean():.3f} of the 500 strongest survive 20 frames; '
          f'{full_length} tracks of length 20')
    assert survive[:500].mean() >= 0.6  # the strongest keypoints keep their ids
    assert full_length >= 1000


def test_moving_camera_ids_never_jump(shared_dir, weights_npz, tmp_path):
    frames = run_sequence(shared_dir / 'data' / 'tum_fr2_desk', weights_npz,
                          tmp_path / 'node.log', 8)
    check_bookkeeping(frames)
    for (f0, ids0, _), (f1, ids1, _) in zip(frames, frames[1:]):
        common, a, b = np.intersect1d(ids0, ids1, return_indices=True)
        assert len(common) > 300
        p0, p1 = f0.keypoints[a].astype(np.float64), f1.keypoints[b].astype(np.float64)
        assert np.linalg.norm(p1 - p0, axis=1).max() < 100  # camera moves ~20 px a frame
        # Continued tracks agree with one epipolar geometry: a RANSAC fit made here
        # (3 px, on the tracks in id order, so other samples than the node's) keeps
        # most of them. With 2-3 cm baselines many
        # fundamental matrices fit almost as well (the node's own fit keeps 100% by
        # construction; this one found 0.89 and up), so the bound is loose.
        _, mask = cv2.findFundamentalMat(p0, p1, cv2.FM_RANSAC, 3.0, 0.999)
        print(f'continued tracks {len(common)}, epipolar inliers {mask.mean():.3f}')
        assert mask.mean() >= 0.8
