# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The suite's own plumbing in conftest.py: the one GPU skip, decided in one place."""

from pathlib import Path
import subprocess
import sys

from conftest import gpu_skip_reason
import pytest

TEST_DIR = Path(__file__).resolve().parent


def test_gpu_skip_is_defined_only_in_conftest():
    """No test module decides for itself whether a GPU is there (one marker, one reason)."""
    own = [p.name for p in sorted(TEST_DIR.glob('*.py'))
           if p.name not in ('conftest.py', Path(__file__).name)
           and 'unavailable_reason' in p.read_text()]
    assert own == [], f'{own} check for a GPU themselves: mark the tests gpu instead'


def test_gpu_tests_are_skipped_with_the_one_reason(tmp_path):
    reason = gpu_skip_reason()
    if reason is None:
        pytest.skip('a GPU is usable here, so no gpu test is skipped')
    assert reason.startswith('needs CuPy and a CUDA device: ')
    (tmp_path / 'test_marks.py').write_text(
        'import pytest\n\n\n'
        '@pytest.mark.gpu\n'
        'def test_marked():\n    assert False, "ran without a GPU"\n\n\n'
        "@pytest.mark.parametrize('engine', ['cpu', pytest.param('gpu', marks=pytest.mark.gpu)])\n"
        'def test_param(engine):\n    assert engine == "cpu"\n')
    # the copied conftest is the suite's: its hooks decide the skip
    (tmp_path / 'conftest.py').write_text((TEST_DIR / 'conftest.py').read_text())
    run = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-rs', '-p', 'no:cacheprovider',
                          str(tmp_path)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert '1 passed, 2 skipped' in run.stdout, run.stdout
    assert run.stdout.count(reason) == 2 or f'[2] {reason}' in run.stdout, run.stdout
