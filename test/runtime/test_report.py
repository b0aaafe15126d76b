# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The package's logging records reach the node's logger at their level, once."""

import ast
import importlib.util
import json
import logging
from pathlib import Path
import subprocess
import sys

import pytest
from xfeat_ros import logs
from xfeat_ros.runtime.report import forward_package_logs

PACKAGE_DIR = Path(__file__).resolve().parents[2] / 'xfeat_ros'


class Lines:
    """A logger of one-string methods (as rclpy's) that keeps what it is given."""

    def __init__(self, name='xfeat'):
        self.name = name
        self.lines = []

    def __getattr__(self, level):
        if level not in ('fatal', 'error', 'warning', 'info', 'debug'):
            raise AttributeError(level)
        return lambda text: self.lines.append((level, text))


@pytest.fixture
def package_logger():
    logger = logging.getLogger('xfeat_ros')
    level, handlers = logger.level, list(logger.handlers)
    yield logger
    logger.setLevel(level)
    logger.handlers[:] = handlers


def test_levels_names_and_tracebacks(package_logger):
    lines = Lines()
    stop = forward_package_logs(lines)
    log = logs.package_logger('xfeat_ros.features.gpu.backbone')  # as the package's modules do
    log.debug('not at INFO')
    log.info('captured a CUDA graph of the backbone for %d x %dx%d', 2, 640, 480)
    log.warning('capture failed')
    log.error('error %s', 'text')
    log.critical('critical')
    try:
        raise ValueError('boom')
    except ValueError:
        log.exception('with a traceback')
    logging.getLogger('other_package').warning('not ours')
    assert lines.lines[:4] == [
        ('info', 'xfeat_ros.features.gpu.backbone: captured a CUDA graph of the backbone for '
                 '2 x 640x480'),
        ('warning', 'xfeat_ros.features.gpu.backbone: capture failed'),
        ('error', 'xfeat_ros.features.gpu.backbone: error text'),
        ('fatal', 'xfeat_ros.features.gpu.backbone: critical')]
    level, text = lines.lines[4]
    assert level == 'error'
    assert text.startswith('xfeat_ros.features.gpu.backbone: with a traceback\n')
    assert 'ValueError: boom' in text
    assert len(lines.lines) == 5
    stop()
    log.warning('after stop')
    assert len(lines.lines) == 5


def test_a_node_made_again_does_not_log_twice(package_logger):
    first, second, other = Lines(), Lines(), Lines('xfeat_1')
    forward_package_logs(first)           # a node whose start failed: never stopped
    stop = forward_package_logs(second)   # the same node name again
    stop_other = forward_package_logs(other)
    logs.package_logger('xfeat_ros.features.engine').info('once')
    assert first.lines == []
    assert second.lines == other.lines == [('info', 'xfeat_ros.features.engine: once')]
    stop()
    stop_other()


# Run in a fresh interpreter where new loggers do not propagate, as after ``import launch``
# (its logger class sets ``propagate = False``; launch_testing's pytest plugin imports it),
# then import the package and log from two of its modules.
NO_PROPAGATION = """
import json, logging, sys
if sys.argv[1] == 'launch':
    import launch  # noqa: F401
else:
    class LaunchLike(logging.getLoggerClass()):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.propagate = False
    logging.setLoggerClass(LaunchLike)
probe = logging.getLogger('probe.made_after')
assert not probe.propagate, 'loggers made now must not propagate'

class Lines:
    name = 'xfeat'
    lines = []
    def __getattr__(self, level):
        return lambda text: self.lines.append([level, text])

root = []
handler = logging.Handler()
handler.emit = lambda record: root.append(record.name)
logging.getLogger().addHandler(handler)
from xfeat_ros.features import engine, weights
from xfeat_ros.runtime.report import forward_package_logs
forward_package_logs(Lines())
engine.LOG.info('from the engine')
weights.LOG.warning('from weights')
print(json.dumps({'lines': Lines.lines, 'root': root}))
"""


@pytest.mark.parametrize('how', ['simulated', 'launch'])
def test_records_reach_the_node_and_root_where_loggers_do_not_propagate(how):
    if how == 'launch' and importlib.util.find_spec('launch.logging') is None:  # not ../launch
        pytest.skip('ROS 2 launch is not installed (the simulated case covers its effect)')
    run = subprocess.run([sys.executable, '-c', NO_PROPAGATION, how], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out['lines'] == [['info', 'xfeat_ros.features.engine: from the engine'],
                            ['warning', 'xfeat_ros.features.weights: from weights']]
    # the root logger's handlers (pytest's caplog, for one) get them too
    assert out['root'] == ['xfeat_ros.features.engine', 'xfeat_ros.features.weights']


def made_loggers(path):
    """Yield (line, name) for each logger the module at ``path`` makes with logging.getLogger."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == 'getLogger' and node.args):
            yield node.lineno, ast.unparse(node.args[0])


def test_the_package_makes_its_loggers_propagating():
    """Every logger of the package (modules' and tools') comes from package_logger."""
    found = []
    for path in sorted(PACKAGE_DIR.rglob('*.py')):
        if path.name != 'logs.py':
            found += [f'{path.relative_to(PACKAGE_DIR)}:{line} getLogger({arg})'
                      for line, arg in made_loggers(path)]
    assert found == []


def test_tally_counts_each_key_from_one_throttled_or_not():
    from xfeat_ros.runtime.report import MAX_REASONS, reason_key, Reporter
    from xfeat_ros.errors import ImageLayoutError
    lines = Lines()
    report = Reporter(lines, clock=lambda: 0.0)  # a frozen clock: repeats are throttled
    step, empty = (ImageLayoutError('step 10 is smaller than width * 3 = 30'),
                   ImageLayoutError('empty image (0 x 0)'))
    assert reason_key(step) != reason_key(empty)  # one error class, two reasons
    counts = [report.tally(('cam', reason_key(exc))) for exc in (step, step, step, empty, step)]
    assert counts == [1, 2, 3, 1, 4]
    assert report.tally(('other', reason_key(empty))) == 1  # per camera too
    for k in range(MAX_REASONS):  # bounded: the oldest key is forgotten first
        report.tally(('many', k))
    assert report.tally(('cam', reason_key(step))) == 1
