# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""``xfeat_node --help``: the usage, topics and parameters, instead of starting the node."""

import sys

from xfeat_ros.ros.parameters import PARAMETERS


def help_requested(argv):
    """Return whether ``argv`` asks for help before any ``--ros-args``."""
    for arg in argv:
        if arg == '--ros-args':
            return False
        if arg in ('-h', '--help'):
            return True
    return False


def node_usage(parameters):
    """
    Return ``xfeat_node``'s usage text.

    ``parameters``: ``{name: (default, ParameterDescriptor)}`` (the node's
    ``PARAMETERS``); each is listed with its default and description.
    """
    lines = [
        'usage: xfeat_node [--ros-args [-r FROM:=TO] [-p NAME:=VALUE] [--params-file FILE]]',
        '',
        'XFeat keypoints, descriptors and frame-to-frame matches for ROS 2.',
        '',
        'examples:',
        '  xfeat_node --ros-args -r image:=/camera/image_raw',
        '  xfeat_node --ros-args -r image:=/camera/image_raw -p top_k:=2048 '
        '-p backend:=onnxruntime',
        '  xfeat_node --ros-args --params-file config/xfeat.yaml -r __ns:=/front',
        '  ros2 launch xfeat_ros xfeat.launch.py image:=/camera/image_raw  (with the ros2 CLI)',
        '',
        'topics (relative: namespaces and remapping apply; camera c of `cameras` uses c/...):',
        '  image        sensor_msgs/Image            input',
        '  keypoints    xfeat_ros_msgs/Keypoints     one per image',
        '  matches      xfeat_ros_msgs/Matches       one per image after the first',
        '  /diagnostics diagnostic_msgs/DiagnosticArray',
        '',
        'parameters (-p NAME:=VALUE; "live" ones also with `ros2 param set`):',
    ]
    for name, (default, descriptor) in parameters.items():
        shown = "''" if default == '' else default
        lines.append(f'  {name} (default {shown}): {descriptor.description}')
    lines += ['', 'Stop with Ctrl-C or SIGTERM: the frames in flight are finished and the '
              'counts logged.']
    return '\n'.join(lines)


def node_help(argv=None, out=None):
    """
    Print ``xfeat_node``'s usage and return True if ``argv`` asks for help, else False.

    ``argv`` defaults to ``sys.argv[1:]``. Call first thing in ``node.main``::

        if node_help(args):
            return 0
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if not help_requested(argv):
        return False
    print(node_usage(PARAMETERS), file=out or sys.stdout)
    return True
