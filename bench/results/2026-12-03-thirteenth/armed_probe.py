# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The probe the thirteenth session could not run: which frame an armed chain gets wrong, and whose.

Runs on the GPU machine against the armed engine of commit 3c7f636 (``GpuEngine.arm``,
``xfeat_ros/gpu/armed.py``, ``kernels/gate.cu``; this session reverted them)::

    git checkout 3c7f636 -- xfeat_ros/gpu kernels/gate.cu   # then restore HEAD after
    PYTHONPATH=$PWD python3 bench/results/2026-12-03-thirteenth/armed_probe.py --shared .devlite

In a fresh process, one engine runs the four TUM frames twice over (eight frames, two
slots in turn, each frame matched against the one before) the ordinary way, armed, and
the ordinary way again, once with the HostCopier's PyTorch copy and once with NumPy's.
For every armed frame whose keypoints differ from the ordinary run's it prints which
ordinary frame they equal: frame i - 2 (the image the slot's staging buffer held before)
means the gate let the upload run before ``fire`` wrote the bytes. It also prints how
long each ``arm()`` took: the suspect (bench/NOTES.md) is an implicitly synchronizing call
inside ``arm()`` after the gate kernel was enqueued (a pinned or device allocation that the
pools could not serve in a fresh process), which would wait until the gate expired.
"""

import argparse
from pathlib import Path
import sys
import time

import numpy as np

GOLDEN_TUM = ['tum_fr2_desk/rgb/1311868169.163498.png', 'tum_fr2_desk/rgb/1311868169.263274.png',
              'tum_fr2_desk/rgb/1311868169.363470.png', 'tum_fr2_desk/rgb/1311868169.463229.png']


def run(engine, msgs, arm, arm_seconds=None):
    """Features of each frame, alone and chained; with ``arm`` every next frame armed first."""
    slots = [engine.alloc_slot(), engine.alloc_slot()]
    previous, out = None, []
    for i, msg in enumerate(msgs):
        slot = slots[i % 2]
        engine.submit_group([msg], [slot], previous=previous, chain=True)
        if arm and i + 1 < len(msgs):
            t0 = time.perf_counter()
            engine.arm(msgs[i + 1], slots[(i + 1) % 2], previous=slot)
            arm_seconds.append((round(time.perf_counter() - t0, 4),
                                getattr(engine, 'last_arm_seconds', None)))
        out.append(engine.results([slot])[0][0])
        previous = slot
    return out


def main():
    """Run both copies; print what each armed frame equals."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--shared', default='.devlite')
    args = parser.parse_args()
    from xfeat_ros.gpu.buffers import HostCopier
    from xfeat_ros.gpu.engine import create_gpu_engine
    from xfeat_ros.image_codec import raw_image
    from xfeat_ros.image_files import read_image
    msgs = [raw_image(read_image(Path(args.shared) / 'data' / name)[0], 'rgb8')
            for name in GOLDEN_TUM] * 2
    engine = create_gpu_engine('pytorch', 'xfeat_ros/data/xfeat_backbone.npz', 0, 4096,
                               0.05, 0.82)
    for copy in ('torch', 'numpy'):
        engine._copier = HostCopier(use_torch=copy == 'torch')
        want = run(engine, msgs, False)
        arm_seconds = []
        got = run(engine, msgs, True, arm_seconds)
        again = run(engine, msgs, False)
        # an arm() of ~5 s waited behind its own gate until the gate expired (see NOTES)
        print(copy, 'arm counts', engine.arm_counts, 'arm() seconds', arm_seconds)
        for i, features in enumerate(got):
            same = [j for j, w in enumerate(want)
                    if np.array_equal(features.keypoints, w.keypoints)]
            steady = np.array_equal(want[i].keypoints, again[i].keypoints)
            print(f'  frame {i}: equals ordinary frames {same} (ordinary runs agree: {steady})')
    sys.stdout.flush()


if __name__ == '__main__':
    main()
