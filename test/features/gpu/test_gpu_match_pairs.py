# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Several pairs matched by one launch per kernel (xfeat_ros.features.gpu.matching.match_pairs).

On the GPU: every pair's matches bitwise equal the one-pair tensor-core matcher's (and
so the FP32 kernel's, test_gpu_match.py), with pairs of different sizes, device counts,
an empty side, near-ties and both widths. On any machine: the scratch layout and the
pair table's rows.
"""

from types import SimpleNamespace

import numpy as np
import pytest
from test_gpu_kernels import correspondences, unit_rows
from test_gpu_match import device_sets, host_matches, near_ties
from xfeat_ros.errors import DescriptorLayoutError
from xfeat_ros.features.gpu import kernels, matching, ops


def fake_array(ptr, size=0):
    return SimpleNamespace(data=SimpleNamespace(ptr=ptr), size=size)


@pytest.mark.parametrize('rows,cols', [(4096, 3000), (4096, 3001), (1, 64)])
def test_pair_scratch_layout(rows, cols):
    """Runs on CI: the pairs' zeroed parts first (one memset), then each pair's tables."""
    zeroed, total = matching.scratch_layout(rows, cols, 64)
    zeroed_each, tables_at, tables_each, whole = matching.pair_scratch_layout(8, rows, cols, 64)
    assert zeroed_each == zeroed and tables_at == 8 * zeroed
    assert tables_each == total - zeroed and whole == 8 * total
    # every pair's keys 8-byte aligned and its FP16 rows 16-byte aligned (an odd rows + cols
    # once put the second pair's 64-bit keys at an address 4 mod 8)
    scratch = matching.PairScratch()
    scratch.buffer = fake_array(1 << 20)
    columns, cleared = scratch.columns(8, rows, cols, 64)
    assert cleared == 8 * zeroed
    for parts in columns:
        assert parts[0] % 8 == 0 and parts[1] % 8 == 0
        assert parts[6] % 16 == 0 and parts[7] % 16 == 0


def test_pair_table_rows():
    """Runs on CI: one row per pair, every field where PAIR_TABLE says."""
    col = kernels.PAIR_TABLE.index
    side0 = SimpleNamespace(buffer=fake_array(1000), count=ops.DeviceCount(fake_array(2000), 77),
                            width=64)
    side1 = SimpleNamespace(buffer=fake_array(3000), count=55, width=64)
    out = SimpleNamespace(idx0=fake_array(4000), idx1=fake_array(5000),
                          similarity=fake_array(6000), count=fake_array(7000), capacity=99)
    scratch = [(11, 12, 13, 14, 15, 16, 17, 18), (21, 22, 23, 24, 25, 26, 27, 28)]
    rows = matching.pair_table_rows([(side0, side1, out), (side1, side0, out)], scratch)
    assert rows.shape == (2, kernels.PAIR_FIELDS) and rows.dtype == np.uint64
    first = dict(zip(kernels.PAIR_TABLE, rows[0].tolist()))
    assert (first['d0'], first['count0'], first['bound0']) == (1000, 2000, 77)
    assert (first['d1'], first['count1'], first['bound1']) == (3000, 0, 55)
    assert [first[n] for n in ('best_row', 'best_col', 'row_max', 'col_max', 'tile_first',
                               'tile_second', 'h0', 'h1')] == list(scratch[0])
    assert [first[n] for n in ('idx0', 'idx1', 'sim', 'match_count', 'capacity')] == [
        4000, 5000, 6000, 7000, 99]
    assert rows[1, col('d0')] == 3000 and rows[1, col('count1')] == 2000
    assert rows[1, col('best_row')] == 21


def test_pairs_rejected_before_any_work():
    """Runs on CI: a wrong width or a short output is a typed error, as one by one."""
    buf = np.zeros(10 * 64, np.float32)
    out = matching.MatchOutput(np.zeros(5, np.int32), np.zeros(5, np.int32),
                               np.zeros(5, np.float32), np.zeros(1, np.int32))
    good = (matching.DescriptorSet(buf, 5, 64), matching.DescriptorSet(buf, 5, 64), out)
    with pytest.raises(DescriptorLayoutError, match='width'):
        matching.check_pairs([good, (matching.DescriptorSet(buf, 5, 128), good[1], out)], 64)
    with pytest.raises(DescriptorLayoutError, match='output holds 5'):
        matching.check_pairs([good, (matching.DescriptorSet(buf, 10, 64),
                                     matching.DescriptorSet(buf, 10, 64), out)], 64)
    assert matching.check_pairs([good, good], 64) == (5, 5)


# -- on the device --------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize('width', [64, 128])
def test_pairs_in_one_launch_equal_one_by_one(cp, stream, width):
    rng = np.random.default_rng(width)
    cases = [correspondences(rng, 4096, 4096, width) + (None,),
             near_ties(rng, 600, 3000, width, 1e-3) + (None,),
             correspondences(rng, 300, 257, width) + (None,),
             correspondences(rng, 4096, 4096, width) + ((3000, 129),),
             (unit_rows(rng, 1, width), unit_rows(rng, 5, width), None),
             (unit_rows(rng, 40, width), unit_rows(rng, 0, width), None),
             correspondences(rng, 129, 65, width) + ((0, 65),)]
    for min_cossim in (0.82, -1.0):
        together = [device_sets(cp, d0, d1, width, counts) for d0, d1, counts in cases]
        scratch = matching.PairScratch()
        table, rows, cols, zeroed = matching.upload_table(together, scratch, width)
        matching.match_pairs(table, rows, cols, zeroed, scratch, min_cossim, stream,
                             width=width)
        stream.synchronize()
        for i, ((d0, d1, counts), (side0, side1, out)) in enumerate(zip(cases, together)):
            alone = device_sets(cp, d0, d1, width, counts)
            matching.mutual_nn_match(alone[0], alone[1], alone[2], matching.MatchScratch(),
                                     min_cossim, stream, width=width, tensor_cores=True)
            stream.synchronize()
            for a, b, name in zip(host_matches(out), host_matches(alone[2]),
                                  ('idx0', 'idx1', 'similarity')):
                np.testing.assert_array_equal(a, b, err_msg=f'pair {i} {name} ({min_cossim})')
        assert len(host_matches(together[0][2])[0]) > 1000  # the correspondences matched
        assert len(host_matches(together[5][2])[0]) == 0  # an empty side: no matches
