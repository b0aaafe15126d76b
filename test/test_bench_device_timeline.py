# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/device_timeline.py: device operations split into groups, spans and gaps counted."""

from script_loader import load_script


def load_tool():
    """Import bench/device_timeline.py as a module."""
    return load_script('bench/device_timeline.py', 'bench_device_timeline')


def trace(*events):
    """Return a Chrome trace of ``(category, start, duration, name)`` events."""
    return {'traceEvents': [{'cat': c, 'ph': 'X', 'ts': t, 'dur': d, 'name': n}
                            for c, t, d, n in events] + [{'cat': 'kernel', 'ph': 'i', 'ts': 0}]}


def test_ops_of_the_device_categories_by_start():
    tool = load_tool()
    ops = tool.trace_ops(trace(('kernel', 30.0, 5.0, 'b'), ('cpu_op', 1.0, 1.0, 'x'),
                               ('gpu_memcpy', 10.0, 2.0, 'a')), tool.DEVICE_CATEGORIES)
    assert ops == [(10.0, 12.0, 'a'), (30.0, 35.0, 'b')]


def test_groups_split_at_long_idle_and_overlaps_count_once():
    tool = load_tool()
    ops = [(0.0, 10.0, 'a'), (5.0, 20.0, 'b'), (25.0, 30.0, 'c'),
           (2000.0, 2004.0, 'd'), (2010.0, 2011.0, 'e')]
    groups = tool.split_groups(ops, gap_us=1000.0)
    assert [[name for _, _, name in g] for g in groups] == [['a', 'b', 'c'], ['d', 'e']]
    first = tool.summarize(groups[0], [(-40.0, -38.0, 'cudaGraphLaunch')])
    assert first['span_us'] == 30.0
    assert first['busy_us'] == 25.0  # a and b overlap from 5 to 10
    assert first['idle_us'] == 5.0 and first['largest_gap_us'] == 5.0
    assert first['ops'][1] == (5.0, 15.0, 'b')
    assert first['host'] == [(-40.0, 2.0, 'cudaGraphLaunch')]
    second = tool.summarize(groups[1], [])
    assert (second['span_us'], second['busy_us'], second['idle_us']) == (11.0, 5.0, 6.0)


def test_report_names_the_median_group():
    tool = load_tool()
    groups = [tool.summarize([(0.0, float(span), 'k')], []) for span in (30, 10, 20)]
    out = tool.report('test', groups)
    assert out['groups'] == 3 and out['median']['span_us'] == 20.0
    assert out['per name (median us per group)'] == {'k': 20.0}
    assert tool.report('none', []) == {'groups': 0}
