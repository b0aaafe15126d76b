# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The command line of ``xfeat_bench``: one parser per mode, and ``main``."""

import argparse
import json
import logging
import os
from pathlib import Path

from xfeat_ros.cli import one_line_errors
from xfeat_ros.defaults import MIN_COSSIM, THRESHOLD, TOP_K
from xfeat_ros.errors import XFeatError
from xfeat_ros.features.descriptor_format import ENCODINGS as DESCRIPTOR_ENCODINGS
from xfeat_ros.features.engine import BACKENDS
from xfeat_ros.ros import dds
from xfeat_ros.runtime.frontend import OutputConfig
from xfeat_ros.runtime.scheduler import SchedulerConfig
from xfeat_ros.tools.bench import __doc__ as DOC
from xfeat_ros.tools.bench.collector import TAKES
from xfeat_ros.tools.bench.frames import default_images, default_weights
from xfeat_ros.tools.bench.node import DEFAULT_NODE_CONFIGS, run_node
from xfeat_ros.tools.bench.pipeline import (DEFAULT_BASELINE_IN_FLIGHT, DEFAULT_IN_FLIGHT,
                                            DEFAULT_RESOLUTIONS, run_pipeline)
from xfeat_ros.tools.bench.publisher import ENCODINGS, RELIABLE_DEPTH, run_publisher
from xfeat_ros.tools.bench.report import plot_latencies
import yaml


