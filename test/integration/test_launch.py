# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
launch/xfeat.launch.py: its decisions everywhere, the real launch where launch exists.

:func:`node_settings` (parameters, remappings, the DDS profile's environment,
warnings for arguments without effect) is plain Python: tested here on every
machine. The launch_pytest tests include the launch file as a user would and
talk to the node it starts (one camera with ``image:=`` and a namespace; two
cameras with ``remappings``); they need launch_pytest, which ships with ROS 2
and not with the PyPI wheels, so they are skipped there with that reason.
"""

from pathlib import Path
import time

import pytest
from script_loader import load_script

from xfeat_ros.errors import ParameterError
from xfeat_ros.ros import dds

REPO = Path(__file__).resolve().parents[2]
LAUNCH_FILE = REPO / 'launch' / 'xfeat.launch.py'
DEFAULT_PARAMS = str(REPO / 'config' / 'xfeat.yaml')


def load_launch_module():
    """Import the launch file as a module (it imports launch only when used)."""
    return load_script(LAUNCH_FILE.relative_to(REPO), 'xfeat_launch_file')


launch_file = load_launch_module()


def settings(env=None, gpu=True, **args):
    """node_settings of ``args`` over the declared defaults, without a profile exported."""
    values = {name: default for name, default, _ in launch_file.ARGUMENTS}
    values.update(args)
    return launch_file.node_settings(values, {} if env is None else env, DEFAULT_PARAMS,
                                     gpu_present=lambda: gpu)


def params_file(tmp_path, text):
    """Write a params YAML file; returns its path as str."""
    path = tmp_path / 'params.yaml'
    path.write_text(text)
    return str(path)


def test_defaults():
    result = settings()
    assert result['parameters'] == [DEFAULT_PARAMS]
    assert result['remappings'] == []
    assert result['env'] == {dds.PROFILE_ENV: str(dds.shipped_profile())}
    assert result['warnings'] == []
    assert result['ros_arguments'] == ['--log-level', 'info']


def test_sim_time_and_log_level_are_declared():
    names = [name for name, _, _ in launch_file.ARGUMENTS]
    assert 'use_sim_time' in names and 'log_level' in names
    pytest.importorskip('launch.logging', reason='launch is not installed (ships with ROS 2)')
    description = launch_file.generate_launch_description()
    declared = {argument.name: argument for argument in description.get_launch_arguments()}
    assert declared['log_level'].default_value[0].text == 'info'
    assert 'use_sim_time' in declared


@pytest.mark.parametrize('text,value', [('true', True), ('True', True), ('false', False),
                                        (' FALSE ', False)])
def test_use_sim_time_sets_the_node_parameter(text, value):
    result = settings(use_sim_time=text)
    assert result['parameters'] == [DEFAULT_PARAMS, {'use_sim_time': value}]
    assert result['nodes'] == [('xfeat', [DEFAULT_PARAMS, {'use_sim_time': value}])]
    split = settings(use_sim_time=text, cameras='c0,c1', node_processes='2')
    assert [params[0]['use_sim_time'] for _, params in split['nodes']] == [value, value]


def test_use_sim_time_left_empty_keeps_the_params_file(tmp_path):
    path = params_file(tmp_path, '/**:\n  ros__parameters:\n    use_sim_time: true\n')
    assert settings(params_file=path)['parameters'] == [path]  # the file's true stands
    assert settings(params_file=path, use_sim_time='false')['parameters'] == [
        path, {'use_sim_time': False}]


@pytest.mark.parametrize('text,arguments', [
    ('info', ['--log-level', 'info']), ('debug', ['--log-level', 'debug']),
    ('WARN', ['--log-level', 'WARN']), ('xfeat:=debug', ['--log-level', 'xfeat:=debug']),
    ('', [])])
def test_log_level_becomes_ros_arguments(text, arguments):
    assert settings(log_level=text)['ros_arguments'] == arguments


@pytest.mark.parametrize('name,text', [('use_sim_time', 'yes'), ('use_sim_time', '1'),
                                       ('log_level', 'loud'), ('log_level', ':=debug')])
def test_bad_sim_time_or_log_level_refused(name, text):
    with pytest.raises(ValueError, match=name):
        settings(**{name: text})


def test_image_remap_and_overrides():
    result = settings(image='/cam/image_raw', backend='onnxruntime', weights='/w/xfeat.npz',
                      namespace='cam')
    assert result['remappings'] == [('image', '/cam/image_raw')]
    assert result['parameters'] == [DEFAULT_PARAMS, {'backend': 'onnxruntime',
                                                     'weights': '/w/xfeat.npz'}]
    assert result['warnings'] == []


def test_image_description_says_where_outputs_land():
    description = {name: text for name, _, text in launch_file.ARGUMENTS}['image']
    assert 'namespace root' in description and 'namespace:=' in description


def test_two_cameras_with_remappings_argument():
    result = settings(cameras='cam0, cam1',
                      remappings='cam0/image:=/left/image_raw cam1/image:=/right/image_raw')
    assert result['parameters'] == [DEFAULT_PARAMS, {'cameras': ['cam0', 'cam1']}]
    assert result['remappings'] == [('cam0/image', '/left/image_raw'),
                                    ('cam1/image', '/right/image_raw')]
    assert result['warnings'] == []


def test_image_without_effect_warns_cameras_from_argument():
    result = settings(cameras='cam0,cam1', image='/camera/image_raw')
    assert ('image', '/camera/image_raw') not in result['remappings']
    [warning] = result['warnings']
    assert 'image:=/camera/image_raw has no effect' in warning
    assert 'cam0/image' in warning and 'cam1/image' in warning and 'remappings' in warning


@pytest.mark.parametrize('key,namespace,applies', [
    ('/**', '', True), ('/**/xfeat', '', True), ('/**/xfeat', 'robot/front', True),
    ('/robot/xfeat', 'robot', True), ('xfeat', '', True), ('/robot/xfeat', '', False),
    ('/**/other', '', False), ('/*/xfeat', 'a', True), ('/*/xfeat', 'a/b', False)])
def test_image_without_effect_warns_cameras_from_params_file(tmp_path, key, namespace,
                                                             applies):
    path = params_file(tmp_path, f"{key}:\n  ros__parameters:\n    cameras: ['c0', 'c1']\n")
    result = settings(params_file=path, image='/x/image_raw', namespace=namespace)
    assert bool(result['warnings']) is applies
    assert (('image', '/x/image_raw') in result['remappings']) is not applies


def test_plain_camera_among_named_ones_keeps_image(tmp_path):
    path = params_file(tmp_path, "/**:\n  ros__parameters:\n    cameras: ['', 'aux']\n")
    result = settings(params_file=path, image='/x/image_raw')
    assert result['remappings'] == [('image', '/x/image_raw')] and not result['warnings']


def test_unreadable_params_file_gives_no_warning(tmp_path):
    path = params_file(tmp_path, 'a: [unclosed\n')
    assert settings(params_file=path, image='/x')['remappings'] == [('image', '/x')]


def test_image_and_remappings_of_image_warns():
    result = settings(image='/a', remappings='image:=/b')
    assert result['remappings'] == [('image', '/b')]
    assert 'image:=/a has no effect' in result['warnings'][0]


def test_one_node_by_default():
    result = settings(cameras='c0,c1', backend='onnxruntime')
    assert result['nodes'] == [('xfeat', [DEFAULT_PARAMS, {'backend': 'onnxruntime',
                                                           'cameras': ['c0', 'c1']}])]


def test_node_processes_deal_cameras_and_keep_the_params_file(tmp_path):
    path = params_file(tmp_path, '/**/xfeat:\n  ros__parameters:\n    top_k: 2048\n'
                                 "    cameras: ['a', 'b', 'c']\n"
                                 '/**/other:\n  ros__parameters:\n    top_k: 1\n')
    result = settings(params_file=path, node_processes='2', weights='/w.npz')
    assert result['nodes'] == [
        ('xfeat_0', [{'top_k': 2048, 'cameras': ['a', 'c'], 'weights': '/w.npz'}]),
        ('xfeat_1', [{'top_k': 2048, 'cameras': ['b'], 'weights': '/w.npz'}])]
    assert result['warnings'] == []


def test_node_processes_note_when_no_mps_daemon_runs(tmp_path):
    assert settings(cameras='c0,c1')['notes'] == []
    [note] = settings(cameras='c0,c1', node_processes='2',
                      env={'CUDA_MPS_PIPE_DIRECTORY': str(tmp_path)})['notes']
    assert 'nvidia-cuda-mps-control -d' in note and note.startswith('2 node processes')
    (tmp_path / 'control').touch()  # the daemon's control pipe: MPS runs, nothing to say
    assert settings(cameras='c0,c1', node_processes='2',
                    env={'CUDA_MPS_PIPE_DIRECTORY': str(tmp_path)})['notes'] == []
    assert launch_file.mps_running({}, exists=lambda path: path == '/tmp/nvidia-mps/control')


@pytest.mark.parametrize('backend,gpu,note', [
    ('auto', False, False), ('', False, False), ('onnxruntime', True, False),
    ('auto', True, True), ('tensorrt', False, True), ('pytorch', True, True)])
def test_node_processes_mention_mps_only_for_a_gpu_engine(tmp_path, backend, gpu, note):
    no_daemon = {'CUDA_MPS_PIPE_DIRECTORY': str(tmp_path)}
    notes = settings(cameras='c0,c1', node_processes='2', backend=backend, gpu=gpu,
                     env=no_daemon)['notes']
    assert bool(notes) is note and all('MPS' in line for line in notes)


def test_node_processes_mps_note_follows_the_params_file_backend(tmp_path):
    path = params_file(tmp_path, '/**:\n  ros__parameters:\n    backend: onnxruntime\n'
                                 "    cameras: ['a', 'b']\n")
    assert settings(params_file=path, node_processes='2', env={})['notes'] == []


def fake_nvidia_smi(folder, rows):
    """Put an ``nvidia-smi`` printing ``rows`` (one a GPU) in ``folder``; return its PATH."""
    script = folder / 'nvidia-smi'
    script.write_text('#!/bin/sh\n' + ''.join(f'echo "{row}"\n' for row in rows))
    script.chmod(0o755)
    return str(folder)


def test_the_launch_tells_a_gpu_machine_by_nvidia_smi(tmp_path, monkeypatch):
    from xfeat_ros.tools import plumbing
    values = {name: default for name, default, _ in launch_file.ARGUMENTS}
    values.update(cameras='c0,c1', node_processes='2')
    no_daemon = {'CUDA_MPS_PIPE_DIRECTORY': str(tmp_path)}
    monkeypatch.setenv('PATH', str(tmp_path))  # no nvidia-smi: a machine without a GPU
    assert not plumbing.gpu_present()
    assert launch_file.node_settings(values, no_daemon, DEFAULT_PARAMS)['notes'] == []
    gpu = tmp_path / 'gpu'
    gpu.mkdir()
    monkeypatch.setenv('PATH', fake_nvidia_smi(gpu, ['NVIDIA H100 80GB HBM3']))
    assert plumbing.gpu_present() and plumbing.gpu_rows('name') == ['NVIDIA H100 80GB HBM3']
    [note] = launch_file.node_settings(values, no_daemon, DEFAULT_PARAMS)['notes']
    assert 'nvidia-cuda-mps-control -d' in note


def test_node_processes_more_than_cameras_warns():
    result = settings(cameras='c0,c1', node_processes='4')
    assert [name for name, _ in result['nodes']] == ['xfeat_0', 'xfeat_1']
    assert 'node_processes:=4' in result['warnings'][0]


@pytest.mark.parametrize('cameras,count,message', [
    ('c0,c1', '0', 'whole number'), ('c0,c1', 'two', 'whole number'),
    ('', '2', 'named cameras')])
def test_node_processes_refused(cameras, count, message):
    with pytest.raises(ValueError, match=message):
        settings(cameras=cameras, node_processes=count)


def test_node_processes_refuse_stereo_pairs(tmp_path):
    path = params_file(tmp_path, "/**:\n  ros__parameters:\n    cameras: ['l', 'r']\n"
                                 "    stereo_pairs: ['l:r']\n")
    with pytest.raises(ValueError, match='stereo'):
        settings(params_file=path, node_processes='2')


@pytest.mark.parametrize('text', ['cam0/image', 'a:=', ':=b', 'a:=b:=c'])
def test_bad_remappings_raise(text):
    with pytest.raises(ValueError, match='FROM:=TO'):
        settings(remappings=text)


def test_remappings_separators():
    assert launch_file.parse_remappings(' a:=b,c:=d;e:=f\n g:=h ') == [
        ('a', 'b'), ('c', 'd'), ('e', 'f'), ('g', 'h')]


def test_dds_profile_choices(tmp_path):
    own = tmp_path / 'own.xml'
    own.write_text('<dds/>')
    assert settings(dds_profile=str(own))['env'] == {dds.PROFILE_ENV: str(own.resolve())}
    assert settings(dds_profile='')['env'] == {}
    with pytest.raises(ParameterError, match='not a file'):
        settings(dds_profile=str(tmp_path / 'missing.xml'))
    # An exported profile wins; an explicit other profile then has no effect (warned).
    exported = {dds.PROFILE_ENV: str(own)}
    result = settings(env=exported)
    assert result['env'] == {} and result['warnings'] == []
    result = settings(env=exported, dds_profile=str(dds.shipped_profile()))
    assert result['env'] == {}
    assert 'dds_profile' in result['warnings'][0] and 'no effect' in result['warnings'][0]
    assert settings(env=exported, dds_profile=str(own))['warnings'] == []


# -- the real launch (launch_pytest, a ROS 2 install) --------------------------------------------

try:
    import launch_pytest
except ImportError:
    launch_pytest = None

LAUNCH_MISSING = 'launch_pytest is not installed (it ships with ROS 2, not PyPI)'
IMAGE_TOPIC = '/test_camera/image_raw'
NAMESPACE = 'launch_test'
STEREO_NAMESPACE = 'launch_test_two'
SPLIT_NAMESPACE = 'launch_test_split'
SIM_NAMESPACE = 'launch_test_sim'
STEREO_TOPICS = {'cam0': '/test_stereo/left/image_raw', 'cam1': '/test_stereo/right/image_raw'}


def reliable_params(tmp_path_factory):
    """Write the shipped params with a reliable input (each frame is published once)."""
    import yaml
    params = yaml.safe_load((REPO / 'config' / 'xfeat.yaml').read_text())
    params['/**/xfeat']['ros__parameters']['input_qos_reliability'] = 'reliable'
    path = tmp_path_factory.mktemp('launch') / 'xfeat.yaml'
    path.write_text(yaml.safe_dump(params))
    return str(path)


def include_launch_file(arguments):
    """Return a description including the package's launch file with ``arguments``."""
    from launch import LaunchDescription
    from launch.actions import IncludeLaunchDescription
    from launch.launch_description_sources import PythonLaunchDescriptionSource
    return LaunchDescription([
        IncludeLaunchDescription(PythonLaunchDescriptionSource(str(LAUNCH_FILE)),
                                 launch_arguments=arguments.items()),
        launch_pytest.actions.ReadyToTest(),
    ])


