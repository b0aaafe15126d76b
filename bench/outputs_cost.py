# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
What each optional output of the node costs per frame: host time and bytes on the wire.

    python bench/outputs_cost.py --shared ../shared --backend auto --json out.json

On real EuRoC V1_01 stereo frames (752x480), with the engine the node would use
(``--backend auto``: the CUDA engine where there is one, else ONNX Runtime), it
times, side by side in one run, the work the node adds per frame for each
output: building Keypoints with each descriptor encoding, the keypoint cloud,
the VINS feature cloud (with undistortion), the debug image (render + message),
and stereo matching through ``engine.match_features`` next to NumPy matching.
Bytes are those of the CDR-serialized message (``rclpy.serialization``), i.e.
what travels per frame. Each time is the median of ``--repeat`` runs at
``top_k`` 4096 and at 500 keypoints (a typical VINS feature budget).
"""

import argparse
import json
import logging
from pathlib import Path
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xfeat_ros.features.camera import CameraModel, undistort_points  # noqa: E402
from xfeat_ros.features.debug_image import render_debug_image  # noqa: E402
from xfeat_ros.features.engine import EngineConfig  # noqa: E402
from xfeat_ros.features.factory import create_engine  # noqa: E402
from xfeat_ros.features.image_codec import decode_image_msg, image_msg  # noqa: E402
from xfeat_ros.features.match import mutual_nn_match  # noqa: E402
from xfeat_ros.features.pipeline import Features  # noqa: E402
from xfeat_ros.ros.messages import (keypoint_cloud_msg, keypoints_msg,  # noqa: E402
                                    vins_feature_msg)
from xfeat_ros.tools.image_files import read_image  # noqa: E402

LOG = logging.getLogger('outputs_cost')


def median_ms(function, repeat):
    """Median wall time of ``function()`` over ``repeat`` calls, in milliseconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def first(features, count):
    """Return the ``count`` strongest keypoints of :class:`Features` (sorted by score)."""
    return Features(features.keypoints[:count], features.scores[:count],
                    features.descriptors[:count], features.image_hw)


def measure(engine, msgs, model, repeat):
    """Return ``{keypoints: {row: {'ms', 'bytes'}}}`` for both keypoint budgets."""
    from rclpy.serialization import serialize_message
    from std_msgs.msg import Header
    slots = [engine.alloc_slot(), engine.alloc_slot()]
    for msg, slot in zip(msgs, slots):
        engine.submit(msg, slot)
    engine.synchronize()
    left_all, right_all = (engine.features(slot) for slot in slots)
    grey = decode_image_msg(msgs[0])
    header = Header(frame_id='cam0')
    results = {}
    for count in (len(left_all), 500):
        left, right = first(left_all, count), first(right_all, count)
        n = len(left)
        ids = np.arange(n, dtype=np.uint64)
        ages = np.ones(n, dtype=np.uint32)
        rows = {}
        for encoding in ('float32', 'float16', 'int8', 'none'):
            rows[f'Keypoints {encoding}'] = {
                'ms': median_ms(lambda e=encoding: serialize_message(
                    keypoints_msg(header, left, (ids, ages), e)), repeat),
                'bytes': len(serialize_message(keypoints_msg(header, left, (ids, ages),
                                                             encoding)))}
        rows['keypoint_cloud'] = {
            'ms': median_ms(lambda: serialize_message(
                keypoint_cloud_msg(header, left, ids, ages)), repeat),
            'bytes': len(serialize_message(keypoint_cloud_msg(header, left, ids, ages)))}
        velocity = np.zeros((n, 2), np.float32)

        def vins():
            return serialize_message(vins_feature_msg(
                header, undistort_points(model, left.keypoints), ids, left.keypoints,
                velocity))
        rows['feature (VINS, with undistortion)'] = {'ms': median_ms(vins, repeat),
                                                     'bytes': len(vins())}

        def debug():
            canvas = render_debug_image(grey, left.keypoints, left.scores, ages)
            return serialize_message(image_msg(canvas, 'bgr8'))
        rows['debug_image (render + message)'] = {'ms': median_ms(debug, repeat),
                                                  'bytes': len(debug())}
        rows[f'stereo match_features ({engine.name} on {engine.device})'] = {
            'ms': median_ms(lambda: engine.match_features(left, right), repeat), 'bytes': None}
        rows['stereo NumPy mutual_nn_match (reference)'] = {
            'ms': median_ms(lambda: mutual_nn_match(left.descriptors, right.descriptors, 0.82),
                            max(3, repeat // 4)), 'bytes': None}
        results[n] = rows
    return results


def markdown(results, header):
    """Markdown table of :func:`measure`'s results."""
    counts = list(results)
    lines = [header, '', '| output | ' + ' | '.join(f'ms @ {n} kp | bytes @ {n} kp'
                                                    for n in counts) + ' |',
             '|---|' + '---:|---:|' * len(counts)]
    for row in results[counts[0]]:
        cells = []
        for n in counts:
            value = results[n][row]
            cells += [f'{value["ms"]:.2f}',
                      f'{value["bytes"]:,}' if value['bytes'] is not None else '']
        lines.append(f'| {row} | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines) + '\n'


def main(argv=None):
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip())
    parser.add_argument('--shared', default=str(Path(__file__).resolve().parents[2] /
                                                'shared'),
                        help='the shared folder (models/, data/)')
    parser.add_argument('--backend', default='auto', help='as the node (default auto)')
    parser.add_argument('--repeat', type=int, default=20, help='runs per measurement')
    parser.add_argument('--json', help='write the results here (and a .md beside it)')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='[%(name)s] %(message)s')
    shared = Path(args.shared)
    folder = shared / 'data' / 'euroc_v101_stereo'
    name = sorted(p.name for p in (folder / 'cam0').glob('*.png'))[0]
    msgs = [image_msg(*read_image(folder / cam / name)) for cam in ('cam0', 'cam1')]
    model = CameraModel.from_euroc_yaml(folder / 'cam0_sensor.yaml')
    engine = create_engine(EngineConfig(args.backend,
                                        str(shared / 'models' / 'xfeat_backbone.npz')), LOG)
    results = measure(engine, msgs, model, args.repeat)
    title = (f'Per-frame cost of the optional outputs, engine {engine.name} on '
             f'{engine.device}, EuRoC 752x480, median of {args.repeat} runs')
    text = markdown(results, title)
    sys.stdout.write(text)
    if args.json:
        Path(args.json).write_text(json.dumps({'title': title, 'results': results}, indent=1))
        Path(args.json).with_suffix('.md').write_text(text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
