# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Hold a PM QoS CPU latency request while a command runs (a measurement aid, not the product).

    python bench/cpu_latency_hold.py [--us 0] -- COMMAND [ARGS...]

Writes ``--us`` (int32) to ``/dev/cpu_dma_latency`` and keeps the file open
while COMMAND runs: the kernel then keeps every CPU out of idle states whose
exit latency is longer (0: polling idle, no halt), and drops the request when
the file is closed. This is the real-time tuning many robot setups apply; here
it measures how much of the node's latency is CPUs waking from idle
(bench/NOTES.md, seventeenth session). Needs write access to the device
(root); without it COMMAND does not run and one line says why.
"""

import argparse
import os
import struct
import subprocess
import sys

DEVICE = '/dev/cpu_dma_latency'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    parser.add_argument('--us', type=int, default=0, help='latency request in microseconds')
    parser.add_argument('command', nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ['--'] else args.command
    if not command or args.us < 0:
        parser.error('give a command after --, and --us >= 0')
    try:
        fd = os.open(DEVICE, os.O_WRONLY)
        os.write(fd, struct.pack('i', args.us))
    except OSError as exc:
        print(f'cpu_latency_hold: cannot hold {DEVICE}: {exc.strerror}', file=sys.stderr)
        return 2
    try:
        return subprocess.call(command)
    finally:
        os.close(fd)


if __name__ == '__main__':
    sys.exit(main())
