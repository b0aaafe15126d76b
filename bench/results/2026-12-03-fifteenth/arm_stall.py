# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Where an arm() blocks behind its own gate in a fresh process: the Python stack at the stall.

The fifteenth session's armed_check.sh showed the second arm() of a fresh process taking
5.0 s, all of it in its final ``engine.flush()`` (the gate's device lifetime). This runs the
thirteenth session's probe with ``faulthandler.dump_traceback_later`` armed around every
arm(): a call still running after 1 s writes every thread's stack to stderr, naming the
call that waits. Run on the GPU machine (PYTHONPATH=$PWD)::

    python3 bench/results/2026-12-03-fifteenth/arm_stall.py --shared .devlite
"""

import faulthandler
import importlib.util
from pathlib import Path
import sys

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location(
    'armed_probe', HERE.parent / '2026-12-03-thirteenth' / 'armed_probe.py')
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)

from xfeat_ros.gpu.engine import GpuEngine  # noqa: E402

_arm = GpuEngine.arm


def arm_watched(self, *args, **kwargs):
    """GpuEngine.arm with every thread's stack written if it runs past one second."""
    faulthandler.dump_traceback_later(1.0, repeat=False, file=sys.stderr)
    try:
        return _arm(self, *args, **kwargs)
    finally:
        faulthandler.cancel_dump_traceback_later()


GpuEngine.arm = arm_watched

if __name__ == '__main__':
    probe.main()
