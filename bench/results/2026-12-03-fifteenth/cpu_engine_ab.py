# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The CPU engine a frame before and after the fifteenth session's NumPy changes.

Submit + match against the previous frame, both arms interleaved in one process (CPU
machine)::

    git show bac7cdc:xfeat_ros/postprocess.py > /tmp/oldpp/old_postprocess.py
    git show bac7cdc:xfeat_ros/match.py > /tmp/oldpp/old_match.py
    python bench/results/2026-12-03-fifteenth/cpu_engine_ab.py /tmp/oldpp

The old modules are patched into the engine's pipeline for the "before" arm; every frame's
keypoints, descriptors and matches are compared between the arms (they must be equal).
"""

import glob
import sys
import time

import cv2
import numpy as np
from xfeat_ros import engine as engine_module, heap, pipeline
from xfeat_ros.engine import cpu_engine, EngineConfig
from xfeat_ros.image_codec import raw_image
from xfeat_ros.image_files import read_image

sys.path.insert(0, sys.argv[1])
import old_match  # noqa: E402,I100
import old_postprocess  # noqa: E402

ARMS = {'before': (old_postprocess.detect, old_match.mutual_nn_match),
        'after': (pipeline.detect, engine_module.mutual_nn_match)}


def use(arm):
    """Patch the engine's detection and matcher to ``arm``'s."""
    pipeline.detect, engine_module.mutual_nn_match = ARMS[arm]


def run(engine, msgs):
    """Median ms a frame of submit + match over ``msgs``, and the last outputs."""
    times, prev, outs = [], None, []
    for msg in msgs:
        slot = engine.alloc_slot()
        t0 = time.perf_counter()
        engine.submit(msg, slot)
        if prev is not None:
            engine.submit_match(prev, slot)
        times.append(time.perf_counter() - t0)
        outs.append((slot.features.keypoints, slot.features.descriptors,
                     None if slot.matches is None else slot.matches.idx1))
        prev = slot
    return np.median(times[2:]) * 1e3, outs


def main():
    """Two sizes, three interleaved rounds each."""
    heap.keep_large_buffers()
    files = sorted(glob.glob('/work/shared/data/tum_fr2_desk/rgb/*.png'))[:12]
    images = [read_image(f)[0] for f in files]
    for (w, h, k, enc) in [(320, 240, 1024, 'mono8'), (640, 480, 4096, 'rgb8')]:
        engine = cpu_engine(EngineConfig(backend='onnxruntime',
                                         weights='xfeat_ros/data/xfeat_backbone.npz', top_k=k))
        msgs = []
        for img in images:
            small = cv2.resize(img, (w, h))
            if enc == 'mono8':
                small = small.mean(axis=2).astype(np.uint8)[:, :, None]
            msgs.append(raw_image(small, enc))
        for r in range(3):
            line = []
            outs = {}
            for arm in (('before', 'after') if r % 2 == 0 else ('after', 'before')):
                use(arm)
                ms, outs[arm] = run(engine, msgs)
                line.append(f'{arm} {ms:.2f}')
            same = all(all(a is None and b is None or np.array_equal(a, b) for a, b in zip(x, y))
                       for x, y in zip(outs['before'], outs['after']))
            print(f'{w}x{h} {enc} top_k {k} round {r}: ' + ', '.join(line)
                  + f' ms a frame; outputs equal: {same}', flush=True)


if __name__ == '__main__':
    main()
