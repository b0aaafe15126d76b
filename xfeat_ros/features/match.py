# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Mutual-nearest-neighbour matching on cosine similarity (NumPy, CPU)."""

import numpy as np

from xfeat_ros.defaults import MIN_COSSIM
from xfeat_ros.errors import DescriptorLayoutError


def check_descriptors(buffer, count, width):
    """
    View a flat descriptor ``buffer`` as [count, width], with typed checks.

    The width cannot be recovered from a buffer whose capacity exceeds
    ``count * width``, so it is always passed explicitly; a short buffer or a
    non-positive width is a :class:`DescriptorLayoutError`, never a silent stride.
    """
    flat = np.asarray(buffer, dtype=np.float32).reshape(-1)
    if width <= 0:
        raise DescriptorLayoutError(f'descriptor width must be positive, got {width}')
    if count < 0 or flat.size < count * width:
        raise DescriptorLayoutError(
            f'descriptor buffer holds {flat.size} values, needs {count} x {width}')
    return flat[:count * width].reshape(count, width)


def column_maximisers(sim, col_max):
    """
    How many rows of ``sim`` [N0, N1] reach each column's maximum ``col_max`` [N1].

    Counted in 16 bits where the rows fit (half the time of NumPy's
    ``count_nonzero`` over an axis, which sums in 64 bits).
    """
    equal = sim == col_max
    if sim.shape[0] < np.iinfo(np.uint16).max:
        return np.add.reduce(equal.view(np.uint8), axis=0, dtype=np.uint16)
    return np.count_nonzero(equal, axis=0)


def mutual_nn_match(desc0, desc1, min_cossim=MIN_COSSIM):
    """
    Match two unit-length descriptor sets [N0, D] and [N1, D].

    ``i`` and ``j`` match when each is the other's best cosine neighbour and,
    if ``min_cossim > 0``, their similarity is strictly above it. Returns
    ``(idx0 int64 [M], idx1 int64 [M], similarity float32 [M])``, ordered by idx0.
    Either side empty gives no matches.
    """
    if desc0.shape[1] != desc1.shape[1]:
        raise DescriptorLayoutError(
            f'descriptor widths differ: {desc0.shape[1]} vs {desc1.shape[1]}')
    if desc0.shape[0] == 0 or desc1.shape[0] == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), np.zeros(0, dtype=np.float32)
    sim = desc0 @ desc1.T
    best1 = np.argmax(sim, axis=1)
    idx0 = np.arange(desc0.shape[0])
    best_sim = sim[idx0, best1]
    # Column maxima: a reduction over axis 0 runs row by row (fast); argmax over
    # axis 0 would walk columns with a stride and costs 25x more at 4096^2.
    col_max = sim.max(axis=0)
    keep = best_sim == col_max[best1]
    # argmax semantics on ties: only the FIRST maximiser of a column is its
    # nearest neighbour. Columns with several maximisers are rare; fix them exactly.
    tied = np.nonzero(column_maximisers(sim, col_max) > 1)[0]
    if tied.size:
        first = np.argmax(sim[:, tied] == col_max[tied], axis=0)
        owner = dict(zip(tied.tolist(), first.tolist()))
        for i in np.nonzero(keep)[0]:
            j = int(best1[i])
            if j in owner and owner[j] != i:
                keep[i] = False
    if min_cossim > 0:
        keep &= best_sim > min_cossim
    return idx0[keep], best1[keep], best_sim[keep].astype(np.float32)
