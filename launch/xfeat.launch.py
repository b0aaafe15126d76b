# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
r"""
Launch the xfeat node.

Usage::

    ros2 launch xfeat_ros xfeat.launch.py namespace:=cam image:=/cam/image_raw
    ros2 launch xfeat_ros xfeat.launch.py cameras:=left,right \\
        remappings:='left/image:=/stereo/left/image_raw right/image:=/stereo/right/image_raw'
    ros2 launch xfeat_ros xfeat.launch.py params_file:=my.yaml weights:=/data/xfeat.pt
    ros2 launch xfeat_ros xfeat.launch.py cameras:=c0,c1,c2,c3 node_processes:=2
    ros2 launch xfeat_ros xfeat.launch.py use_sim_time:=true log_level:=debug   # a bag

Arguments (``ros2 launch xfeat_ros xfeat.launch.py --show-args``): ``image``,
``cameras``, ``remappings``, ``namespace``, ``params_file``, ``backend``,
``weights``, ``dds_profile``, ``node_processes``, ``use_sim_time`` and
``log_level``. Outputs (``keypoints``, ``matches``, ``debug_image``, ...) are
relative names: they land in the node's namespace, whatever the input topic.

``use_sim_time`` sets the node parameter of that name (``true``: the node's
clock follows ``/clock``, as for ``ros2 bag play --clock``; empty, the default:
the params file's value, else false). ``log_level`` reaches each node as
``--ros-args --log-level`` (a level, or ``LOGGER:=LEVEL``).

``dds_profile`` gives the node the shipped Fast DDS profile
(config/fastdds_shm.xml: large messages through shared memory) through
``FASTDDS_DEFAULT_PROFILES_FILE`` unless that variable is already exported
(the exported one wins); ``''`` leaves the environment alone.

``node_processes`` deals the named cameras round robin over that many node
processes (``xfeat_0``, ``xfeat_1``, ...; each its own interpreter, CUDA context
and parameters: the params file's entries for ``xfeat`` plus its share of the
cameras). One node's Python work bounds it near 400 frames/s on the H200
machine; 8 cameras at 120 Hz need 4 (docs/performance.md). Topics do not
change. A stereo pair must stay in one node, so ``stereo_pairs`` needs 1.
Several processes share the GPU well only with the CUDA MPS daemon running
(``nvidia-cuda-mps-control -d``; without it their contexts take turns): the
launch says so when the nodes will use a GPU engine (:func:`uses_gpu`) and it
sees no daemon (:func:`mps_running`); without a GPU it says nothing of MPS.

The decisions live in :func:`node_settings` (plain Python, tested without
launch); launch itself is imported only when a launch description is built.
"""

import os
import re

from xfeat_ros.features.engine import CPU_BACKEND, GPU_BACKENDS
from xfeat_ros.ros import dds

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
    ('node_processes', '1',
     'node processes the named cameras are dealt over (round robin; nodes xfeat_0, xfeat_1, '
     '...): one node handles ~400 frames/s, so many fast cameras need several; topics stay '
     'the same; not with stereo_pairs'),
    ('dds_profile', dds.SHIPPED,
     f'Fast DDS profile of the node: "{dds.SHIPPED}" ({dds.PROFILE_NAME}: shared memory '
     f'for large images and Keypoints), a path, or "" to leave the environment alone; an '
     f'exported {dds.PROFILE_ENV} always wins'),
    ('use_sim_time', '',
     'true: the node takes its time from /clock (a bag played with --clock); false: the '
     'system clock; empty: use_sim_time of params_file, else false. Sets the node '
     'parameter use_sim_time'),
    ('log_level', 'info',
     'log level of the node: debug, info, warn, error or fatal, or LOGGER:=LEVEL for one '
     'logger (passed as --ros-args --log-level)'),
)
LOG_LEVELS = ('debug', 'info', 'warn', 'warning', 'error', 'fatal', 'unset')


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


def params_file_values(path, namespace):
    """
    Return the parameters a params file gives the node (merged in file order).

    None when the file cannot be read; an empty dict when nothing applies.
    """
    import yaml
    try:
        with open(path, encoding='utf-8') as stream:
            content = yaml.safe_load(stream)
    except (OSError, yaml.YAMLError):
        return None
    node_path = '/'.join(['', *[p for p in namespace.split('/') if p], NODE_NAME])
    values = {}
    for key, entry in (content or {}).items() if isinstance(content, dict) else ():
        params = entry.get('ros__parameters') if isinstance(entry, dict) else None
        if isinstance(params, dict) and _applies(key, node_path):
            values.update(params)
    return values


def node_count(text):
    """Return the ``node_processes`` argument as an int >= 1; ValueError otherwise."""
    try:
        count = int(str(text).strip() or '1')
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f'node_processes: {text!r} is not a whole number >= 1')
    return count


def sim_time(text):
    """Return the ``use_sim_time`` argument as a bool, None when empty; ValueError otherwise."""
    value = str(text).strip().lower()
    if not value:
        return None
    if value not in ('true', 'false'):
        raise ValueError(f'use_sim_time: {text!r} is not true or false')
    return value == 'true'


def log_level_arguments(text):
    """Return the ROS arguments of the ``log_level`` argument (``--log-level``); ValueError."""
    value = str(text).strip()
    if not value:
        return []
    level = value.rpartition(':=')[2]
    if level.strip().lower() not in LOG_LEVELS or value.startswith(':='):
        raise ValueError(f'log_level: {text!r} is not one of {", ".join(LOG_LEVELS[:6])} '
                         '(or LOGGER:=LEVEL)')
    return ['--log-level', value]


