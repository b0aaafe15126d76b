# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Every source file carries the copyright and license header.

Uses ament_copyright where it is installed (a ROS install); the PyPI ROS
wheels have no ament_copyright, so the same rule is checked directly then:
a ``Copyright <year> <holder>`` line and the SPDX Apache-2.0 identifier within
the first lines of every Python, CUDA, shell, CMake and launch source.
"""

from pathlib import Path
import re
import subprocess

import pytest

REPO = Path(__file__).resolve().parents[1]
SUFFIXES = {'.py', '.cu', '.cuh', '.sh', '.cmake'}
NAMES = {'CMakeLists.txt', 'Makefile'}
HEAD_LINES = 12
COPYRIGHT = re.compile(r'Copyright \d{4} \S.*')
SPDX = 'SPDX-License-Identifier: Apache-2.0'
# Not sources: what .gitignore leaves out, for a tree that is not a git checkout.
NOT_SOURCES = {'build', 'install', 'log', 'demo_output', '__pycache__'}


def source_names():
    """Return the repository's file names: git's list, or a walk where there is no git."""
    try:
        listed = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard'],
                                cwd=REPO, capture_output=True, text=True, check=True).stdout
        return listed.split()
    except (OSError, subprocess.CalledProcessError):  # no git, or an exported source tree
        return [str(path.relative_to(REPO)) for path in REPO.rglob('*') if not any(
            (part.startswith('.') and part != '.ci') or part in NOT_SOURCES
            or part.endswith('.egg-info')
            for part in path.relative_to(REPO).parts[:-1])]


def tracked_sources():
    for name in source_names():
        path = REPO / name
        if path.is_file() and (path.suffix in SUFFIXES or path.name in NAMES
                               or name.startswith('.ci/')):
            yield path


@pytest.mark.copyright
@pytest.mark.linter
def test_copyright():
    try:
        from ament_copyright.main import main
    except ImportError:
        main = None
    if main is not None:
        assert main(argv=['.', 'test']) == 0, 'Found errors'
    missing = []
    sources = list(tracked_sources())
    assert len(sources) > 10
    for path in sources:
        head = path.read_text(errors='replace').splitlines()[:HEAD_LINES]
        has_copyright = any(COPYRIGHT.search(line) for line in head)
        if not has_copyright or not any(SPDX in line for line in head):
            missing.append(str(path.relative_to(REPO)))
    assert not missing, f'files without the copyright/license header: {missing}'
