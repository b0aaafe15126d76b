# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Time the CPU case's engine alone: back to back, and paced as a 30 Hz camera paces it.

The yardstick of the CPU goal (bench/cpu_goal.sh): 320x240 mono8 TUM fr2/desk
frames, top_k 1024, ONNX Runtime; per frame ``submit`` + ``submit_match`` +
``synchronize`` + ``features``, as the node's device stage runs them. Each round
times ``--frames`` frames back to back ("hot") and, with ``--paced``, as many
frames one every 1/30 s ("paced_30hz"). Prints one JSON line per round and mode
(median, p10, p90 in ms; the first five frames are not counted)::

    python bench/engine_time.py                      # one hot round
    python bench/engine_time.py --rounds 3 --paced   # hot and paced, interleaved
"""

import argparse
import json
import os
from pathlib import Path
import sys
import time

import numpy as np

from xfeat_ros.cli import one_line_errors
from xfeat_ros.errors import DatasetError

REPO = Path(__file__).resolve().parents[1]
SKIPPED = 5


def shared_dir(path):
    """Return the data folder: ``path``, else ``$XFEAT_ROS_SHARED``, else ``../shared``."""
    return Path(path or os.environ.get('XFEAT_ROS_SHARED', REPO.parent / 'shared'))


def load_messages(shared, count=8):
    """``count`` TUM fr2/desk frames as 320x240 mono8 Image messages."""
    import cv2
    from xfeat_ros.features.image_codec import image_msg
    from xfeat_ros.tools.image_files import list_sequence, read_image
    folder = shared / 'data' / 'tum_fr2_desk'
    if not folder.is_dir():
        raise DatasetError(f'{folder}: no such folder (pass --shared)')
    images = [cv2.resize(read_image(p)[0], (320, 240), interpolation=cv2.INTER_AREA)
              for _, p in list_sequence(str(folder))[:count]]
    return [image_msg(cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)[..., None], 'mono8')
            for image in images]


def summary(times_ms):
    """Median, p10 and p90 of the frames after the first ``SKIPPED``."""
    kept = np.asarray(times_ms[SKIPPED:], float)
    return {'frames': int(kept.size), 'median_ms': round(float(np.median(kept)), 3),
            'p10_ms': round(float(np.percentile(kept, 10)), 3),
            'p90_ms': round(float(np.percentile(kept, 90)), 3)}


class EngineClock:
    """The engine and two slots; :meth:`run` times frames as the node's device stage."""

    def __init__(self, messages, weights, threads):
        """Create the ONNX Runtime engine and submit the first frame."""
        from xfeat_ros.features.engine import EngineConfig
        from xfeat_ros.features.factory import create_engine
        self.messages = messages
        self.engine = create_engine(EngineConfig('onnxruntime', weights, top_k=1024,
                                                 num_threads=threads))
        self.slots = [self.engine.alloc_slot(), self.engine.alloc_slot()]
        self.frame = 0
        self.engine.submit(messages[0], self.slots[0])
        self.engine.synchronize()

    def run(self, frames, period_s):
        """Milliseconds of ``frames`` frames, one every ``period_s`` (0: back to back)."""
        engine, slots, times = self.engine, self.slots, []
        due = time.monotonic()
        for _ in range(frames):
            self.frame += 1
            current, previous = slots[self.frame % 2], slots[(self.frame + 1) % 2]
            due += period_s
            start = time.perf_counter()
            engine.submit(self.messages[self.frame % len(self.messages)], current)
            engine.submit_match(previous, current)
            engine.synchronize()
            engine.features(current)
            times.append(1e3 * (time.perf_counter() - start))
            if period_s:
                time.sleep(max(0.0, due - time.monotonic()))
        return times


@one_line_errors('engine_time')
def main(argv=None):
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--shared', help='data folder (default: $XFEAT_ROS_SHARED or ../shared)')
    parser.add_argument('--weights', help='default: SHARED/models/xfeat_backbone.npz')
    parser.add_argument('--rounds', type=int, default=1)
    parser.add_argument('--frames', type=int, default=60, help='per round and mode')
    parser.add_argument('--paced', action='store_true', help='also time frames paced at 30 Hz')
    parser.add_argument('--threads', type=int, default=0,
                        help="ONNX Runtime threads (0: its default, as the node's num_threads)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.frames <= SKIPPED:
        parser.error(f'--rounds must be >= 1 and --frames > {SKIPPED}')
    shared = shared_dir(args.shared)
    weights = args.weights or str(shared / 'models' / 'xfeat_backbone.npz')
    clock = EngineClock(load_messages(shared), weights, args.threads)
    modes = (('hot', 0.0), ('paced_30hz', 1 / 30)) if args.paced else (('hot', 0.0),)
    for round_index in range(args.rounds):
        for mode, period in modes:
            record = {'round': round_index + 1, 'mode': mode, 'num_threads': args.threads}
            record.update(summary(clock.run(args.frames, period)))
            sys.stdout.write(json.dumps(record) + '\n')
            sys.stdout.flush()
    return 0


if __name__ == '__main__':
    sys.exit(main())
