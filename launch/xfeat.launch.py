# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Launch the xfeat node.

Usage::

    ros2 launch xfeat_ros xfeat.launch.py image:=/camera/image_raw
    ros2 launch xfeat_ros xfeat.launch.py namespace:=front params_file:=my.yaml

Arguments: ``image`` (the topic remapped onto the node's ``image`` input),
``params_file`` (default: this package's config/xfeat.yaml), ``namespace``,
``backend`` (empty: keep the params file's value). Outputs are ``keypoints`` and
``matches`` in the node's namespace.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node


def _node(context):
    backend = LaunchConfiguration('backend').perform(context)
    parameters = [LaunchConfiguration('params_file').perform(context)]
    if backend:
        parameters.append({'backend': backend})
    return [Node(
        package='xfeat_ros',
        executable='xfeat_node',
        name='xfeat',
        namespace=LaunchConfiguration('namespace').perform(context),
        parameters=parameters,
        remappings=[('image', LaunchConfiguration('image').perform(context))],
        output='screen',
        emulate_tty=True,
    )]


def generate_launch_description():
    """Launch description with the image, params_file, namespace and backend arguments."""
    default_params = os.path.join(get_package_share_directory('xfeat_ros'), 'config',
                                  'xfeat.yaml')
    return LaunchDescription([
        DeclareLaunchArgument('image', default_value='image',
                              description='image topic to subscribe (remaps "image")'),
        DeclareLaunchArgument('params_file', default_value=default_params,
                              description='YAML file with the node parameters'),
        DeclareLaunchArgument('namespace', default_value='',
                              description='namespace of the node and its topics'),
        DeclareLaunchArgument('backend', default_value='',
                              description='auto, onnxruntime, pytorch, tensorrt, '
                                          'onnxruntime_cuda (empty: from params_file)'),
        OpaqueFunction(function=_node),
    ])
