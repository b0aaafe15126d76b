# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_ros.tools.plumbing: upstream loading, environment records, a node process."""

import signal
import subprocess
import sys
import time

import pytest

from xfeat_ros.errors import BackendError
from xfeat_ros.tools import plumbing


def test_ros_param():
    assert plumbing.ros_param(['cam0', 'cam1']) == "['cam0','cam1']"
    assert plumbing.ros_param('') == "''" and plumbing.ros_param(True) == 'true'
    assert plumbing.ros_param([1.5, 2]) == '[1.5,2]' and plumbing.ros_param(4096) == '4096'
    assert plumbing.ros_param('reliable') == 'reliable'


def test_node_command():
    command = plumbing.node_command({'cameras': ['a', 'b'], 'top_k': 512, 'weights': ''},
                                    extra_args=['-r', 'image:=/x'])
    assert command[:5] == [sys.executable, '-m', 'xfeat_ros.ros.node', '--ros-args', '-r']
    assert command[5:] == ['image:=/x', '-p', "cameras:=['a','b']", '-p', 'top_k:=512',
                           '-p', "weights:=''"]


def test_start_node_writes_its_log_and_stop_process_interrupts(tmp_path, monkeypatch):
    # The same start/stop path with a stand-in for the node: a child that waits for SIGINT.
    child = ('import sys, time\nprint("started", sys.argv[1:], flush=True)\n'
             'try:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n'
             '    print("final counts: {\'\': {\'published\': 3}}", flush=True)\n')
    monkeypatch.setattr(plumbing, 'node_command',
                        lambda params, extra_args=(): [sys.executable, '-c', child,
                                                       *plumbing.ros_param(params['x'])])
    log = tmp_path / 'node.log'
    process = plumbing.start_node({'x': 'ab'}, log)
    deadline = time.monotonic() + 30
    while 'started' not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "started ['a', 'b']" in log.read_text()
    assert plumbing.stop_process(process, timeout=30) == 0  # SIGINT: KeyboardInterrupt, exit 0
    assert plumbing.parse_final_counts(log.read_text()) == {'': {'published': 3}}


def test_stop_process_kills_what_ignores_sigint():
    process = subprocess.Popen([sys.executable, '-c', 'import signal, sys, time\n'
                                'signal.signal(signal.SIGINT, signal.SIG_IGN)\n'
                                'print(1, flush=True)\ntime.sleep(60)'],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == '1'  # the handler is in place
    assert plumbing.stop_process(process, timeout=0.5) == -signal.SIGKILL
    process.stdout.close()
    assert plumbing.stop_process(process) == -signal.SIGKILL  # already stopped: its code


def test_environment_records():
    env = plumbing.environment()
    assert env['python'] and env['cores'] >= 1 and env['numpy']
    assert env['command'][0] and len(env['load_average']) == 3
    versions = plumbing.versions(['numpy', 'cv2', 'no_such_module_here'])
    assert list(versions) == ['python', 'numpy', 'opencv']
    commit, short = plumbing.git_commit(), plumbing.git_commit(short=True)
    assert (commit is None and short is None) or (len(commit) == 40
                                                  and commit.startswith(short))
    assert plumbing.run_text([sys.executable, '-c', 'raise SystemExit(3)']) is None
    assert plumbing.run_text(['/no/such/program']) is None
    assert env['git_dirty'] in (True, False, None)


def test_git_dirty_says_whether_tracked_files_changed(tmp_path):
    """A benchmark's JSON tells a committed tree from an edited one (untracked files aside)."""
    assert plumbing.git_dirty(tmp_path) is None  # not a repository
    git = ['git', '-C', str(tmp_path), '-c', 'user.name=t', '-c', 'user.email=t@example.com']
    if plumbing.run_text(git[:3] + ['init', '-q']) is None:
        pytest.skip('git is not available')
    (tmp_path / 'kernel.cu').write_text('a\n')
    assert plumbing.run_text(git + ['add', 'kernel.cu']) is not None
    assert plumbing.run_text(git + ['commit', '-q', '-m', 'first']) is not None
    assert plumbing.git_dirty(tmp_path) is False
    (tmp_path / 'notes.txt').write_text('untracked\n')
    assert plumbing.git_dirty(tmp_path) is False
    (tmp_path / 'kernel.cu').write_text('b\n')
    assert plumbing.git_dirty(tmp_path) is True


def test_load_upstream_errors(tmp_path, monkeypatch):
    pytest.importorskip('torch')
    monkeypatch.setattr(sys, 'path', list(sys.path))  # the checkout is put on it
    for name in ('modules', 'modules.xfeat'):  # imported here, forgotten afterwards
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(BackendError, match='has no modules/xfeat.py'):
        plumbing.load_upstream(tmp_path, {}, 4096, 0.05)
    (tmp_path / 'modules').mkdir()
    (tmp_path / 'modules' / '__init__.py').write_text('')
    (tmp_path / 'modules' / 'xfeat.py').write_text('import no_such_module_here\n')
    with pytest.raises(BackendError, match="needs the Python module 'no_such_module_here'"):
        plumbing.load_upstream(tmp_path, {}, 4096, 0.05)
