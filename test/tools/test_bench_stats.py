# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_bench's statistics: percentiles, summaries, ratios and CPU load."""

import os

import numpy as np
import pytest

from xfeat_ros.tools.bench import node, stats


def test_percentile_matches_numpy():
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0]
    for q in (0, 10, 25, 50, 90, 99, 100):
        assert stats.percentile(values, q) == pytest.approx(np.percentile(values, q))
    assert stats.percentile([7.0], 99) == 7.0
    assert np.isnan(stats.percentile([], 50))


def test_summaries():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s['median_ms'] == 3.0 and s['p10_ms'] == pytest.approx(1.4)
    assert s['p90_ms'] == pytest.approx(4.6) and s['n'] == 5 and s['mean_ms'] == 3.0
    lat = stats.latency_summary([float(v) for v in range(1, 101)])
    assert lat['median_ms'] == 50.5 and lat['p99_ms'] == pytest.approx(99.01)
    assert lat['max_ms'] == 100.0 and lat['n'] == 100
    assert stats.summarize([]) == {'n': 0} and stats.latency_summary([]) == {'n': 0}
    assert stats.ratio(6.0, 2.0) == 3.0 and stats.ratio(None, 2.0) is None


def test_cpu_percent():
    # 150 ticks of 100 Hz in 2 s: 0.75 of one core
    assert stats.cpu_percent(50, 200, 2.0, 100) == pytest.approx(75.0)
    assert stats.cpu_percent(None, 200, 2.0, 100) is None
    assert node.proc_cpu_ticks(os.getpid()) >= 0
