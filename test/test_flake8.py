# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""ament_flake8 over the package's Python sources (99 columns, ROS 2 style)."""

from pathlib import Path
import subprocess
import sys

import pytest

REPO = Path(__file__).resolve().parents[1]
# ament_lint is a test dependency (package.xml): `rosdep install` or `make setup-test` brings
# it (docs/install.md); without it this test is skipped, saying so, and the others still run.
ament_flake8_main = pytest.importorskip(
    'ament_flake8.main', reason='ament_flake8 is not installed (ros-kilted-ament-flake8, or '
    'ros-ament-flake8 from PyPI; docs/install.md)')
SOURCES = ['xfeat_ros', 'test', 'launch', 'bench', 'setup.py']


@pytest.mark.flake8
@pytest.mark.linter
def test_flake8():
    # In a fresh interpreter: flake8 forks its workers, and a worker forked from this test
    # process after in-process node tests inherits ONNX Runtime sessions whose destructors
    # then wait forever on condition variables of threads that did not survive the fork.
    paths = [str(REPO / p) for p in SOURCES if (REPO / p).exists()]
    run = subprocess.run([sys.executable, '-m', ament_flake8_main.__name__, *paths],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f'code style errors / warnings:\n{run.stdout}\n{run.stderr}'
    assert 'checked' in run.stdout or 'No problems found' in run.stdout, run.stdout
