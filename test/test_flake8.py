# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""ament_flake8 over the package's Python sources (99 columns, ROS 2 style)."""

from pathlib import Path

from ament_flake8.main import main_with_errors
import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = ['xfeat_ros', 'test', 'launch', 'bench', 'setup.py']


@pytest.mark.flake8
@pytest.mark.linter
def test_flake8():
    paths = [str(REPO / p) for p in SOURCES if (REPO / p).exists()]
    rc, errors = main_with_errors(argv=paths)
    assert rc == 0, f'Found {len(errors)} code style errors / warnings:\n' + '\n'.join(errors)
