# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_eval's protocol and summaries: the pairs of a sequence, match orders, order statistics."""

import numpy as np
import pytest

from xfeat_ros.tools.evaluation import protocol, report


def test_summaries_over_orders():
    inf = float('inf')
    # 2 pairs x 4 orders: per-order MHA@3px 1.0, 0.5, 0.5, 0.0
    records = [{'corner_error_px': 1.0, 'corner_error_px_orders': [0.5, 2.0, 4.0, 6.0],
                'matches': 10, 'inliers': 5},
               {'corner_error_px': 2.0, 'corner_error_px_orders': [3.0, inf, 1.5, inf],
                'matches': 10, 'inliers': 5}]
    summary = report.summarize_homography(records)
    assert summary['fit_orders'] == 4
    assert summary['mha@3px_orders_mean'] == pytest.approx(0.5)
    assert summary['mha@3px_orders_std'] == pytest.approx(np.std([1.0, 0.5, 0.5, 0.0]))
    assert summary['mha@1px_orders_mean'] == pytest.approx(0.125)
    assert summary['mha@5px_orders_mean'] == pytest.approx(np.mean([1.0, 0.5, 1.0, 0.0]))
    assert summary['mha@3px'] == 1.0  # the canonical fits
    pose = [{'pose_error_deg': 1.0, 'rotation_error_deg': 1.0, 'translation_error_deg': 1.0,
             'pose_error_deg_orders': [0.0, 10.0], 'matches': 10, 'inliers': 5}]
    summary = report.summarize_pose(pose)
    assert summary['fit_orders'] == 2
    assert summary['auc@20deg_orders_mean'] == pytest.approx((1.0 + 0.75) / 2)
    assert summary['auc@20deg_orders_std'] == pytest.approx(0.125)
    assert summary['auc@5deg_orders_mean'] == pytest.approx(0.5)
    assert 'fit_orders' not in report.summarize_pose([])
    orders = protocol.fit_orders(50, 3)
    assert len(orders) == 3 and all(sorted(o) == list(range(50)) for o in orders)
    np.testing.assert_array_equal(orders[2], np.random.default_rng(2).permutation(50))
    assert protocol.map_orders(lambda order: int(order[0]), 50, 3) == [int(o[0]) for o in orders]


def test_pose_pairs():
    assert protocol.pose_pairs(4, (1, 2)) == [(0, 1), (1, 2), (2, 3), (0, 2), (1, 3)]
    assert protocol.pose_pairs(4, (1, 4), max_pairs=2) == [(0, 1), (1, 2)]
