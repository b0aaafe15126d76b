# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The package's layering (setup.cfg's import-linter contracts): wings one way, no circle."""

from pathlib import Path
import subprocess
import sys

import pytest

REPO = Path(__file__).resolve().parents[1]

importlinter = pytest.importorskip(
    'importlinter', reason='import-linter is not installed (make setup-test installs it)')


@pytest.mark.linter
def test_import_contracts_are_kept():
    # In a fresh interpreter, from the repository: the package as it is in this tree.
    run = subprocess.run([sys.executable, '-c', 'import sys; from importlinter.cli import '
                          'lint_imports; sys.exit(lint_imports("setup.cfg", no_logo=True, '
                          'no_cache=True))'],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f'{run.stdout}\n{run.stderr}'
    assert 'Contracts: 4 kept, 0 broken.' in run.stdout, run.stdout


def test_a_broken_layer_is_caught(tmp_path):
    """The contracts bite: a features module importing the ROS wing breaks one."""
    package = tmp_path / 'xfeat_ros'
    for folder in ('features', 'runtime', 'ros', 'tools'):
        (package / folder).mkdir(parents=True)
        (package / folder / '__init__.py').write_text('')
    (package / '__init__.py').write_text('')
    for name in ('errors', 'defaults', 'cli', 'logs'):
        (package / f'{name}.py').write_text('')
    (package / 'features' / 'engine.py').write_text('from xfeat_ros.ros import node\n')
    (package / 'ros' / 'node.py').write_text('from xfeat_ros.features import engine\n')
    config = tmp_path / 'setup.cfg'
    config.write_text((REPO / 'setup.cfg').read_text())
    run = subprocess.run([sys.executable, '-c', 'import sys; from importlinter.cli import '
                          'lint_imports; sys.exit(lint_imports("setup.cfg", no_logo=True, '
                          'no_cache=True))'],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={'PYTHONPATH': str(tmp_path), 'PATH': '/usr/bin:/bin'})
    assert run.returncode != 0
    assert 'Wings import one way: tools, ros, runtime, features BROKEN' in run.stdout, \
        run.stdout + run.stderr
    assert 'No import circle among modules or packages BROKEN' in run.stdout
