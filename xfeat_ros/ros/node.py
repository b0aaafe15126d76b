# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The ``xfeat`` node: images in, keypoints and frame-to-frame matches out.

Per camera ``c`` (parameter ``cameras``; ``''`` means the plain relative names):
subscribes ``c/image`` (sensor_msgs/Image; with ``input_transport`` compressed
``c/image/compressed``, sensor_msgs/CompressedImage: :mod:`xfeat_ros.ros.compressed`),
publishes ``c/keypoints``
(xfeat_ros_msgs/Keypoints, one per accepted image) and ``c/matches``
(xfeat_ros_msgs/Matches, one per accepted image after that camera's first).
Optional per camera: ``c/feature`` (VINS feature cloud; intrinsics from
parameters or ``c/camera_info``), ``c/keypoint_cloud`` (PointCloud2),
``c/debug_image`` (rendered only while subscribed); per stereo pair
``left/stereo_matches``.

A thin ROS adapter over the ROS-free core (:mod:`xfeat_ros.runtime`): it declares
the parameters (:mod:`xfeat_ros.ros.parameters`), takes each image message in
:meth:`XFeatNode.on_image` on the image receiver's thread
(:mod:`xfeat_ros.ros.transport.image_receiver`; checked and queued by the core's stream and
scheduler), publishes what the core's front-end hands it (the ``publish_*``
methods of :class:`xfeat_ros.ros.outputs.NodeOutputs`), and reports per-camera
health on ``/diagnostics``.
"""

import signal
import sys
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import ParameterDescriptor, ParameterType, SetParametersResult
import rclpy
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.exceptions import ParameterException
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import CameraInfo, Image, PointCloud, PointCloud2

from xfeat_ros.errors import CameraModelError, ImageError, ParameterError, XFeatError
from xfeat_ros.features.camera import CameraModel
from xfeat_ros.features.factory import create_engine
from xfeat_ros.features.tracks import prepare_host_check
from xfeat_ros.features.weights import weights_summary
from xfeat_ros.ros import dds
from xfeat_ros.ros.compressed import engine_jpeg_decoder, image_input, warm_jpeg_decoder
from xfeat_ros.ros.messages import diagnostic_name, message_types
from xfeat_ros.ros.outputs import NodeOutputs, Ports
from xfeat_ros.ros.parameters import (camera_parameter, CAMERA_PARAMETERS, declare_reason,
                                      engine_config, ENGINE_LIVE, LIVE, output_config, PARAMETERS,
                                      scheduler_config, unset_value, validate_parameter)
from xfeat_ros.ros.transport import rcl_io
from xfeat_ros.ros.transport.image_receiver import ImageReceiver
from xfeat_ros.runtime import heap
from xfeat_ros.runtime.frontend import FrontEnd
from xfeat_ros.runtime.gaps import lost_hint, publication_gap
from xfeat_ros.runtime.health import latency_values, recent_rate, stream_health
from xfeat_ros.runtime.report import forward_package_logs, reason_key, Reporter
from xfeat_ros.runtime.scheduler import Scheduler
from xfeat_ros.runtime.stereo import StereoPairing
from xfeat_ros.runtime.stream import CameraStream

RELIABILITY = {'reliable': ReliabilityPolicy.RELIABLE,
               'best_effort': ReliabilityPolicy.BEST_EFFORT}
REJECT_LOG_PERIOD_S = 2.0


def topic(camera, name):
    """Relative topic ``camera/name`` (just ``name`` for the unnamed camera)."""
    return f'{camera}/{name}' if camera else name


class XFeatNode(NodeOutputs, Node):
    """ROS 2 node over the front-end core (see the module docstring)."""

    def __init__(self, engine=None, **kwargs):
        """Declare parameters, build the engine (unless given) and the core, wire topics."""
        super().__init__('xfeat', **kwargs)
        try:
            self._start(engine)
        except XFeatError as exc:
            exc.node_logger = self.get_logger().name  # main() says why under the node's name
            raise

    def _start(self, engine):
        """Set the node up (see __init__); raises the XFeatError of a start that cannot go on."""
        self._stop_forwarding = forward_package_logs(self.get_logger())  # engine logs -> ROS
        message_types()  # fail early, with the build command, if messages are missing
        self.params = {}
        self._declare(PARAMETERS.items())
        self._declare((camera_parameter(camera, name), spec)
                      for camera in self.params['cameras']
                      for name, spec in CAMERA_PARAMETERS.items())
        self.outputs = output_config(self.params)
        unknown = {c for pair in self.outputs.pairs for c in pair} - set(self.params['cameras'])
        if unknown:
            raise ParameterError(f'parameter stereo_pairs: cameras {sorted(unknown)} are not '
                                 f'in cameras {self.params["cameras"]}')
        self.get_logger().debug(f'parameters: {self.params}')
        self.engine_config = engine_config(self.params)
        engine = engine or create_engine(self.engine_config, self.get_logger())
        self.get_logger().info(f'engine: {engine.name} on {engine.device}')
        prepare_host_check(engine)  # OpenCV loaded now, not at the first matched frame
        if self.params['input_transport'] == 'compressed':
            warm_jpeg_decoder(engine)  # seconds of set-up now, not under the first images
        self.get_logger().info(weights_summary(self.params['weights']))
        self.report = Reporter(self.get_logger())
        self.streams = {name: CameraStream(name) for name in self.params['cameras']}
        stereo = None
        if self.outputs.pairs:
            stereo = StereoPairing(self.outputs.pairs, self.outputs.stereo_sync_tolerance_s,
                                   lambda camera, key: self.streams[camera].count(key))
        self.scheduler = Scheduler(engine, self.streams, scheduler_config(self.params),
                                   self.engine_config, self.report, stereo)
        self.frontend = FrontEnd(self.streams, self.outputs, self, self.report,
                                 lambda: self.params['debug_image_color'])
        self.scheduler.on_done = self.frontend.finish
        self.scheduler.placement = self._placement
        self.scheduler.on_reject = lambda item, exc: self._log_reject(item.camera, exc)
        self.scheduler.on_failure = lambda exc: self.stop_requested.set()
        self.stop_requested = threading.Event()
        self.ports = {}
        self._topics = {}
        # Images are taken on a thread of their own, past the executor (image_receiver.py),
        # into the GPU engine's pinned buffers where it offers them (rcl_io.py); with that
        # engine messages go out through rcl's own call too. The CPU engine keeps rclpy's
        # calls: neither measured a gain on the CPU machine (docs/design-notes.md).
        rcl = rcl_io.load()
        buffers = engine.image_buffer if engine.capabilities.image_buffers else None
        self.receiver = ImageReceiver(self, rcl=rcl, buffers=buffers)
        self._publish_rcl = rcl if buffers is not None else None
        self.get_logger().info(f'images: {self.receiver.take}; messages: '
                               f'{rcl_io.publishing(self._publish_rcl)}')
        self._wire_cameras()
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.diagnostics_pub = None
        if self.params['diagnostics_period_s'] > 0:
            self.diagnostics_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
            self.create_timer(self.params['diagnostics_period_s'], self._publish_diagnostics)
        self.scheduler.start()
        self.receiver.start()

    @property
    def engine(self):
        """Return the engine in use (the CPU engine after a fallback)."""
        return self.scheduler.engine

    @property
    def failure(self):
        """Return why the engine stopped the node, or None."""
        return self.scheduler.failure

    @property
    def fallback(self):
        """Return why the node fell back to the CPU engine, or None."""
        return self.scheduler.fallback

    def _declare(self, specs):
        """Declare and validate parameters ``[(name, (default, descriptor))]``."""
        for name, (default, descriptor) in specs:
            try:
                value = self._declare_one(name, default, descriptor)
            except ParameterException as exc:
                raise ParameterError(f'parameter {name}: {declare_reason(name, exc)}') from exc
            if unset_value(name, value):
                value = []  # a list parameter left unset
            reason = validate_parameter(name, value)
            if reason:
                raise ParameterError(f'parameter {name}: {reason}')
            self.params[name] = value

    def _declare_one(self, name, default, descriptor):
        """
        Declare one parameter; return its value.

        A list that may stay unset and comes as YAML null from a parameters file
        (what ``ros2 param dump`` writes for it; rcl reads the string 'null')
        is declared unset instead, so a dump loads back as it was. That needs a
        writable declaration first; the descriptor then becomes read-only.
        """
        if default is not None and descriptor.type == ParameterType.PARAMETER_DOUBLE:
            return self._declare_double(name, default, descriptor)
        if default is not None:
            return self.declare_parameter(name, default, descriptor).value
        writable = ParameterDescriptor(dynamic_typing=True, description=descriptor.description)
        value = self.declare_parameter(name, None, writable).value
        if value is not None and unset_value(name, value):
            self.undeclare_parameter(name)
            return self.declare_parameter(name, None, descriptor, ignore_override=True).value
        self.set_descriptor(name, descriptor)
        return value

    def _declare_double(self, name, default, descriptor):
        """
        Declare a floating-point parameter that also takes a whole number (``min_distance:=20``).

        rcl reads ``20`` on a command line, in a launch file or in YAML as an
        integer, which a DOUBLE declaration refuses; the value is read through a
        writable declaration first and a whole number is declared as its float.
        """
        writable = ParameterDescriptor(dynamic_typing=True, description=descriptor.description)
        value = self.declare_parameter(name, default, writable).value
        if isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        self.undeclare_parameter(name)
        return self.declare_parameter(name, value, descriptor, ignore_override=True).value

    # -- wiring -----------------------------------------------------------------------------------
    def _qos(self, prefix, reliability=None):
        reliability = reliability or self.params[f'{prefix}_reliability']
        if reliability == 'auto':
            reliability = 'reliable'
        return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=self.params[f'{prefix}_depth'],
                          reliability=RELIABILITY[reliability])

    def _wire_cameras(self):
        keypoints_type, matches_type = message_types()
        qos = self._qos('output_qos')
        for name in self.params['cameras']:
            ports = self.ports[name] = Ports()
            ports.keypoints = self._serialized(keypoints_type, topic(name, 'keypoints'), qos)
            ports.matches = self._serialized(matches_type, topic(name, 'matches'), qos)
            ports.debug = self.create_publisher(Image, topic(name, 'debug_image'), qos)
            if self.outputs.keypoint_cloud:
                ports.cloud = self.create_publisher(PointCloud2, topic(name, 'keypoint_cloud'),
                                                    qos)
            if self.outputs.vins_features:
                ports.feature = self.create_publisher(PointCloud, topic(name, 'feature'), qos)
            if self.outputs.needs_camera_model(name):
                self._camera_model(name)
            self._subscribe(name, self.params['input_qos_reliability'])
        for left, _ in self.outputs.pairs:
            self.ports[left].stereo = self._serialized(
                matches_type, topic(left, 'stereo_matches'), qos)

    def _serialized(self, msg_type, name, qos):
        """Create a publisher of CDR writers: rcl's own call from a kept buffer (rcl_io.py)."""
        return rcl_io.serialized_publisher(self.create_publisher(msg_type, name, qos),
                                           self._publish_rcl)

    def _camera_model(self, camera):
        """Take the camera model from parameters, else subscribe ``c/camera_info``."""
        intrinsics = self.params[camera_parameter(camera, 'intrinsics')]
        if intrinsics:
            coeffs = self.params[camera_parameter(camera, 'distortion_coeffs')]
            model = self.params[camera_parameter(camera, 'distortion_model')]
            try:
                self.streams[camera].camera_model = CameraModel.from_parameters(
                    intrinsics, model if coeffs else 'none', coeffs)
            except CameraModelError as exc:
                raise ParameterError(f'camera {camera!r} intrinsics parameters: {exc}') from exc
            return
        # Best effort hears reliable and best-effort camera drivers alike.
        qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=5,
                         reliability=ReliabilityPolicy.BEST_EFFORT)
        self.ports[camera].camera_info = self.create_subscription(
            CameraInfo, topic(camera, 'camera_info'),
            lambda msg, c=camera: self._on_camera_info(c, msg), qos)

    def _on_camera_info(self, camera, msg):
        """Keep the newest valid camera model; count and log invalid ones."""
        try:
            self.streams[camera].camera_model = CameraModel.from_camera_info(msg)
        except CameraModelError as exc:
            self.streams[camera].count('camera_info_rejected')
            self.report.error(f'{self.topic_name(camera, "camera_info")}: {exc}',
                              key=(camera, 'camera_info'))

    def _subscribe(self, camera, reliability):
        ports = self.ports[camera]
        ports.publishers = 0
        events = SubscriptionEventCallbacks(
            incompatible_qos=lambda event, c=camera: self._on_incompatible_qos(c, event),
            matched=lambda info, p=ports: setattr(p, 'publishers', info.current_count))
        # A raw subscription: the image is parsed in place (cdr.parse_image, no copy of the
        # pixels) instead of rclpy building a message (docs/transport.md); a compressed one
        # is decoded on receipt (ros/compressed.py), JPEG by the GPU engine where it can.
        msg_type, name, parse = image_input(self, topic(camera, 'image'),
                                            self.params['input_transport'],
                                            lambda: engine_jpeg_decoder(self.engine))
        ports.subscription = self.receiver.subscribe(
            msg_type, name,
            lambda payload, info, c=camera: self.on_image(c, payload, info, parse),
            self._qos('input_qos', reliability), event_callbacks=events)
        ports.reliability = 'reliable' if reliability == 'auto' else reliability

    def _on_incompatible_qos(self, camera, event):
        """Adapt (auto) or warn when a publisher's QoS does not match the subscription."""
        ports = self.ports[camera]
        name = self.topic_name(camera, 'image')
        auto = self.params['input_qos_reliability'] == 'auto'
        if auto and ports.reliability == 'reliable' and not ports.switch_pending:
            # Re-create the subscription outside this event's own callback.
            ports.switch_pending = True
            self.get_logger().warning(
                f'{name}: a best-effort publisher appeared; input_qos_reliability is auto, so '
                'this camera now subscribes best effort (large images can then be lost in '
                'transport: every detected loss is counted)')
            timer = None

            def switch():
                timer.cancel()
                self.destroy_timer(timer)
                self.receiver.unsubscribe(ports.subscription)
                self._subscribe(camera, 'best_effort')
                ports.switch_pending = False
            timer = self.create_timer(0.0, switch)
            return
        self.report.warning(f'{name}: a publisher has QoS this subscription cannot hear '
                            f'(policy {event.last_policy_kind}); set input_qos_reliability to '
                            'match it', key=(camera, 'qos'), period_s=30.0)

    def topic_name(self, camera, name):
        """Return the resolved name of topic ``name`` of ``camera`` (as on /diagnostics)."""
        key = (camera, name)
        if key not in self._topics:
            self._topics[key] = self.resolve_topic_name(topic(camera, name))
        return self._topics[key]

    # -- parameters -------------------------------------------------------------------------------
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
        for parameter in parameters:
            self.params[parameter.name] = parameter.value
        engine_settings = {p.name: p.value for p in parameters if p.name in ENGINE_LIVE}
        if engine_settings:
            self.scheduler.configure(**engine_settings)
        return SetParametersResult(successful=True)

    # -- input ------------------------------------------------------------------------------------
    def on_image(self, camera, msg, info=None, parse=None):
        """
        Take one image message of ``camera``: check it and queue it for the engine.

        The one entry point of images (``info``: rclpy's message info, for
        counting images lost before the node; ``parse``: how to read ``msg``,
        :func:`xfeat_ros.ros.transport.cdr.parse_image` for the raw subscription's bytes).
        Never raises into rclpy: a bad image is counted and logged, a full queue
        drops its oldest frame.
        """
        received = time.monotonic()
        stream = self.streams[camera]
        self._count_gap(camera, info)
        try:
            item = stream.accept(msg, received, parse, info)
        except ImageError as exc:
            self._log_reject(camera, exc)
            return
        if self.scheduler.put(item):
            self.report.warning(
                f'{self.topic_name(camera, "image")}: queue full '
                f'({self.scheduler.config.queue_size}), dropped the oldest frame '
                f'({stream.counts()["dropped_queue_full"]} so far)', key=(camera, 'queue'))

    def _log_reject(self, camera, exc):
        """Log a rejected image: each new reason at once, repeats every few seconds."""
        key = (camera, reason_key(exc))
        count = self.report.tally(key)  # this reason's; /diagnostics counts per error class
        self.report.error(f'{self.topic_name(camera, "image")}: rejected image ({count} so far '
                          f'for this reason): {exc}', key=key, period_s=REJECT_LOG_PERIOD_S)

    def _count_gap(self, camera, info):
        """Count images a publisher sent that never reached this callback (runtime.gaps)."""
        ports = self.ports[camera]
        missed = publication_gap(ports.sequences, info)
        if not missed:
            return
        total = self.streams[camera].count('lost_before_node', missed)
        self.report.warning(f'{self.topic_name(camera, "image")}: {missed} image(s) lost in the '
                            f'middleware before the node ({total} so far); '
                            f'{lost_hint(ports.reliability, dds.driver_profile_hint())}',
                            key=(camera, 'lost', ports.reliability))

    # -- outputs (the core's sink) ----------------------------------------------------------------

    # -- health -----------------------------------------------------------------------------------
    def stats(self):
        """Per-camera counters (received, accepted, published, rejected, dropped...)."""
        return {name: dict(stream.counts()) for name, stream in self.streams.items()}

    def stage_medians(self):
        """Per camera, the median ms of each latency stage (see runtime.stream.STAGES)."""
        return {name: {stage: round(ms, 3) for stage, ms in stream.stage_medians().items()}
                for name, stream in self.streams.items()}

    def camera_status(self, camera, now=None):
        """Return the ``diagnostic_msgs/DiagnosticStatus`` of one camera's stream."""
        stream, ports, engine = self.streams[camera], self.ports[camera], self.engine
        counts = stream.counts()
        published_at, latency = stream.timings()
        level, message = stream_health(counts, self.failure, self.fallback, ports.publishers)
        status = DiagnosticStatus(name=diagnostic_name(self.topic_name(camera, 'image')),
                                  hardware_id=f'{engine.name} on {engine.device}',
                                  level=getattr(DiagnosticStatus, level), message=message)
        now = time.monotonic() if now is None else now
        values = {'rate_hz': f'{recent_rate(published_at, now):.2f}',
                  'queued': str(self.scheduler.queued(camera)), **latency_values(latency),
                  'backend': engine.name, 'device': engine.device,
                  'input_reliability': ports.reliability,
                  'image_publishers': str(ports.publishers),
                  'keypoints_subscribers': str(ports.keypoints.publisher
                                               .get_subscription_count())}
        values.update({f'{stage}_ms_median': f'{ms:.2f}'
                       for stage, ms in stream.stage_medians().items()})
        values.update({k: str(v) for k, v in sorted(counts.items())})
        status.values = [KeyValue(key=k, value=v) for k, v in values.items()]
        return status

    def _publish_diagnostics(self):
        array = DiagnosticArray()
        array.header.stamp = self.get_clock().now().to_msg()
        array.status = [self.camera_status(camera) for camera in self.streams]
        self.diagnostics_pub.publish(array)

    def destroy_node(self):
        """Stop the image receiver's thread, then destroy the node."""
        self.receiver.stop()
        self._stop_forwarding()
        super().destroy_node()

    def stop(self):
        """Stop taking images; finish the group in flight and its outputs; count the rest."""
        self.receiver.stop()
        self.scheduler.stop()
        self.frontend.flush()  # VINS-Fusion left frames whose right never came


