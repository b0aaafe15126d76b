# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
launch_pytest test of launch/xfeat.launch.py.

Runs where launch_pytest is installed (a ROS 2 install); the PyPI ROS wheels
have no launch packages, so it is skipped there with that reason. The launch
file is included with an ``image`` remap, a namespace and the CPU backend; the
test publishes a real frame on the remapped topic and waits for Keypoints in
the namespace.
"""

import os
from pathlib import Path
import time

import pytest

launch_pytest = pytest.importorskip(
    'launch_pytest', reason='launch_pytest is not installed (it ships with ROS 2, not PyPI)')

from launch import LaunchDescription  # noqa: E402, I100
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
IMAGE_TOPIC = '/test_camera/image_raw'
NAMESPACE = 'launch_test'


@launch_pytest.fixture
def xfeat_launch(weights_npz, tmp_path_factory):
    """Include the package's launch file as a user would call it."""
    import yaml
    os.environ['XFEAT_ROS_WEIGHTS'] = str(weights_npz)  # the node inherits it
    # The shipped params, with a reliable input: a best-effort subscription loses
    # most 640x480 RGB frames here (FastDDS falls back from shared memory to UDP
    # fragments above 512 KiB, and best effort does not repair them).
    params = yaml.safe_load((REPO / 'config' / 'xfeat.yaml').read_text())
    params['/**/xfeat']['ros__parameters']['input_qos_reliability'] = 'reliable'
    params_file = tmp_path_factory.mktemp('launch') / 'xfeat.yaml'
    params_file.write_text(yaml.safe_dump(params))
    launch_file = REPO / 'launch' / 'xfeat.launch.py'
    return LaunchDescription([
        IncludeLaunchDescription(
            PythonLaunchDescriptionSource(str(launch_file)),
            launch_arguments={'image': IMAGE_TOPIC, 'namespace': NAMESPACE,
                              'backend': 'onnxruntime',
                              'params_file': str(params_file)}.items()),
        launch_pytest.actions.ReadyToTest(),
    ])


@pytest.mark.launch(fixture=xfeat_launch)
def test_launch_file_runs_node(data_dir):
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from xfeat_ros.image_files import list_sequence, read_image
    from xfeat_ros.messages import image_msg, message_types

    keypoints_type, matches_type = message_types()
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('xfeat_launch_test', context=context)
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    got, matched = [], []
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    node.create_subscription(keypoints_type, f'/{NAMESPACE}/keypoints', got.append, qos)
    node.create_subscription(matches_type, f'/{NAMESPACE}/matches', matched.append, qos)
    publisher = node.create_publisher(Image, IMAGE_TOPIC, qos)
    frames = [read_image(p) for _, p in list_sequence(data_dir / 'data' / 'tum_fr2_desk')[:2]]
    try:
        deadline = time.monotonic() + 60
        while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
        assert publisher.get_subscription_count() > 0, 'node did not subscribe the remapped topic'
        for frame in frames:
            publisher.publish(image_msg(*frame))
            deadline = time.monotonic() + 60
            count = len(got)
            while len(got) == count and time.monotonic() < deadline:
                executor.spin_once(timeout_sec=0.1)
        deadline = time.monotonic() + 30
        while not matched and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
        assert len(got) == 2 and len(matched) == 1
        assert len(got[0].scores) > 1000 and got[0].descriptor_size == 64
        assert len(matched[0].current_indices) > 300
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
