# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The node with carry_frames: lost tracks carried on, listed in Matches, counted.

On the CPU engine, and on the GPU engine (marked ``gpu``), which hands each frame's dense
descriptor map to the host.
"""

from conftest import DATA_ROOT
import numpy as np
import pytest
from ros_harness import run_sequence
from xfeat_ros.ros.messages import features_from_msg
from xfeat_ros.tools.image_files import list_sequence

pytestmark = pytest.mark.ros
BACKENDS = ['onnxruntime', pytest.param('pytorch', marks=pytest.mark.gpu)]

TOP_K = 300
CARRY_FRAMES = 3
FRAMES = 6


@pytest.mark.parametrize('backend', BACKENDS)
def test_tracks_are_carried_and_every_continuation_is_a_match(backend, weights_npz, tmp_path):
    log = tmp_path / 'node.log'
    frames = list_sequence(DATA_ROOT / 'data' / 'tum_fr2_desk')[:FRAMES]

    def carried(client):
        return int(client.node_side.get('', {}).get('tracks_carried', 0))
    client = run_sequence({'weights': str(weights_npz), 'backend': backend,
                           'input_qos_reliability': 'reliable', 'queue_size': 100,
                           'top_k': TOP_K, 'carry_frames': CARRY_FRAMES}, frames, log,
                          until=lambda client: carried(client) > 0)
    published = []
    for msg in client.keypoints['']:
        features = features_from_msg(msg)
        ids = np.frombuffer(msg.track_ids, np.uint64)
        ages = np.frombuffer(msg.track_ages, np.uint32).astype(int)
        assert 0 < len(features) <= TOP_K and len(np.unique(ids)) == len(ids)
        tracked = ages > 1
        assert tracked[:tracked.sum()].all()  # continued tracks placed first
        published.append((features, ids, ages))
    share = [float((ages > 1).mean()) for _, _, ages in published[1:]]
    print('tracks carried', carried(client), 'share of keypoints continuing a track', share)
    assert carried(client) > 100
    # With carried tracks most keypoints continue one: far more than without (about a third).
    assert np.mean(share) > 0.6
    for (_, ids0, _), (_, ids1, ages1), msg in zip(published, published[1:],
                                                   client.matches['']):
        pairs = set(zip(np.asarray(msg.previous_indices).tolist(),
                        np.asarray(msg.current_indices).tolist()))
        where = {int(t): k for k, t in enumerate(ids0.tolist())}
        for k in np.nonzero(ages1 > 1)[0].tolist():  # every continuation is a listed match
            assert (where[int(ids1[k])], k) in pairs