def uses_gpu(backend, gpu_present):
    """
    Tell whether nodes of ``backend`` run a GPU engine.

    ``gpu_present``: a callable telling whether this machine has a GPU (asked
    only for ``auto``, which runs the CPU engine where it has none).
    """
    backend = backend or 'auto'
    if backend == CPU_BACKEND:
        return False
    return backend in GPU_BACKENDS or bool(gpu_present())


def mps_running(env, exists=os.path.exists):
    """Tell whether a CUDA MPS control daemon listens (its pipe directory holds ``control``)."""
    pipe_dir = env.get('CUDA_MPS_PIPE_DIRECTORY') or '/tmp/nvidia-mps'
    return exists(os.path.join(pipe_dir, 'control'))


def mps_notes(count, backend, env, gpu_present=None):
    """
    Return the note for ``count`` node processes of ``backend`` sharing a GPU without MPS.

    Nothing for one process, for the CPU engine (``onnxruntime``, or ``auto``
    where this machine has no GPU) and where the MPS daemon runs.
    ``gpu_present`` as :func:`uses_gpu` (default
    :func:`xfeat_ros.tools.plumbing.gpu_present`: nvidia-smi lists a GPU).
    """
    if count < 2:
        return []
    if gpu_present is None:
        from xfeat_ros.tools import plumbing
        gpu_present = plumbing.gpu_present
    if not uses_gpu(backend, gpu_present) or mps_running(env):
        return []
    return [f'{count} node processes share the GPU by taking turns: with the CUDA MPS daemon '
            '(nvidia-cuda-mps-control -d, started before the launch) their work overlaps; on '
            'the H200 machine 8 x 120 Hz over 4 processes: p99 18-20 -> 10.5-12 ms '
            '(docs/performance.md)']


def split_nodes(count, cameras, params_file, file_values, overrides):
    """
    Deal the cameras over ``count`` nodes: ``[(name, parameters), ...]``.

    One process keeps the node's own name and the params file as it is. More
    processes take the file's values for the ``xfeat`` node (``file_values``:
    their names differ) and each its share of the named cameras. Raises
    ValueError for plain (unnamed) cameras, or stereo pairs, which must stay
    in one node.
    """
    if count == 1:
        return [(NODE_NAME, [params_file, overrides] if overrides else [params_file])]
    named = cameras if isinstance(cameras, list) and cameras and '' not in cameras else None
    if named is None:
        raise ValueError('node_processes > 1 needs named cameras (cameras:=c0,c1,...): the '
                         'plain camera is one node')
    values = dict(file_values or {}, **overrides)
    if values.get('stereo_pairs'):
        raise ValueError('node_processes > 1 with stereo_pairs: a stereo pair is matched '
                         'inside one node; use node_processes:=1')
    count = min(count, len(named))
    return [(f'{NODE_NAME}_{k}', [dict(values, cameras=named[k::count])])
            for k in range(count)]


def node_settings(args, env, default_params, gpu_present=None):
    """
    Decide the node's parameters, remappings and environment from the launch arguments.

    ``args``: dict of argument name -> string (see :data:`ARGUMENTS`); ``env``:
    the launch process's environment; ``default_params``: the shipped
    config/xfeat.yaml. Returns a dict with ``parameters`` (list for the Node
    action), ``remappings`` (list of pairs), ``env`` (variables to add),
    ``warnings`` (lines to log: arguments that have no effect), ``notes`` (lines
    to log as information: several node processes on a GPU without CUDA MPS),
    ``ros_arguments`` (for each node: the log level) and ``nodes``
    (``[(name, parameters)]``, one per node process, see :func:`split_nodes`).
    ``gpu_present``: as :func:`mps_notes`.
    Raises ValueError (bad remappings, node_processes, use_sim_time or log_level) or
    :class:`xfeat_ros.errors.ParameterError` (a dds_profile path that is not a file).
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
    use_sim_time = sim_time(args.get('use_sim_time', ''))
    if use_sim_time is not None:
        overrides['use_sim_time'] = use_sim_time
    ros_arguments = log_level_arguments(args.get('log_level', ''))
    if overrides:
        parameters.append(overrides)
    warnings = []
    rules = parse_remappings(args.get('remappings', ''))
    image = args.get('image', 'image') or 'image'
    file_values = params_file_values(params_file, args.get('namespace', ''))
    cameras = cameras_arg or (file_values or {}).get('cameras')
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
    count = node_count(args.get('node_processes', '1'))
    nodes = split_nodes(count, cameras, params_file, file_values, overrides)
    if len(nodes) < count:
        warnings.append(f'node_processes:={count} has more processes than cameras: '
                        f'{len(nodes)} nodes, one camera each')
    backend = overrides.get('backend') or (file_values or {}).get('backend')
    notes = mps_notes(len(nodes), backend, env, gpu_present)
    return {'parameters': parameters, 'remappings': rules, 'env': extra_env,
            'warnings': warnings, 'notes': notes, 'profile': decision,
            'ros_arguments': ros_arguments, 'nodes': nodes}


def _node(context):
    from launch.logging import get_logger
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node
    values = {name: LaunchConfiguration(name).perform(context) for name, _, _ in ARGUMENTS}
    settings = node_settings(values, os.environ, _default_params())
    logger = get_logger('xfeat.launch')
    for line in settings['warnings']:
        logger.warning(line)
    for line in settings['notes']:
        logger.info(line)
    logger.info(f'DDS: {settings["profile"].describe()}')
    return [Node(
        package='xfeat_ros',
        executable='xfeat_node',
        name=name,
        namespace=values['namespace'],
        parameters=parameters,
        remappings=settings['remappings'],
        ros_arguments=settings['ros_arguments'],
        additional_env=settings['env'],
        output='screen',
        emulate_tty=True,
    ) for name, parameters in settings['nodes']]


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
