# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The set-up: Makefile, .ci/run, set-up profiles, and the CPU path without torch."""

import os
from pathlib import Path
import re
import shutil
import subprocess
import sys

from conftest import REPO
import pytest

MAKE = shutil.which('make')
needs_make = pytest.mark.skipif(MAKE is None, reason='make is not installed')


def make(*args, env=None):
    """Return the output of ``make -n`` (commands printed, not run) in the repository."""
    result = subprocess.run([MAKE, '--no-print-directory', *args], capture_output=True,
                            text=True, cwd=REPO, env=dict(os.environ, **(env or {})),
                            timeout=60, check=True)
    return result.stdout


@needs_make
@pytest.mark.parametrize('args,want', [
    ([], 'python -m pytest -q -ra'),
    (['PYTEST_ARGS=test/tools/test_play.py'], 'python -m pytest -q -ra test/tools/test_play.py'),
    (['PYTEST_ARGS=test/tools/test_play.py -k convert'],
     'python -m pytest -q -ra test/tools/test_play.py -k convert')], ids=['all', 'one', 'options'])
def test_make_test_runs_what_it_is_given(args, want):
    lines = [line.strip() for line in make('-n', 'test', *args).splitlines()]
    assert [line for line in lines if 'pytest' in line] == [want]


@needs_make
def test_make_keeps_an_exported_domain():
    out = make('-s', '--eval', 'show-domain: ; @echo $$ROS_DOMAIN_ID', 'show-domain',
               env={'ROS_DOMAIN_ID': '42'})
    assert out.strip() == '42'


@needs_make
def test_make_draws_one_domain_per_run():
    """Without an exported ROS_DOMAIN_ID make picks one in 1..100, the same for every recipe."""
    env = {k: v for k, v in os.environ.items() if k != 'ROS_DOMAIN_ID'}
    out = subprocess.run([MAKE, '--no-print-directory', '-s', '--eval',
                          'a: ; @echo $$ROS_DOMAIN_ID', '--eval', 'b: a ; @echo $$ROS_DOMAIN_ID',
                          'b'], capture_output=True, text=True, cwd=REPO, env=env, timeout=60,
                         check=True).stdout
    first, second = out.split()
    assert first == second and 1 <= int(first) <= 100


@needs_make
@pytest.mark.parametrize('target,profile', [('demo', 'user'), ('setup', 'user'),
                                            ('test', 'test'), ('setup-gpu', 'gpu')])
def test_targets_use_their_profile(target, profile):
    assert f'XFEAT_SETUP_PROFILE={profile} bash scripts/setup_venv.sh' in make('-n', target)


def test_ci_run_keeps_an_exported_domain(tmp_path):
    """.ci/run with ``make`` replaced by a stub that reports what it was given."""
    stub = tmp_path / 'make'
    stub.write_text('#!/bin/sh\necho "make $* domain=$ROS_DOMAIN_ID '
                    'range=$ROS_AUTOMATIC_DISCOVERY_RANGE"\n')
    stub.chmod(0o755)
    env = dict(os.environ, PATH=f'{tmp_path}:{os.environ["PATH"]}', ROS_DOMAIN_ID='42')
    out = subprocess.run(['bash', str(REPO / '.ci' / 'run')], capture_output=True, text=True,
                         env=env, timeout=60, check=True).stdout
    assert out.strip() == 'make test domain=42 range=LOCALHOST'
    del env['ROS_DOMAIN_ID']
    out = subprocess.run(['bash', str(REPO / '.ci' / 'run')], capture_output=True, text=True,
                         env=env, timeout=60, check=True).stdout
    assert re.fullmatch(r'make test domain=([1-9]\d?|100) range=LOCALHOST', out.strip()), out


def requirements(profile):
    out = subprocess.run(['bash', str(REPO / 'scripts' / 'setup_venv.sh')], capture_output=True,
                         text=True, timeout=60, check=True,
                         env=dict(os.environ, XFEAT_SETUP_PROFILE=profile, XFEAT_SETUP_LIST='1'))
    return out.stdout.split()


def test_cpu_users_get_no_gpu_packages():
    user = requirements('user')
    assert not [r for r in user if r.startswith(('torch', 'nvidia', 'cupy'))], user
    assert {'onnxruntime', 'numpy', 'ros-rclpy[fastrtps]'} <= set(user)
    test = requirements('test')
    assert set(user) < set(test)
    assert any(r.startswith('nvidia-cuda-nvrtc') for r in test)  # CI compiles the kernels
    gpu = requirements('gpu')
    assert set(user) < set(gpu) and any(r.startswith('cupy') for r in gpu)
    assert not [r for r in requirements('ros') if not r.startswith(('ros-', 'catkin'))]


@pytest.mark.ros
def test_cpu_path_runs_without_torch(tmp_path):
    """The demo (node, ONNX Runtime, packaged weights) with torch and cupy unimportable."""
    for name in ('torch', 'cupy'):
        (tmp_path / 'block' / name).mkdir(parents=True)
        (tmp_path / 'block' / name / '__init__.py').write_text(
            f'raise ImportError("{name} is blocked by this test")\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path / 'block'), os.environ.get('PYTHONPATH', '')]))
    env.pop('XFEAT_ROS_WEIGHTS', None)  # the lookup's last step: the packaged copy
    out = tmp_path / 'demo'
    result = subprocess.run([sys.executable, '-m', 'xfeat_ros.tools.demo', '--frames', '3',
                             '--rate', '5', '--output', str(out)], capture_output=True,
                            text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    log = (out / 'node.log').read_text()
    assert 'using onnxruntime on the CPU' in log and 'Traceback' not in log, log
    assert 'packaged copy' in result.stderr
    assert Path(out / 'summary.json').is_file()


def test_long_test_ids_are_refused():
    """The conftest check that keeps colcon's line reader going (a 220,000-char id stopped it)."""
    from types import SimpleNamespace

    import conftest
    unmarked = {'get_closest_marker': lambda name: None}  # what the gpu skip asks an item
    short = SimpleNamespace(nodeid='test/test_x.py::test_y[a]', **unmarked)
    conftest.pytest_collection_modifyitems(None, [short])  # fine
    long = SimpleNamespace(nodeid='test/test_x.py::test_y[' + 'ab' * 300 + ']', **unmarked)
    with pytest.raises(pytest.UsageError, match='longer than 120 characters'):
        conftest.pytest_collection_modifyitems(None, [short, long])


def test_markers_are_registered():
    """Register them here: colcon runs pytest without the ament plugins that would."""
    text = (REPO / 'test' / 'conftest.py').read_text()
    for mark in ('gpu', 'ros', 'linter', 'copyright', 'flake8', 'pep257'):
        assert f"'{mark}: " in text, mark
