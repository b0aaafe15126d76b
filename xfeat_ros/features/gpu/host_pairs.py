# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Two host feature sets matched on the GPU engine's kernels (stereo pairs).

A stereo pair's frames were published (and their slots possibly reused)
before the partner arrived, so :func:`match_host_features` uploads their
float32 descriptors and keypoints into two slots the engine keeps for this,
and matches them as :meth:`xfeat_ros.features.gpu.engine.GpuEngine.submit_match` would.
"""

import numpy as np

from xfeat_ros.features.gpu import armed
from xfeat_ros.features.gpu.buffers import GpuSlot

UNIT_NORM_TOL = 1e-3  # longer descriptors are matched by the FP32 kernel (see match.cu)


def match_host_features(engine, features0, features1):
    """
    Match two host :class:`Features` on the device now; return a :class:`MatchResult`.

    For stereo pairs, whose frames were published (and their slots possibly
    reused) before the partner arrived: the float32 descriptors are
    uploaded into two engine-owned slots and matched by the same kernels
    as the engine's ``submit_match`` (the FP32 kernel when a descriptor is longer
    than 1 + 1e-3); one synchronization.
    """
    cupy = engine.cupy
    tensor_cores = engine.tensor_cores
    armed.cancel(engine)
    engine.flush()
    with cupy.cuda.Device(engine.gpu), engine.stream:
        sides = []
        for index, features in enumerate((features0, features1)):
            n = len(features)
            slot = engine._pair_slots[index]
            if slot is None or slot.capacity < max(n, 1):
                slot = engine._pair_slots[index] = GpuSlot(max(n, engine.top_k), engine.desc_dim)
            if n:
                desc = np.ascontiguousarray(features.descriptors, dtype=np.float32)
                if np.max(np.einsum('ij,ij->i', desc, desc)) > (1 + UNIT_NORM_TOL) ** 2:
                    tensor_cores = False
                slot.descriptors[:n].set(desc, stream=engine.stream)
                # the keypoints too: the device's epipolar check reads them
                slot.keypoints[:n].set(np.ascontiguousarray(features.keypoints, np.float32),
                                       stream=engine.stream)
            slot.count.set(np.array([n], dtype=np.int32), stream=engine.stream)
            slot.described = None  # features from the host: copied in stream order
            slot.prefetched = slot.wire = slot.tracked = None
            slot.submitted = True
            slot.pending = False
            sides.append(slot)
        engine._enqueue_matches([(sides[0], sides[1], tensor_cores)])
        sides[1].matched = True
    engine.synchronize()
    return engine.matches(sides[1])
