# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
How much slower one host step runs after 33 ms of idling (or of spinning) than back to back.

Three steps (a 921,600-byte NumPy copy, a 200-iteration Python loop, one
small NumPy call), each timed 80 times after nothing, ``time.sleep(0.033)``,
or 33 ms of busy spinning; prints the medians in microseconds.
"""

import statistics
import time

import numpy as np

SOURCE = np.random.default_rng(0).integers(0, 255, 921600, dtype=np.uint8)
TARGET = np.empty_like(SOURCE)
SMALL = np.zeros(4096, np.float32)


def copy_step():
    np.copyto(TARGET, SOURCE)


def python_step():
    total = 0
    for i in range(200):
        total += i * 3
    return total


def numpy_step():
    return float(SMALL.sum())


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def median_us(step, wait, n=80):
    times = []
    for _ in range(n):
        wait()
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def main():
    waits = (('hot', lambda: None), ('sleep33', lambda: time.sleep(0.033)),
             ('spin33', lambda: spin(0.033)))
    for name, step in (('copy921k', copy_step), ('py200', python_step),
                       ('np.sum4k', numpy_step)):
        print(name, 'us:', ' '.join(f'{label} {median_us(step, wait):.1f}'
                                    for label, wait in waits))


if __name__ == '__main__':
    main()
