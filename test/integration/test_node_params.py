# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Node parameters: live updates, rejections, params file, several cameras."""

import math

import numpy as np
import pytest

from ros_harness import (Client, dump_parameters, get_parameters, set_parameters, start_node,
                         stop_node)
from xfeat_ros.features.image_codec import image_msg
from xfeat_ros.ros.parameters import (camera_parameter, CAMERA_PARAMETERS, declare_reason,
                                      PARAMETERS, validate_parameter)
from xfeat_ros.tools.image_files import list_sequence, read_image

REPO_CONFIG = __import__('pathlib').Path(__file__).resolve().parents[2] / 'config' / 'xfeat.yaml'


def test_declare_reason_says_rclpys_reason_once():
    from rclpy.exceptions import (InvalidParameterTypeException,
                                  InvalidParameterValueException, ParameterException)
    from rclpy.parameter import Parameter
    out_of_range = InvalidParameterValueException(
        'top_k', -5, 'Parameter top_k out of range. Min: 1, Max: 65536, value: -5')
    assert declare_reason('top_k', out_of_range) == 'out of range. Min: 1, Max: 65536, value: -5'
    wrong_type = InvalidParameterTypeException(Parameter('top_k', value='abc'), 'INTEGER')
    assert declare_reason('top_k', wrong_type) == \
        "got 'abc' of type 'STRING', expecting type 'INTEGER'"
    assert declare_reason('x', ParameterException('something else', 'x')) == 'something else'


def test_validate_parameter_table():
    assert validate_parameter('top_k', 100) is None
    assert 'in [1, 65536]' in validate_parameter('top_k', 0)
    assert 'in [1, 65536]' in validate_parameter('top_k', -5)
    assert 'type int' in validate_parameter('top_k', 2.5)
    assert 'type int' in validate_parameter('top_k', True)
    assert 'finite' in validate_parameter('threshold', math.nan)
    assert 'finite' in validate_parameter('min_cossim', math.inf)
    assert 'in [0.0, 1.0]' in validate_parameter('threshold', 1.5)
    assert 'type float' in validate_parameter('threshold', '0.1')
    assert 'one of' in validate_parameter('backend', 'cuda')
    assert 'one of' in validate_parameter('input_qos_reliability', 'maybe')
    assert 'distinct' in validate_parameter('cameras', ['a', 'a'])
    assert 'invalid camera' in validate_parameter('cameras', ['/a'])
    for name, (default, descriptor) in {**PARAMETERS, **CAMERA_PARAMETERS}.items():
        unset = default is None  # a list parameter with no default
        assert validate_parameter(name, [] if unset else default) is None, name
        assert descriptor.description, name
    assert validate_parameter('stereo_pairs', ['cam0:cam1', 'a:b']) is None
    for bad in (['cam0'], ['cam0:cam0'], ['a:b', 'b:c'], ['a:b:c'], [':b']):
        assert validate_parameter('stereo_pairs', bad), bad
    assert validate_parameter('cam0.intrinsics', [500.0, 500.0, 320.0, 240.0]) is None
    assert 'fx, fy > 0' in validate_parameter('cam0.intrinsics', [0.0, 500.0, 320.0, 240.0])
    assert 'fx, fy > 0' in validate_parameter('intrinsics', [500.0, 500.0, 320.0])
    assert 'finite' in validate_parameter('cam0.distortion_coeffs', [math.nan])
    assert 'one of' in validate_parameter('cam0.distortion_model', 'fisheye')
    assert 'one of' in validate_parameter('descriptor_encoding', 'bfloat16')
    assert 'invalid camera' in validate_parameter('cameras', ['a:b'])
    assert camera_parameter('', 'intrinsics') == 'intrinsics'
    assert camera_parameter('stereo/left', 'intrinsics') == 'stereo.left.intrinsics'


@pytest.fixture(scope='module')
def frames(data_dir):
    return [read_image(p) for _, p in list_sequence(data_dir / 'data' / 'tum_fr2_desk')[:6]]


