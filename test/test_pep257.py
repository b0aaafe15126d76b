# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""ament_pep257 docstring checks over the package sources."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# A test dependency (package.xml); without it this test is skipped, saying so (test_flake8.py).
main = pytest.importorskip(
    'ament_pep257.main', reason='ament_pep257 is not installed (ros-kilted-ament-pep257, or '
    'ros-ament-pep257 from PyPI; docs/install.md)').main


@pytest.mark.linter
@pytest.mark.pep257
def test_pep257():
    paths = [str(REPO / p) for p in ('xfeat_ros', 'launch', 'bench') if (REPO / p).exists()]
    rc = main(argv=paths)
    assert rc == 0, 'Found code style errors / warnings'
