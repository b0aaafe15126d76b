# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
r"""
Launch the xfeat node.

Usage::

    ros2 launch xfeat_ros xfeat.launch.py namespace:=cam image:=/cam/image_raw
    ros2 launch xfeat_ros xfeat.launch.py cameras:=left,right \\
        remappings:='left/image:=/stereo/left/image_raw right/image:=/stereo/right/image_raw'
    ros2 launch xfeat_ros xfeat.launch.py params_file:=my.yaml weights:=/data/xfeat.pt

Arguments (``ros2 launch xfeat_ros xfeat.launch.py --show-args``): ``image``,
``cameras``, ``remappings``, ``namespace``, ``params_file``, ``backend``,
``weights`` and ``dds_profile``. Outputs (``keypoints``, ``matches``, ...) are
relative names: they land in the node's namespace, whatever the input topic.

``dds_profile`` gives the node the shipped Fast DDS profile
(config/fastdds_shm.xml: large messages through shared memory) through
``FASTDDS_DEFAULT_PROFILES_FILE`` unless that variable is already exported
(the exported one wins); ``''`` leaves the environment alone.

The decisions live in :func:`node_settings` (plain Python, tested without
launch); launch itself is imported only when a launch description is built.
"""

import os
import re

from xfeat_ros import dds

NODE_NAME = 'xfeat'
ARGUMENTS = (
    ('image', 'image',
     'image topic of the single camera (remaps the input "image" of the node); outputs stay '
     'relative: with image:=/cam/image_raw they land at the namespace root (/keypoints, '
     '/matches), so add namespace:=cam for /cam/keypoints. No effect when cameras are set: '
     'use remappings'),
    ('cameras', '',
     'comma-separated camera names (each subscribes <name>/image and publishes '
     '<name>/keypoints, ...); empty: the cameras of params_file'),
    ('remappings', '',
     'extra remapping rules FROM:=TO separated by spaces, e.g. '
     '"cam0/image:=/left/image_raw cam1/image:=/right/image_raw"'),
    ('namespace', '', 'namespace of the node and its topics'),
    ('params_file', '', 'YAML file with the node parameters (empty: config/xfeat.yaml '
                        'of this package)'),
    ('backend', '', 'auto, onnxruntime, pytorch, tensorrt, onnxruntime_cuda (empty: from '
                    'params_file)'),
    ('weights', '', 'XFeat weights file, .pt or .npz (empty: from params_file, then '
                    '$XFEAT_ROS_WEIGHTS, the cache, the packaged copy)'),
    ('dds_profile', dds.SHIPPED,
     f'Fast DDS profile of the node: "{dds.SHIPPED}" ({dds.PROFILE_NAME}: shared memory '
     f'for large images and Keypoints), a path, or "" to leave the environment alone; an '
     f'exported {dds.PROFILE_ENV} always wins'),
)


def parse_remappings(text):
    """Return ``[(from, to), ...]`` of ``'a:=b c:=d'`` (spaces, commas or semicolons)."""
    rules = []
    for item in re.split(r'[\s,;]+', text.strip()):
        if not item:
            continue
        source, sep, target = item.partition(':=')
        if not sep or not source or not target or ':=' in target:
            raise ValueError(f'remappings: {item!r} is not a FROM:=TO rule')
        rules.append((source, target))
    return rules


def _applies(key, node_path):
    """Tell whether a params-file key (``/**``, ``/**/xfeat``, ``/ns/xfeat``) names the node."""
    pattern = '/' + str(key).lstrip('/')
    regex = re.escape(pattern).replace(r'/\*\*', '(/[^/]+)*').replace(r'\*', '[^/]*')
    return re.fullmatch(regex, node_path) is not None


