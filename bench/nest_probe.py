# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Probe on the GPU machine: can a captured PyTorch CUDA graph run inside a CuPy capture.

Test 1 launches the PyTorch graph's executable on a capturing CuPy stream
(``cudaGraphLaunch``); test 2 adds the kept ``cudaGraph_t`` as a child node
of the capture (``cuda.bindings``: capture info, child node, capture
dependencies). Each prints OK with the value the outer graph computed, or
the error. 2026-12-02: test 1 fails (capture invalidated), test 2 works.
"""

import traceback

import cupy
import torch


def report_versions():
    runtime = cupy.cuda.runtime
    print('torch', torch.__version__, 'cupy', cupy.__version__, 'runtime',
          runtime.runtimeGetVersion(), 'driver', runtime.driverGetVersion())
    try:
        from cuda.bindings import runtime as bindings
        print('cuda.bindings: yes', hasattr(bindings, 'cudaGraphAddChildGraphNode'))
    except ImportError as exc:
        print('cuda.bindings: no', exc)


def torch_graph(x, y):
    """Capture y = 2 x + 1 as a PyTorch graph that keeps its cudaGraph_t."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        for _ in range(2):
            y.copy_(x * 2 + 1)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph, stream=side):
        y.copy_(x * 2 + 1)
    graph.instantiate()
    return graph


def run_captured(body, y, label, want):
    """Capture ``body(stream)`` on a new CuPy stream, launch the graph, print y[0]."""
    stream = cupy.cuda.Stream(non_blocking=True)
    try:
        stream.begin_capture()
        try:
            body(stream)
        finally:
            outer = stream.end_capture()
        y.fill_(0)
        torch.cuda.synchronize()
        outer.launch(stream)
        stream.synchronize()
        print(f'{label}: OK, y = {float(y[0])} (want {want})')
    except (RuntimeError, ImportError):  # CuPy's CUDA errors are RuntimeErrors
        print(f'{label}: failed')
        traceback.print_exc()


def add_child_graph(stream, graph):
    """Add ``graph`` (a cudaGraph_t) to ``stream``'s capture as a child node (CUDA 13 API)."""
    from cuda.bindings import runtime
    info = runtime.cudaStreamGetCaptureInfo(stream.ptr)  # (error, status, id, graph, nodes, ..)
    error, node = runtime.cudaGraphAddChildGraphNode(info[3], info[4], len(info[4]), graph)
    flags = runtime.cudaStreamUpdateCaptureDependenciesFlags.cudaStreamSetCaptureDependencies
    update = runtime.cudaStreamUpdateCaptureDependencies(stream.ptr, [node], None, 1, flags)
    if int(info[0]) or int(error) or int(update[0]):
        raise RuntimeError(f'child graph node: {info[0]!r} {error!r} {update[0]!r}')


def launch_inside(graph, xs, y):
    """Test 1: launch PyTorch's executable graph on the capturing stream."""
    def body(stream):
        xs[:] = 3.0
        cupy.cuda.runtime.graphLaunch(int(graph.raw_cuda_graph_exec()), stream.ptr)
    run_captured(body, y, 'test 1 (graph launch inside a capture)', 7)


def child_node(graph, xs, y):
    """Test 2: add PyTorch's kept cudaGraph_t to the capture as a child node."""
    def body(stream):
        xs[:] = 5.0
        add_child_graph(stream, int(graph.raw_cuda_graph()))
    run_captured(body, y, 'test 2 (child graph node)', 11)


def main():
    report_versions()
    x = torch.zeros(1000, device='cuda')
    y = torch.zeros(1000, device='cuda')
    graph = torch_graph(x, y)
    xs = cupy.from_dlpack(x)
    launch_inside(graph, xs, y)
    child_node(graph, xs, y)


if __name__ == '__main__':
    main()
