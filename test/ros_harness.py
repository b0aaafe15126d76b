# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Drive a real ``xfeat_node`` process from a test through rclpy.

The node runs as a separate process (``python -m xfeat_ros.ros.node``) with
``--ros-args`` parameters, started and stopped by :mod:`xfeat_ros.tools.plumbing`
as the tools do; the test side owns its own rclpy context with
publishers for the images and subscriptions collecting the outputs. conftest.py
has already set ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and a ROS_DOMAIN_ID, and
child processes inherit them.
"""

import itertools
import os
import time

from diagnostic_msgs.msg import DiagnosticArray
import rclpy
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CompressedImage, Image

from xfeat_ros.ros.messages import camera_status_values
from xfeat_ros.ros.node import topic
# The node process as every tool starts and stops it (python -m xfeat_ros.ros.node --ros-args ...)
# with its output in a log file (start_node(params, log_path, extra_args=())); SIGINT, wait, kill.
from xfeat_ros.tools.plumbing import start_node, stop_process as stop_node  # noqa: F401

RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
_TOPICS = itertools.count()


def private_topic(name):
    """
    Return an absolute topic ``/xfeat_test_<pid>_<n>/<name>`` that no other test uses.

    A publisher that starts as soon as it counts one subscriber (``xfeat_play``)
    starts early when any other reader of its topic is alive in the domain
    (another test's, another process's): images it sends before it has matched
    the test's own reader never reach that reader (volatile durability). A
    topic of the test's own has the test's reader as its only one.
    """
    return f'/xfeat_test_{os.getpid()}_{next(_TOPICS)}/{name}'


class Client:
    """Test-side node: publishes images, collects keypoints and matches per camera."""

    def __init__(self, cameras=('',), name='xfeat_test_client', compressed=False):
        """
        Create a private context and the publishers/subscriptions.

        ``compressed``: publish ``sensor_msgs/CompressedImage`` on ``c/image/compressed``
        (a node with ``input_transport`` compressed) instead of Images on ``c/image``.
        """
        from xfeat_ros_msgs.msg import Keypoints, Matches
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.publishers = {}
        self.keypoints = {}
        self.matches = {}
        self.keypoints_writers = {}  # node writers matched by our Keypoints reader
        self.node_side = {}          # camera -> the node's /diagnostics values
        for cam in cameras:
            self.publishers[cam] = self.node.create_publisher(
                *((CompressedImage, topic(cam, 'image') + '/compressed') if compressed
                  else (Image, topic(cam, 'image'))), RELIABLE)
            self.keypoints[cam] = []
            self.matches[cam] = []
            self.keypoints_writers[cam] = 0
            self.node.create_subscription(
                Keypoints, topic(cam, 'keypoints'), self.keypoints[cam].append, RELIABLE,
                event_callbacks=SubscriptionEventCallbacks(
                    matched=lambda info, c=cam: self._on_keypoints_matched(c, info)))
            self.node.create_subscription(Matches, topic(cam, 'matches'),
                                          self.matches[cam].append, RELIABLE)
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diagnostics, 10)

    def _on_keypoints_matched(self, cam, info):
        self.keypoints_writers[cam] = info.current_count

    def _on_diagnostics(self, array):
        for cam in self.publishers:
            values = camera_status_values(array, '/' + topic(cam, 'image'))
            if values is not None:
                self.node_side[cam] = values

    def spin_until(self, predicate, timeout, process=None):
        """Spin until ``predicate()`` is true; False on timeout or if ``process`` died."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            if process is not None and process.poll() is not None:
                return False
            self.executor.spin_once(timeout_sec=0.05)
        return predicate()

    def wait_connected(self, process, timeout=60.0):
        """
        Wait until every image and Keypoints topic is matched at both ends.

        Our image writers count the node's readers and the node's readers have
        matched our writers (its /diagnostics ``image_publishers``, so the node
        must publish diagnostics): an image sent before that waits for the next
        heartbeat (~3 s). Our Keypoints readers have matched the node's writers
        and those count our readers (``keypoints_subscribers``): Keypoints
        written before that never reach us.
        """
        def node_counts(cam, key):
            return int(self.node_side.get(cam, {}).get(key, 0))

        def ready():
            return all(pub.get_subscription_count() > 0 for pub in self.publishers.values()) \
                and all(self.keypoints_writers[cam] > 0
                        and node_counts(cam, 'image_publishers') > 0
                        and node_counts(cam, 'keypoints_subscribers') > 0
                        for cam in self.publishers)
        return self.spin_until(ready, timeout, process)

    def publish(self, camera, msg):
        """Publish one image on a camera and spin briefly."""
        self.publishers[camera].publish(msg)
        self.executor.spin_once(timeout_sec=0.0)

    def close(self):
        """Destroy the node and the context."""
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


