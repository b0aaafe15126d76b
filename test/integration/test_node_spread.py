# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The node with min_distance: keypoints spread apart, tracks placed first and growing.

On the CPU engine, and on the GPU engine (marked ``gpu``), which selects every frame on
the device (counted ``spread_selected_on_device`` on /diagnostics).
"""

import numpy as np
import pytest
from ros_harness import run_sequence
from xfeat_ros.ros.messages import features_from_msg
from xfeat_ros.tools.image_files import list_sequence

pytestmark = pytest.mark.ros
BACKENDS = ['onnxruntime', pytest.param('pytorch', marks=pytest.mark.gpu)]

MIN_DISTANCE = 20.0
TOP_K = 1024
FRAMES = 6


def min_pair_distance(keypoints):
    diff = keypoints[:, None, :].astype(np.float64) - keypoints[None, :, :]
    distance = np.sqrt((diff ** 2).sum(-1))
    return distance[np.triu_indices(len(keypoints), 1)].min()


def counter(client, name):
    return int(client.node_side.get('', {}).get(name, 0))


@pytest.mark.parametrize('backend', BACKENDS)
def test_published_keypoints_are_spread_and_tracks_grow(backend, shared_dir, weights_npz,
                                                        tmp_path):
    log = tmp_path / 'node.log'
    frames = list_sequence(shared_dir / 'data' / 'tum_fr2_desk')[:FRAMES]
    on_device = backend != 'onnxruntime'
    client = run_sequence({'weights': str(weights_npz), 'backend': backend,
                           'input_qos_reliability': 'reliable', 'queue_size': 100,
                           'top_k': TOP_K, 'min_distance': MIN_DISTANCE}, frames, log,
                          until=lambda c: not on_device or counter(
                              c, 'spread_selected_on_device') == FRAMES)
    assert counter(client, 'spread_selected_on_host') == 0
    published = []
    for msg in client.keypoints['']:
        features = features_from_msg(msg)
        ages = np.frombuffer(msg.track_ages, np.uint32).astype(int)
        assert 100 < len(features) <= TOP_K
        assert min_pair_distance(features.keypoints) >= MIN_DISTANCE
        tracked = ages > 1
        assert tracked[:tracked.sum()].all()                   # continued tracks first,
        assert (np.diff(ages[:tracked.sum()]) <= 0).all()      # oldest first,
        assert (np.diff(features.scores[~tracked]) <= 0).all()  # then new ones by score
        published.append((features, ages))
    print('keypoints per frame', [len(f) for f, _ in published], 'last frame ages >= 3:',
          int((published[-1][1] >= 3).sum()), 'matches per frame',
          [len(msg.current_indices) for msg in client.matches['']])
    assert published[-1][1].max() == FRAMES
    assert (published[-1][1] >= 3).sum() > 50  # many tracks live through the frames
    for (previous, _), (current, _), msg in zip(published, published[1:], client.matches['']):
        before = np.asarray(msg.previous_indices, np.int64)
        after = np.asarray(msg.current_indices, np.int64)
        assert len(after) > 100
        assert before.max() < len(previous) and after.max() < len(current)
        np.testing.assert_allclose(np.asarray(msg.current_keypoints).reshape(-1, 2),
                                   current.keypoints[after])
