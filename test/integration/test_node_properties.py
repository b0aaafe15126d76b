# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Property-based test of the node's image callback with random messages.

Whatever arrives (any encoding name, size, step, data length, endianness,
stamp), the callback never raises into rclpy, and every message is accounted
for: received = accepted + rejected, and once the worker is idle, accepted =
published + dropped.
"""

from hypothesis import given, HealthCheck, settings, strategies as st
from image_strategies import image_headers
import pytest
import rclpy
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image
from xfeat_ros.features.backbone import OnnxRuntimeBackbone
from xfeat_ros.features.engine import CpuEngine
from xfeat_ros.features.network_onnx import build_model
from xfeat_ros.ros.node import XFeatNode
from xfeat_ros.tools.play import stamp_msg

pytestmark = pytest.mark.ros


@pytest.fixture(scope='module')
def node(weights, weights_npz):
    context = rclpy.Context()
    rclpy.init(context=context)
    engine = CpuEngine(OnnxRuntimeBackbone(build_model(weights)), top_k=256)
    xfeat = XFeatNode(engine=engine, context=context,
                      parameter_overrides=[Parameter('weights', value=str(weights_npz)),
                                           Parameter('queue_size', value=1000),
                                           Parameter('diagnostics_period_s', value=0.0)])
    yield xfeat
    xfeat.stop()
    xfeat.destroy_node()
    rclpy.shutdown(context=context)


def to_msg(header, stamp_ns):
    data, encoding, height, width, step, bigendian, _ = header
    msg = Image()
    msg.header.stamp = stamp_msg(stamp_ns)
    msg.encoding, msg.height, msg.width, msg.step = encoding, height, width, step
    msg.is_bigendian = int(bigendian)
    msg.data = data
    return msg


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(image_headers(), st.integers(0, 5 * 10 ** 9)), min_size=1,
                max_size=6))
def test_callback_never_raises_and_accounts_for_everything(node, frames):
    for header, stamp in frames:
        node.on_image('', to_msg(header, stamp), None)  # must not raise
    assert node.scheduler.wait_idle(30)
    counts = node.stats()['']
    assert counts.get('received', 0) == counts.get('accepted', 0) + counts.get('rejected', 0) \
        - counts.get('rejected_late', 0)
    dropped = sum(v for k, v in counts.items() if k.startswith('dropped_'))
    assert counts.get('accepted', 0) == counts.get('published', 0) + dropped \
        + counts.get('rejected_late', 0)
