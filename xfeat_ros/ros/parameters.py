# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The node's parameters: descriptors, defaults, validation.

Defaults come from the core's configurations (:class:`EngineConfig`,
:class:`SchedulerConfig`, :class:`OutputConfig`), so the node, the offline
tool and the command lines share one default configuration.
"""

import math

from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                ParameterType)

from xfeat_ros.features.camera import MODELS as DISTORTION_MODELS
from xfeat_ros.features.debug_image import COLOR_BY
from xfeat_ros.features.descriptor_format import ENCODINGS
from xfeat_ros.features.engine import BACKENDS, EngineConfig
from xfeat_ros.runtime.frontend import OutputConfig
from xfeat_ros.runtime.scheduler import SchedulerConfig
from xfeat_ros.runtime.stereo import parse_stereo_pairs
from xfeat_ros.runtime.vins import FORMATS as VINS_FORMATS, VELOCITY_UNITS

RELIABILITIES = ('reliable', 'best_effort')
ENGINE_LIVE = ('top_k', 'threshold', 'min_cossim')
LIVE = ENGINE_LIVE + ('debug_image_color',)
# How rcl reads YAML's null (what `ros2 param dump` writes for an unset parameter).
YAML_NULLS = ('null', 'Null', 'NULL', '~')

_ENGINE, _SCHEDULER, _OUTPUT = EngineConfig(), SchedulerConfig(), OutputConfig()


def _int(description, default, low, high, live=False):
    return default, ParameterDescriptor(
        type=ParameterType.PARAMETER_INTEGER, description=description, read_only=not live,
        integer_range=[IntegerRange(from_value=low, to_value=high, step=1)])


def _float(description, default, low, high, live=False):
    return default, ParameterDescriptor(
        type=ParameterType.PARAMETER_DOUBLE, description=description, read_only=not live,
        floating_point_range=[FloatingPointRange(from_value=low, to_value=high, step=0.0)])


def _str(description, default, choices=None, live=False):
    return default, ParameterDescriptor(
        type=ParameterType.PARAMETER_STRING, description=description, read_only=not live,
        additional_constraints=('one of: ' + ', '.join(choices)) if choices else '')


def _bool(description, default):
    return default, ParameterDescriptor(type=ParameterType.PARAMETER_BOOL, read_only=True,
                                        description=description)


def _unset_list(description):
    # A list that may stay unset: dynamic typing keeps `ros2 param get/dump` working
    # (an empty YAML list cannot carry a type).
    return None, ParameterDescriptor(dynamic_typing=True, read_only=True,
                                     description=description)


PARAMETERS = {
    'cameras': ([''], ParameterDescriptor(
        type=ParameterType.PARAMETER_STRING_ARRAY, read_only=True,
        description='camera names; camera c uses topics c/image, c/keypoints, c/matches '
                    "('' = the plain relative topics image, keypoints, matches)")),
    'backend': _str('backbone backend: auto picks the best available '
                    '(tensorrt, pytorch CUDA, then onnxruntime CPU)', _ENGINE.backend, BACKENDS),
    'weights': _str('XFeat weights file (.pt state dict or .npz); empty: $XFEAT_ROS_WEIGHTS, '
                    'then the user cache, then the packaged copy', _ENGINE.weights),
    'gpu': _int('CUDA device index for GPU backends', _ENGINE.gpu, 0, 63),
    'num_threads': _int('CPU threads of the ONNX Runtime backbone (0: its default)',
                        _ENGINE.num_threads, 0, 256),
    'top_k': _int('maximum keypoints per image (live)', _ENGINE.top_k, 1, 65536, live=True),
    'threshold': _float('heatmap detection threshold, strict (live)', _ENGINE.threshold, 0.0,
                        1.0, live=True),
    'min_cossim': _float('minimum cosine similarity of a match, strict; <= 0 disables the '
                         'filter (live)', _ENGINE.min_cossim, -1.0, 1.0, live=True),
    'min_distance': _float('spread: no two published keypoints closer than this, pixels; '
                           'keypoints that continue a track are placed first (oldest first), '
                           'then new ones by score, top_k the cap (0: off, upstream keypoints)',
                           _ENGINE.min_distance, 0.0, 10000.0),
    'grid_cell_px': _int('spread grid: square cells of this many pixels hold at most '
                         'max_per_cell published keypoints (0: no grid; set both)',
                         _ENGINE.grid_cell_px, 0, 100000),
    'max_per_cell': _int('spread grid: most published keypoints per cell of grid_cell_px '
                         '(0: no grid; set both)', _ENGINE.max_per_cell, 0, 65536),
    'carry_frames': _int('longer tracks: a keypoint whose track the matches lose is looked for '
                         "in the next image's dense descriptor map near its predicted place, "
                         'up to this many frames in a row; carried keypoints are published as '
                         'tracked ones, top_k the cap (0: off)',
                         _ENGINE.carry_frames, 0, 10000),
    'max_frames_in_flight': _int('most frames (across cameras) submitted to the engine as one '
                                 'group; frames that arrive while a group runs form the next',
                                 _SCHEDULER.max_frames_in_flight, 1, 64),
    'queue_size': _int('frames queued per camera while the engine is busy; a newer frame drops '
                       'the oldest (counted): 1 keeps latency near two frame periods under '
                       'overload', _SCHEDULER.queue_size, 1, 1000),
    'fallback_to_cpu': (_SCHEDULER.fallback_to_cpu, ParameterDescriptor(
        type=ParameterType.PARAMETER_BOOL, read_only=True,
        description='when the GPU engine fails at run time (out of memory, CUDA error), '
                    'reprocess on the CPU and go on; false: stop the node cleanly')),
    'arm_next_frame': (_SCHEDULER.arm_next_frame, ParameterDescriptor(
        type=ParameterType.PARAMETER_BOOL, read_only=True,
        description='one camera on the GPU engine: after each frame, enqueue the next one on '
                    'the device behind a gate, so that a frame reaching the idle engine starts '
                    'without the host launching its chain')),
    'diagnostics_period_s': _float('period of /diagnostics status messages (0: off)', 1.0,
                                   0.0, 60.0),
    'input_transport': _str(
        'image input of every camera of this node: raw subscribes c/image (sensor_msgs/Image); '
        'compressed subscribes the image topic + /compressed (image_transport naming: '
        'image:=/cam/image_raw gives /cam/image_raw/compressed) as sensor_msgs/CompressedImage '
        '(jpeg or png), decoded on the CPU on receipt', 'raw', ('raw', 'compressed')),
    'input_qos_depth': _int('history depth of the image subscriptions', 5, 1, 1000),
    'input_qos_reliability': _str(
        'image subscription reliability; auto starts reliable (no silent transport losses) '
        'and switches a camera to best effort when a best-effort publisher appears',
        'auto', ('auto',) + RELIABILITIES),
    'output_qos_depth': _int('history depth of the keypoints/matches publishers', 10, 1, 1000),
    'output_qos_reliability': _str('keypoints/matches publisher reliability', 'reliable',
                                   RELIABILITIES),
    'descriptor_encoding': _str('how descriptors travel in Keypoints: float32 (descriptors '
                                'field), float16 or int8 (descriptor_data bytes)',
                                _OUTPUT.descriptor_encoding, ENCODINGS),
    'publish_descriptors': _bool('false: Keypoints carry no descriptors (descriptor_encoding '
                                 'none), for consumers that only want tracks', True),
    'publish_vins_features': _bool('publish c/feature (sensor_msgs/PointCloud, VINS-Mono / '
                                   'VINS-Fusion feature format); needs the intrinsics: '
                                   'parameter c.intrinsics or the topic c/camera_info',
                                   _OUTPUT.vins_features),
    'vins_velocity_units': _str('unit of the velocity_x/velocity_y channels of c/feature: '
                                'pixels per second, or normalized image coordinates per '
                                'second (what VINS-Fusion computes itself)',
                                _OUTPUT.vins_velocity_units, VELOCITY_UNITS),
    'vins_format': _str('channels of c/feature: mono = id, u, v, velocity_x, velocity_y '
                        '(VINS-Mono); fusion = id, camera_id, u, v, velocity_x, velocity_y '
                        '(VINS-Fusion), where the right-image features of a stereo pair travel '
                        'in the message of the left camera (camera_id 1, the left track id)',
                        _OUTPUT.vins_format, VINS_FORMATS),
    'publish_keypoint_cloud': _bool('publish c/keypoint_cloud (sensor_msgs/PointCloud2: x, y '
                                    'pixels, z = 0, score, track_id, track_age) for RViz',
                                    _OUTPUT.keypoint_cloud),
    'debug_image_color': _str('colour of the keypoints on c/debug_image (rendered only while '
                              'subscribed) (live)', 'score', COLOR_BY, live=True),
    'stereo_pairs': _unset_list(
        "camera pairs 'left:right' (names from cameras) matched left to right into "
        'left/stereo_matches, one Matches per synchronized pair; unset: none'),
    'stereo_sync_tolerance_s': _float('largest stamp difference of a stereo pair, seconds '
                                      '(0: stamps must be equal)',
                                      _OUTPUT.stereo_sync_tolerance_s, 0.0, 1.0),
    'stereo_epipolar_check_px': _float(
        'keep only stereo matches within this epipolar distance of one RANSAC fundamental '
        'matrix, fitted on undistorted pixels when both cameras have intrinsics (0: keep '
        'every mutual nearest neighbour)', _OUTPUT.stereo_epipolar_check_px, 0.0, 100.0),
}
# Declared per camera c as 'c.<name>' ('/' in c becomes '.'; the unnamed camera: '<name>').
CAMERA_PARAMETERS = {
    'intrinsics': _unset_list('[fx, fy, cx, cy] in pixels, for c/feature; unset: from '
                              'c/camera_info'),
    'distortion_model': _str('distortion model of the intrinsics parameter (ROS CameraInfo '
                             'names)', 'plumb_bob', DISTORTION_MODELS),
    'distortion_coeffs': _unset_list('distortion coefficients in CameraInfo order (plumb_bob: '
                                     'k1 k2 p1 p2 k3; equidistant: k1 k2 k3 k4); unset: none'),
}


def camera_parameter(camera, name):
    """Return the name of the per-camera parameter ``name`` of ``camera``."""
    return f'{camera.replace("/", ".")}.{name}' if camera else name


def spec(name):
    """Return ``(default, descriptor)`` of a node or per-camera parameter."""
    if name in PARAMETERS:
        return PARAMETERS[name]
    return CAMERA_PARAMETERS[name.rsplit('.', 1)[-1]]


def unset_value(name, value):
    """
    Return True if ``value`` leaves the unset-able list parameter ``name`` unset.

    That is None, or YAML's null as rcl reads it (the string 'null' or '~':
    what ``ros2 param dump`` writes for an unset parameter), so a dump loads back.
    """
    return spec(name)[0] is None and (value is None or value in YAML_NULLS)


def _validate_list(name, value):
    if name == 'cameras':
        if not all(isinstance(v, str) for v in value):
            return 'must be a list of strings'
        if len(set(value)) != len(value) or not value:
            return 'must be a non-empty list of distinct camera names'
        bad = [v for v in value if v.strip('/') != v or ' ' in v or ':' in v]
        return f'invalid camera names {bad}' if bad else None
    if name == 'stereo_pairs':
        try:
            parse_stereo_pairs(value)
        except ValueError as exc:
            return str(exc)
        return None
    if not all(isinstance(v, float) and math.isfinite(v) for v in value):
        return 'must be a list of finite floats'
    if name.rsplit('.', 1)[-1] == 'intrinsics' and value and (
            len(value) != 4 or value[0] <= 0 or value[1] <= 0):
        return 'must be [fx, fy, cx, cy] with fx, fy > 0'
    return None


def validate_parameter(name, value):
    """Return None if ``value`` is valid for parameter ``name``, else the reason."""
    default, descriptor = spec(name)
    if default is None or isinstance(default, list):
        if not isinstance(value, (list, tuple)):
            return 'must be a list'
        return _validate_list(name, list(value))
    if type(value) is not type(default):
        return f'must be of type {type(default).__name__}, got {type(value).__name__}'
    if isinstance(value, float) and not math.isfinite(value):
        return 'must be finite'
    for rng in list(descriptor.integer_range) + list(descriptor.floating_point_range):
        if not rng.from_value <= value <= rng.to_value:
            return f'must be in [{rng.from_value}, {rng.to_value}], got {value}'
    choices = descriptor.additional_constraints
    if isinstance(value, str) and choices.startswith('one of: '):
        options = choices[len('one of: '):].split(', ')
        if value not in options:
            return f'must be one of {options}, got {value!r}'
    return None


def declare_reason(name, exc):
    """
    Return why rclpy refused parameter ``name`` at its declaration, without its repeats.

    rclpy's ParameterException texts say the name up to three times and the value
    twice ('Invalid parameter value (-5) for parameter. Reason: Parameter top_k out
    of range. Min: 1, Max: 65536, value: -5: top_k'); the node's line names the
    parameter itself, so this keeps the reason: 'out of range. Min: 1, Max: 65536,
    value: -5', "got 'abc' of type 'STRING', expecting type 'INTEGER'".
    """
    text = str(exc.args[0] if exc.args else exc).strip()
    text = text.removesuffix(f': {name}')           # the parameter rclpy appends
    text = text.split('Reason: ', 1)[-1]            # InvalidParameterValueException
    text = text.replace(f'Parameter {name} ', '', 1)
    text = text.replace(f"Trying to set parameter '{name}' to ", 'got ', 1)
    return text.strip() or type(exc).__name__


def engine_config(params):
    """Return the :class:`EngineConfig` of the node's parameter values ``params``."""
    return EngineConfig(params['backend'], params['weights'], params['gpu'],
                        params['num_threads'], params['top_k'], params['threshold'],
                        params['min_cossim'], params['min_distance'], params['grid_cell_px'],
                        params['max_per_cell'], params['carry_frames'])


def scheduler_config(params):
    """Return the :class:`SchedulerConfig` of the node's parameter values."""
    return SchedulerConfig(params['max_frames_in_flight'], params['queue_size'],
                           params['fallback_to_cpu'], params['arm_next_frame'])


def output_config(params):
    """Return the :class:`OutputConfig` of the node's parameter values."""
    encoding = params['descriptor_encoding'] if params['publish_descriptors'] else 'none'
    return OutputConfig(encoding, params['publish_keypoint_cloud'],
                        params['publish_vins_features'], params['vins_format'],
                        params['vins_velocity_units'], tuple(params['stereo_pairs']),
                        params['stereo_sync_tolerance_s'], params['stereo_epipolar_check_px'])
