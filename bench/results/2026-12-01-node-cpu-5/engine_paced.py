# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Engine time of issue 10's CPU case in a hot loop and paced at 30 Hz, interleaved.

320x240 mono8 TUM frames, top_k 1024, ONNX Runtime with its default threads; per
frame submit + match + synchronize + features (as the node's device stage). Rounds
alternate hot (frames back to back) and paced (one frame every 1/30 s, the node's
load at 1 x 30 Hz). Arguments: rounds (default 3), ONNX Runtime threads (default 0: its
default; added 2026-12-02). Prints one JSON line per round.
"""

import json
from pathlib import Path
import sys
import time

import cv2
import numpy as np

from xfeat_ros.engine import create_engine, EngineConfig
from xfeat_ros.image_codec import image_msg
from xfeat_ros.image_files import list_sequence, read_image

SHARED = Path(__file__).resolve().parents[4] / 'shared'
THREADS = int(sys.argv[2]) if len(sys.argv) > 2 else 0
images = [cv2.resize(read_image(p)[0], (320, 240), interpolation=cv2.INTER_AREA)
          for _, p in list_sequence(str(SHARED / 'data' / 'tum_fr2_desk'))[:8]]
msgs = [image_msg(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)[..., None], 'mono8') for img in images]
engine = create_engine(EngineConfig('onnxruntime', str(SHARED / 'models' / 'xfeat_backbone.npz'),
                                    top_k=1024, num_threads=THREADS))
slots = [engine.alloc_slot(), engine.alloc_slot()]
engine.submit(msgs[0], slots[0])
engine.synchronize()


def run(frames, period_s):
    """Engine ms of ``frames`` frames, one every ``period_s`` (0: back to back)."""
    times, due = [], time.monotonic()
    for i in range(1, frames + 1):
        due += period_s
        start = time.perf_counter()
        engine.submit(msgs[i % 8], slots[i % 2])
        engine.submit_match(slots[(i + 1) % 2], slots[i % 2])
        engine.synchronize()
        engine.features(slots[i % 2])
        times.append(1e3 * (time.perf_counter() - start))
        if period_s:
            time.sleep(max(0.0, due - time.monotonic()))
    return times[5:]


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
for r in range(rounds):
    for name, period in (('hot', 0.0), ('paced_30hz', 1 / 30)):
        t = run(95, period)
        sys.stdout.write(json.dumps({'round': r, 'mode': name, 'frames': len(t),
                                     'median_ms': round(float(np.median(t)), 2),
                                     'p90_ms': round(float(np.percentile(t, 90)), 2)}) + '\n')
        sys.stdout.flush()
