# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The GPU engine's matching of frame pairs, queued until a flush and enqueued as one graph.

For each pair (previous slot, slot) the mutual-NN matcher (``match.cu``) runs on
the engine's stream and writes into the slot's match buffers; the pair's epipolar
check (``ransac.cu``, ``ransac_refine.cu``; the tracks' RANSAC) forks onto one of
:data:`EPIPOLAR_BRANCHES` side streams, each with its own scratch, and every
branch joins the main stream before the slots' ``done`` events::

    main:      match(0) -> count copy -> match(1) -> count copy -> ... -> join all
    branch 0:       +-> check(0)                      check(8) ...
    branch 1:                          +-> check(1) ...

The matchers share one scratch in stream order. The whole flush's pairs are one
CUDA graph, keyed by every pair's buffers and the settings, so a repeated pattern
of slots replays it (:meth:`GpuEngine._launch` captures and caches).
"""

from collections import namedtuple, OrderedDict

from xfeat_ros.geometry import EPIPOLAR_THRESHOLD_PX
from xfeat_ros.gpu import ops
from xfeat_ros.gpu.buffers import copy_async
from xfeat_ros.gpu.ransac import EpipolarRansac

# The epipolar checks of a flush's matches run on this many side streams (branches of
# the match graph), each with its own scratch: a check keeps 1-16 blocks busy, so
# several run side by side while the matcher (the whole GPU) goes on with the next pair.
EPIPOLAR_BRANCHES = 8

# What one enqueue of pairs uses of its engine: the matcher's threshold, whether every
# match is checked, the graph capture and replay (``launch(cache, key, enqueue)``) and
# the profiling events (``mark(marks, name)``).
PairSettings = namedtuple('PairSettings', 'min_cossim epipolar launch mark')


class PairMatcher:
    """Matching and epipolar checks of slot pairs on one engine's stream (no sync)."""

    def __init__(self, cupy, stream, desc_dim):
        """Allocate the checks' scratch and side streams now (never inside a capture)."""
        self.cupy = cupy
        self.stream = stream
        self.desc_dim = desc_dim
        self.graphs = OrderedDict()
        self.scratch = ops.MatchScratch()
        self.branches = [(EpipolarRansac(EPIPOLAR_THRESHOLD_PX),
                          cupy.cuda.Stream(non_blocking=True))
                         for _ in range(EPIPOLAR_BRANCHES)]

    def _match_pair(self, previous, slot, tensor_cores, settings, branch):
        """
        Enqueue one pair's mutual-NN matching and its match-count copy (capturable).

        The pair's epipolar check (when ``settings.epipolar``) forks onto side
        stream ``branch`` right after the matcher; returns the event the main
        stream must wait for before the pair's results are read (None without a
        check).
        """
        cupy = self.cupy
        side0 = ops.DescriptorSet(previous.descriptors,
                                  ops.DeviceCount(previous.count, previous.capacity),
                                  previous.desc_dim)
        side1 = ops.DescriptorSet(slot.descriptors, ops.DeviceCount(slot.count, slot.capacity),
                                  slot.desc_dim)
        ops.mutual_nn_match(side0, side1, slot.matches, self.scratch, settings.min_cossim,
                            self.stream, width=self.desc_dim, tensor_cores=tensor_cores)
        joined = None
        if settings.epipolar:
            check, stream = self.branches[branch % len(self.branches)]
            fork = cupy.cuda.Event(disable_timing=True)
            fork.record(self.stream)
            stream.wait_event(fork)
            check.enqueue_matches(previous.keypoints, slot.keypoints, slot.matches,
                                  slot.epipolar, stream)
            joined = cupy.cuda.Event(disable_timing=True)
            joined.record(stream)
        settings.mark(slot.marks, 'match')
        copy_async(slot.host_counts.ptr + 4, slot.matches.count.data.ptr, 4,
                   cupy.cuda.runtime.memcpyDeviceToHost, self.stream)
        return joined

    def _match_pairs(self, pairs, settings):
        """Enqueue ``pairs`` in order, checks on the branches in turn, then join them."""
        joins = [self._match_pair(*pair, settings, branch=i) for i, pair in enumerate(pairs)]
        for joined in joins:
            if joined is not None:
                self.stream.wait_event(joined)

    def enqueue(self, pairs, settings):
        """
        Enqueue the matchings ``[(previous, slot, tensor_cores)]`` in order, as one graph.

        ``settings``: a :data:`PairSettings`. Records each slot's ``done``
        after the pairs (and their checks).
        """
        rows = max(p.capacity for p, _, _ in pairs)
        cols = max(s.capacity for _, s, _ in pairs)
        if not self.scratch.fits(rows, cols):
            self.scratch.ensure(rows, cols)
        key = (tuple((p.token, s.token, tc) for p, s, tc in pairs), settings.min_cossim,
               self.scratch.generation, settings.epipolar)
        settings.launch(self.graphs, key, lambda: self._match_pairs(pairs, settings))
        for _, slot, _ in pairs:
            slot.checked = settings.epipolar  # read by the result copies (graph replays too)
            slot.done.record(self.stream)