def main(args=None):
    """Run the node until SIGINT/SIGTERM; then finish the group in flight and log counts."""
    from xfeat_ros.ros.usage import node_help
    if node_help(args):  # --help / -h before --ros-args: usage, not a node
        return 0
    malloc = heap.keep_large_buffers()  # before rclpy allocates its first buffers
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    # SIGINT too: a process started in the background of a shell inherits it ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    node = None
    code = 0
    try:
        node = XFeatNode()
        # Not rclpy.experimental's EventsExecutor: in kilted it fails (SystemError) on
        # callbacks that take the message info, which the gap count needs (docs/design-notes.md).
        executor = rclpy.executors.SingleThreadedExecutor()
        executor.add_node(node)
        node.get_logger().info(f'heap for large messages: {malloc} (xfeat_ros.runtime.heap)')
        # Start-up's objects (PyTorch, CuPy, the weights) out of the full collections.
        heap.freeze_startup_objects()
        while rclpy.ok() and not node.stop_requested.is_set():
            # Short waits return to Python, where SIGINT/SIGTERM raise KeyboardInterrupt
            # with the context still valid, so shutdown can finish and log cleanly.
            executor.spin_once(timeout_sec=0.1)
        if node.failure:
            code = 1
    except KeyboardInterrupt:
        pass
    except XFeatError as exc:
        # Under the node's own name (-r __node:=..., its namespace): XFeatNode attaches it.
        logger = rclpy.logging.get_logger(getattr(exc, 'node_logger', 'xfeat'))
        logger.fatal(f'cannot start: {exc}')
        code = 1
    finally:
        if node is not None:
            node.stop()
            node.get_logger().info(f'final counts: {node.stats()}')
            node.get_logger().info(f'stage medians, ms: {node.stage_medians()}')
        with dds.teardown_guard():
            if node is not None:
                node.destroy_node()
            if rclpy.ok():
                rclpy.shutdown()
    return code


if __name__ == '__main__':
    sys.exit(main())
