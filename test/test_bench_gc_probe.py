# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/gc_probe.py times collections per generation and keeps the slow ones."""

from script_loader import load_script


def test_pauses_are_timed_per_generation_and_slow_ones_kept():
    tool = load_script('bench/gc_probe.py', 'bench_gc_probe')
    ticks = iter([0.0, 1.0, 1.002, 2.0, 2.05, 3.0])
    timer = tool.GcTimer(clock=lambda: next(ticks))
    timer('start', {'generation': 0})
    timer('stop', {'generation': 0})      # 2 ms
    timer('start', {'generation': 2})
    timer('stop', {'generation': 2})      # 50 ms
    timer('stop', {'generation': 1})      # a stop without its start is ignored
    summary = timer.summary()
    assert summary['generations']['0'] == {'count': 1, 'total_ms': 2.0, 'max_ms': 2.0}
    assert summary['generations']['2']['count'] == 1
    assert abs(summary['generations']['2']['max_ms'] - 50.0) < 1e-6
    assert summary['generations']['1']['count'] == 0
    assert summary['slow'] == [(2.0, 2, 50.0)]  # started 2 s after the timer
    assert tool.node_arguments(['python', '-m', 'xfeat_ros.node', '--ros-args']) == ['--ros-args']
