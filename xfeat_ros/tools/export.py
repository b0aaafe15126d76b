# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_export``: write the XFeat backbone as an ONNX file.

The graph holds the network only (input grey [1, 1, H, W] at model size,
outputs feats / keypoint_logits / reliability), with dynamic H and W unless
``--height``/``--width`` fix them (some TensorRT and embedded runtimes prefer
one engine per resolution). ``--check`` runs the file once with ONNX Runtime.
"""

import argparse
import logging
import sys

from xfeat_ros.cli import error_line, one_line_errors
from xfeat_ros.errors import XFeatError
from xfeat_ros.features.network_onnx import build_model
from xfeat_ros.features.preprocess import model_size
from xfeat_ros.features.weights import load_weights, resolve_weights
from xfeat_ros.logs import package_logger

LOG = package_logger('xfeat_export')


def export_onnx(output, weights='', height=None, width=None):
    """Write the ONNX model to ``output``; image sides are floored to multiples of 32."""
    if (height is None) != (width is None):
        raise XFeatError('give both --height and --width, or neither')
    if height is not None:
        height, width = model_size(height, width)
    model = build_model(load_weights(resolve_weights(weights)), height, width)
    with open(output, 'wb') as handle:
        handle.write(model.SerializeToString())
    return model, (height, width)


def check_onnx(path, height, width):
    """Run the exported file once; return the output shapes."""
    import numpy as np

    from xfeat_ros.features.backbone import OnnxRuntimeBackbone
    backbone = OnnxRuntimeBackbone(path)
    outputs = backbone.run(np.random.default_rng(0).random((height, width), np.float32))
    return [o.shape for o in outputs]


@one_line_errors('xfeat_export')
def main(argv=None):
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('-o', '--output', default='xfeat.onnx', help='ONNX file to write')
    parser.add_argument('-w', '--weights', default='',
                        help='weights .pt/.npz (default: $XFEAT_ROS_WEIGHTS, cache, packaged)')
    parser.add_argument('--height', type=int, help='fixed image height (floored to 32)')
    parser.add_argument('--width', type=int, help='fixed image width (floored to 32)')
    parser.add_argument('--check', action='store_true', help='run it once with ONNX Runtime')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')
    try:
        _, (height, width) = export_onnx(args.output, args.weights, args.height, args.width)
        LOG.info('wrote %s (%s input)', args.output,
                 f'{width}x{height}' if height else 'dynamic')
        if args.check:
            shapes = check_onnx(args.output, height or 480, width or 640)
            LOG.info('ONNX Runtime check: outputs %s', shapes)
    except XFeatError as exc:
        print(error_line('xfeat_export', exc), file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
