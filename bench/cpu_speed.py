# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
CPU speed at 640x480, kept for its old command line: now ``xfeat_bench cpu``.

    python bench/cpu_speed.py --weights ../shared/models/xfeat_backbone.pt \
        --upstream /path/to/accelerated_features --frames 20 --repeat 3

runs ``xfeat_bench cpu --weights W --upstream U --num-images 20 --frames 60``:
our ONNX Runtime path next to the PyTorch reference and upstream XFeat on the
CPU (see :mod:`xfeat_ros.tools.bench`).
"""

import argparse
from pathlib import Path
import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xfeat_ros.tools.bench.cli import main as bench_main  # noqa: E402 - after the path set-up
from xfeat_ros.tools.bench.frames import default_images  # noqa: E402


def main(argv=None):
    """Translate the old options and run ``xfeat_bench cpu``."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip())
    parser.add_argument('--weights', default='', help='weights (.pt or .npz)')
    parser.add_argument('--upstream', help='upstream XFeat checkout (holds modules/)')
    parser.add_argument('--images', default=str(default_images()))
    parser.add_argument('--frames', type=int, default=20, help='distinct images')
    parser.add_argument('--repeat', type=int, default=3, help='passes over them')
    parser.add_argument('--threads', type=int, default=0, help='0: all cores')
    parser.add_argument('--json', help='write the results here')
    args = parser.parse_args(argv)
    new = ['cpu', '--images', args.images, '--num-images', str(args.frames),
           '--frames', str(args.frames * args.repeat), '--threads', str(args.threads)]
    for flag, value in (('--weights', args.weights), ('--upstream', args.upstream),
                        ('--json', args.json)):
        if value:
            new += [flag, value]
    return bench_main(new)


if __name__ == '__main__':
    sys.exit(main())