def run_sequence(params, frames, log, until=lambda client: True, timeout=120):
    """
    Run a node with ``params`` over ``frames`` ([(stamp ns, image path)]) on camera ''.

    Waits until every Keypoints and Matches message came and ``until(client)``
    holds (asserted, with the node's log), then stops the node (exit code 0
    asserted). Returns the closed :class:`Client`, its messages kept.
    """
    from xfeat_ros.features.image_codec import image_msg
    from xfeat_ros.tools.image_files import read_image
    from xfeat_ros.tools.play import stamp_msg
    process = start_node(params, log)
    client = Client()
    try:
        assert client.wait_connected(process), log.read_text()
        for stamp, path in frames:
            client.publish('', image_msg(*read_image(path), stamp=stamp_msg(stamp)))
        assert client.spin_until(lambda: len(client.keypoints['']) == len(frames)
                                 and len(client.matches['']) == len(frames) - 1
                                 and until(client), timeout, process), log.read_text()
    finally:
        client.close()
        assert stop_node(process) == 0
    return client


def call_service(client, service_type, name, request, timeout=10.0):
    """Call a service from the client's node; returns the response or None."""
    cli = client.node.create_client(service_type, name)
    try:
        if not cli.wait_for_service(timeout_sec=timeout):
            return None
        future = cli.call_async(request)
        client.spin_until(future.done, timeout)
        return future.result()
    finally:
        client.node.destroy_client(cli)


def set_parameters(client, node_name, values):
    """Set parameters of a remote node one by one; returns their SetParametersResult list."""
    from rcl_interfaces.srv import SetParameters
    from rclpy.parameter import Parameter
    request = SetParameters.Request()
    request.parameters = [Parameter(k, value=v).to_parameter_msg() for k, v in values.items()]
    response = call_service(client, SetParameters, f'{node_name}/set_parameters', request)
    return None if response is None else list(response.results)


def get_parameters(client, node_name, names):
    """Values of remote parameters (python values)."""
    from rcl_interfaces.srv import GetParameters
    from rclpy.parameter import parameter_value_to_python
    request = GetParameters.Request()
    request.names = list(names)
    response = call_service(client, GetParameters, f'{node_name}/get_parameters', request)
    return [parameter_value_to_python(v) for v in response.values]


def dump_parameters(client, node_name):
    """
    Return the YAML ``ros2 param dump`` writes for a remote node.

    The same steps as ros2param's dump verb: every parameter name (list
    service), their values (get service) turned into Python values, nested
    at each '.', written by ``yaml.dump`` in block style.
    """
    import yaml
    from rcl_interfaces.srv import ListParameters
    names = call_service(client, ListParameters, f'{node_name}/list_parameters',
                         ListParameters.Request(depth=ListParameters.Request.DEPTH_RECURSIVE))
    names = sorted(names.result.names)
    values = get_parameters(client, node_name, names)
    tree = {}
    for name, value in zip(names, values):
        branch = tree
        head, *rest = name.split('.', 1)
        while rest:
            branch = branch.setdefault(head, {})
            head, *rest = rest[0].split('.', 1)
        branch[head] = value
    return yaml.dump({node_name: {'ros__parameters': tree}}, default_flow_style=False)
