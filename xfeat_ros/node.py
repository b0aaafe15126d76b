# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The ``xfeat`` node: images in, keypoints and frame-to-frame matches out.

Per camera ``c`` (parameter ``cameras``; ``''`` means the plain relative names):
subscribes ``c/image`` (sensor_msgs/Image), publishes ``c/keypoints``
(xfeat_ros_msgs/Keypoints, one per accepted image) and ``c/matches``
(xfeat_ros_msgs/Matches, one per accepted image after that camera's first).
Optional per camera: ``c/feature`` (VINS feature cloud; intrinsics from
parameters or ``c/camera_info``), ``c/keypoint_cloud`` (PointCloud2),
``c/debug_image`` (rendered only while subscribed); per stereo pair
``left/stereo_matches``. The outputs themselves are built by pure functions in
:mod:`xfeat_ros.messages`, :mod:`xfeat_ros.tracks`, :mod:`xfeat_ros.camera` and
:mod:`xfeat_ros.debug_image`.

Thin glue: the subscription callback validates the header and queues the
frame (bounded per camera, newest kept, every drop counted); one worker
thread takes up to ``max_frames_in_flight`` frames across cameras (waiting at
most ``max_batch_latency_ms`` for a group to fill), submits them to the engine,
synchronizes once, then publishes. A bad image is rejected with a throttled
error naming topic and reason and counted; the stream continues.
"""

from collections import Counter, deque
from dataclasses import dataclass, field, replace
import math
import signal
import sys
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
import numpy as np
from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                ParameterType, SetParametersResult)
import rclpy
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.exceptions import ParameterException
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import CameraInfo, Image, PointCloud, PointCloud2

from xfeat_ros.camera import (CameraModel, ideal_pixels, MODELS as DISTORTION_MODELS,
                              undistort_points)
from xfeat_ros.debug_image import COLOR_BY, render_debug_image
from xfeat_ros.decode import decode_image_msg, validate_layout
from xfeat_ros.encoding import ENCODINGS
from xfeat_ros.errors import (CameraModelError, ImageError, ParameterError, StampOrderError,
                              XFeatError)
from xfeat_ros.match import mutual_nn_match
from xfeat_ros.messages import (image_msg, keypoint_cloud_msg, keypoints_msg, matches_msg,
                                message_types, vins_feature_msg)
from xfeat_ros.pipeline import MatchResult
from xfeat_ros.preprocess import model_size
from xfeat_ros.tracks import epipolar_inliers, next_tracks, track_velocity

RELIABILITY = {'reliable': ReliabilityPolicy.RELIABLE,
               'best_effort': ReliabilityPolicy.BEST_EFFORT}
ENGINE_LIVE = ('top_k', 'threshold', 'min_cossim')
LIVE = ENGINE_LIVE + ('debug_image_color',)
REJECT_LOG_PERIOD_S = 2.0
DIAGNOSTICS_WINDOW_S = 5.0
STEREO_WINDOW = 16  # published frames per side waiting for a stereo partner


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


PARAMETERS = {
    'cameras': ([''], ParameterDescriptor(
        type=ParameterType.PARAMETER_STRING_ARRAY, read_only=True,
        description='camera names; camera c uses topics c/image, c/keypoints, c/matches '
                    "('' = the plain relative topics image, keypoints, matches)")),
    'backend': _str('backbone backend: auto picks the best available '
                    '(tensorrt, pytorch CUDA, then onnxruntime CPU)', 'auto',
                    ('auto', 'onnxruntime', 'pytorch', 'tensorrt', 'onnxruntime_cuda')),
    'weights': _str('XFeat weights file (.pt state dict or .npz); empty: $XFEAT_ROS_WEIGHTS, '
                    'then the user cache, then download of upstream weights', ''),
    'gpu': _int('CUDA device index for GPU backends', 0, 0, 63),
    'num_threads': _int('CPU threads of the ONNX Runtime backbone (0: its default)', 0, 0, 256),
    'top_k': _int('maximum keypoints per image (live)', 4096, 1, 65536, live=True),
    'threshold': _float('heatmap detection threshold, strict (live)', 0.05, 0.0, 1.0,
                        live=True),
    'min_cossim': _float('minimum cosine similarity of a match, strict; <= 0 disables the '
                         'filter (live)', 0.82, -1.0, 1.0, live=True),
    'max_frames_in_flight': _int('frames submitted before one synchronization', 8, 1, 64),
    'max_batch_latency_ms': _float('longest wait for a group of frames to fill', 5.0, 0.0,
                                   1000.0),
    'queue_size': _int('frames queued per camera before the oldest is dropped (counted)',
                       10, 1, 1000),
    'fallback_to_cpu': (True, ParameterDescriptor(
        type=ParameterType.PARAMETER_BOOL, read_only=True,
        description='when the GPU engine fails at run time (out of memory, CUDA error), '
                    'reprocess on the CPU and go on; false: stop the node cleanly')),
    'diagnostics_period_s': _float('period of /diagnostics status messages (0: off)', 1.0,
                                   0.0, 60.0),
    'input_qos_depth': _int('history depth of the image subscriptions', 5, 1, 1000),
    'input_qos_reliability': _str(
        'image subscription reliability; auto starts reliable (no silent transport losses) '
        'and switches a camera to best effort when a best-effort publisher appears',
        'auto', ('auto',) + tuple(RELIABILITY)),
    'output_qos_depth': _int('history depth of the keypoints/matches publishers', 10, 1, 1000),
    'output_qos_reliability': _str('keypoints/matches publisher reliability', 'reliable',
                                   tuple(RELIABILITY)),
    'descriptor_encoding': _str('how descriptors travel in Keypoints: float32 (descriptors '
                                'field), float16 or int8 (descriptor_data bytes)', 'float32',
                                ENCODINGS),
    'publish_descriptors': _bool('false: Keypoints carry no descriptors (descriptor_encoding '
                                 'none), for consumers that only want tracks', True),
    'publish_vins_features': _bool('publish c/feature (sensor_msgs/PointCloud, VINS-Mono / '
                                   'VINS-Fusion feature format); needs the intrinsics: '
                                   'parameter c.intrinsics or the topic c/camera_info', False),
    'vins_velocity_units': _str('unit of the velocity_x/velocity_y channels of c/feature: '
                                'pixels per second, or normalized image coordinates per '
                                'second (what VINS-Fusion computes itself)', 'pixels',
                                ('pixels', 'normalized')),
    'vins_format': _str('channels of c/feature: mono = id, u, v, velocity_x, velocity_y '
                        '(VINS-Mono); fusion = id, camera_id, u, v, velocity_x, velocity_y '
                        '(VINS-Fusion), where the right-image features of a stereo pair travel '
                        'in the message of the left camera (camera_id 1, the left track id)',
                        'mono',
                        ('mono', 'fusion')),
    'publish_keypoint_cloud': _bool('publish c/keypoint_cloud (sensor_msgs/PointCloud2: x, y '
                                    'pixels, z = 0, score, track_id, track_age) for RViz',
                                    False),
    'debug_image_color': _str('colour of the keypoints on c/debug_image (rendered only while '
                              'subscribed) (live)', 'score', COLOR_BY, live=True),
    'stereo_pairs': (None, ParameterDescriptor(
        dynamic_typing=True, read_only=True,
        description="camera pairs 'left:right' (names from cameras) matched left to right "
                    'into left/stereo_matches, one Matches per synchronized pair; unset: none')),
    'stereo_sync_tolerance_s': _float('largest stamp difference of a stereo pair, seconds '
                                      '(0: stamps must be equal)', 0.0, 0.0, 1.0),
    'stereo_epipolar_check_px': _float(
        'keep only stereo matches within this epipolar distance of one RANSAC fundamental '
        'matrix, fitted on undistorted pixels when both cameras have intrinsics (0: keep '
        'every mutual nearest neighbour)', 0.0, 0.0, 100.0),
}
# Declared per camera c as 'c.<name>' ('/' in c becomes '.'; the unnamed camera: '<name>').
# A default of None: a list parameter that may stay unset (declared with dynamic typing,
# so `ros2 param get/dump` still work; an empty YAML list would be typed as bytes).
CAMERA_PARAMETERS = {
    'intrinsics': (None, ParameterDescriptor(
        dynamic_typing=True, read_only=True,
        description='[fx, fy, cx, cy] in pixels, for c/feature; unset: from c/camera_info')),
    'distortion_model': _str('distortion model of the intrinsics parameter (ROS CameraInfo '
                             'names)', 'plumb_bob', DISTORTION_MODELS),
    'distortion_coeffs': (None, ParameterDescriptor(
        dynamic_typing=True, read_only=True,
        description='distortion coefficients in CameraInfo order (plumb_bob: k1 k2 p1 p2 k3; '
                    'equidistant: k1 k2 k3 k4); unset: none')),
}


def camera_parameter(camera, name):
    """Name of the per-camera parameter ``name`` of ``camera`` (see CAMERA_PARAMETERS)."""
    return f'{camera.replace("/", ".")}.{name}' if camera else name


def _spec(name):
    if name in PARAMETERS:
        return PARAMETERS[name]
    return CAMERA_PARAMETERS[name.rsplit('.', 1)[-1]]


def stereo_pairs(entries):
    """Return ``[(left, right)]`` of ``stereo_pairs`` entries 'left:right', or raise ValueError."""
    pairs = []
    for entry in entries:
        names = entry.split(':') if isinstance(entry, str) else []
        if len(names) != 2 or not all(names) or names[0] == names[1]:
            raise ValueError(f"entry {entry!r} is not 'left:right' with two different cameras")
        pairs.append(tuple(names))
    used = [name for pair in pairs for name in pair]
    if len(set(used)) != len(used):
        raise ValueError(f'a camera is in more than one pair: {entries}')
    return pairs


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
            stereo_pairs(value)
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
    default, descriptor = _spec(name)
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


def stamp_ns(stamp):
    """Integer nanoseconds of a ``builtin_interfaces/Time``."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def check_image(msg, last_stamp_ns):
    """
    Raise the :class:`ImageError` for an image the node rejects on receipt.

    Checks the header against the data, the 32 px minimum, and that a non-zero
    stamp is later than ``last_stamp_ns``. Returns the stamp in nanoseconds.
    """
    validate_layout(msg.encoding, msg.height, msg.width, msg.step, len(msg.data))
    model_size(msg.height, msg.width)
    stamp = stamp_ns(msg.header.stamp)
    if stamp and stamp <= last_stamp_ns:
        raise StampOrderError(f'stamp {stamp} ns is not later than the previous image stamp '
                              f'{last_stamp_ns} ns (repeated or out of order)')
    return stamp


def topic(camera, name):
    """Relative topic ``camera/name`` (just ``name`` for the unnamed camera)."""
    return f'{camera}/{name}' if camera else name


@dataclass(eq=False)
class Frame:
    """The last frame of a camera: stamp, host features, engine slot, size, tracks."""

    stamp: object
    features: object
    slot: object
    shape: tuple
    track_ids: object = None   # uint64 [N]
    track_ages: object = None  # uint32 [N]
    header: object = None      # the image's std_msgs/Header
    vins: object = None        # VinsPart of this frame (publish_vins_features), or None


@dataclass
class VinsPart:
    """The c/feature content of one frame: float [N, 2] arrays and uint64 [N] ids."""

    normalized: object
    pixels: object
    velocity: object
    ids: object


@dataclass
class CameraState:
    """Per-camera queue, history and counters."""

    name: str
    image_topic: str
    queue: deque
    keypoints_pub: object = None
    matches_pub: object = None
    previous: Frame = None        # the last published frame
    counts: Counter = field(default_factory=Counter)
    last_log: dict = field(default_factory=dict)   # reason -> monotonic time of last log
    sequences: dict = field(default_factory=dict)  # publisher gid -> last sequence number
    subscription: object = None
    reliability: str = 'reliable'  # of the current subscription
    switch_pending: bool = False
    last_stamp_ns: int = 0         # newest accepted non-zero stamp
    next_track_id: int = 0
    published_at: deque = field(default_factory=lambda: deque(maxlen=200))  # monotonic s
    latency_ms: deque = field(default_factory=lambda: deque(maxlen=200))   # receipt->publish
    feature_pub: object = None     # VINS feature PointCloud (publish_vins_features)
    cloud_pub: object = None       # keypoints PointCloud2 (publish_keypoint_cloud)
    debug_pub: object = None       # debug image, rendered only while subscribed
    camera_model: CameraModel = None  # from parameters or the camera_info topic
    camera_info_sub: object = None
    stereo: object = None          # the StereoPair this camera belongs to


@dataclass
class StereoPair:
    """A configured left/right pair: recent frames of each side, waiting for a partner."""

    left: str
    right: str
    publisher: object = None
    recent: dict = field(default_factory=dict)  # camera name -> deque of [stamp_ns, Frame]
    pending_feature: deque = field(default_factory=deque)  # left frames awaiting c/feature


def pair_partner(candidates, stamp, tolerance_ns):
    """
    Index of the unpaired candidate closest in time to ``stamp``, or None.

    ``candidates`` is a sequence of ``[stamp_ns, frame]`` (``frame`` None once
    paired); a candidate qualifies when ``|stamp_ns - stamp| <= tolerance_ns``.
    """
    best = None
    for index, (other, frame) in enumerate(candidates):
        gap = abs(other - stamp)
        if frame is not None and gap <= tolerance_ns and (best is None or gap < best[0]):
            best = (gap, index)
    return None if best is None else best[1]


def create_engine(backend, weights, gpu, num_threads, top_k, threshold, min_cossim, logger):
    """Create the frame engine for ``backend`` ('auto' tries GPU engines first)."""
    from xfeat_ros.backbone import create_backbone
    from xfeat_ros.engine import CpuEngine
    if backend not in ('auto', 'onnxruntime'):
        from xfeat_ros.gpu.engine import create_gpu_engine
        return create_gpu_engine(backend, weights, gpu, top_k, threshold, min_cossim)
    if backend == 'auto':
        try:
            from xfeat_ros.gpu.engine import create_gpu_engine
            engine = create_gpu_engine('auto', weights, gpu, top_k, threshold, min_cossim)
            logger.info(f'backend auto: chose {engine.name} on GPU {gpu}')
            return engine
        except (ImportError, XFeatError) as exc:
            logger.info(f'backend auto: no GPU backend ({exc}); using onnxruntime on the CPU')
    return CpuEngine(create_backbone('onnxruntime', weights, num_threads), top_k, threshold,
                     min_cossim)


class XFeatNode(Node):
    """ROS 2 node wrapping a frame engine (see module docstring)."""

    def __init__(self, engine=None, **kwargs):
        """Declare parameters, build the engine (unless given), wire topics, start the worker."""
        super().__init__('xfeat', **kwargs)
        message_types()  # fail early, with the build command, if messages are missing
        self.params = {}
        self._declare(PARAMETERS.items())
        self._declare((camera_parameter(camera, name), spec)
                      for camera in self.params['cameras']
                      for name, spec in CAMERA_PARAMETERS.items())
        self.pairs = stereo_pairs(self.params['stereo_pairs'])
        unknown = {c for pair in self.pairs for c in pair} - set(self.params['cameras'])
        if unknown:
            raise ParameterError(f'parameter stereo_pairs: cameras {sorted(unknown)} are not '
                                 f'in cameras {self.params["cameras"]}')
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.pending_config = {}
        self.engine = engine or create_engine(
            self.params['backend'], self.params['weights'], self.params['gpu'],
            self.params['num_threads'], self.params['top_k'], self.params['threshold'],
            self.params['min_cossim'], self.get_logger())
        self.get_logger().info(f'engine: {self.engine.name} on {self.engine.device}')
        self.free_slots = []
        self.generation = 0  # bumped when settings change; older slots are not reused
        self.cameras = {}
        self._wire_cameras()
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.failure = None            # set when the engine failed and the node must stop
        self.fallback = None           # set when the node fell back from GPU to CPU
        self.stop_requested = threading.Event()
        self.diagnostics_pub = None
        if self.params['diagnostics_period_s'] > 0:
            self.diagnostics_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
            self.create_timer(self.params['diagnostics_period_s'], self._publish_diagnostics)
        self.running = True
        self.busy = False
        self.worker = threading.Thread(target=self._work, name='xfeat_worker', daemon=True)
        self.worker.start()

    def _declare(self, specs):
        """Declare and validate parameters ``[(name, (default, descriptor))]``."""
        for name, (default, descriptor) in specs:
            try:
                value = self.declare_parameter(name, default, descriptor).value
            except ParameterException as exc:
                raise ParameterError(f'parameter {name}: {exc}') from exc
            if default is None and value is None:
                value = []  # a list parameter left unset
            reason = validate_parameter(name, value)
            if reason:
                raise ParameterError(f'parameter {name}: {reason}')
            self.params[name] = value

    def descriptor_encoding(self):
        """Return the Keypoints descriptor encoding ('none' when descriptors are off)."""
        if not self.params['publish_descriptors']:
            return 'none'
        return self.params['descriptor_encoding']

    # -- wiring -------------------------------------------------------------
    def _qos(self, prefix, reliability=None):
        reliability = reliability or self.params[f'{prefix}_reliability']
        if reliability == 'auto':
            reliability = 'reliable'
        return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=self.params[f'{prefix}_depth'],
                          reliability=RELIABILITY[reliability])

    def _wire_cameras(self):
        keypoints_type, matches_type = message_types()
        out_qos = self._qos('output_qos')
        for name in self.params['cameras']:
            state = CameraState(name, topic(name, 'image'),
                                deque(maxlen=self.params['queue_size']))
            state.keypoints_pub = self.create_publisher(keypoints_type, topic(name, 'keypoints'),
                                                        out_qos)
            state.matches_pub = self.create_publisher(matches_type, topic(name, 'matches'),
                                                      out_qos)
            self._subscribe(state, self.params['input_qos_reliability'])
            self.cameras[name] = state
            state.debug_pub = self.create_publisher(Image, topic(name, 'debug_image'), out_qos)
            if self.params['publish_keypoint_cloud']:
                state.cloud_pub = self.create_publisher(PointCloud2,
                                                        topic(name, 'keypoint_cloud'), out_qos)
            if self.params['publish_vins_features']:
                state.feature_pub = self.create_publisher(PointCloud, topic(name, 'feature'),
                                                          out_qos)
            stereo_check = self.params['stereo_epipolar_check_px'] > 0 and any(
                name in pair for pair in self.pairs)
            if self.params['publish_vins_features'] or stereo_check:
                self._camera_model(state)
        for left, right in self.pairs:
            pair = StereoPair(left, right, self.create_publisher(
                matches_type, topic(left, 'stereo_matches'), out_qos))
            pair.recent = {left: deque(), right: deque()}
            self.cameras[left].stereo = self.cameras[right].stereo = pair

    def _camera_model(self, state):
        """Take the camera model from parameters, else subscribe ``c/camera_info``."""
        intrinsics = self.params[camera_parameter(state.name, 'intrinsics')]
        if intrinsics:
            coeffs = self.params[camera_parameter(state.name, 'distortion_coeffs')]
            model = self.params[camera_parameter(state.name, 'distortion_model')]
            try:
                state.camera_model = CameraModel.from_parameters(
                    intrinsics, model if coeffs else 'none', coeffs)
            except CameraModelError as exc:
                raise ParameterError(f'camera {state.name!r} intrinsics parameters: {exc}') \
                    from exc
            return
        # Best effort hears reliable and best-effort camera drivers alike.
        qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=5,
                         reliability=ReliabilityPolicy.BEST_EFFORT)
        state.camera_info_sub = self.create_subscription(
            CameraInfo, topic(state.name, 'camera_info'),
            lambda msg, s=state: self._on_camera_info(s, msg), qos)

    def _on_camera_info(self, state, msg):
        """Keep the newest valid camera model; count and log invalid ones."""
        try:
            model = CameraModel.from_camera_info(msg)
        except CameraModelError as exc:
            with self.lock:
                state.counts['camera_info_rejected'] += 1
            self.get_logger().error(f'{topic(state.name, "camera_info")}: {exc}',
                                    throttle_duration_sec=5.0)
            return
        with self.lock:
            state.camera_model = model

    def _subscribe(self, state, reliability):
        events = SubscriptionEventCallbacks(
            incompatible_qos=lambda event, s=state: self._on_incompatible_qos(s, event))
        state.subscription = self.create_subscription(
            Image, state.image_topic, lambda msg, info, s=state: self._on_image(s, msg, info),
            self._qos('input_qos', reliability), event_callbacks=events)
        state.reliability = 'reliable' if reliability == 'auto' else reliability

    def _on_incompatible_qos(self, state, event):
        """Adapt (auto) or warn when a publisher's QoS does not match the subscription."""
        auto = self.params['input_qos_reliability'] == 'auto'
        if auto and state.reliability == 'reliable' and not state.switch_pending:
            # Re-create the subscription outside this event's own callback.
            state.switch_pending = True
            self.get_logger().warning(
                f'{state.image_topic}: a best-effort publisher appeared; input_qos_reliability '
                'is auto, so this camera now subscribes best effort (large images can then be '
                'lost in transport: every detected loss is counted)')
            timer = None

            def switch():
                timer.cancel()
                self.destroy_timer(timer)
                self.destroy_subscription(state.subscription)
                self._subscribe(state, 'best_effort')
                state.switch_pending = False
            timer = self.create_timer(0.0, switch)
            return
        self.get_logger().warning(
            f'{state.image_topic}: a publisher has QoS this subscription cannot hear '
            f'(policy {event.last_policy_kind}); set input_qos_reliability to match it',
            throttle_duration_sec=30.0)

    # -- parameters ---------------------------------------------------------
    def _on_set_parameters(self, parameters):
        for parameter in parameters:
            if parameter.name not in self.params:
                return SetParametersResult(successful=False,
                                           reason=f'unknown parameter {parameter.name}')
            if parameter.name not in LIVE:
                return SetParametersResult(
                    successful=False, reason=f'{parameter.name} is read-only after start; '
                                             f'live parameters: {", ".join(LIVE)}')
            reason = validate_parameter(parameter.name, parameter.value)
            if reason:
                return SetParametersResult(successful=False,
                                           reason=f'{parameter.name} {reason}')
        with self.lock:
            for parameter in parameters:
                self.params[parameter.name] = parameter.value
                if parameter.name in ENGINE_LIVE:
                    self.pending_config[parameter.name] = parameter.value
        return SetParametersResult(successful=True)

    # -- input --------------------------------------------------------------
    def _count_gap(self, state, info):
        """
        Count images a publisher sent that never reached this callback.

        Publication sequence numbers are consecutive per publisher; a gap means
        the middleware dropped images (best-effort transport losses, or the
        subscription history overflowing) before the node could see them.
        """
        sequence = info.get('publication_sequence_number') if info else None
        gid = info.get('publisher_gid') if info else None
        if not sequence or gid is None:
            return
        key = bytes(gid.get('data', b'')) if isinstance(gid, dict) else bytes(gid)
        last = state.sequences.get(key)
        state.sequences[key] = sequence
        if last is not None and sequence > last + 1:
            lost = sequence - last - 1
            state.counts['lost_before_node'] += lost
            self.get_logger().warning(
                f'{state.image_topic}: {lost} image(s) lost in the middleware before the node '
                f'({state.counts["lost_before_node"]} so far). With a reliable camera '
                'publisher set input_qos_reliability to reliable; with best effort, large '
                'images need bigger socket buffers (net.core.rmem_default)',
                throttle_duration_sec=5.0)

    def _on_image(self, state, msg, info=None):
        """Validate an image and queue it; never raises into rclpy."""
        received = time.monotonic()
        with self.lock:
            state.counts['received'] += 1
        self._count_gap(state, info)
        try:
            stamp = check_image(msg, state.last_stamp_ns)
        except ImageError as exc:
            self._reject(state, exc)
            return
        with self.wake:
            if stamp:
                state.last_stamp_ns = stamp
            state.counts['accepted'] += 1
            if len(state.queue) == state.queue.maxlen:
                state.counts['dropped_queue_full'] += 1
                self.get_logger().warning(
                    f'{state.image_topic}: queue full ({state.queue.maxlen}), dropped the '
                    f'oldest frame ({state.counts["dropped_queue_full"]} so far)',
                    throttle_duration_sec=5.0)
            state.queue.append((msg, received))
            self.wake.notify()

    def _reject(self, state, exc):
        kind = type(exc).__name__
        with self.lock:
            state.counts['rejected'] += 1
            state.counts[f'rejected_{kind}'] += 1
            count = state.counts[f'rejected_{kind}']
        # Throttled per camera and reason, so one noisy fault hides no other.
        now = time.monotonic()
        if now - state.last_log.get(kind, -math.inf) >= REJECT_LOG_PERIOD_S:
            state.last_log[kind] = now
            self.get_logger().error(f'{state.image_topic}: rejected image ({count} so far '
                                    f'for this reason): {exc}')

    # -- worker -------------------------------------------------------------
    def _next_group(self):
        """Wait for frames; return up to max_frames_in_flight (camera, msg) pairs."""
        with self.wake:
            while self.running and not any(c.queue for c in self.cameras.values()):
                self.wake.wait(0.1)
            if not self.running:
                return []
            limit = self.params['max_frames_in_flight']
            deadline = time.monotonic() + self.params['max_batch_latency_ms'] / 1000.0
            while (sum(len(c.queue) for c in self.cameras.values()) < limit
                   and time.monotonic() < deadline and self.running):
                self.wake.wait(max(0.0, deadline - time.monotonic()))
            group = []
            while len(group) < limit and any(c.queue for c in self.cameras.values()):
                for state in self.cameras.values():
                    if state.queue and len(group) < limit:
                        group.append((state, *state.queue.popleft()))
            if self.pending_config:
                self.engine.configure(**self.pending_config)
                self.pending_config = {}
                self.generation += 1  # slot capacity may depend on top_k
                self.free_slots.clear()
            self.busy = bool(group)  # set with the queues' lock: no idle-looking gap
            return group

    def _slot(self):
        if self.free_slots:
            return self.free_slots.pop()
        slot = self.engine.alloc_slot()
        slot.generation = self.generation
        return slot

    def _release(self, slot):
        if getattr(slot, 'generation', None) == self.generation:
            self.free_slots.append(slot)

    def _work(self):
        while self.running:
            group = self._next_group()
            if group:
                try:
                    self._process(group)
                finally:
                    self.busy = False

    def worker_busy(self):
        """Return True while the worker processes a group."""
        return self.busy

    def _process(self, group):
        """
        Submit a group, synchronize once, publish in arrival order.

        An engine failure (GPU out of memory, a CUDA error) moves the node to the
        CPU engine and reprocesses the group when ``fallback_to_cpu`` is set;
        otherwise the group is counted as dropped and the node stops cleanly.
        """
        try:
            submitted = self._submit(group)
            self.engine.synchronize()
            results = [(state, msg, received, self.engine.features(slot),
                        self.engine.matches(slot) if comparable else None, slot)
                       for state, msg, received, slot, comparable in submitted]
        except (XFeatError, RuntimeError, MemoryError) as exc:
            if not self._fall_back(exc):
                for state, _, _ in group:
                    state.counts['dropped_engine_failure'] += 1
                return
            submitted = self._submit(group)
            results = [(state, msg, received, self.engine.features(slot),
                        self.engine.matches(slot) if comparable else None, slot)
                       for state, msg, received, slot, comparable in submitted]
        for result in results:
            self._publish(*result)

    def _submit(self, group):
        """Enqueue a group on the engine: [(state, msg, received, slot, comparable)]."""
        submitted = []
        last = {name: state.previous for name, state in self.cameras.items()}
        for state, msg, received in group:
            slot = self._slot()
            try:
                self.engine.submit(msg, slot)
            except ImageError as exc:
                self._reject(state, exc)
                state.counts['rejected_late'] += 1
                self._release(slot)
                continue
            prev = last[state.name]
            shape = (msg.height, msg.width)
            comparable = prev is not None and prev.shape == shape
            if comparable:
                self.engine.submit_match(self._engine_slot(prev), slot)
            submitted.append((state, msg, received, slot, comparable))
            last[state.name] = Frame(msg.header.stamp, None, slot, shape)
        return submitted

    def _engine_slot(self, frame):
        """Return the engine slot of a previous frame (a CPU slot after a fallback)."""
        if frame.slot is not None:
            return frame.slot
        slot = self.engine.alloc_slot()
        slot.features = frame.features
        return slot

    def _fall_back(self, exc):
        """Switch to the CPU engine after a GPU engine failure; False if not allowed."""
        device = getattr(self.engine, 'device', 'cpu')
        if device == 'cpu' or not self.params['fallback_to_cpu']:
            self.get_logger().fatal(f'engine {self.engine.name} on {device} failed: {exc!r}; '
                                    'stopping (fallback_to_cpu is off or already on the CPU)')
            self.failure = f'engine failed: {exc!r}'
            self.running = False
            self.stop_requested.set()
            return False
        self.get_logger().error(f'engine {self.engine.name} on {device} failed: {exc!r}; '
                                'falling back to onnxruntime on the CPU')
        self.fallback = f'{self.engine.name} on {device} failed ({type(exc).__name__}); on CPU'
        self.engine = create_engine('onnxruntime', self.params['weights'], 0,
                                    self.params['num_threads'], self.params['top_k'],
                                    self.params['threshold'], self.params['min_cossim'],
                                    self.get_logger())
        self.generation += 1
        self.free_slots.clear()
        for state in self.cameras.values():
            if state.previous is not None:  # host features stay; the device slot does not
                state.previous = replace(state.previous, slot=None)
        return True

    def _publish(self, state, msg, received, features, matches, slot):
        prev = state.previous
        ids, ages, state.next_track_id, origin = next_tracks(features, state.next_track_id,
                                                             prev, matches)
        state.keypoints_pub.publish(keypoints_msg(msg.header, features, (ids, ages),
                                                  self.descriptor_encoding()))
        if prev is not None:
            if prev.shape != (msg.height, msg.width):
                state.counts['matches_empty_size_change'] += 1
                self.get_logger().warning(
                    f'{state.image_topic}: image size changed from {prev.shape} to '
                    f'{(msg.height, msg.width)}; published empty matches for this frame',
                    throttle_duration_sec=5.0)
            state.matches_pub.publish(matches_msg(msg.header, prev.stamp, prev.features,
                                                  features, matches))
            if prev.slot is not None:
                self._release(prev.slot)
        frame = Frame(msg.header.stamp, features, slot, (msg.height, msg.width), ids, ages,
                      msg.header)
        if state.cloud_pub is not None:
            state.cloud_pub.publish(keypoint_cloud_msg(msg.header, features, ids, ages))
        if state.feature_pub is not None:
            self._publish_vins(state, msg, frame, prev, origin)
        if state.debug_pub.get_subscription_count() > 0:
            self._publish_debug(state, msg, frame, prev, matches, origin)
        if state.stereo is not None:
            self._pair_stereo(state, msg, frame)
        state.previous = frame
        now = time.monotonic()
        with self.lock:
            state.counts['published'] += 1
            state.published_at.append(now)
            state.latency_ms.append((now - received) * 1000.0)

    def _publish_vins(self, state, msg, frame, prev, origin):
        """
        Publish ``c/feature`` (VINS format); count and warn while intrinsics are missing.

        With ``vins_format`` fusion, a stereo left camera's message waits for its
        pair (:meth:`_publish_vins_stereo`) or, at the latest, for the camera's
        next frame; a right camera's features travel in the left's message.
        """
        frame.vins = self._vins_part(state, msg, frame, prev, origin)
        if self.params['vins_format'] == 'fusion' and state.stereo is not None:
            pair = state.stereo
            if state.name == pair.left:
                self._flush_vins(pair)
                if frame.vins is not None:
                    pair.pending_feature.append(frame)
            return
        if frame.vins is not None:
            self._send_vins(state, frame, None, None)

    def _vins_part(self, state, msg, frame, prev, origin):
        """Return the :class:`VinsPart` of a frame, or None (counted) without intrinsics."""
        with self.lock:
            model = state.camera_model
        if model is None or (model.width and (model.width, model.height) !=
                             (msg.width, msg.height)):
            reason = 'no_camera_info' if model is None else 'camera_info_size'
            state.counts[f'feature_skipped_{reason}'] += 1
            self.get_logger().warning(
                f'{topic(state.name, "feature")}: not published, '
                + ('no intrinsics yet (parameter '
                   f'{camera_parameter(state.name, "intrinsics")} unset and nothing on '
                   f'{topic(state.name, "camera_info")})' if model is None else
                   f'camera_info is for {model.width}x{model.height} but the image is '
                   f'{msg.width}x{msg.height}') + f' ({state.counts[f"feature_skipped_{reason}"]}'
                ' frames so far)', throttle_duration_sec=5.0)
            return None
        pixels = frame.features.keypoints
        normalized = undistort_points(model, pixels)
        dt_s = 0.0
        if prev is not None:
            dt_s = (stamp_ns(frame.stamp) - stamp_ns(prev.stamp)) / 1e9
        in_pixels = self.params['vins_velocity_units'] == 'pixels'
        current = pixels if in_pixels else normalized
        if prev is None:
            before = current[:0]
        elif in_pixels:
            before = prev.features.keypoints
        elif prev.vins is not None:  # undistorted when that frame was published
            before = prev.vins.normalized
        else:
            before = undistort_points(model, prev.features.keypoints)
        velocity = track_velocity(current, before, origin, dt_s)
        return VinsPart(normalized, pixels, velocity, frame.track_ids)

    def _send_vins(self, state, frame, right, result):
        """
        Publish one ``c/feature`` message for ``frame`` (and its stereo partner).

        ``right``/``result``: the right frame of a stereo pair and the matches
        left -> right, whose right keypoints join as camera 1 with the left's
        track ids (VINS-Fusion); None for a single camera.
        """
        part = frame.vins
        columns = [part.normalized, part.ids, part.pixels, part.velocity]
        camera_ids = None
        if self.params['vins_format'] == 'fusion':
            camera_ids = np.zeros(len(part.ids), dtype=np.uint8)
            if right is not None and right.vins is not None and len(result):
                other = right.vins
                joined = [other.normalized[result.idx1], part.ids[result.idx0],
                          other.pixels[result.idx1], other.velocity[result.idx1]]
                columns = [np.concatenate([a, b]) for a, b in zip(columns, joined)]
                camera_ids = np.concatenate([camera_ids, np.ones(len(result), np.uint8)])
            elif right is not None:
                state.counts['feature_stereo_right_skipped'] += 1
        state.feature_pub.publish(vins_feature_msg(frame.header, *columns,
                                                   camera_ids=camera_ids))

    def _publish_vins_stereo(self, pair, left, right, result):
        """Publish the left frame's VINS-Fusion message with the right features matched."""
        if not any(frame is left for frame in pair.pending_feature):
            return  # no intrinsics for the left camera: counted when it was published
        self._flush_vins(pair, until=left)
        pair.pending_feature.popleft()
        self._send_vins(self.cameras[pair.left], left, right, result)

    def _flush_vins(self, pair, until=None):
        """Send the pair's waiting left frames alone, in order, up to ``until`` (excluded)."""
        state = self.cameras[pair.left]
        while pair.pending_feature and pair.pending_feature[0] is not until:
            self._send_vins(state, pair.pending_feature.popleft(), None, None)
            state.counts['feature_stereo_unpaired'] += 1

    def _publish_debug(self, state, msg, frame, prev, matches, origin):
        """Render and publish ``c/debug_image`` (only called while someone subscribes)."""
        features = frame.features
        previous_points = current_points = continued = None
        if prev is not None and matches is not None and len(matches):
            previous_points = prev.features.keypoints[matches.idx0]
            current_points = features.keypoints[matches.idx1]
            continued = origin[matches.idx1] == matches.idx0
        canvas = render_debug_image(decode_image_msg(msg), features.keypoints, features.scores,
                                    frame.track_ages, self.params['debug_image_color'],
                                    previous_points, current_points, continued)
        out = image_msg(canvas, 'bgr8', msg.header.stamp, msg.header.frame_id)
        state.debug_pub.publish(out)
        with self.lock:
            state.counts['debug_images_rendered'] += 1

    def _pair_stereo(self, state, msg, frame):
        """
        Pair a published frame with the other side's closest unpaired frame, then match.

        Frames wait in their side's recent list (the last :data:`STEREO_WINDOW`);
        one that leaves it unpaired is counted as ``stereo_unpaired``.
        """
        pair = state.stereo
        other = pair.right if state.name == pair.left else pair.left
        stamp = stamp_ns(frame.stamp)
        tolerance = int(round(self.params['stereo_sync_tolerance_s'] * 1e9))
        waiting = pair.recent[other]
        index = pair_partner(waiting, stamp, tolerance)
        if index is None:
            mine = pair.recent[state.name]
            if len(mine) == STEREO_WINDOW:
                if mine.popleft()[1] is not None:
                    state.counts['stereo_unpaired'] += 1
            mine.append([stamp, frame])
            return
        partner = waiting[index][1]
        waiting[index][1] = None
        left, right = (frame, partner) if state.name == pair.left else (partner, frame)
        try:
            result = self.engine.match_features(left.features, right.features)
        except (XFeatError, RuntimeError, MemoryError) as exc:
            state.counts['stereo_engine_errors'] += 1
            self.get_logger().error(f'stereo {pair.left}:{pair.right}: engine matching failed '
                                    f'({exc!r}); matched on the CPU instead',
                                    throttle_duration_sec=5.0)
            result = MatchResult(*mutual_nn_match(left.features.descriptors,
                                                  right.features.descriptors,
                                                  self.params['min_cossim']))
        threshold = self.params['stereo_epipolar_check_px']
        if threshold > 0 and len(result):
            result = self._stereo_verified(pair, left.features, right.features, result,
                                           threshold)
        pair.publisher.publish(matches_msg(right.header, left.stamp, left.features, right.features,
                                           result))
        if self.params['publish_vins_features'] and self.params['vins_format'] == 'fusion':
            self._publish_vins_stereo(pair, left, right, result)
        with self.lock:
            self.cameras[pair.left].counts['stereo_matches_published'] += 1

    def _stereo_verified(self, pair, left, right, result, threshold_px):
        """
        Keep the stereo matches that fit one RANSAC fundamental matrix.

        With both cameras' intrinsics the fit runs on undistorted pixels (the
        lens distortion bends epipolar lines); without them on raw pixels.
        """
        points = [left.keypoints[result.idx0], right.keypoints[result.idx1]]
        with self.lock:
            models = [self.cameras[pair.left].camera_model, self.cameras[pair.right].camera_model]
        if all(model is not None for model in models):
            points = [ideal_pixels(model, p) for model, p in zip(models, points)]
        keep = epipolar_inliers(*points, threshold_px)
        self.cameras[pair.left].counts['stereo_matches_rejected_epipolar'] += int(
            np.sum(~keep))
        return MatchResult(result.idx0[keep], result.idx1[keep], result.similarity[keep])

    def stats(self):
        """Per-camera counters (received, accepted, published, rejected, dropped...)."""
        with self.lock:
            return {name: dict(state.counts) for name, state in self.cameras.items()}

    # -- health -------------------------------------------------------------
    def camera_status(self, state, now=None):
        """Return the ``diagnostic_msgs/DiagnosticStatus`` of one camera's stream."""
        now = time.monotonic() if now is None else now
        with self.lock:
            counts = Counter(state.counts)
            times = list(state.published_at)
            latency = sorted(state.latency_ms)
            queued = len(state.queue)
        recent = [t for t in times if now - t <= DIAGNOSTICS_WINDOW_S]
        rate = (len(recent) - 1) / (recent[-1] - recent[0]) if len(recent) > 1 and \
            recent[-1] > recent[0] else 0.0
        lost = sum(counts[k] for k in ('dropped_queue_full', 'dropped_shutdown',
                                       'dropped_engine_failure', 'lost_before_node'))
        status = DiagnosticStatus(name=f'xfeat: {self.resolve_topic_name(state.image_topic)}',
                                  hardware_id=f'{self.engine.name} on {self.engine.device}')
        if self.failure:
            status.level, status.message = DiagnosticStatus.ERROR, self.failure
        elif self.fallback or lost or counts['rejected']:
            status.level = DiagnosticStatus.WARN
            parts = [self.fallback] if self.fallback else []
            if lost:
                parts.append(f'{lost} frames dropped or lost')
            if counts['rejected']:
                parts.append(f'{counts["rejected"]} images rejected')
            status.message = '; '.join(parts)
        elif not counts['published']:
            status.level, status.message = DiagnosticStatus.OK, 'waiting for images'
        else:
            status.level, status.message = DiagnosticStatus.OK, 'tracking input healthy'
        values = {'rate_hz': f'{rate:.2f}', 'queued': str(queued),
                  'latency_median_ms': f'{latency[len(latency) // 2]:.1f}' if latency else '',
                  'latency_max_ms': f'{latency[-1]:.1f}' if latency else '',
                  'backend': self.engine.name, 'device': str(self.engine.device),
                  'input_reliability': state.reliability}
        values.update({k: str(v) for k, v in sorted(counts.items())})
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        return status

    def _publish_diagnostics(self):
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status = [self.camera_status(state) for state in self.cameras.values()]
        self.diagnostics_pub.publish(array)

    def stop(self):
        """Stop the worker after its current group; count frames left in queues."""
        with self.wake:
            self.running = False
            self.wake.notify_all()
        self.worker.join(timeout=30.0)
        for state in self.cameras.values():
            pair = state.stereo
            if pair is not None and state.name == pair.left:
                self._flush_vins(pair)  # left frames whose right never came
            if state.queue:
                state.counts['dropped_shutdown'] += len(state.queue)
                state.queue.clear()


def main(args=None):
    """Run the node until SIGINT/SIGTERM; then finish the group in flight and log counts."""
    from xfeat_ros.cli import node_help
    if node_help(args):  # --help / -h before --ros-args: usage, not a node
        return 0
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    node = None
    code = 0
    try:
        node = XFeatNode()
        executor = rclpy.executors.SingleThreadedExecutor()
        executor.add_node(node)
        while rclpy.ok() and not node.stop_requested.is_set():
            # Short waits return to Python, where SIGINT/SIGTERM raise KeyboardInterrupt
            # with the context still valid, so shutdown can finish and log cleanly.
            executor.spin_once(timeout_sec=0.1)
        if node.failure:
            code = 1
    except KeyboardInterrupt:
        pass
    except XFeatError as exc:
        rclpy.logging.get_logger('xfeat').fatal(f'cannot start: {exc}')
        code = 1
    finally:
        if node is not None:
            node.stop()
            node.get_logger().info(f'final counts: {node.stats()}')
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return code


if __name__ == '__main__':
    sys.exit(main())
