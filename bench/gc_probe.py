# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Run ``xfeat_node`` with every garbage collection of its interpreter timed.

Use as a node wrapper of the benchmark (any version of the package on ``sys.path``)::

    xfeat_bench node --node-wrapper "python3 bench/gc_probe.py" ...

``gc.callbacks`` time each collection (per generation); at exit one line
``gc_probe: {json}`` on stderr (the node's log) gives per generation the number
of collections, their total and largest pause in ms, and the pauses over 10 ms
with their time since start, so that latency spikes can be laid beside them.
"""

import atexit
import gc
import json
import sys
import time

SLOW_MS = 10.0


class GcTimer:
    """Time every collection through ``gc.callbacks``."""

    def __init__(self, clock=time.perf_counter):
        """Start with no collections seen."""
        self.clock = clock
        self.t0 = clock()
        self.started = {}
        self.pauses = {0: [], 1: [], 2: []}
        self.slow = []  # (seconds since start, generation, ms)

    def __call__(self, phase, info):
        """Record the start or the end of one collection (the ``gc.callbacks`` signature)."""
        generation = info.get('generation', 0)
        now = self.clock()
        if phase == 'start':
            self.started[generation] = now
            return
        began = self.started.pop(generation, None)
        if began is None:
            return
        ms = 1e3 * (now - began)
        self.pauses.setdefault(generation, []).append(ms)
        if ms >= SLOW_MS:
            self.slow.append((round(began - self.t0, 3), generation, round(ms, 2)))

    def summary(self):
        """Return the per-generation counts, total and largest pauses, and the slow ones."""
        return {'generations': {str(g): {'count': len(v), 'total_ms': round(sum(v), 2),
                                         'max_ms': round(max(v, default=0.0), 2)}
                                for g, v in self.pauses.items()},
                'slow': self.slow[:200], 'frozen': gc.get_freeze_count()}


def node_arguments(argv):
    """Return the node's own arguments in ``argv`` (after ``-m xfeat_ros.node``, if given)."""
    if 'xfeat_ros.node' in argv:
        return argv[argv.index('xfeat_ros.node') + 1:]
    return argv


def main(argv=None):
    """Run ``xfeat_ros.node.main`` under the timer; print its summary at exit."""
    timer = GcTimer()
    gc.callbacks.append(timer)
    atexit.register(lambda: sys.stderr.write(f'gc_probe: {json.dumps(timer.summary())}\n'))
    from xfeat_ros import node
    return node.main(node_arguments(sys.argv[1:] if argv is None else argv))


if __name__ == '__main__':
    sys.exit(main())
