# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The node's names as ROS resolves them: its outputs' topics and its start-up FATAL line.

Every output (``debug_image`` included) is a relative name, so ``-r __ns:=/robot``
moves them all under ``/robot``; a node that cannot start says why under its
own name (``-r __node:=...``, its namespace), the reason once.
"""

import pytest
import rclpy
from rclpy.parameter import Parameter
from ros_harness import start_node
from xfeat_ros.ros.node import topic, XFeatNode

pytestmark = pytest.mark.ros
CAMERAS = ['', 'cam0']


@pytest.fixture
def robot_node():
    """Yield an in-process node started as ``-r __ns:=/robot``: two cameras, every output."""
    from core_fakes import ScriptedEngine
    context = rclpy.Context()
    rclpy.init(context=context)
    node = XFeatNode(engine=ScriptedEngine({}), context=context,
                     cli_args=['--ros-args', '-r', '__ns:=/robot'],
                     parameter_overrides=[Parameter('cameras', value=CAMERAS),
                                          Parameter('publish_keypoint_cloud', value=True),
                                          Parameter('publish_vins_features', value=True),
                                          Parameter('diagnostics_period_s', value=0.0)])
    yield node
    node.stop()
    node.destroy_node()
    rclpy.shutdown(context=context)


def test_every_output_follows_the_node_namespace(robot_node):
    assert robot_node.get_namespace() == '/robot'
    for camera in CAMERAS:
        ports = robot_node.ports[camera]
        names = {'keypoints': ports.keypoints.publisher.topic_name,
                 'matches': ports.matches.publisher.topic_name,
                 'debug_image': ports.debug.topic_name,
                 'keypoint_cloud': ports.cloud.topic_name,
                 'feature': ports.feature.topic_name}
        assert names == {name: f'/robot/{topic(camera, name)}' for name in names}
        assert robot_node.topic_name(camera, 'image') == f'/robot/{topic(camera, "image")}'


@pytest.mark.parametrize('value,reason', [
    ('-5', 'out of range. Min: 1, Max: 65536, value: -5'),
    ('abc', "got 'abc' of type 'STRING', expecting type 'INTEGER'")], ids=['range', 'type'])
def test_start_failure_names_the_node_and_says_why_once(tmp_path, value, reason):
    log = tmp_path / 'node.log'
    process = start_node({}, log, extra_args=['-r', '__node:=my_name', '-r', '__ns:=/robot',
                                              '-p', f'top_k:={value}'])
    assert process.wait(60) == 1
    [fatal] = [line for line in log.read_text().splitlines() if '[FATAL]' in line]
    assert '[robot.my_name]: cannot start: parameter top_k: ' in fatal, fatal
    assert fatal.endswith(reason), fatal
    assert fatal.count('top_k') == 1 and fatal.count(value) == 1, fatal
