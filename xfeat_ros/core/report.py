# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Log lines of the core: throttled per key, and each new reason once.

Works over a ``logging.Logger`` or an rclpy logger (both take one message
string); the throttling here does not rely on either's own options.
"""

import re
import threading
import time

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

    def seen(self, key):
        """Return True if ``key`` was reported before (and remember it now)."""
        with self._lock:
            if key in self._last:
                return True
            self._last[key] = self.clock()
            return False
