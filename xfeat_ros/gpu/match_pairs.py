# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Mutual-NN matching of several descriptor-set pairs at once: one launch per kernel.

The tensor-core matcher (``match_tc.cu``) and its collection (``match.cu``) read
each pair's descriptor sets, counts, scratch and outputs from a *pair table*
(:data:`xfeat_ros.gpu.kernels.PAIR_TABLE`, one row of 64-bit words per pair), so
the pairs of a flush share a memset, ``mnn_approx_tc_pairs``,
``mnn_refine_tc_pairs`` and ``mnn_collect_pairs`` instead of a chain of those
per pair. The matches equal :func:`xfeat_ros.gpu.ops.mutual_nn_match`'s with
``tensor_cores=True`` bit for bit (the same device functions run).

Each pair has a scratch of its own (:class:`PairScratch`): the keys and maxima of
every pair first, zeroed by one memset, then the tile tables.
"""

import numpy as np

from xfeat_ros.gpu import kernels
from xfeat_ros.gpu.kernels import (COLLECT_THREADS, MATCH_TILE, PAIR_FIELDS, PAIR_TABLE,
                                   TC_THREADS)
from xfeat_ros.gpu.ops import (_cupy, _device_id, _ptr, blocks, check_descriptor_set,
                               check_match_capacity, DeviceCount, function, scratch_layout,
                               TC_MARGIN, tile_entries)


def pair_scratch_layout(pairs, rows, cols):
    """
    Byte offsets of :class:`PairScratch` for ``pairs`` pairs of up to ``rows`` x ``cols``.

    Returns ``(zeroed_each, tables_at, tables_each, total)``: pair p's keys and
    maxima start at ``p * zeroed_each`` (all of them ``pairs * zeroed_each``
    bytes, one memset); its tile tables at ``tables_at + p * tables_each``.
    """
    zeroed, total = scratch_layout(rows, cols)
    tables_each = total - zeroed
    return zeroed, pairs * zeroed, tables_each, pairs * total


class PairScratch:
    """The scratch of a batch of pairs in one buffer, grown on demand."""

    def __init__(self):
        """Start empty (no CuPy needed until :meth:`ensure`)."""
        self.buffer = None
        self.generation = 0  # changes whenever the buffer is replaced (graph cache keys)

    def fits(self, pairs, rows, cols):
        """Tell whether the buffer holds ``pairs`` pairs of ``rows`` x ``cols``."""
        return (self.buffer is not None
                and self.buffer.nbytes >= pair_scratch_layout(pairs, rows, cols)[3])

    def ensure(self, pairs, rows, cols):
        """Grow the buffer for ``pairs`` pairs of up to ``rows`` x ``cols`` (not in a capture)."""
        if not self.fits(pairs, rows, cols):
            total = pair_scratch_layout(pairs, rows, cols)[3]
            self.buffer = _cupy().empty(max(total, 16), dtype=np.uint8)
            self.generation += 1

    def columns(self, pairs, rows, cols):
        """
        Return the scratch columns of a pair table and the memset's size.

        Returns ``([(best_row, best_col, row_max, col_max, tile_first,
        tile_second)] * pairs`` device addresses, bytes to zero).
        """
        zeroed, tables_at, tables_each, _ = pair_scratch_layout(pairs, rows, cols)
        base = int(self.buffer.data.ptr)
        entries = tile_entries(rows, cols)
        out = []
        for p in range(pairs):
            keys = base + p * zeroed
            maxima = keys + 8 * (rows + cols)
            first = base + tables_at + p * tables_each
            out.append((keys, keys + 8 * rows, maxima, maxima + 4 * rows, first,
                        first + 4 * entries))
        return out, pairs * zeroed


def pair_table_rows(pairs, scratch_columns):
    """
    Host uint64 [len(pairs), PAIR_FIELDS] pair table.

    ``pairs``: ``[(side0, side1, out)]`` (:class:`xfeat_ros.gpu.ops.DescriptorSet`
    twice, :class:`xfeat_ros.gpu.ops.MatchOutput`); ``scratch_columns`` from
    :meth:`PairScratch.columns`.
    """
    rows = np.zeros((len(pairs), PAIR_FIELDS), dtype=np.uint64)
    col = PAIR_TABLE.index
    for p, ((side0, side1, out), scratch) in enumerate(zip(pairs, scratch_columns)):
        for side, suffix in ((side0, '0'), (side1, '1')):
            device = isinstance(side.count, DeviceCount)
            rows[p, col('d' + suffix)] = _ptr(side.buffer)
            rows[p, col('count' + suffix)] = _ptr(side.count.array) if device else 0
            rows[p, col('bound' + suffix)] = side.count.bound if device else int(side.count)
        for name, address in zip(('best_row', 'best_col', 'row_max', 'col_max', 'tile_first',
                                  'tile_second'), scratch):
            rows[p, col(name)] = address
        rows[p, col('idx0')] = _ptr(out.idx0)
        rows[p, col('idx1')] = _ptr(out.idx1)
        rows[p, col('sim')] = _ptr(out.similarity)
        rows[p, col('match_count')] = _ptr(out.count)
        rows[p, col('capacity')] = int(out.capacity)
    return rows


def check_pairs(pairs, width):
    """
    Validate every pair as :func:`xfeat_ros.gpu.ops.mutual_nn_match` does; return the bounds.

    Raises :class:`xfeat_ros.errors.DescriptorLayoutError` before anything is
    enqueued. Returns ``(rows, cols)``: the largest bound of each side.
    """
    rows = cols = 0
    for side0, side1, out in pairs:
        bound0 = check_descriptor_set(side0, width, 'side 0')
        bound1 = check_descriptor_set(side1, width, 'side 1')
        check_match_capacity(bound0, bound1, out)
        rows, cols = max(rows, bound0), max(cols, bound1)
    return rows, cols


def tensor_core_ready(pairs):
    """Tell whether every pair's descriptors suit the tensor-core kernels (16-byte aligned)."""
    return all(not (s0.buffer.data.ptr % 16 or s1.buffer.data.ptr % 16) for s0, s1, _ in pairs)