def graph_nodes(timeout=10.0):
    """Return ``(name, namespace)`` of the nodes on the graph (after they show up)."""
    import rclpy
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('xfeat_launch_graph', context=context)
    try:
        deadline = time.monotonic() + timeout
        names = []
        while time.monotonic() < deadline:
            names = node.get_node_names_and_namespaces()
            if sum(ns == f'/{SPLIT_NAMESPACE}' for _, ns in names) >= 2:
                break
            time.sleep(0.1)  # polled until the deadline: the graph fills in the background
        return names
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def parameter_and_debug_lines(node_path, parameter, timeout=60.0):
    """
    Return a launched node's ``parameter`` value and its DEBUG lines on /rosout.

    Waits for the node's parameter service and for a DEBUG line of the node
    (it logs its parameters at DEBUG once declared): /rosout keeps each node's
    recent lines for late subscribers (transient local).
    """
    import rclpy
    from rcl_interfaces.msg import Log
    from rcl_interfaces.srv import GetParameters
    from rclpy.parameter import parameter_value_to_python
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('xfeat_launch_sim_probe', context=context)
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    logger_name = node_path.strip('/').replace('/', '.')
    debug = []
    node.create_subscription(
        Log, '/rosout',
        lambda msg: debug.append(msg.msg) if msg.name == logger_name and msg.level == Log.DEBUG
        else None,
        QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                   durability=DurabilityPolicy.TRANSIENT_LOCAL))
    client = node.create_client(GetParameters, f'{node_path}/get_parameters')

    def spin_until(predicate):
        deadline = time.monotonic() + timeout
        while not predicate() and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
        return predicate()
    try:
        assert spin_until(client.service_is_ready), f'{node_path} did not start'
        future = client.call_async(GetParameters.Request(names=[parameter]))
        assert spin_until(future.done), f'{node_path}/get_parameters did not answer'
        [value] = future.result().values
        spin_until(lambda: debug)
        return parameter_value_to_python(value), debug
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)


