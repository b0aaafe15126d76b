# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Every command line answers a mistake with one line and a non-zero exit, never a traceback."""

import os
from pathlib import Path
import signal
import subprocess
import sys
import time

from conftest import FIXTURES, REPO
import pytest
from xfeat_ros.cli import error_line, EXIT_ERROR, EXIT_INTERRUPTED, one_line_errors
from xfeat_ros.errors import ImageError
from xfeat_ros.ros.usage import help_requested, node_usage

TUM = FIXTURES / 'data' / 'tum_fr2_desk'


def run_tool(module, *args, env=None, timeout=120):
    """Run ``python -m xfeat_ros.<module> args``; return the finished process."""
    return subprocess.run([sys.executable, '-m', f'xfeat_ros.{module}', *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env=dict(os.environ, **(env or {})))


def assert_one_error_line(result, prog, says, code=EXIT_ERROR):
    """Assert the tool exited ``code`` and its stderr ends in one ``prog: error:`` line."""
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert 'Traceback' not in output, output
    errors = [line for line in result.stderr.splitlines() if 'error' in line.lower()]
    assert errors == [result.stderr.splitlines()[-1]], output
    assert errors[0].startswith(f'{prog}: error: ') and says in errors[0], output


# -- the plumbing ---------------------------------------------------------------------------


def test_error_line_forms():
    assert error_line('t', ImageError('bad\nsecond line')) == 't: error: bad'
    missing = FileNotFoundError(2, 'No such file or directory', '/x/y')
    assert error_line('t', missing) == 't: error: /x/y: No such file or directory'
    module = ModuleNotFoundError("No module named 'tqdm'", name='tqdm')
    assert error_line('t', module) == "t: error: needs the Python module 'tqdm', which is not " \
                                      'installed'


@pytest.mark.parametrize('raised,code,says', [
    (ImageError('no images found in config'), EXIT_ERROR, 't: error: no images found'),
    (NotADirectoryError(20, 'Not a directory', 'README.md'), EXIT_ERROR,
     't: error: README.md: Not a directory'),
    (KeyboardInterrupt(), EXIT_INTERRUPTED, 't: interrupted'),
])
def test_one_line_errors(capsys, raised, code, says):
    @one_line_errors('t')
    def main(argv=None):
        raise raised

    assert main([]) == code
    err = capsys.readouterr().err
    assert err.startswith(says) and err.count('\n') == 1


def test_usage_errors_and_bugs_pass_through():
    @one_line_errors('t')
    def usage(argv=None):
        raise SystemExit(2)

    @one_line_errors('t')
    def bug(argv=None):
        raise ZeroDivisionError

    with pytest.raises(SystemExit):
        usage()
    with pytest.raises(ZeroDivisionError):
        bug()


@pytest.mark.parametrize('argv,asked', [
    (['--help'], True), (['-h'], True), (['--ros-args', '-p', 'top_k:=5'], False),
    (['--ros-args', '--help'], False), ([], False), (['xfeat_node', '--help'], True)])
def test_help_requested(argv, asked):
    assert help_requested(argv) == asked


def test_node_usage_lists_every_parameter():
    from xfeat_ros.ros.node import PARAMETERS
    text = node_usage(PARAMETERS)
    assert text.startswith('usage: xfeat_node')
    assert 'xfeat_node --ros-args -r image:=/camera/image_raw' in text
    for name in PARAMETERS:
        assert f'\n  {name} (default ' in text, name


def test_node_help_prints_usage_instead_of_starting():
    start = time.monotonic()
    result = run_tool('ros.node', '--help', timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith('usage: xfeat_node') and 'top_k (default 4096)' in \
        result.stdout
    assert '[INFO]' not in result.stdout + result.stderr  # no node was started
    assert time.monotonic() - start < 30


# -- each tool ------------------------------------------------------------------------------


@pytest.mark.parametrize('source,says', [('missing', 'does not exist'),
                                         ('README.md', 'is not a folder')])
def test_play_missing_path_or_a_file(source, says):
    assert_one_error_line(run_tool('tools.play', REPO / source), 'xfeat_play', says)


def test_play_needs_a_subscriber_to_wait_for():
    assert_one_error_line(run_tool('tools.play', REPO / 'config', '--subscribers', '0'),
                          'xfeat_play', '--subscribers must be at least 1, got 0')


def test_demo_images_without_images():
    assert_one_error_line(run_tool('tools.demo', '--images', REPO / 'config'), 'xfeat_demo',
                          'no images found in')


def test_demo_weights_not_weights(tmp_path):
    result = run_tool('tools.demo', '--weights', REPO / 'README.md', '--output', tmp_path)
    assert_one_error_line(result, 'xfeat_demo', 'is not a weights file')
    assert 'weights_only' not in result.stderr and 'did not start' not in result.stderr


@pytest.mark.parametrize('module,prog,args', [
    ('tools.demo', 'xfeat_demo', ['--weights']),
    ('tools.export', 'xfeat_export', ['-o', 'x.onnx', '-w']),
    ('tools.weights_cli', 'xfeat_weights', ['check'])], ids=['demo', 'export', 'weights'])
def test_junk_npz(tmp_path, module, prog, args):
    junk = tmp_path / 'junk.npz'
    junk.write_bytes(os.urandom(3000))
    result = run_tool(module, *args, junk)
    assert_one_error_line(result, prog, 'is not an .npz weights file')
    assert 'allow_pickle' not in result.stderr


def test_bench_cpu_without_shared(tmp_path):
    result = run_tool('tools.bench', 'cpu', env={'XFEAT_ROS_SHARED': str(tmp_path / 'no_shared')})
    assert_one_error_line(result, 'xfeat_bench', 'give --images DIR')


def test_eval_and_offline_missing_input(tmp_path):
    assert_one_error_line(run_tool('tools.evaluation', tmp_path / 'none', '--out', tmp_path / 'o'),
                          'xfeat_eval', 'is not a folder', code=2)
    assert_one_error_line(run_tool('tools.offline', tmp_path / 'none', tmp_path / 'out'),
                          'xfeat_offline', 'is not a rosbag2 bag')


def wait_for_line(process, text, timeout):
    """Read ``process``'s merged output until a line holds ``text``; return all read."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return ''.join(seen)
    raise AssertionError(f'no {text!r} within {timeout} s: {"".join(seen)}')


@pytest.mark.ros
def test_ctrl_c_in_the_demo(tmp_path):
    process = subprocess.Popen(
        [sys.executable, '-m', 'xfeat_ros.tools.demo', '--frames', '200', '--rate', '5',
         '--output', str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED='1'))
    try:
        wait_for_line(process, 'node ready: publishing', 120)  # the interrupt lands mid-run
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == EXIT_INTERRUPTED, rest
    assert rest.strip().splitlines()[-1] == 'xfeat_demo: interrupted', rest
    assert 'Traceback' not in rest and 'Exception' not in rest, rest
    assert 'final counts' in (tmp_path / 'node.log').read_text()  # its node was stopped


@pytest.mark.ros
@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT], ids=['term', 'int'])
def test_signal_stops_play_cleanly(sig):
    from ros_harness import Client, private_topic
    from sensor_msgs.msg import Image
    client = Client()
    images = []
    topic = private_topic('image')
    client.node.create_subscription(Image, topic, images.append, 10)
    process = subprocess.Popen(
        [sys.executable, '-m', 'xfeat_ros.tools.play', str(TUM), '--loop', '--rate', '20',
         '--topic', topic],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED='1'))
    try:
        assert client.spin_until(lambda: len(images) >= 3 or process.poll() is not None, 60)
        assert process.poll() is None, process.stdout.read()
        process.send_signal(sig)
        output, _ = process.communicate(timeout=30)
    finally:
        client.close()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert 'Traceback' not in output and 'RCLError' not in output, output
    assert 'stopped' in output, output


def test_every_console_script_is_wrapped():
    """Each entry point in setup.py is a main with one-line errors (or the node's)."""
    import importlib
    import re
    scripts = re.findall(r"'(xfeat_\w+) = (xfeat_ros[\w.]*):main'",
                         (REPO / 'setup.py').read_text())
    assert len(scripts) >= 8
    for name, module in scripts:
        main = importlib.import_module(module).main
        if name == 'xfeat_node':
            continue  # a ROS node: --help is answered first, errors are logged FATAL
        assert getattr(main, '__wrapped__', None) is not None, name
    assert Path(REPO / 'xfeat_ros' / 'cli.py').is_file()
