# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Mutual-NN matching launches (CuPy arrays, one stream, no sync): one pair, or many at once.

:func:`mutual_nn_match` matches two :class:`DescriptorSet` (``match.cu``'s FP32
kernel, or ``match_tc.cu``'s tensor-core similarities with ``match_refine.cu``'s
exact FP32 re-check, the default) into a :class:`MatchOutput`, ordered by ``idx0``.

:func:`match_pairs` matches several pairs with one launch per kernel: the
kernels' ``*_pairs`` entry points read each pair's descriptor sets, counts,
scratch and outputs from a *pair table* (:data:`xfeat_ros.features.gpu.kernels.PAIR_TABLE`,
one row of 64-bit words per pair; :func:`pair_table_rows`). The matches equal
:func:`mutual_nn_match`'s with ``tensor_cores=True`` bit for bit (the same device
functions run). Each pair has a scratch of its own (:class:`PairScratch`): the
keys and maxima of every pair first, zeroed by one memset, then the tile tables
and the FP16 copies of the pair's descriptors that the tensor-core tiles read.

Validation happens before anything is enqueued, with typed errors
(:class:`xfeat_ros.errors.DescriptorLayoutError`).
"""

from dataclasses import dataclass

import numpy as np

from xfeat_ros.errors import DescriptorLayoutError
from xfeat_ros.features.gpu import kernels
# launch shapes the kernels are compiled with (injected into their preamble)
from xfeat_ros.features.gpu.kernels import (COLLECT_THREADS, MATCH_THREADS, MATCH_TILE,
                                            PAIR_FIELDS, PAIR_TABLE, TC_THREADS)
from xfeat_ros.features.gpu.ops import (_cupy, _device_id, _ptr, blocks, count_args, count_bound,
                                        DeviceCount, function, memset_async)

# Candidates within this much of a row's / column's tensor-core maximum are
# re-checked in FP32 (match_refine.cu derives the bound: 2^-10 for unit vectors).
TC_MARGIN = 2.0 ** -8


# -- one pair -------------------------------------------------------------------------------

def tensor_core_ready(pairs):
    """Tell whether every pair's descriptors suit the tensor-core kernels (16-byte aligned)."""
    return all(not (s0.buffer.data.ptr % 16 or s1.buffer.data.ptr % 16) for s0, s1, _ in pairs)


def refine_grid(rows, cols, pairs=None):
    """
    Grid of ``mnn_refine_tc`` (``pairs`` None) or ``mnn_refine_tc_pairs``.

    One thread per entry of the larger tile table (rows' or columns'), both
    tables (grid y), and one layer per pair (grid z).
    """
    entries = max(blocks(cols, MATCH_TILE) * rows, blocks(rows, MATCH_TILE) * cols)
    grid = (blocks(entries, TC_THREADS), 2)
    return grid if pairs is None else grid + (pairs,)