@pytest.mark.ros
def test_live_parameter_updates(frames, weights_npz, tmp_path):
    log = tmp_path / 'node.log'
    process = start_node({'weights': str(weights_npz), 'input_qos_reliability': 'reliable',
                          'queue_size': 50}, log,
                         extra_args=['--params-file', str(REPO_CONFIG)])
    client = Client()
    try:
        assert client.wait_connected(process), log.read_text()
        got = client.keypoints['']

        def send(i):
            client.publish('', image_msg(*frames[i]))
            assert client.spin_until(lambda: len(got) == i + 1, 60, process), log.read_text()
            return len(got[-1].scores)

        assert send(0) > 1000
        # Invalid values are rejected with a reason and change nothing.
        for name, value, reason in [('top_k', 0, 'top_k'), ('top_k', -1, 'top_k'),
                                    ('threshold', math.nan, 'threshold'),
                                    ('threshold', 2.0, 'threshold'),
                                    ('min_cossim', math.inf, 'min_cossim'),
                                    ('top_k', 'many', 'type'),
                                    ('backend', 'onnxruntime', 'read-only'),
                                    ('cameras', ['x'], 'read-only')]:
            result = set_parameters(client, '/xfeat', {name: value})
            assert result is not None and not result[0].successful, (name, value)
            assert result[0].reason, (name, value)
        assert get_parameters(client, '/xfeat', ['top_k', 'threshold']) == [4096, 0.05]
        # A valid live change takes effect on the next frame.
        result = set_parameters(client, '/xfeat', {'top_k': 300})
        assert result[0].successful, result[0].reason
        assert send(1) == 300
        result = set_parameters(client, '/xfeat', {'threshold': 0.5, 'top_k': 4096})
        assert result[0].successful
        few = send(2)
        assert 0 < few < 1000
        result = set_parameters(client, '/xfeat', {'min_cossim': 0.99, 'threshold': 0.05})
        assert result[0].successful
        send(3)
        assert client.spin_until(lambda: len(client.matches['']) == 3, 30, process)
        strict = client.matches[''][-1]
        assert len(strict.similarities) > 0
        assert np.all(np.frombuffer(strict.similarities, np.float32) > 0.99)
    finally:
        client.close()
        assert stop_node(process) == 0, log.read_text()


@pytest.mark.ros
def test_two_cameras_and_namespace(frames, weights_npz, tmp_path):
    log = tmp_path / 'node.log'
    process = start_node({'weights': str(weights_npz), 'input_qos_reliability': 'reliable',
                          'cameras': ['left', 'right'], 'top_k': 1000, 'queue_size': 10}, log,
                         extra_args=['-r', '__ns:=/rig'])
    client = Client(cameras=('rig/left', 'rig/right'))
    try:
        # Topics are relative to the node's namespace: /rig/left/image ...
        assert client.wait_connected(process), log.read_text()
        for i in range(3):
            client.publish('rig/left', image_msg(*frames[i]))
            client.publish('rig/right', image_msg(*frames[i + 3]))
        done = client.spin_until(lambda: all(len(v) == 3 for v in client.keypoints.values())
                                 and all(len(v) == 2 for v in client.matches.values()),
                                 60, process)
        assert done, log.read_text()
        assert all(len(m.scores) == 1000 for v in client.keypoints.values() for m in v)
    finally:
        client.close()
        assert stop_node(process) == 0, log.read_text()


@pytest.mark.ros
def test_invalid_start_parameter_refuses_to_start(weights_npz, tmp_path):
    log = tmp_path / 'node.log'
    process = start_node({'weights': str(tmp_path / 'missing.pt')}, log)
    assert process.wait(60) != 0
    assert 'missing.pt' in log.read_text()


def test_config_documents_every_parameter_with_its_default():
    import yaml
    config = yaml.safe_load(REPO_CONFIG.read_text())['/**/xfeat']['ros__parameters']
    # A list parameter without a default cannot be written as an empty YAML list (rcl
    # would type it as a byte array): the file shows it commented out, with an example.
    unset = {name for name, (default, _) in {**PARAMETERS, **CAMERA_PARAMETERS}.items()
             if default is None}
    assert set(config) == set(PARAMETERS) - unset | {'distortion_model'}
    for name, (default, _) in {**PARAMETERS, **CAMERA_PARAMETERS}.items():
        if name not in unset:
            assert config[name] == default, name
    text = REPO_CONFIG.read_text()
    for name in unset:
        assert f'    # {name}: [' in text, name
    for name in PARAMETERS:  # each has a comment line before it (or its group's)
        assert f'    {name}:' in text or f'    # {name}:' in text


