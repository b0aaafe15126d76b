# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Node wrapper of the fourteenth session's diagnostics A/B (CPU machine).

Runs the node with the zero-cost replay engine (``bench/replay_engine.py``) and
times every ``/diagnostics`` call (wall and the calling thread's CPU); at exit
it writes one ``DIAG`` line to the node's log. ``DIAG_ARM=base`` patches back
the NumPy medians of the stream's stage windows (the code before 3ed0593)::

    xfeat_bench node --configs 1x30 ... --node-wrapper "env XFEAT_REPLAY_BUFFERS=1 \
        DIAG_ARM=base python bench/results/2026-12-03-fourteenth/diag_ab.py"
"""

import atexit
import os
from pathlib import Path
import sys
import time

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import replay_engine  # noqa: E402 - bench/ on the path first
from xfeat_ros import node as nodemod  # noqa: E402
from xfeat_ros.core import stream as streammod  # noqa: E402

TIMES = []


def numpy_medians(self):
    """Return the stage medians as before 3ed0593 (np.median under the stream's lock)."""
    with self._lock:
        return {stage: float(np.median(values)) for stage, values in self.stage_ms.items()
                if values}


def timed(original):
    """Wrap ``_publish_diagnostics`` to record each call's wall and thread CPU ms."""
    def call(self):
        wall, cpu = time.perf_counter(), time.thread_time()
        original(self)
        TIMES.append(((time.perf_counter() - wall) * 1e3, (time.thread_time() - cpu) * 1e3))
    return call


def report():
    """Write the DIAG line (the first call left out: it runs before any frame)."""
    values = np.array(TIMES[1:]).reshape(-1, 2)
    if len(values):
        sys.stderr.write(f'DIAG {os.environ.get("DIAG_ARM", "new")} calls {len(values)} wall ms '
                         f'median {np.median(values[:, 0]):.3f} cpu median '
                         f'{np.median(values[:, 1]):.3f} max wall {values[:, 0].max():.3f}\n')


if __name__ == '__main__':
    if os.environ.get('DIAG_ARM') == 'base':
        streammod.CameraStream.stage_medians = numpy_medians
    nodemod.XFeatNode._publish_diagnostics = timed(nodemod.XFeatNode._publish_diagnostics)
    atexit.register(report)
    sys.exit(replay_engine.main())
