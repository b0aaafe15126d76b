# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""ament_pep257 docstring checks over the package sources."""

from pathlib import Path

from ament_pep257.main import main
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.linter
@pytest.mark.pep257
def test_pep257():
    paths = [str(REPO / p) for p in ('xfeat_ros', 'launch', 'bench') if (REPO / p).exists()]
    rc = main(argv=paths)
    assert rc == 0, 'Found code style errors / warnings'