def exchange(data_dir, inputs, outputs, frames_per_camera=2):
    """Publish real frames on ``inputs`` (topic per camera); collect Keypoints/Matches."""
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from xfeat_ros.features.image_codec import image_msg
    from xfeat_ros.tools.image_files import list_sequence, read_image
    from xfeat_ros.ros.messages import message_types
    keypoints_type, matches_type = message_types()
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('xfeat_launch_test', context=context)
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    got = {cam: ([], []) for cam in inputs}
    for cam, prefix in outputs.items():
        node.create_subscription(keypoints_type, f'{prefix}/keypoints', got[cam][0].append, qos)
        node.create_subscription(matches_type, f'{prefix}/matches', got[cam][1].append, qos)
    publishers = {cam: node.create_publisher(Image, topic, qos) for cam, topic in inputs.items()}
    frames = [read_image(p) for _, p in
              list_sequence(data_dir / 'data' / 'tum_fr2_desk')[:frames_per_camera]]

    def spin_until(predicate, timeout):
        deadline = time.monotonic() + timeout
        while not predicate() and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
        return predicate()
    try:
        assert spin_until(lambda: all(p.get_subscription_count() for p in publishers.values())
                          and all(node.count_publishers(f'{prefix}/keypoints')
                                  for prefix in outputs.values()), 60), \
            'the node did not subscribe the remapped topics'
        for frame in frames:
            for cam, publisher in publishers.items():
                count = len(got[cam][0])
                publisher.publish(image_msg(*frame))
                assert spin_until(lambda c=cam, n=count: len(got[c][0]) > n, 60)
        assert spin_until(lambda: all(len(m) == frames_per_camera - 1
                                      for _, m in got.values()), 30)
        return got
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)


