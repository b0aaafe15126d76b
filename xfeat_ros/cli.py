# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
What every xfeat_ros command line shares: one-line errors and interruption.

* :func:`one_line_errors` wraps a tool's ``main``: a mistake (an
  :class:`~xfeat_ros.errors.XFeatError`, a missing or unreadable file, a missing
  optional Python module) ends in one line ``<tool>: error: <reason>`` on
  stderr and exit status 1; Ctrl-C in ``<tool>: interrupted`` and 130 (the
  shell's code for SIGINT), never a traceback.
* :func:`stop_on_sigterm` makes SIGTERM raise ``KeyboardInterrupt`` like SIGINT,
  for processes that hold a ROS context (``rclpy.init`` with
  ``signal_handler_options=NO``), so they stop with the context still valid.

``xfeat_node --help`` lives with the node (:mod:`xfeat_ros.ros.usage`).
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
