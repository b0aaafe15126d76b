# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""A stream's /diagnostics level, message, rate and latency entries (xfeat_ros.runtime.health)."""

from collections import Counter

from xfeat_ros.runtime import health


def test_levels_and_messages_in_order_of_precedence():
    healthy = Counter(published=5)
    assert health.stream_health(Counter(), publishers=0) == ('OK', 'no image publisher matched')
    assert health.stream_health(Counter(), publishers=2) == ('OK', 'waiting for images')
    assert health.stream_health(healthy, publishers=1) == ('OK', 'tracking input healthy')
    troubled = Counter(published=5, dropped_queue_full=2, lost_before_node=1, rejected=4)
    assert health.stream_health(troubled) == \
        ('WARN', '3 frames dropped or lost; 4 images rejected')
    assert health.stream_health(healthy, fallback='running on the CPU') == \
        ('WARN', 'running on the CPU')
    assert health.stream_health(troubled, failure='engine failed', fallback='x') == \
        ('ERROR', 'engine failed')
    # every counter of a frame that reached no subscriber counts, and only those
    for key in health.LOST:
        assert health.stream_health(Counter({key: 1}))[0] == 'WARN'
    assert health.stream_health(Counter(received=9, accepted=9, published=9))[0] == 'OK'


def test_rate_over_the_recent_window():
    assert health.recent_rate([], 10.0) == 0.0
    assert health.recent_rate([9.5], 10.0) == 0.0
    times = [1.0, 6.0, 7.0, 8.0, 9.0]   # 1.0 is older than the 5 s window at 10.0
    assert health.recent_rate(times, 10.0) == 1.0
    assert health.recent_rate([3.0, 3.0], 4.0) == 0.0   # no time between them


def test_latency_entries():
    assert health.latency_values([]) == {'latency_median_ms': '', 'latency_max_ms': ''}
    assert health.latency_values([9.0, 1.0, 4.04]) == {'latency_median_ms': '4.0',
                                                       'latency_max_ms': '9.0'}