def params_file_cameras(path, namespace):
    """Return the ``cameras`` a params file gives the node (None: not set or unreadable)."""
    import yaml
    try:
        with open(path, encoding='utf-8') as stream:
            content = yaml.safe_load(stream)
    except (OSError, yaml.YAMLError):
        return None
    node_path = '/'.join(['', *[p for p in namespace.split('/') if p], NODE_NAME])
    cameras = None
    for key, entry in (content or {}).items() if isinstance(content, dict) else ():
        params = entry.get('ros__parameters') if isinstance(entry, dict) else None
        if isinstance(params, dict) and 'cameras' in params and _applies(key, node_path):
            cameras = params['cameras']
    return cameras


def node_settings(args, env, default_params):
    """
    Decide the node's parameters, remappings and environment from the launch arguments.

    ``args``: dict of argument name -> string (see :data:`ARGUMENTS`); ``env``:
    the launch process's environment; ``default_params``: the shipped
    config/xfeat.yaml. Returns a dict with ``parameters`` (list for the Node
    action), ``remappings`` (list of pairs), ``env`` (variables to add) and
    ``warnings`` (lines to log: arguments that have no effect). Raises
    ValueError (bad remappings) or :class:`xfeat_ros.errors.ParameterError`
    (a dds_profile path that is not a file).
    """
    params_file = args.get('params_file') or default_params
    parameters = [params_file]
    overrides = {}
    for name in ('backend', 'weights'):
        if args.get(name):
            overrides[name] = args[name]
    cameras_arg = [c.strip() for c in args.get('cameras', '').split(',') if c.strip()]
    if cameras_arg:
        overrides['cameras'] = cameras_arg
    if overrides:
        parameters.append(overrides)
    warnings = []
    rules = parse_remappings(args.get('remappings', ''))
    image = args.get('image', 'image') or 'image'
    cameras = cameras_arg or params_file_cameras(params_file, args.get('namespace', ''))
    # The node's default cameras [''] means the plain topics (image, keypoints, ...).
    plain = not isinstance(cameras, list) or not cameras or '' in cameras
    if image != 'image':
        named = [c for c in cameras if c] if isinstance(cameras, list) else []
        if not plain:
            warnings.append(
                f'image:={image} has no effect: the node subscribes '
                f'{", ".join(c + "/image" for c in named)} (cameras {named}); remap those '
                f"with remappings:='{named[0]}/image:=...'")
        elif any(source == 'image' for source, _ in rules):
            warnings.append(f'image:={image} has no effect: remappings also remaps "image", '
                            'and that rule comes first')
        else:
            rules.append(('image', image))
    decision = dds.decide_profile(args.get('dds_profile', dds.SHIPPED), env)
    if decision.ignored:
        warnings.append(f'dds_profile:={args["dds_profile"]} has no effect: '
                        f'{dds.PROFILE_ENV}={env.get(dds.PROFILE_ENV)} is exported')
    extra_env = {dds.PROFILE_ENV: decision.path} if decision.path else {}
    return {'parameters': parameters, 'remappings': rules, 'env': extra_env,
            'warnings': warnings, 'profile': decision}


def _node(context):
    from launch.logging import get_logger
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node
    values = {name: LaunchConfiguration(name).perform(context) for name, _, _ in ARGUMENTS}
    settings = node_settings(values, os.environ, _default_params())
    logger = get_logger('xfeat.launch')
    for line in settings['warnings']:
        logger.warning(line)
    logger.info(f'DDS: {settings["profile"].describe()}')
    return [Node(
        package='xfeat_ros',
        executable='xfeat_node',
        name=NODE_NAME,
        namespace=values['namespace'],
        parameters=settings['parameters'],
        remappings=settings['remappings'],
        additional_env=settings['env'],
        output='screen',
        emulate_tty=True,
    )]


def _default_params():
    from ament_index_python.packages import get_package_share_directory
    return os.path.join(get_package_share_directory('xfeat_ros'), 'config', 'xfeat.yaml')


def generate_launch_description():
    """Return the launch description: the arguments of :data:`ARGUMENTS`, then the node."""
    from launch import LaunchDescription
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    return LaunchDescription([
        *[DeclareLaunchArgument(name, default_value=default, description=description)
          for name, default, description in ARGUMENTS],
        OpaqueFunction(function=_node),
    ])
