# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Carried tracks on the GPU engine, against the CPU engine's.

The GPU engine hands each frame's unit-length dense descriptor map to the host
(``gpu.spread.dense_to_host``); the camera's stream carries lost tracks through it as it
does for the CPU engine. The map agrees with the CPU engine's (cosine per cell), and on
the same frames both engines carry about as many tracks. Marked ``gpu``: skipped, with
the reason, where CuPy or a CUDA device is missing (run on the GPU machine:
``bash bench/gpu_check.sh``).
"""

import numpy as np
import pytest
from test_gpu_spread import frames, gpu_engine, MIN_COSSIM, run_contract, THRESHOLD
from xfeat_ros.features.engine import CpuEngine
from xfeat_ros.features.spread import Spread

TOP_K = 300
CARRY = Spread(carry_frames=3)
MAP_COSINE_MIN = 0.999  # per cell, the backbones' parity bound
CARRIED_SHARE = 0.25    # carried tracks of the two engines within this share of each other


@pytest.fixture(scope='module')
def carrying(weights_npz):
    return gpu_engine(weights_npz, TOP_K, CARRY)


@pytest.mark.gpu
def test_the_dense_map_reaches_the_host_and_equals_the_cpu_one(carrying, cpu_pipeline,
                                                               shared_dir):
    msg = frames(shared_dir)[0]
    cpu = CpuEngine(cpu_pipeline.backbone, TOP_K, THRESHOLD, MIN_COSSIM, CARRY)
    slot = carrying.alloc_slot()
    carrying.submit(msg, slot)
    carrying.synchronize()
    got = carrying.features(slot).dense
    cpu_slot = cpu.alloc_slot()
    cpu.submit(msg, cpu_slot)
    cpu.synchronize()
    want = cpu.features(cpu_slot).dense
    assert got is not None and want is not None
    assert got.feats.shape == want.feats.shape and got.model_hw == want.model_hw
    np.testing.assert_allclose(got.scale, want.scale, rtol=1e-6)
    norms = np.linalg.norm(got.feats, axis=0)
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)
    cosine = (got.feats * want.feats).sum(axis=0)
    assert cosine.min() >= MAP_COSINE_MIN, cosine.min()


@pytest.mark.gpu
def test_the_gpu_engine_carries_tracks_as_the_cpu_engine_does(carrying, cpu_pipeline,
                                                              shared_dir):
    msgs = frames(shared_dir)
    cpu = CpuEngine(cpu_pipeline.backbone, TOP_K, THRESHOLD, MIN_COSSIM, CARRY)
    gpu_outs, gpu_counts = run_contract(carrying, msgs)
    cpu_outs, cpu_counts = run_contract(cpu, msgs)
    assert carrying.arm(msgs[0], carrying.alloc_slot()) is False  # never armed while carrying
    print('carried gpu', gpu_counts['tracks_carried'], 'cpu', cpu_counts['tracks_carried'])
    assert gpu_counts['tracks_carried'] > 50
    assert abs(gpu_counts['tracks_carried'] - cpu_counts['tracks_carried']) \
        <= CARRIED_SHARE * cpu_counts['tracks_carried']
    for g, c in zip(gpu_outs[1:], cpu_outs[1:]):
        assert len(g.frame.features) <= TOP_K
        share_gpu = float((g.frame.track_ages > 1).mean())
        share_cpu = float((c.frame.track_ages > 1).mean())
        assert abs(share_gpu - share_cpu) <= CARRIED_SHARE, (share_gpu, share_cpu)
        carried = g.frame.track_carried
        assert carried is not None and (carried > 0).any()