def upload_table(pairs, scratch, width):
    """
    Check ``pairs``, size ``scratch`` and upload their pair table (outside any capture).

    Returns ``(table, rows, cols, zeroed)``: the device table, the largest
    bounds and the bytes the launch's memset clears.
    """
    rows, cols = check_pairs(pairs, width)
    scratch.ensure(len(pairs), rows, cols)
    columns, zeroed = scratch.columns(len(pairs), rows, cols)
    table = _cupy().asarray(pair_table_rows(pairs, columns))
    return table, rows, cols, zeroed


def match_pairs(table, pairs, rows, cols, zeroed, scratch, min_cossim, stream, width=64):
    """
    Enqueue the matching of every pair of ``table`` on ``stream`` (capturable, no sync).

    ``table`` and the sizes from :func:`upload_table`; each pair's matches land
    in its own output (ordered by idx0), as :func:`xfeat_ros.gpu.ops.mutual_nn_match`
    writes them with ``tensor_cores=True``.
    """
    cp = _cupy()
    count = len(pairs)
    cp.cuda.runtime.memsetAsync(scratch.buffer.data.ptr, 0, zeroed, stream.ptr)
    tc_module = kernels.match_tc_module(int(width), _device_id())
    module = kernels.match_module(int(width), _device_id())
    entries = max(blocks(cols, MATCH_TILE) * rows, blocks(rows, MATCH_TILE) * cols)
    use_min = float(min_cossim) > 0
    with stream:
        function(tc_module, 'mnn_approx_tc_pairs')(
            (blocks(cols, MATCH_TILE), blocks(rows, MATCH_TILE), count), (TC_THREADS,),
            (table,))
        function(tc_module, 'mnn_refine_tc_pairs')(
            (blocks(entries, TC_THREADS), 2, count), (TC_THREADS,),
            (table, np.float32(TC_MARGIN)))
        function(module, 'mnn_collect_pairs')(
            (count,), (COLLECT_THREADS,),
            (table, np.float32(min_cossim), np.int32(use_min)))