def halve_grid(bound, width):
    """Grid of ``halve_sides`` for up to ``bound`` rows: a thread per 8 values, 2 sides."""
    return (max(blocks(int(bound) * int(width) // 8, TC_THREADS), 1), 2)


@dataclass(frozen=True)
class DescriptorSet:
    """
    Descriptors as ``(buffer, count, width)``: ``buffer`` float32 device, row-major.

    ``count`` is an int (host) or a :class:`DeviceCount`. The width cannot be
    recovered from a buffer whose capacity exceeds ``count * width``, so it is
    always stated.
    """

    buffer: object
    count: object
    width: int


@dataclass
class MatchOutput:
    """Match results: ``idx0``/``idx1`` int32 [capacity], ``similarity`` float32, ``count``."""

    idx0: object
    idx1: object
    similarity: object
    count: object

    @property
    def capacity(self):
        """Most matches the output holds."""
        return int(self.idx0.shape[0])


def alloc_match_output(capacity):
    """Device :class:`MatchOutput` for up to ``capacity`` matches."""
    cp = _cupy()
    capacity = max(int(capacity), 0)
    return MatchOutput(cp.empty(capacity, dtype=cp.int32), cp.empty(capacity, dtype=cp.int32),
                       cp.empty(capacity, dtype=cp.float32), cp.zeros(1, dtype=cp.int32))


@dataclass(frozen=True)
class ScratchViews:
    """
    One matching's scratch, zeroed by one memset of ``nbytes`` from ``best_row``.

    ``best_row`` / ``best_col`` uint64 packed best keys; ``row_max`` /
    ``col_max`` uint32 orderable tensor-core maxima; ``tile_first`` /
    ``tile_second`` (uint32) the two largest tensor-core values of each tile's
    rows, then columns, tagged with their place in the tile; ``half0`` /
    ``half1`` (uint16) the two sides' descriptors as FP16 (the tables and
    halves are written before they are read, so outside the memset). All but
    the keys are used by the tensor-core path only.
    """

    best_row: object
    best_col: object
    row_max: object
    col_max: object
    tile_first: object
    tile_second: object
    half0: object
    half1: object
    nbytes: int


def tile_entries(rows, cols):
    """Entries of the tile tables: each row in every tile of columns, then each column."""
    rows, cols = int(rows), int(cols)
    return blocks(cols, MATCH_TILE) * rows + blocks(rows, MATCH_TILE) * cols


def align16(nbytes):
    """Round a byte count up to a multiple of 16 (the FP16 rows are read 16 bytes at a time)."""
    return -(-int(nbytes) // 16) * 16


def scratch_layout(rows, cols, width):
    """
    Byte sizes ``(zeroed, total)`` of the matcher's scratch for ``rows`` x ``cols``.

    ``zeroed``: the keys (8 bytes) and maxima (4 bytes) of every row and
    column, rounded up to 16 bytes; then the two tile tables, 8 bytes an entry
    (:func:`tile_entries`), rounded up likewise; then both sides' descriptors
    as FP16 (``2 * width`` bytes a row). Both sizes are multiples of 16.
    """
    zeroed = align16(12 * (int(rows) + int(cols)))
    half1_at = scratch_parts(0, zeroed, rows, cols, width)[-1]
    return zeroed, half1_at + 2 * int(width) * int(cols)


def scratch_parts(keys_at, tables_at, rows, cols, width):
    """
    Where one matching's scratch parts lie, given where its keys and its tables start.

    Returns ``(best_row, best_col, row_max, col_max, tile_first, tile_second,
    half0, half1)`` (the fields of :class:`ScratchViews`; pair-table columns),
    as offsets or addresses like the two given.
    """
    maxima_at = keys_at + 8 * (rows + cols)
    entries = tile_entries(rows, cols)
    half0_at = tables_at + align16(8 * entries)
    return (keys_at, keys_at + 8 * rows, maxima_at, maxima_at + 4 * rows, tables_at,
            tables_at + 4 * entries, half0_at, half0_at + 2 * int(width) * rows)


class GrowingBuffer:
    """One device byte buffer, replaced by a larger one when asked for more (never shrinks)."""

    def __init__(self):
        """Start empty (no CuPy needed until :meth:`grow_to`)."""
        self.buffer = None
        self.generation = 0  # changes whenever the buffer is replaced (graph cache keys)

    def holds(self, nbytes):
        """Tell whether the buffer holds ``nbytes`` without growing."""
        return self.buffer is not None and self.buffer.nbytes >= nbytes

    def grow_to(self, nbytes):
        """Replace the buffer by one of ``nbytes`` unless it holds them (not in a capture)."""
        if not self.holds(nbytes):
            self.buffer = _cupy().empty(max(nbytes, 16), dtype=np.uint8)
            self.generation += 1


class MatchScratch(GrowingBuffer):
    """Per-row / per-column scratch of the matcher in one buffer, grown on demand."""

    def fits(self, rows, cols, width):
        """Tell whether the buffer holds ``rows`` x ``cols`` without growing."""
        return self.holds(scratch_layout(rows, cols, width)[1])

    def ensure(self, rows, cols, width):
        """Return :class:`ScratchViews` for ``rows`` x ``cols`` (one contiguous block)."""
        cp = _cupy()
        zeroed, total = scratch_layout(rows, cols, width)
        self.grow_to(total)
        entries = tile_entries(rows, cols)
        shapes = ((rows, cp.uint64), (cols, cp.uint64), (rows, cp.uint32), (cols, cp.uint32),
                  (entries, cp.uint32), (entries, cp.uint32), (rows * width, cp.uint16),
                  (cols * width, cp.uint16))
        offsets = scratch_parts(0, zeroed, rows, cols, width)
        views = [cp.ndarray((size,), dtype=dtype, memptr=self.buffer.data + offset)
                 for (size, dtype), offset in zip(shapes, offsets)]
        return ScratchViews(*views, zeroed)


def check_descriptor_set(side, width, label):
    """
    Validate a :class:`DescriptorSet` for a ``width``-wide matcher; return its bound.

    Raises :class:`DescriptorLayoutError` for a wrong width, a non-float32 or
    non-contiguous buffer, a negative count, or a buffer shorter than
    ``count * width``.
    """
    if int(side.width) != int(width):
        raise DescriptorLayoutError(
            f'{label}: descriptor width {side.width} does not match the {width}-wide matcher')
    buffer = side.buffer
    if getattr(buffer, 'dtype', None) != np.float32 or not buffer.flags.c_contiguous:
        raise DescriptorLayoutError(f'{label}: descriptors must be a C-contiguous float32 buffer')
    bound = count_bound(side.count)
    if bound < 0:
        raise DescriptorLayoutError(f'{label}: negative descriptor count {bound}')
    if buffer.size < bound * width:
        raise DescriptorLayoutError(
            f'{label}: descriptor buffer holds {buffer.size} values, needs {bound} x {width}')
    return bound


def check_match_capacity(bound0, bound1, out):
    """Check that a match output holds ``min(count0, count1)`` matches (typed error if not)."""
    needed = min(bound0, bound1)
    if needed > out.capacity:
        raise DescriptorLayoutError(
            f'up to {needed} matches possible, output holds {out.capacity}')


def mutual_nn_match(side0, side1, out, scratch, min_cossim, stream, width=64,
                    tensor_cores=True):
    """
    Mutual-NN matches of two :class:`DescriptorSet` into ``out`` (ordered by idx0).

    ``min_cossim > 0`` also requires similarity strictly above it. A side with
    a host count of zero gives zero matches and launches no kernel. Raises
    :class:`DescriptorLayoutError` (see :func:`check_descriptor_set`,
    :func:`check_match_capacity`) before anything is enqueued.

    ``tensor_cores=True`` finds the candidates on the tensor cores and
    re-checks them in FP32 (``mnn_approx_tc`` + ``mnn_refine_tc``): the
    matches and similarities equal the FP32 kernel's (``mnn_best``, used with
    ``tensor_cores=False``) for descriptors of length <= ~1.001.
    """
    bound0 = check_descriptor_set(side0, width, 'side 0')
    bound1 = check_descriptor_set(side1, width, 'side 1')
    check_match_capacity(bound0, bound1, out)
    if bound0 == 0 or bound1 == 0:
        memset_async(out.count, 0, stream)
        return
    # the tensor-core kernels read rows as float4: 16-byte aligned buffers only
    tensor_cores = bool(tensor_cores) and tensor_core_ready([(side0, side1, out)])
    views = scratch.ensure(bound0, bound1, int(width))
    _cupy().cuda.runtime.memsetAsync(views.best_row.data.ptr, 0, views.nbytes, stream.ptr)
    module = kernels.match_module(int(width), _device_id())
    c0, b0 = count_args(side0.count)
    c1, b1 = count_args(side1.count)
    use_min = float(min_cossim) > 0
    grid = (blocks(bound1, MATCH_TILE), blocks(bound0, MATCH_TILE))
    with stream:
        if tensor_cores:
            tc_module = kernels.match_tc_module(int(width), _device_id())
            tables = (views.tile_first, views.tile_second)
            function(tc_module, 'halve_sides')(
                halve_grid(max(bound0, bound1), width), (TC_THREADS,),
                (side0.buffer, c0, b0, views.half0, side1.buffer, c1, b1, views.half1))
            function(tc_module, 'mnn_approx_tc')(
                grid, (TC_THREADS,),
                (views.half0, c0, b0, views.half1, c1, b1, views.row_max, views.col_max)
                + tables)
            refine_module = kernels.match_refine_module(int(width), _device_id())
            function(refine_module, 'mnn_refine_tc')(
                refine_grid(bound0, bound1), (TC_THREADS,),
                (side0.buffer, c0, b0, side1.buffer, c1, b1, views.row_max, views.col_max)
                + tables + (np.float32(TC_MARGIN), views.best_row, views.best_col))
        else:
            function(module, 'mnn_best')(
                grid, (MATCH_THREADS,),
                (side0.buffer, c0, b0, side1.buffer, c1, b1, views.best_row, views.best_col))
        function(module, 'mnn_collect')(
            (1,), (COLLECT_THREADS,),
            (views.best_row, views.best_col, c0, b0, c1, b1, np.float32(min_cossim),
             np.int32(use_min), out.idx0, out.idx1, out.similarity, out.count,
             np.int32(out.capacity)))


# -- many pairs -----------------------------------------------------------------------------

def pair_scratch_layout(pairs, rows, cols, width):
    """
    Byte offsets of :class:`PairScratch` for ``pairs`` pairs of up to ``rows`` x ``cols``.

    Returns ``(zeroed_each, tables_at, tables_each, total)``: pair p's keys and
    maxima start at ``p * zeroed_each`` (all of them ``pairs * zeroed_each``
    bytes, one memset); its tile tables and FP16 descriptors at ``tables_at +
    p * tables_each``. Every part starts 16-byte aligned.
    """
    zeroed, total = scratch_layout(rows, cols, width)
    tables_each = total - zeroed
    return zeroed, pairs * zeroed, tables_each, pairs * total


class PairScratch(GrowingBuffer):
    """The scratch of a batch of pairs in one buffer, grown on demand."""

    def ensure(self, pairs, rows, cols, width):
        """Grow the buffer for ``pairs`` pairs of up to ``rows`` x ``cols`` (not in a capture)."""
        self.grow_to(pair_scratch_layout(pairs, rows, cols, width)[3])

    def columns(self, pairs, rows, cols, width):
        """
        Return the scratch columns of a pair table and the memset's size.

        Returns ``([(best_row, best_col, row_max, col_max, tile_first,
        tile_second, half0, half1)] * pairs`` device addresses, bytes to zero).
        """
        zeroed, tables_at, tables_each, _ = pair_scratch_layout(pairs, rows, cols, width)
        base = int(self.buffer.data.ptr)
        return [scratch_parts(base + p * zeroed, base + tables_at + p * tables_each, rows, cols,
                              width)
                for p in range(pairs)], pairs * zeroed


def pair_table_rows(pairs, scratch_columns):
    """
    Host uint64 [len(pairs), PAIR_FIELDS] pair table.

    ``pairs``: ``[(side0, side1, out)]`` (:class:`DescriptorSet`
    twice, :class:`MatchOutput`); ``scratch_columns`` from
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
                                  'tile_second', 'h0', 'h1'), scratch):
            rows[p, col(name)] = address
        rows[p, col('idx0')] = _ptr(out.idx0)
        rows[p, col('idx1')] = _ptr(out.idx1)
        rows[p, col('sim')] = _ptr(out.similarity)
        rows[p, col('match_count')] = _ptr(out.count)
        rows[p, col('capacity')] = int(out.capacity)
    return rows


def check_pairs(pairs, width):
    """
    Validate every pair as :func:`mutual_nn_match` does; return the bounds.

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


def pair_table(pairs, scratch, rows, cols, width):
    """
    Upload the pair table of ``pairs`` (checked; ``scratch`` sized for ``rows`` x ``cols``).

    Outside any capture. Returns ``(table, zeroed)``: the device table and the
    bytes the launch's memset clears.
    """
    columns, zeroed = scratch.columns(len(pairs), rows, cols, width)
    return _cupy().asarray(pair_table_rows(pairs, columns)), zeroed


def upload_table(pairs, scratch, width):
    """
    Check ``pairs``, size ``scratch`` and upload their pair table (outside any capture).

    Returns ``(table, rows, cols, zeroed)``: the device table, the largest
    bounds and the bytes the launch's memset clears.
    """
    rows, cols = check_pairs(pairs, width)
    scratch.ensure(len(pairs), rows, cols, width)
    table, zeroed = pair_table(pairs, scratch, rows, cols, width)
    return table, rows, cols, zeroed


def match_pairs(table, rows, cols, zeroed, scratch, min_cossim, stream, width=64):
    """
    Enqueue the matching of every pair of ``table`` on ``stream`` (capturable, no sync).

    ``table`` and the sizes from :func:`upload_table`; each pair's matches land
    in its own output (ordered by idx0), as :func:`mutual_nn_match`
    writes them with ``tensor_cores=True``.
    """
    cp = _cupy()
    count = int(table.shape[0])
    cp.cuda.runtime.memsetAsync(scratch.buffer.data.ptr, 0, zeroed, stream.ptr)
    tc_module = kernels.match_tc_module(int(width), _device_id())
    refine_module = kernels.match_refine_module(int(width), _device_id())
    module = kernels.match_module(int(width), _device_id())
    use_min = float(min_cossim) > 0
    with stream:
        function(tc_module, 'halve_sides_pairs')(
            halve_grid(max(rows, cols), width) + (count,), (TC_THREADS,), (table,))
        function(tc_module, 'mnn_approx_tc_pairs')(
            (blocks(cols, MATCH_TILE), blocks(rows, MATCH_TILE), count), (TC_THREADS,),
            (table,))
        function(refine_module, 'mnn_refine_tc_pairs')(
            refine_grid(rows, cols, count), (TC_THREADS,), (table, np.float32(TC_MARGIN)))
        function(module, 'mnn_collect_pairs')(
            (count,), (COLLECT_THREADS,),
            (table, np.float32(min_cossim), np.int32(use_min)))
