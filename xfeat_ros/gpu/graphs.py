# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Captured CUDA graphs of the GPU engine, and graphs inside graphs.

* :class:`GraphCache` - graphs by key, captured on first use from the
  launches a function enqueues, replayed after; the least recently used are
  dropped past a limit. A key names every buffer and argument the launches
  bake in; a cached graph may keep buffers of its own alive (``keep``).
  :meth:`GraphCache.repeated` tells whether a key was asked for before, so
  that keys that never come back (many cameras in changing groups) cost no
  capture.
* :func:`add_child_graph` - put an already captured graph (a PyTorch
  backbone's) into the capture under way on a stream, as one child node, so
  that one launch runs both. Needs NVIDIA's ``cuda.bindings`` (the CUDA
  runtime API for Python); :func:`child_graphs_supported` says whether it is
  there.

Nothing here synchronizes; every function takes the CuPy stream the engine
enqueues on.
"""

from collections import OrderedDict

MAX_GRAPHS = 64      # per cache
SEEN_PER_GRAPH = 4   # keys remembered (not captured) per cached graph


class GraphCache:
    """Captured CUDA graphs by key, least recently used dropped past ``limit``."""

    def __init__(self, limit=MAX_GRAPHS):
        """Start empty; keep at most ``limit`` graphs."""
        self.limit = int(limit)
        self._graphs = OrderedDict()  # key -> (graph, kept objects)
        self._seen = OrderedDict()    # keys asked for once, not captured

    def __len__(self):
        """Graphs held."""
        return len(self._graphs)

    def __contains__(self, key):
        """Tell whether ``key`` has a captured graph."""
        return key in self._graphs

    def repeated(self, key):
        """
        Tell whether ``key`` has a graph or was asked for before; remember it if not.

        The first call for a key returns False (and remembers it, among the
        last ``SEEN_PER_GRAPH * limit`` keys); the next returns True.
        """
        if key in self._graphs:
            return True
        if key in self._seen:
            self._seen.move_to_end(key)
            return True
        self._seen[key] = None
        while len(self._seen) > SEEN_PER_GRAPH * self.limit:
            self._seen.popitem(last=False)
        return False

    def launch(self, key, stream, enqueue, keep=None):
        """
        Launch the graph of ``key`` on ``stream``, capturing ``enqueue()`` first if new.

        Nothing runs during a capture. ``keep`` (any object) stays referenced
        as long as the graph: buffers the captured launches read or write.
        An exception of ``enqueue`` or of the capture propagates and caches
        nothing (the stream's capture is ended either way).
        """
        entry = self._graphs.get(key)
        if entry is None:
            stream.begin_capture()
            try:
                enqueue()
            finally:
                graph = stream.end_capture()
            entry = self._graphs[key] = (graph, keep)
            self._seen.pop(key, None)
            while len(self._graphs) > self.limit:
                self._graphs.popitem(last=False)
        else:
            self._graphs.move_to_end(key)
        entry[0].launch(stream)

    def clear(self):
        """Drop every graph and remembered key."""
        self._graphs.clear()
        self._seen.clear()


def _runtime():
    from cuda.bindings import runtime
    return runtime


def child_graphs_supported():
    """Tell whether :func:`add_child_graph` can run (``cuda.bindings`` importable)."""
    try:
        _runtime()
    except ImportError:
        return False
    return True


def _check(result, what):
    error = result[0] if isinstance(result, tuple) else result
    if int(error) != 0:
        raise RuntimeError(f'{what} failed: {error!r}')
    return result


def add_child_graph(stream, graph):
    """
    Add ``graph`` (a ``cudaGraph_t`` handle) to ``stream``'s capture as one child node.

    The node depends on everything captured on ``stream`` so far and the
    stream's next captured work depends on it, as if the graph's launches
    had been enqueued there. The child is a copy: ``graph`` stays its
    owner's. Raises ``RuntimeError`` when a runtime call fails (the capture
    is then invalid and ends with an error).
    """
    runtime = _runtime()
    info = _check(runtime.cudaStreamGetCaptureInfo(stream.ptr), 'cudaStreamGetCaptureInfo')
    captured, dependencies = info[3], info[4]  # (error, status, id, graph, nodes, ...)
    _, node = _check(runtime.cudaGraphAddChildGraphNode(captured, dependencies,
                                                        len(dependencies), graph),
                     'cudaGraphAddChildGraphNode')
    flags = runtime.cudaStreamUpdateCaptureDependenciesFlags.cudaStreamSetCaptureDependencies
    try:  # CUDA 13: (stream, nodes, edge data, count, flags)
        result = runtime.cudaStreamUpdateCaptureDependencies(stream.ptr, [node], None, 1, flags)
    except TypeError:  # CUDA 12: (stream, nodes, count, flags)
        result = runtime.cudaStreamUpdateCaptureDependencies(stream.ptr, [node], 1, flags)
    _check(result, 'cudaStreamUpdateCaptureDependencies')
