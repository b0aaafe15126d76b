# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/matcher_probe.py's source edits (CPU): every anchor is in today's match_tc.cu."""

import pytest
from script_loader import load_script
from xfeat_ros.gpu import kernels

matcher_probe = load_script('bench/matcher_probe.py', 'matcher_probe')
SOURCE = kernels.match_tc_variant(64).source()


@pytest.mark.parametrize('name', ['blocks6', 'blocks8', 'no_atomics', 'no_tables',
                                  'products_only'])
def test_each_variant_edits_the_kernel(name):
    edited = matcher_probe.variant_source(SOURCE, name)
    assert 'mnn_approx_tc_pairs' in edited and 'mnn_refine_tc_pairs' in edited
    if name == 'no_atomics':
        assert 'atomicMax(&out.row_max' not in edited and 'atomicMax(&out.col_max' not in edited
    if name == 'no_tables':
        assert 'tile_second[at] = v.second' not in edited and 'atomicMax(&out.row_max' in edited
    if name == 'products_only':
        assert 'partial_top2s<true>(o' not in edited and 's == 1234.5f' in edited
    if name.startswith('blocks'):
        assert matcher_probe.BLOCKS.search(edited).group(0).endswith(f' {name[-1]}\n')
    assert matcher_probe.variant_source(SOURCE, 'shipped') == SOURCE


def test_unknown_variant_and_missing_anchor_stop_with_one_line():
    with pytest.raises(SystemExit, match='unknown variant'):
        matcher_probe.variant_source(SOURCE, 'fastest')
    with pytest.raises(SystemExit, match='no_atomics'):
        matcher_probe.variant_source(SOURCE.replace('atomicMax(&out.row_max', 'x('), 'no_atomics')
