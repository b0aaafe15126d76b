# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Log lines of the core: throttled per key, and each new reason once.

Works over a ``logging.Logger`` or an rclpy logger (both take one message
string); the throttling here does not rely on either's own options.

:func:`forward_package_logs` hands the package's own ``logging`` records (the
GPU engine's backbone captures, a kernel feature turned off, a capture that
failed) to such a logger too: in the node they go to its ROS log and
``/rosout`` instead of nowhere (INFO) or bare stderr (WARNING and above). They
reach it by propagation, which the package's loggers keep even where ROS 2's
``launch`` has been imported (:mod:`xfeat_ros.logs`).
"""

import logging
import re
import threading
import time

from xfeat_ros.logs import package_logger

MAX_REASONS = 256  # distinct reject reasons remembered per reporter


def reason_key(exc):
    """
    Return what identifies the *reason* of an error, without its varying numbers.

    ``unsupported image encoding '32FC1'`` and ``'bayer_rggb8'`` are two
    reasons; two stamps out of order are one.
    """
    return type(exc).__name__, re.sub(r'\b\d+\b', '#', str(exc))


class Reporter:
    """Log through ``logger``, at most once per ``period_s`` per key."""

    def __init__(self, logger, clock=time.monotonic):
        """Wrap ``logger``; ``clock`` returns seconds (monotonic)."""
        self.logger = logger
        self.clock = clock
        self._last = {}
        self._tallies = {}
        self._lock = threading.Lock()

    def _due(self, key, period_s):
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < period_s:
                return False
            if last is None and len(self._last) >= MAX_REASONS:
                self._last.pop(next(iter(self._last)))
            self._last[key] = now
            return True

    def error(self, text, key=None, period_s=5.0):
        """Log an error line, at most once per ``period_s`` per ``key`` (None: always)."""
        if key is None or self._due(key, period_s):
            self.logger.error(text)

    def warning(self, text, key=None, period_s=5.0):
        """Log a warning line, at most once per ``period_s`` per ``key`` (None: always)."""
        if key is None or self._due(key, period_s):
            self.logger.warning(text)

    def info(self, text):
        """Log an information line."""
        self.logger.info(text)

    def tally(self, key):
        """
        Count one more occurrence of ``key``; return how many so far (1 the first time).

        For lines that say "N so far" of what their key names (a reason, not a
        class of errors); logged or throttled alike. At most :data:`MAX_REASONS`
        keys are kept: the oldest is forgotten (counted from 1 again).
        """
        with self._lock:
            count = self._tallies.get(key, 0) + 1
            if count == 1 and len(self._tallies) >= MAX_REASONS:
                self._tallies.pop(next(iter(self._tallies)))
            self._tallies[key] = count
            return count

    def seen(self, key):
        """Return True if ``key`` was reported before (and remember it now)."""
        with self._lock:
            if key in self._last:
                return True
            self._last[key] = self.clock()
            return False


_LEVELS = ((logging.CRITICAL, 'fatal'), (logging.ERROR, 'error'), (logging.WARNING, 'warning'),
           (logging.INFO, 'info'))


class ToLogger(logging.Handler):
    """A ``logging`` handler that passes each record to a logger of one-string methods."""

    def __init__(self, logger):
        """Pass records to ``logger`` (methods fatal, error, warning, info, debug)."""
        super().__init__()
        self.logger = logger

    def emit(self, record):
        """Log ``name: message`` (and the traceback, if any) at the record's level."""
        try:
            text = f'{record.name}: {record.getMessage()}'
            if record.exc_info:
                text += '\n' + logging.Formatter().formatException(record.exc_info)
        except (TypeError, ValueError):  # a bad format string in the record
            self.handleError(record)
            return
        method = next((name for level, name in _LEVELS if record.levelno >= level), 'debug')
        getattr(self.logger, method)(text)


def forward_package_logs(logger, package='xfeat_ros'):
    """
    Send ``package``'s ``logging`` records of INFO and above to ``logger``.

    Returns a function that stops it (the node calls it when it is destroyed).
    A handler already sending to a logger of the same name (a node made again
    in one process after a failed start) is replaced, so no line comes twice.
    """
    handler = ToLogger(logger)
    target = package_logger(package)
    name = getattr(logger, 'name', None)
    if name is not None:
        for old in [h for h in target.handlers if isinstance(h, ToLogger)]:
            if getattr(old.logger, 'name', None) == name:
                target.removeHandler(old)
    target.addHandler(handler)
    if target.level == logging.NOTSET or target.level > logging.INFO:
        target.setLevel(logging.INFO)
    return lambda: target.removeHandler(handler)
