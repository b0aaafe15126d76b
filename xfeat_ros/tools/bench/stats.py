# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Statistics of the measurements: percentiles, summaries, ratios, CPU load."""

import math


def percentile(values, q):
    """Return the ``q``-th percentile of ``values``, q in 0..100, linear between ranks (NumPy)."""
    data = sorted(values)
    if not data:
        return math.nan
    pos = (len(data) - 1) * float(q) / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


def summarize(values_ms):
    """Median, p10, p90, mean, min, max and count of millisecond samples."""
    if not values_ms:
        return {'n': 0}
    return {'median_ms': percentile(values_ms, 50), 'p10_ms': percentile(values_ms, 10),
            'p90_ms': percentile(values_ms, 90), 'mean_ms': sum(values_ms) / len(values_ms),
            'min_ms': min(values_ms), 'max_ms': max(values_ms), 'n': len(values_ms)}


def latency_summary(latencies_ms):
    """Median, p99, max, mean and count of latencies in milliseconds."""
    if not latencies_ms:
        return {'n': 0}
    return {'median_ms': percentile(latencies_ms, 50), 'p99_ms': percentile(latencies_ms, 99),
            'max_ms': max(latencies_ms), 'mean_ms': sum(latencies_ms) / len(latencies_ms),
            'n': len(latencies_ms)}


def ratio(slower, faster):
    """``slower / faster`` (how many times faster ``faster`` is), None if either is missing."""
    if not slower or not faster:
        return None
    return slower / faster


def cpu_percent(ticks_before, ticks_after, wall_s, ticks_per_s):
    """CPU load in percent of one core from process CPU ticks over ``wall_s`` seconds."""
    if ticks_before is None or ticks_after is None or wall_s <= 0:
        return None
    return 100.0 * (ticks_after - ticks_before) / ticks_per_s / wall_s