if launch_pytest is not None:
    @launch_pytest.fixture
    def one_camera_launch(weights_npz, tmp_path_factory):
        """Include the launch file with an image remap, a namespace and the CPU backend."""
        return include_launch_file({'image': IMAGE_TOPIC, 'namespace': NAMESPACE,
                                    'backend': 'onnxruntime', 'weights': str(weights_npz),
                                    'params_file': reliable_params(tmp_path_factory)})

    @launch_pytest.fixture
    def two_camera_launch(weights_npz, tmp_path_factory):
        """Include the launch file with two cameras remapped through ``remappings``."""
        rules = ' '.join(f'{cam}/image:={topic}' for cam, topic in STEREO_TOPICS.items())
        return include_launch_file({'cameras': ','.join(STEREO_TOPICS), 'remappings': rules,
                                    'namespace': STEREO_NAMESPACE, 'backend': 'onnxruntime',
                                    'weights': str(weights_npz),
                                    'params_file': reliable_params(tmp_path_factory)})

    @launch_pytest.fixture
    def split_launch(weights_npz, tmp_path_factory):
        """Include the launch file with two cameras dealt over two node processes."""
        rules = ' '.join(f'{cam}/image:={topic}' for cam, topic in STEREO_TOPICS.items())
        return include_launch_file({'cameras': ','.join(STEREO_TOPICS), 'remappings': rules,
                                    'namespace': SPLIT_NAMESPACE, 'node_processes': '2',
                                    'backend': 'onnxruntime', 'weights': str(weights_npz),
                                    'params_file': reliable_params(tmp_path_factory)})

    @launch_pytest.fixture
    def sim_time_launch(weights_npz, tmp_path_factory):
        """Include the launch file as for a bag: use_sim_time:=true, log_level:=debug."""
        return include_launch_file({'namespace': SIM_NAMESPACE, 'use_sim_time': 'true',
                                    'log_level': 'debug', 'backend': 'onnxruntime',
                                    'weights': str(weights_npz),
                                    'params_file': reliable_params(tmp_path_factory)})

    @pytest.mark.launch(fixture=sim_time_launch)
    def test_launch_file_sim_time_and_log_level():
        use_sim_time, debug = parameter_and_debug_lines(f'/{SIM_NAMESPACE}/xfeat', 'use_sim_time')
        assert use_sim_time is True
        assert any(line.startswith('parameters: ') for line in debug), debug

    @pytest.mark.launch(fixture=one_camera_launch)
    def test_launch_file_runs_node(data_dir):
        got = exchange(data_dir, {'': IMAGE_TOPIC}, {'': f'/{NAMESPACE}'})
        keypoints, matches = got['']
        assert len(keypoints) == 2 and len(matches) == 1
        assert len(keypoints[0].scores) > 1000 and keypoints[0].descriptor_size == 64
        assert len(matches[0].current_indices) > 300

    def assert_both_cameras_served(data_dir, namespace):
        """Two frames per camera in, their Keypoints and Matches out under ``namespace``."""
        outputs = {cam: f'/{namespace}/{cam}' for cam in STEREO_TOPICS}
        got = exchange(data_dir, STEREO_TOPICS, outputs)
        for cam in STEREO_TOPICS:
            keypoints, matches = got[cam]
            assert len(keypoints) == 2 and len(matches) == 1
            assert len(matches[0].current_indices) > 300

    @pytest.mark.launch(fixture=two_camera_launch)
    def test_launch_file_two_cameras(data_dir):
        assert_both_cameras_served(data_dir, STEREO_NAMESPACE)

    @pytest.mark.launch(fixture=split_launch)
    def test_launch_file_node_processes(data_dir):
        assert_both_cameras_served(data_dir, SPLIT_NAMESPACE)
        assert sorted(n for n, ns in graph_nodes() if ns == f'/{SPLIT_NAMESPACE}') == \
            ['xfeat_0', 'xfeat_1']
else:
    @pytest.mark.parametrize('case', ['one_camera', 'two_cameras', 'node_processes',
                                      'sim_time_and_log_level'])
    def test_launch_file_runs_node(case):
        pytest.skip(LAUNCH_MISSING)
