# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Engine time of the node's CPU case: submit + match per frame, 320x240 mono8, top_k 1024.

Argument: ONNX Runtime threads (the node's num_threads; default 0, its default).
"""

import json
import sys
import time

import cv2
import numpy as np

from xfeat_ros.engine import create_engine, EngineConfig
from xfeat_ros.image_codec import image_msg  # xfeat_ros.messages before 2026-12-01 08:00
from xfeat_ros.image_files import list_sequence, read_image

images = [cv2.resize(read_image(p)[0], (320, 240), interpolation=cv2.INTER_AREA)
          for _, p in list_sequence('/work/shared/data/tum_fr2_desk')[:8]]
msgs = [image_msg(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)[..., None], 'mono8') for img in images]
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 0
engine = create_engine(EngineConfig('onnxruntime', '/work/shared/models/xfeat_backbone.npz',
                                    num_threads=threads, top_k=1024))
slots = [engine.alloc_slot(), engine.alloc_slot()]
engine.submit(msgs[0], slots[0])
times = []
for i in range(1, 61):
    start = time.perf_counter()
    engine.submit(msgs[i % 8], slots[i % 2])
    engine.submit_match(slots[(i + 1) % 2], slots[i % 2])
    engine.synchronize()
    engine.features(slots[i % 2])
    times.append(1e3 * (time.perf_counter() - start))
result = {'num_threads': threads, 'frames': len(times), 'median_ms': float(np.median(times[5:])),
          'p10_ms': float(np.percentile(times[5:], 10)),
          'p90_ms': float(np.percentile(times[5:], 90))}
sys.stdout.write(json.dumps(result) + '\n')
