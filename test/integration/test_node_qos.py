# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Input QoS: auto reliability, adapting to best-effort publishers, counted losses."""

from types import SimpleNamespace

import numpy as np
import pytest
import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_harness import Client, start_node, stop_node
from sensor_msgs.msg import Image
from xfeat_ros.features.image_codec import image_msg
from xfeat_ros.ros import dds
from xfeat_ros.ros.node import XFeatNode
from xfeat_ros.runtime.report import Reporter
from xfeat_ros.tools.image_files import list_sequence, read_image

pytestmark = pytest.mark.ros


def test_auto_hears_reliable_large_frames(data_dir, weights_npz, tmp_path):
    """Default (auto) input: 640x480 RGB frames from a reliable publisher all arrive."""
    frames = [read_image(p) for _, p in list_sequence(data_dir / 'data' / 'tum_fr2_desk')[:8]]
    log = tmp_path / 'node.log'
    process = start_node({'weights': str(weights_npz), 'queue_size': 50}, log)
    client = Client()
    try:
        assert client.wait_connected(process), log.read_text()
        for frame in frames:
            client.publish('', image_msg(*frame))
            client.spin_until(lambda: False, 0.05)
        assert client.spin_until(lambda: len(client.keypoints['']) == 8, 60, process), \
            log.read_text()
    finally:
        client.close()
        assert stop_node(process) == 0
    assert 'lost' not in log.read_text()


def test_auto_switches_to_best_effort_publisher(weights_npz, tmp_path):
    """A best-effort camera is heard after the automatic switch (small frames)."""
    log = tmp_path / 'node.log'
    process = start_node({'weights': str(weights_npz), 'top_k': 500}, log)
    client = Client()
    best_effort = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)
    publisher = client.node.create_publisher(Image, 'image', best_effort)
    rng = np.random.default_rng(0)
    try:
        assert client.wait_connected(process), log.read_text()
        assert client.spin_until(lambda: publisher.get_subscription_count() > 0, 30, process)
        texture = rng.integers(0, 256, (120, 160, 1), dtype=np.uint8)
        sent = 0
        while len(client.keypoints['']) < 3 and sent < 200:
            publisher.publish(image_msg(np.roll(texture, sent, axis=1), 'mono8'))
            sent += 1
            client.spin_until(lambda: False, 0.1)
        assert len(client.keypoints['']) >= 3, log.read_text()
    finally:
        client.node.destroy_publisher(publisher)
        client.close()
        assert stop_node(process) == 0
    assert 'now subscribes best effort' in log.read_text()


def test_sequence_gaps_are_counted(weights, tmp_path):
    """Gaps in a publisher's sequence numbers are counted as lost before the node."""
    from xfeat_ros.features.backbone import OnnxRuntimeBackbone
    from xfeat_ros.features.engine import CpuEngine
    from xfeat_ros.features.network_onnx import build_model
    context = rclpy.Context()
    rclpy.init(context=context)
    node = XFeatNode(engine=CpuEngine(OnnxRuntimeBackbone(build_model(weights))),
                     context=context)
    try:
        gid = {'implementation_identifier': 'x', 'data': bytes(range(24))}
        other = {'implementation_identifier': 'x', 'data': bytes(24)}
        for seq, who in [(1, gid), (2, gid), (5, gid), (1, other), (6, gid), (9, gid),
                         (2, other)]:
            node._count_gap('', {'publication_sequence_number': seq, 'publisher_gid': who})
        assert node.stats()['']['lost_before_node'] == 2 + 2
        node._count_gap('', {'publication_sequence_number': None, 'publisher_gid': None})
        node._count_gap('', None)
        assert node.stats()['']['lost_before_node'] == 4
        # The reliability hint only where it applies: a best-effort subscription.
        lines = []
        node.report = Reporter(SimpleNamespace(warning=lines.append))
        node._count_gap('', {'publication_sequence_number': 20, 'publisher_gid': gid})
        node.ports[''].reliability = 'best_effort'
        node._count_gap('', {'publication_sequence_number': 30, 'publisher_gid': other})
        assert len(lines) == 2
        assert "'/image'" not in lines[0] and lines[0].startswith('/image: 10 image(s) lost')
        assert 'input_qos_depth' in lines[0] and 'input_qos_reliability' not in lines[0]
        assert 'set input_qos_reliability to reliable' in lines[1]
        # Best effort loses large images on a driver with Fast DDS defaults: the fix named
        # first is the shipped profile for the camera driver, not only socket buffers.
        assert f'camera driver with the shipped Fast DDS profile, {dds.PROFILE_ENV}=' in lines[1]
        assert str(dds.shipped_profile()) in lines[1] and dds.PROFILE_NAME not in lines[0]
    finally:
        node.stop()
        node.destroy_node()
        rclpy.shutdown(context=context)
