# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Side by side of ``xfeat_bench pipeline`` JSON files (bench/gpu_kernel_ab.sh's pipeline section).

    python3 bench/pipeline_ab_table.py pipeline_base_1.json pipeline_new_1.json ...

One line per file and contender row: frames in flight, wall, device and device-work
medians in ms a frame.
"""

import json
import sys


def rows(path):
    """Yield ``(contender, in_flight, wall, device, device_work)`` medians of one file."""
    for row in json.load(open(path))['results']:
        def median(key):
            return (row.get(key) or {}).get('median_ms')
        yield (row.get('contender'), row.get('resolution', ''), row.get('in_flight'),
               median('wall'), median('device'), median('device_work'))


def main(paths):
    """Print the table."""
    print(f'{"file":<28} {"contender":<22} {"size":<10} {"n":>3} {"wall":>7} {"device":>7} '
          f'{"work":>7}')
    for path in paths:
        for name, size, n, wall, device, work in rows(path):
            cells = ['-' if v is None else f'{v:.3f}' for v in (wall, device, work)]
            print(f'{path.rsplit("/", 1)[-1]:<28} {name:<22} {size:<10} {n:>3} '
                  f'{cells[0]:>7} {cells[1]:>7} {cells[2]:>7}')


if __name__ == '__main__':
    main(sys.argv[1:])
