# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Which host calls wait while a gate kernel runs (GPU machine; PYTHONPATH=$PWD).

A gate kernel (``kernels/gate.cu``) is enqueued with a 2 s expiry and left closed;
each call below is then timed. A call near 2 s waited for the kernel: behind an armed
chain's gate it would wait until the gate expired. Each call runs in a fresh gate on a
fresh size, so that no pool can serve it::

    python3 bench/results/2026-12-03-fifteenth/gate_blockers.py
"""

import time

import cupy
import numpy as np
from xfeat_ros.gpu import kernels, ops
from xfeat_ros.gpu.buffers import PinnedBuffer

EXPIRE_NS = 2_000_000_000


def timed_behind_gate(name, call):
    """Run ``call()`` behind a closed gate on a side stream; print its seconds."""
    stream = cupy.cuda.Stream(non_blocking=True)
    gate = PinnedBuffer(8, np.uint64)
    gate.array[0] = kernels.GATE_CLOSED
    ops.gate_wait(gate.ptr, EXPIRE_NS, stream)
    time.sleep(0.05)  # the kernel is running
    t0 = time.perf_counter()
    call()
    seconds = time.perf_counter() - t0
    gate.array[0] = kernels.GATE_OPEN
    stream.synchronize()
    print(f'{name:48s} {seconds * 1e3:9.2f} ms', flush=True)


def capture_new_graph():
    """Capture (and instantiate) a tiny graph on another stream."""
    stream = cupy.cuda.Stream(non_blocking=True)
    x = cupy.zeros(16, cupy.float32)
    with stream:
        stream.begin_capture()
        x += 1
        graph = stream.end_capture()
    return graph


def main():
    """Time each call behind its own gate."""
    cupy.zeros(1).sum()  # context and the pools up
    timed_behind_gate('nothing (reference)', lambda: None)
    timed_behind_gate('pinned alloc 3 MB (new size, CuPy pool)', lambda: PinnedBuffer(3 << 20))
    timed_behind_gate('pinned alloc 4 MB, no pool (cudaHostAlloc)',
                      lambda: cupy.cuda.runtime.freeHost(
                          cupy.cuda.runtime.hostAlloc(4 << 20, 0)))
    timed_behind_gate('device alloc 64 MB (new size, CuPy pool)',
                      lambda: cupy.empty(64 << 20, cupy.uint8))
    timed_behind_gate('device malloc 32 MB, no pool (cudaMalloc)',
                      lambda: cupy.cuda.runtime.malloc(32 << 20))
    ptr = cupy.cuda.runtime.malloc(8 << 20)
    timed_behind_gate('device free (cudaFree)', lambda: cupy.cuda.runtime.free(ptr))
    timed_behind_gate('event create + record', lambda: cupy.cuda.Event().record())
    timed_behind_gate('graph capture + instantiate (other stream)', capture_new_graph)
    graph = capture_new_graph()
    timed_behind_gate('graph upload (other stream)',
                      lambda: graph.upload(cupy.cuda.Stream(non_blocking=True)))


if __name__ == '__main__':
    main()