def _at_least_one(text):
    """Argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f'must be at least 1, got {value}')
    return value


def _node_param(text):
    """Argparse type: ``NAME:=VALUE`` (the value read as YAML, as ``ros2 run`` reads it)."""
    name, sep, value = text.partition(':=')
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f'expected NAME:=VALUE, got {text!r}')
    try:
        return name.strip(), yaml.safe_load(value)
    except yaml.YAMLError:
        raise argparse.ArgumentTypeError(f'{name}: value {value!r} is not YAML') from None


def _pipeline_args(parser, cpu):
    parser.add_argument('--resolutions', default='640x480' if cpu else DEFAULT_RESOLUTIONS,
                        help='WxH list (default: %(default)s)')
    parser.add_argument('--backend', default='onnxruntime' if cpu else 'auto',
                        choices=BACKENDS)
    parser.add_argument('--in-flight', default='1' if cpu else DEFAULT_IN_FLIGHT,
                        help='frames per synchronization for ours (GPU only; default '
                             '%(default)s)')
    parser.add_argument('--baseline-in-flight', default='1' if cpu
                        else DEFAULT_BASELINE_IN_FLIGHT,
                        help='batch sizes for the reference and upstream (default %(default)s)')
    parser.add_argument('--frames', type=int, default=30 if cpu else 240,
                        help='measured frames per row (default %(default)s)')
    parser.add_argument('--warmup', type=int, default=3 if cpu else 32,
                        help='warm-up frames per row (default %(default)s)')
    parser.add_argument('--upstream', help='upstream XFeat checkout (holds modules/; needs tqdm)')
    parser.add_argument('--interleave', action='store_true',
                        help='contenders take turns group by group (default: one block each)')
    parser.add_argument('--repeat', type=_at_least_one, default=1,
                        help='measure every row this many times, the contenders in reverse '
                             "order every other time; ratios are the median of the repeats' "
                             'ratios (each listed) (default %(default)s)')
    parser.add_argument('--unchecked', action='store_true',
                        help='also time our GPU engine without its device epipolar check of '
                             'the matches (the RANSAC of the tracks), as upstream matches')
    parser.add_argument('--armed', action='store_true',
                        help='also time our GPU engine at one frame in flight with each next '
                             'frame enqueued before it comes (GpuEngine.arm)')
    parser.add_argument('--no-machine-rates', action='store_true',
                        help='skip measuring the GPU FP32 matmul and copy rates')


def build_parser():
    """Build the argument parser of every mode."""
    parser = argparse.ArgumentParser(prog='xfeat_bench',
                                     description=DOC.strip().splitlines()[0])
    modes = parser.add_subparsers(dest='mode', required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument('--images', default=str(default_images()),
                        help='image folder or sequence (default: ../shared TUM fr2/desk)')
    common.add_argument('--num-images', type=int, default=8,
                        help='images to rotate (default %(default)s)')
    common.add_argument('--weights', default='', help='weights (.pt or .npz); default: '
                        '../shared/models/xfeat_backbone.npz, else the weights lookup')
    common.add_argument('--gpu', type=int, default=0)
    common.add_argument('--threads', type=int, default=0, help='CPU threads (0: all / default)')
    common.add_argument('--top-k', type=int, default=TOP_K)
    common.add_argument('--json', help='write the results here')
    common.add_argument('-v', '--verbose', action='store_true')
    detect = argparse.ArgumentParser(add_help=False)
    detect.add_argument('--threshold', type=float, default=THRESHOLD)
    detect.add_argument('--min-cossim', type=float, default=MIN_COSSIM)
    for name, cpu, text in (('pipeline', False, 'time the pipeline at several resolutions '
                             'and frames in flight'),
                            ('cpu', True, 'time the ONNX Runtime path on the CPU')):
        sub = modes.add_parser(name, parents=[common, detect], help=text, description=text)
        _pipeline_args(sub, cpu)
    node = modes.add_parser('node', parents=[common], help='time xfeat_node through ROS 2',
                            description='time xfeat_node through ROS 2 transport')
    node.add_argument('--configs', default=DEFAULT_NODE_CONFIGS,
                      help='CAMERASxHZ list, HZ "max" = as fast as possible '
                           '(default %(default)s)')
    node.add_argument('--duration', type=float, default=10.0, help='seconds per configuration')
    node.add_argument('--resolution', default='640x480', help='camera images')
    node.add_argument('--encoding', default='rgb8', choices=ENCODINGS,
                      help='camera images: raw rgb8 or mono8, or rgb8 sent compressed as jpeg '
                           '(quality 90) or png, the node then subscribing <camera>/image/'
                           'compressed (default %(default)s)')
    node.add_argument('--backend', default='auto', choices=BACKENDS)
    node.add_argument('--max-frames-in-flight', type=int,
                      default=SchedulerConfig.max_frames_in_flight,
                      help="the node parameter (default: the node's, %(default)s)")
    node.add_argument('--queue-size', type=int, default=SchedulerConfig.queue_size,
                      help="the node parameter (default: the node's, %(default)s)")
    node.add_argument('--descriptor-encoding', default=OutputConfig.descriptor_encoding,
                      choices=DESCRIPTOR_ENCODINGS,
                      help='the node parameter: descriptors on the wire (default: the '
                           "node's, %(default)s)")
    node.add_argument('--warmup-frames', type=int, default=10,
                      help='per camera, before measuring (default %(default)s)')
    node.add_argument('--warmup-rate', type=float, default=20.0)
    node.add_argument('--publisher-processes', type=int,
                      default=max(1, min(4, (os.cpu_count() or 2) // 4)),
                      help='camera processes the cameras are dealt over (default %(default)s)')
    node.add_argument('--start-timeout', type=float, default=120.0)
    node.add_argument('--drain-timeout', type=float, default=20.0)
    node.add_argument('--drain-idle', type=float, default=3.0,
                      help='stop draining after this long without a new Keypoints (s)')
    node.add_argument('--domain-id', type=int, help='ROS_DOMAIN_ID (default: kept, else '
                      'from the process id)')
    node.add_argument('--node-processes', type=_at_least_one, default=1,
                      help='node processes the cameras are dealt over, each a full xfeat_node '
                           'with its own interpreter (default %(default)s: one node)')
    node.add_argument('--node-wrapper', metavar='COMMAND',
                      help='run the node under this command prefix, e.g. a profiler: '
                           '"py-spy record --gil -f raw -o /tmp/{label}.txt --" '
                           '({label}: the configuration)')
    node.add_argument('--node-param', action='append', default=[], type=_node_param,
                      metavar='NAME:=VALUE',
                      help="an xfeat_node parameter for every node, over the benchmark's own "
                           '(repeatable), e.g. arm_next_frame:=false')
    node.add_argument('--collector-take', default='rcl', choices=TAKES,
                      help="how the collector takes the Keypoints: rcl's take into a kept "
                           "buffer in a thread of its own, or rclpy's raw take in the "
                           'executor (default %(default)s)')
    node.add_argument('--log-dir', help='node and publisher logs (default: a temporary folder)')
    dds.add_profile_argument(node)
    node.add_argument('--png', help='write the latency histogram here')
    pub = modes.add_parser('publisher', parents=[common],
                           help='camera process of the node mode (driven over stdin)')
    pub.add_argument('--cameras', required=True, help='comma-separated camera names')
    pub.add_argument('--resolution', default='640x480')
    pub.add_argument('--encoding', default='rgb8', choices=ENCODINGS)
    pub.add_argument('--depth', type=int, default=RELIABLE_DEPTH)
    pub.add_argument('--wait-subscribers', type=float, default=60.0)
    pub.add_argument('--domain-id', type=int)
    dds.add_profile_argument(pub)
    plot = modes.add_parser('plot', help='latency histogram PNG of a node JSON')
    plot.add_argument('json_file')
    plot.add_argument('--png', required=True)
    return parser


@one_line_errors('xfeat_bench')
def main(argv=None):
    """Command-line entry point of ``xfeat_bench``."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, 'verbose', False) else logging.WARNING,
                        format='%(name)s: %(message)s')
    if args.mode in ('pipeline', 'cpu') and not Path(args.images).is_dir():
        raise XFeatError(f'no images at {args.images} (the default is ../shared/data/'
                         'tum_fr2_desk beside the repository): give --images DIR')
    if args.mode in ('pipeline', 'cpu'):
        args.weights = args.weights or default_weights()
        return run_pipeline(args)
    if args.mode == 'node':
        return run_node(args)
    if args.mode == 'publisher':
        return run_publisher(args)
    plot_latencies(json.loads(Path(args.json_file).read_text()), args.png)
    return 0
