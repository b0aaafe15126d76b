# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The package's logging records reach the node's logger at their level, once."""

import logging

import pytest
from xfeat_ros.core.report import forward_package_logs


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
    log = logging.getLogger('xfeat_ros.gpu.backbone')
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
        ('info', 'xfeat_ros.gpu.backbone: captured a CUDA graph of the backbone for 2 x 640x480'),
        ('warning', 'xfeat_ros.gpu.backbone: capture failed'),
        ('error', 'xfeat_ros.gpu.backbone: error text'),
        ('fatal', 'xfeat_ros.gpu.backbone: critical')]
    level, text = lines.lines[4]
    assert level == 'error' and text.startswith('xfeat_ros.gpu.backbone: with a traceback\n')
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
    logging.getLogger('xfeat_ros.engine').info('once')
    assert first.lines == []
    assert second.lines == other.lines == [('info', 'xfeat_ros.engine: once')]
    stop()
    stop_other()
