# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
What every xfeat_ros command line shares: one-line errors, interruption, ``xfeat_node --help``.

* :func:`one_line_errors` wraps a tool's ``main``: a mistake (an
  :class:`~xfeat_ros.errors.XFeatError`, a missing or unreadable file, a missing
  optional Python module) ends in one line ``<tool>: error: <reason>`` on
  stderr and exit status 1; Ctrl-C in ``<tool>: interrupted`` and 130 (the
  shell's code for SIGINT), never a traceback.
* :func:`stop_on_sigterm` makes SIGTERM raise ``KeyboardInterrupt`` like SIGINT,
  for processes that hold a ROS context (``rclpy.init`` with
  ``signal_handler_options=NO``), so they stop with the context still valid.
* :func:`node_help` answers ``xfeat_node --help`` / ``-h`` (before any
  ``--ros-args``) with the usage, topics and parameters instead of starting.
"""

import functools
import signal
import sys

from xfeat_ros.errors import XFeatError

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130


def error_line(prog, exc):
    """Return the one line that reports ``exc`` for the tool ``prog``."""
    if isinstance(exc, ModuleNotFoundError):
        reason = f'needs the Python module {exc.name!r}, which is not installed'
    elif isinstance(exc, OSError) and exc.filename is not None:
        reason = f'{exc.filename}: {exc.strerror or exc}'
    else:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f'{prog}: error: {reason}'


def one_line_errors(prog):
    """
    Decorate a command-line ``main(argv=None)`` so mistakes end in one line.

    ``XFeatError``, ``OSError`` and ``ModuleNotFoundError`` escaping ``main``
    print :func:`error_line` to stderr and return :data:`EXIT_ERROR`;
    ``KeyboardInterrupt`` prints ``<prog>: interrupted`` and returns
    :data:`EXIT_INTERRUPTED`. ``SystemExit`` (argparse's usage errors) passes
    through. Anything else is a bug and keeps its traceback.
    """
    def decorate(main):
        @functools.wraps(main)
        def run(argv=None):
            try:
                return main(argv)
            except KeyboardInterrupt:
                print(f'{prog}: interrupted', file=sys.stderr)
                return EXIT_INTERRUPTED
            except (XFeatError, OSError, ModuleNotFoundError) as exc:
                print(error_line(prog, exc), file=sys.stderr)
                return EXIT_ERROR
        return run
    return decorate


def stop_on_sigterm():
    """Make SIGTERM raise ``KeyboardInterrupt`` in the main thread, as SIGINT does."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)


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
    from xfeat_ros.node import PARAMETERS
    print(node_usage(PARAMETERS), file=out or sys.stdout)
    return True
