# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The package's ``logging`` loggers, propagating whatever logger class is in force.

Every module of xfeat_ros that logs, the tools' included, takes its logger from
:func:`package_logger` rather than ``logging.getLogger``. Records of
``xfeat_ros.<module>`` reach the node's ROS logger
(:func:`xfeat_ros.runtime.report.forward_package_logs`, a handler on ``xfeat_ros``),
and the tools' (``xfeat_map``, ...) the root logger's handlers
(``logging.basicConfig``, pytest's ``caplog``), only by propagation. Importing
ROS 2's ``launch`` (``ros2 launch``, launch_testing's pytest plugin, which pytest
loads wherever launch_testing is installed) installs a logger class that creates
every later logger with ``propagate = False``: without this, such records would
stop at their own logger, reaching none of those.
"""

import logging


def package_logger(name):
    """
    Return ``logging.getLogger(name)``, it and its ancestors below the root propagating.

    ``name`` is a dotted logger name (``__name__`` of a module of the package).
    """
    logger = logging.getLogger(name)
    parts = name.split('.')
    for end in range(len(parts), 0, -1):
        logging.getLogger('.'.join(parts[:end])).propagate = True
    return logger
