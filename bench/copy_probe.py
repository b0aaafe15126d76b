# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Host copies of one image into pinned memory: how fast each way is (GPU machine).

The engine's host stage at one frame in flight is one ``np.copyto`` of the
image into pinned staging on the calling thread (the 1 MiB pieces of
:class:`xfeat_ros.gpu.buffers.HostCopier` leave a VGA image in one piece;
splitting it over the Python thread pool measured slower, bench/NOTES.md
round 2). This times, per image size: that copy, the HostCopier as shipped,
and PyTorch's ``Tensor.copy_`` (its C++ thread pool, no Python hand-off) at
several thread counts. Prints one JSON object (medians in microseconds)::

    python3 bench/copy_probe.py [--repeats 200]
"""

import argparse
import json
import statistics
import time

import numpy as np

SIZES = {'640x480 rgb8': 640 * 480 * 3, '1280x720 rgb8': 1280 * 720 * 3,
         '1920x1080 rgb8': 1920 * 1080 * 3, '640x480 mono8': 640 * 480}


def median_us(copy, repeats):
    """Median microseconds of ``copy()`` over ``repeats`` calls (after 20 warm-up calls)."""
    for _ in range(20):
        copy()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        copy()
        times.append(time.perf_counter() - t0)
    return round(1e6 * statistics.median(times), 1)


def main():
    """Time every way at every size; print the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--repeats', type=int, default=200)
    args = parser.parse_args()
    import torch
    from xfeat_ros.gpu.buffers import HostCopier, PinnedBuffer
    out = {'torch': torch.__version__, 'torch_threads': torch.get_num_threads()}
    copier = HostCopier()
    for name, nbytes in SIZES.items():
        src = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
        dst = PinnedBuffer(nbytes).array
        row = {'numpy one thread': median_us(lambda: np.copyto(dst, src), args.repeats),
               'HostCopier': median_us(lambda: copier.copy([(dst, src)]), args.repeats)}
        tdst, tsrc = torch.from_numpy(dst), torch.from_numpy(src)
        for threads in (1, 2, 4, 8, 16):
            torch.set_num_threads(threads)
            row[f'torch copy_ {threads} threads'] = median_us(lambda: tdst.copy_(tsrc),
                                                              args.repeats)
            assert np.array_equal(dst, src)
        out[name] = row
    print(json.dumps(out, indent=1))


if __name__ == '__main__':
    main()
