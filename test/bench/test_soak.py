# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""A short run of the soak script: every frame processed, memory sampled."""

import json
import os
from pathlib import Path
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ros
SOAK = Path(__file__).resolve().parents[2] / 'bench' / 'soak.py'


def test_short_soak(weights_npz, tmp_path):
    out = tmp_path / 'soak.json'
    result = subprocess.run([sys.executable, str(SOAK), '--frames', '300', '--rate', '60',
                             '--warmup', '50', '--weights', str(weights_npz), '--out', str(out)],
                            capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(out.read_text())
    assert summary['keypoints_received'] == 300 and summary['matches_received'] == 299
    counts = summary['node_counts']
    assert counts['received'] == counts['accepted'] == counts['published'] == 300
    assert summary['rss_kib_end'] > 0 and len(summary['samples']) >= 3
