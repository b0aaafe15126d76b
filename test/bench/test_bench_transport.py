# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""bench/transport.py: its statistics, and one short real run of each mode."""

import json
from pathlib import Path
import subprocess
import sys

import pytest
from script_loader import load_script

from xfeat_ros.ros import dds

REPO = Path(__file__).resolve().parents[2]
TOOL = [sys.executable, str(REPO / 'bench' / 'transport.py')]


def load_tool():
    """Import bench/transport.py as a module."""
    return load_script('bench/transport.py', 'bench_transport')


def test_latency_stats_skip_warmup_and_count_losses():
    tool = load_tool()
    received = [(seq, 1_000_000 * seq, 1_000_000 * seq + 2_000_000 + 1_000 * seq)
                for seq in range(10) if seq != 7]
    stats = tool.latency_stats(received, warmup=3, published=10)
    assert (stats['published'], stats['received'], stats['lost']) == (7, 6, 1)
    assert stats['p50_ms'] == pytest.approx(2.0055, abs=1e-3)  # rounded to us
    assert stats['max_ms'] == pytest.approx(2.009)
    empty = tool.latency_stats([], warmup=0, published=4)
    assert empty == {'published': 4, 'received': 0, 'lost': 4}


def test_child_environment_drops_an_exported_profile(monkeypatch):
    tool = load_tool()
    monkeypatch.setenv(dds.PROFILE_ENV, '/somewhere/else.xml')
    env, decision = tool.child_environment('default', 5)
    assert dds.PROFILE_ENV not in env and env[dds.DOMAIN_ENV] == '5'
    assert env[dds.DISCOVERY_ENV] == 'LOCALHOST' and decision.path is None
    env, decision = tool.child_environment('shipped', 5)
    assert env[dds.PROFILE_ENV] == decision.path == str(dds.shipped_profile())


def test_run_side_by_side(tmp_path):
    out = tmp_path / 'transport.json'
    done = subprocess.run(TOOL + ['run', '--messages', 'rgb', '--reliability', 'reliable',
                                  '--count', '12', '--warmup', '2', '--rate', '20',
                                  '--json', str(out)],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())['rows']
    assert [row['profile'] for row in rows] == ['default', 'shipped']
    for row in rows:
        assert row['received'] == row['published'] == 10 and row['p50_ms'] > 0
        assert row['serialized_bytes'] == 921_648
    assert rows[1]['profile_file'] == str(dds.shipped_profile())
    assert '| rgb | 921,648 | reliable |' in done.stdout


def test_cdr_cost_mode(tmp_path):
    out = tmp_path / 'cdr.json'
    done = subprocess.run(TOOL + ['cdr', '--keypoints', '64', '--encodings', 'float32',
                                  '--repeat', '3', '--json', str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())['rows']
    assert [row['what'] for row in rows] == ['Keypoints 64, float32, tracks', 'Matches 32',
                                             'receive Image 640x480 rgb8']
    assert all(v['median_us'] > 0 for row in rows for v in row.values() if isinstance(v, dict))
