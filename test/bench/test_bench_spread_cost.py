# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/spread_cost.py: one record per top_k and spread (host column here); one-line mistakes."""

import json

from conftest import DATA_ROOT
import pytest
from script_loader import load_script


def load_tool():
    """Import bench/spread_cost.py as a module."""
    return load_script('bench/spread_cost.py', 'bench_spread_cost')


def test_records_every_spread(tmp_path, monkeypatch, capsys):
    if not (DATA_ROOT / 'data' / 'tum_fr2_desk').is_dir():
        pytest.skip('needs the TUM frames of ../shared/data')
    monkeypatch.setenv('XFEAT_ROS_SHARED', str(DATA_ROOT))
    tool = load_tool()
    out = tmp_path / 'cost.json'
    assert tool.main(['--top-k', '100', '--repeat', '3', '--json', str(out)]) == 0
    record = json.loads(out.read_text())
    rows = {row['spread']: row for row in record['rows']}
    assert set(rows) == set(tool.SPREADS)
    for row in rows.values():
        assert row['top_k'] == 100 and 100 < row['candidates'] <= 200
        assert 0 < row['kept'] <= 100 and 0 < row['host_ms'][0] <= row['host_ms'][1]
        assert 'device_ms' not in row
    assert capsys.readouterr().out.count('"spread"') == 3


def test_no_frames_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv('XFEAT_ROS_SHARED', str(tmp_path))
    assert load_tool().main([]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('spread_cost: error: no TUM frame')
