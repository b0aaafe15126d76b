# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/upload_probe.py without a GPU: its CPU lists and its summary."""

from script_loader import load_script

upload_probe = load_script('bench/upload_probe.py', 'upload_probe')


def test_sysfs_cpu_lists_are_read_as_sets():
    """Ranges, single CPUs and an empty list, as sysfs writes them."""
    assert upload_probe.parse_cpulist('0-3,8,10-11') == {0, 1, 2, 3, 8, 10, 11}
    assert upload_probe.parse_cpulist('5') == {5}
    assert upload_probe.parse_cpulist('') == set()


def test_summary_is_median_low_tail_and_span():
    """Rates in GB/s: median, 10th percentile and minimum; the rounds' median span."""
    summary = upload_probe.summarize([10.0, 20.0, 30.0, 40.0, 50.0], [100.0, 300.0, 200.0])
    assert summary['rate_median_gbs'] == 30.0
    assert summary['rate_p10_gbs'] == 14.0
    assert summary['rate_min_gbs'] == 10.0
    assert summary['span_median_us'] == 200.0
