# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/decode_cost.py: one record per size, input and compression; mistakes are one line."""

import json

import pytest
from script_loader import load_script

pytest.importorskip('rclpy', reason='rclpy (ROS 2) is not installed')


def load_tool():
    """Import bench/decode_cost.py as a module."""
    return load_script('bench/decode_cost.py', 'bench_decode_cost')


def test_records_every_case(tmp_path, data_dir, monkeypatch, capsys):
    tool = load_tool()
    monkeypatch.setattr(tool, 'SIZES', ((64, 48), (640, 480)))
    out = tmp_path / 'cost.json'
    assert tool.main(['--data', str(data_dir), '--repeat', '50', '--json', str(out)]) == 0
    record = json.loads(out.read_text())
    assert record['repeat'] == 50 and record['quality'] == 90
    assert record['versions']['opencv']
    cases = {(c['size'], c['encoding'], c['kind']): c for c in record['cases']}
    assert len(cases) == 8
    jpeg, png = cases['640x480', 'rgb8', 'jpeg'], cases['640x480', 'rgb8', 'png']
    assert jpeg['format'] == 'rgb8; jpeg compressed bgr8' and jpeg['raw_bytes'] == 640 * 480 * 3
    for case in (jpeg, png):
        assert 0 < case['decode']['median_ms'] <= case['decode']['p90_ms']
        assert case['added_ms'] == pytest.approx(case['receipt']['median_ms']
                                                 - case['receipt_raw']['median_ms'], abs=1e-3)
    assert '| 640x480 | rgb8 jpeg |' in capsys.readouterr().out


def test_mistakes_end_in_one_line(tmp_path, capsys):
    tool = load_tool()
    assert tool.main(['--data', str(tmp_path / 'nowhere')]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('decode_cost: error:') and 'tum_fr2_desk' in err[0]
    with pytest.raises(SystemExit) as stop:
        tool.main(['--repeat', '10'])
    assert stop.value.code == 2 and '--repeat' in capsys.readouterr().err
