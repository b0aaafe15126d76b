# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/engine_time.py: its summary leaves out the first frames; missing data is one line."""

import pytest
from script_loader import load_script


def load_tool():
    """Import bench/engine_time.py as a module."""
    return load_script('bench/engine_time.py', 'bench_engine_time')


def test_summary_leaves_out_the_first_frames():
    tool = load_tool()
    times = [100.0] * tool.SKIPPED + [float(v) for v in range(1, 12)]
    summary = tool.summary(times)
    assert summary['frames'] == 11
    assert summary['median_ms'] == pytest.approx(6.0)
    assert summary['p10_ms'] == pytest.approx(2.0) and summary['p90_ms'] == pytest.approx(10.0)


def test_a_missing_data_folder_ends_in_one_line(tmp_path, capsys):
    tool = load_tool()
    assert tool.main(['--shared', str(tmp_path / 'nowhere')]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('engine_time: error:')
    assert 'tum_fr2_desk' in err[0]


def test_too_few_frames_is_a_usage_error(capsys):
    tool = load_tool()
    with pytest.raises(SystemExit) as stop:
        tool.main(['--frames', str(tool.SKIPPED)])
    assert stop.value.code == 2
    assert '--frames' in capsys.readouterr().err
