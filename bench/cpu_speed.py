# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
CPU speed at 640x480: our ONNX Runtime + NumPy path next to upstream XFeat.

Both run in this one process on the same frames (TUM fr2/desk by default),
each per frame: detect + describe, then match against the previous frame
(min cosine 0.82, top_k 4096). Median and spread of wall time per frame after
warm-up. Upstream comes from a checkout given with ``--upstream DIR`` (the
folder holding its ``modules/``; it also needs ``tqdm`` installed), loaded
with the same weights; it is never part of this repository.

    python bench/cpu_speed.py --weights ../shared/models/xfeat_backbone.pt \
        --upstream /path/to/accelerated_features --frames 20 --repeat 3
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time


def time_loop(step, frames, repeat):
    """Call ``step(i, frame)`` over the frames ``repeat`` times; return per-frame seconds."""
    step(0, frames[0])  # warm-up (session creation, first allocations)
    step(1, frames[1 % len(frames)])
    times = []
    for _ in range(repeat):
        for i, frame in enumerate(frames):
            start = time.perf_counter()
            step(i, frame)
            times.append(time.perf_counter() - start)
    return times


def ours(weights, threads):
    """Per-frame step of the xfeat_ros CPU path (decode from rgb8 bytes included)."""
    from xfeat_ros.backbone import create_backbone
    from xfeat_ros.decode import decode_image
    from xfeat_ros.match import mutual_nn_match
    from xfeat_ros.pipeline import CpuPipeline
    pipeline = CpuPipeline(create_backbone('onnxruntime', weights, threads), 4096, 0.05)
    state = {}

    def step(i, rgb):
        h, w, _ = rgb.shape
        grey = decode_image(rgb.tobytes(), 'rgb8', h, w, w * 3)
        features = pipeline.extract(grey)
        if 'prev' in state:
            mutual_nn_match(state['prev'].descriptors, features.descriptors, 0.82)
        state['prev'] = features
    return step


def upstream(directory, weights, threads):
    """Per-frame step of upstream XFeat (detectAndCompute + match) on the CPU."""
    import torch
    torch.set_num_threads(threads or os.cpu_count())
    sys.path.insert(0, directory)
    from modules.xfeat import XFeat
    model = XFeat(weights=None, top_k=4096, detection_threshold=0.05)
    state_dict = torch.load(weights, map_location='cpu', weights_only=True)
    model.net.load_state_dict(state_dict, strict=False)  # no fine_matcher in our file
    model = model.to('cpu').eval()
    model.dev = torch.device('cpu')
    state = {}

    def step(i, rgb):
        x = torch.from_numpy(rgb).permute(2, 0, 1)[None].float() / 255.0
        out = model.detectAndCompute(x, top_k=4096)[0]
        if 'prev' in state:
            model.match(state['prev']['descriptors'], out['descriptors'], 0.82)
        state['prev'] = out
    return step


def summary(times):
    """Median, quartiles and frames per second of per-frame times (ms)."""
    ms = [t * 1e3 for t in times]
    q = statistics.quantiles(ms, n=4)
    return {'median_ms': statistics.median(ms), 'p25_ms': q[0], 'p75_ms': q[2],
            'fps': 1e3 / statistics.median(ms), 'frames': len(ms)}


def main(argv=None):
    """Run both and print a table with the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip())
    parser.add_argument('--weights', required=True, help='backbone .pt (upstream key names)')
    parser.add_argument('--upstream', help='upstream XFeat checkout (holds modules/)')
    parser.add_argument('--images', default=os.path.join(os.path.dirname(__file__), '..', '..',
                                                         'shared', 'data', 'tum_fr2_desk'))
    parser.add_argument('--frames', type=int, default=20)
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--threads', type=int, default=0, help='0: all cores')
    parser.add_argument('--json', help='write the results here')
    args = parser.parse_args(argv)
    from xfeat_ros.image_files import list_sequence, read_image
    frames = []
    for _, path in list_sequence(args.images)[:args.frames]:
        pixels, encoding = read_image(path)
        frames.append(pixels if encoding == 'rgb8' else pixels.repeat(3, axis=2))
    results = {'machine': platform.processor() or platform.machine(), 'cores': os.cpu_count(),
               'image_hw': list(frames[0].shape[:2]), 'top_k': 4096}
    results['xfeat_ros_cpu'] = summary(time_loop(ours(args.weights, args.threads), frames,
                                                 args.repeat))
    if args.upstream:
        results['upstream_torch_cpu'] = summary(
            time_loop(upstream(args.upstream, args.weights, args.threads), frames, args.repeat))
        results['speedup'] = (results['upstream_torch_cpu']['median_ms']
                              / results['xfeat_ros_cpu']['median_ms'])
    for name in ('xfeat_ros_cpu', 'upstream_torch_cpu'):
        if name in results:
            r = results[name]
            sys.stdout.write(f"{name:20s} {r['median_ms']:8.1f} ms/frame "
                             f"(p25 {r['p25_ms']:.1f}, p75 {r['p75_ms']:.1f})  "
                             f"{r['fps']:6.2f} fps\n")
    if 'speedup' in results:
        sys.stdout.write(f"xfeat_ros / upstream speed ratio: {results['speedup']:.2f}x\n")
    if args.json:
        with open(args.json, 'w') as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == '__main__':
    sys.exit(main())