@pytest.mark.ros
def test_documented_stereo_params_file(weights_npz, tmp_path):
    """The documented stereo parameters file loads: nested per-camera intrinsics, pairs."""
    readme = (REPO_CONFIG.parents[1] / 'docs' / 'outputs.md').read_text()
    start = readme.index('```yaml\n/**/xfeat:') + len('```yaml\n')
    params_file = tmp_path / 'stereo.yaml'
    params_file.write_text(readme[start:readme.index('```', start)])
    log = tmp_path / 'node.log'
    process = start_node({'weights': str(weights_npz)}, log,
                         extra_args=['--params-file', str(params_file)])
    client = Client(cameras=('cam0', 'cam1'))
    try:
        assert client.wait_connected(process), log.read_text()
        names = ['cam0.intrinsics', 'cam0.distortion_coeffs', 'cam1.intrinsics',
                 'stereo_pairs', 'descriptor_encoding', 'stereo_epipolar_check_px']
        got = get_parameters(client, 'xfeat', names)
        assert len(got) == len(names), (got, log.read_text())
        values = dict(zip(names, got))
        assert values['cam0.intrinsics'] == [458.654, 457.296, 367.215, 248.375]
        assert len(values['cam0.distortion_coeffs']) == 4
        assert values['cam1.intrinsics'] is None  # unset: cam1/camera_info is used
        assert values['stereo_pairs'] == ['cam0:cam1']
        assert values['descriptor_encoding'] == 'int8'
        assert client.node.count_subscribers('/cam1/camera_info') == 1
        assert client.node.count_subscribers('/cam0/camera_info') == 0
    finally:
        client.close()
        assert stop_node(process) == 0, log.read_text()


@pytest.mark.ros
def test_param_dump_loads_back(weights_npz, tmp_path):
    """A ``ros2 param dump`` of a running node (unset lists are null) starts the node again."""
    params = {'weights': str(weights_npz), 'cameras': ['cam0', 'cam1'], 'top_k': 777,
              'cam0.intrinsics': [458.654, 457.296, 367.215, 248.375], 'queue_size': 3}
    names = ['top_k', 'queue_size', 'cameras', 'cam0.intrinsics', 'cam1.intrinsics',
             'cam1.distortion_coeffs', 'stereo_pairs', 'weights']
    logs = [tmp_path / 'first.log', tmp_path / 'second.log']
    dump_file = tmp_path / 'dump.yaml'
    values = []
    for log, extra in zip(logs, ([], ['--params-file', str(dump_file)])):
        process = start_node(params if not extra else {}, log, extra_args=extra)
        client = Client(cameras=('cam0', 'cam1'))
        try:
            assert client.wait_connected(process), log.read_text()
            values.append(get_parameters(client, '/xfeat', names))
            if not extra:
                dump_file.write_text(dump_parameters(client, '/xfeat'))
        finally:
            client.close()
            assert stop_node(process) == 0, log.read_text()
    dump = dump_file.read_text()
    assert 'stereo_pairs: null' in dump and '    intrinsics: null' in dump  # cam1's, unset
    assert values[0] == values[1], (values, dump)
    assert values[1][:2] == [777, 3] and values[1][6] is None


@pytest.mark.ros
def test_whole_numbers_set_floating_point_parameters(weights_npz, tmp_path):
    """``min_distance:=20`` (rcl reads an integer) starts the node with 20.0, as users expect."""
    log = tmp_path / 'node.log'
    process = start_node({'weights': str(weights_npz), 'backend': 'onnxruntime',
                          'min_distance': 20, 'threshold': 0, 'min_cossim': 1}, log)
    client = Client()
    try:
        assert client.wait_connected(process), log.read_text()
        got = get_parameters(client, '/xfeat', ['min_distance', 'threshold', 'min_cossim'])
        assert got == [20.0, 0.0, 1.0] and all(isinstance(v, float) for v in got)
        assert set_parameters(client, '/xfeat', {'threshold': 0.1})[0].successful
    finally:
        client.close()
        assert stop_node(process) == 0, log.read_text()
