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

A flush of two or more pairs on the tensor cores is matched in chunks of
:data:`BATCH_PAIRS` pairs, each chunk one launch per kernel through a pair table
(:mod:`.matching`), and the chunk's checks fork after it::

    main:      match(0..7) -> count copies -> match(8..15) -> ... -> join all
    branch i:               +-> check(i)

All checks of a chunk fork from one point, before its count copies: a fork after
each copy would start the last check of a chunk behind all of them (~6 us each,
serial on the copy engine).

The one-by-one matchers share one scratch in stream order, the chunks another. The
whole flush's pairs are one CUDA graph, keyed by every pair's buffers and the
settings, so a repeated pattern of slots replays it (:meth:`GpuEngine._launch`
captures and caches).
"""

from collections import namedtuple, OrderedDict

from xfeat_ros.features.geometry import EPIPOLAR_THRESHOLD_PX
from xfeat_ros.features.gpu import matching, ops
from xfeat_ros.features.gpu.buffers import copy_async
from xfeat_ros.features.gpu.matching import (check_pairs, match_pairs, pair_table, PairScratch,
                                             tensor_core_ready)
from xfeat_ros.features.gpu.ransac import EpipolarRansac

# The epipolar checks of a flush's matches run on this many side streams (branches of
# the match graph), each with its own scratch: a check keeps 1-16 blocks busy, so
# several run side by side while the matcher (the whole GPU) goes on with the next pair.
EPIPOLAR_BRANCHES = 8
# Plans (with their pair tables) kept, least recently used dropped first: more than the
# engine keeps graphs (MAX_GRAPHS, 64), so a cached graph's tables, read by every replay,
# are always still here.
TABLES_KEPT = 128
# Pairs matched by one launch per kernel (a flush with more goes in chunks of this many):
# bounds the pairs' scratch (~5.3 MB a 4096 x 4096 pair) and lets the first chunk's checks
# start while the next chunk is matched.
BATCH_PAIRS = 8

# What one enqueue of pairs uses of its engine: the matcher's threshold, whether every
# match is checked, the graph capture and replay (``launch(cache, key, enqueue)``), the
# capture alone (``capture(cache, key, enqueue)``) and the profiling events
# (``mark(marks, name)``).
PairSettings = namedtuple('PairSettings', 'min_cossim epipolar launch capture mark')


class PairMatcher:
    """Matching and epipolar checks of slot pairs on one engine's stream (no sync)."""

    def __init__(self, cupy, stream, desc_dim):
        """Allocate the checks' scratch and side streams now (never inside a capture)."""
        self.cupy = cupy
        self.stream = stream
        self.desc_dim = desc_dim
        self.graphs = OrderedDict()
        self.scratch = matching.MatchScratch()
        self.pair_scratch = PairScratch()
        self.plans = OrderedDict()  # _plan_key(slot tokens) -> chunks and tables
        self.batch_pairs = BATCH_PAIRS
        self.branches = [(EpipolarRansac(EPIPOLAR_THRESHOLD_PX),
                          cupy.cuda.Stream(non_blocking=True))
                         for _ in range(EPIPOLAR_BRANCHES)]

    @staticmethod
    def _sides(previous, slot):
        """Return a pair's two :class:`.matching.DescriptorSet` (device counts)."""
        return tuple(matching.DescriptorSet(s.descriptors, ops.DeviceCount(s.count, s.capacity),
                                            s.desc_dim) for s in (previous, slot))

    def _fork(self, settings):
        """Record where the next checks start on the main stream (capturable); None: no checks."""
        if not settings.epipolar:
            return None
        fork = self.cupy.cuda.Event(disable_timing=True)
        fork.record(self.stream)
        return fork

    def _check(self, previous, slot, settings, branch, fork):
        """
        Enqueue a matched pair's check on side stream ``branch`` after event ``fork``.

        The check runs only when ``settings.epipolar``. Returns the event the main
        stream must wait for before the pair's results are read (None without a
        check).
        """
        if not settings.epipolar:
            return None
        check, stream = self.branches[branch % len(self.branches)]
        stream.wait_event(fork)
        check.enqueue_matches(previous.keypoints, slot.keypoints, slot.matches,
                              slot.epipolar, stream)
        joined = self.cupy.cuda.Event(disable_timing=True)
        joined.record(stream)
        return joined

    def _copy_count(self, slot, settings):
        """Mark a slot's match done and copy its match count to the host (main stream)."""
        settings.mark(slot.marks, 'match')
        copy_async(slot.host_counts.ptr + 4, slot.matches.count.data.ptr, 4,
                   self.cupy.cuda.runtime.memcpyDeviceToHost, self.stream)

    def _match_pairs(self, pairs, settings):
        """Enqueue ``pairs`` one by one, checks on the branches in turn, then join them."""
        joins = []
        for i, (previous, slot, tensor_cores) in enumerate(pairs):
            side0, side1 = self._sides(previous, slot)
            matching.mutual_nn_match(side0, side1, slot.matches, self.scratch, settings.min_cossim,
                                     self.stream, width=self.desc_dim, tensor_cores=tensor_cores)
            joins.append(self._check(previous, slot, settings, i, self._fork(settings)))
            self._copy_count(slot, settings)
        self._join(joins)

    def _match_batches(self, batches, settings):
        """
        Enqueue each chunk of pairs as one launch per kernel, then join every check.

        A chunk's checks all fork right after its matching, before its count copies.
        """
        joins = []
        for chunk, (table, rows, cols, zeroed) in batches:
            match_pairs(table, rows, cols, zeroed, self.pair_scratch, settings.min_cossim,
                        self.stream, width=self.desc_dim)
            fork = self._fork(settings)
            joins += [self._check(previous, slot, settings, len(joins) + i, fork)
                      for i, (previous, slot, _) in enumerate(chunk)]
            for _, slot, _ in chunk:
                self._copy_count(slot, settings)
        self._join(joins)

    def _join(self, joins):
        for joined in joins:
            if joined is not None:
                self.stream.wait_event(joined)

    def _batches(self, pairs, settings):
        """
        Return how a flush's ``pairs`` are matched in chunks of :data:`BATCH_PAIRS`, or None.

        Two or more pairs, all on the tensor cores, are matched a chunk at a
        time, one launch per kernel (:mod:`.matching`); otherwise (None) one
        by one. The plan of a pattern of slots (checks, scratch, the chunks'
        tables uploaded outside any capture) is made once and kept while a graph
        may use it (:data:`TABLES_KEPT`). Returns ``(graph key, [(chunk, (table,
        rows, cols, zeroed))])``.
        """
        if len(pairs) < 2 or not all(tc for _, _, tc in pairs):
            return None
        tokens = tuple((p.token, s.token) for p, s, _ in pairs)
        plan_key = self._plan_key(tokens)
        plan = self.plans.get(plan_key)
        if plan is None:
            plan = self._plan(pairs)
            plan_key = self._plan_key(tokens)  # the plan may have grown the scratch
            self.plans[plan_key] = plan
            while len(self.plans) > TABLES_KEPT:
                self.plans.popitem(last=False)
        self.plans.move_to_end(plan_key)
        if not plan:
            return None
        return ('batches', plan_key, settings.min_cossim, settings.epipolar), plan

    def _plan_key(self, tokens):
        """Key of the plan of a pattern of slots: their tokens, the scratch, the chunk size."""
        return tokens, self.pair_scratch.generation, self.batch_pairs

    def _plan(self, pairs):
        """Check ``pairs``, size the scratch and upload each chunk's table (empty: unaligned)."""
        triples = [(*self._sides(p, s), s.matches) for p, s, _ in pairs]
        if not tensor_core_ready(triples):
            return []
        rows, cols = check_pairs(triples, self.desc_dim)
        size = self.batch_pairs
        self.pair_scratch.ensure(min(len(pairs), size), rows, cols, self.desc_dim)
        plan = []
        for at in range(0, len(pairs), size):
            table, zeroed = pair_table(triples[at:at + size], self.pair_scratch, rows, cols,
                                       self.desc_dim)
            plan.append((pairs[at:at + size], (table, rows, cols, zeroed)))
        return plan

    def _graph(self, pairs, settings):
        """Return the graph key and the capturable enqueue of ``pairs`` (scratch sized now)."""
        batched = self._batches(pairs, settings)
        if batched is not None:
            key, batches = batched
            return key, lambda: self._match_batches(batches, settings)
        rows = max(p.capacity for p, _, _ in pairs)
        cols = max(s.capacity for _, s, _ in pairs)
        if not self.scratch.fits(rows, cols, self.desc_dim):
            self.scratch.ensure(rows, cols, self.desc_dim)
        key = (tuple((p.token, s.token, tc) for p, s, tc in pairs), settings.min_cossim,
               self.scratch.generation, settings.epipolar)
        return key, lambda: self._match_pairs(pairs, settings)

    def capture(self, pairs, settings):
        """Capture (and size the scratch of) what :meth:`enqueue` replays; run nothing."""
        settings.capture(self.graphs, *self._graph(pairs, settings))

    def enqueue(self, pairs, settings):
        """
        Enqueue the matchings ``[(previous, slot, tensor_cores)]`` in order, as one graph.

        ``settings``: a :data:`PairSettings`. Records each slot's ``done``
        after the pairs (and their checks).
        """
        settings.launch(self.graphs, *self._graph(pairs, settings))
        for _, slot, _ in pairs:
            slot.checked = settings.epipolar  # read by the result copies (graph replays too)
            slot.done.record(self.stream)
