// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// gate.cu: hold a stream until the host opens a gate, a word of pinned host memory
// (xfeat_ros.features.gpu.armed: a camera's next frame enqueued before its image exists).
//
// Entry point
//   gate_wait(gate, expire_ns)
//     gate       unsigned 64-bit word of pinned host memory, read through its unified
//                address with ld.cv (no cached line of system memory is trusted);
//                GATE_CLOSED while the stream must wait, any other value opens it
//     expire_ns  the kernel gives up after this many nanoseconds of %globaltimer since
//                it started (the host never opens a gate that old: the chain behind it
//                then runs on stale input into a slot nobody reads)
//   Work enqueued behind it reads the image with an ordinary copy (the copy engine
//   reads host memory when it runs); a kernel's ld.cv reads of a whole image from
//   host memory measured ~0.17 GB/s on the H200 machine (docs/design-notes.md).
//
// Thread mapping: one thread of one block polls the word, sleeping GATE_POLL_NS
//   nanoseconds between two reads.
//
// Macros injected by the loader: GATE_CLOSED, GATE_POLL_NS.

#if !defined(GATE_CLOSED) || !defined(GATE_POLL_NS)
#error "gate.cu needs the loader's GATE_CLOSED and GATE_POLL_NS"
#endif

__device__ __forceinline__ unsigned long long global_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void gate_wait(const unsigned long long* gate,
                                     unsigned long long expire_ns)
{
    const unsigned long long start = global_ns();
    while (__ldcv(gate) == (unsigned long long)GATE_CLOSED) {
        if (global_ns() - start > expire_ns) {
            return;
        }
        __nanosleep(GATE_POLL_NS);
    }
}
