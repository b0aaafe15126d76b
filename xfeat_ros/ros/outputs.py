# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The node's outputs: a camera's publishers (:class:`Ports`) and the runtime's Sink.

:class:`NodeOutputs` is the part of :class:`xfeat_ros.ros.node.XFeatNode`
that the runtime's :class:`xfeat_ros.runtime.frontend.FrontEnd` hands each
finished frame to: Keypoints and Matches written as CDR bytes (or in place,
:mod:`xfeat_ros.ros.transport.keypoints_wire`), the keypoint cloud, VINS
features, stereo matches and the debug picture.
"""

from dataclasses import dataclass, field

from xfeat_ros.features.image_codec import image_msg
from xfeat_ros.ros.messages import keypoint_cloud_msg, vins_feature_msg
from xfeat_ros.ros.transport import keypoints_wire
from xfeat_ros.ros.transport.cdr import (CdrWriter, Header, header_msg, write_keypoints,
                                         write_matches)


def ros_header(header):
    """Return the ``std_msgs/Header`` of an image header (a raw image's one converted)."""
    return header_msg(header) if isinstance(header, Header) else header


@dataclass
class Ports:
    """A camera's ROS side: subscriptions, publishers, QoS state."""

    subscription: object = None
    reliability: str = 'reliable'  # of the current image subscription
    switch_pending: bool = False
    publishers: int = 0            # image publishers matched by the current subscription
    sequences: dict = field(default_factory=dict)  # publisher gid -> last sequence number
    keypoints: object = None
    matches: object = None
    cloud: object = None
    feature: object = None
    debug: object = None
    stereo: object = None          # left camera of a pair: its stereo_matches publisher
    camera_info: object = None


class NodeOutputs:
    """The publishing half of the node (needs ``ports``, ``streams`` and ``outputs``)."""

    def _placement(self, camera):
        """Where an armed frame's features go: the places of its Keypoints message."""
        last = self.streams[camera].previous   # the frame just published
        if last is None or self.outputs.descriptor_encoding != keypoints_wire.ENCODING:
            return None
        return keypoints_wire.placement(last.header.frame_id)

    def publish_keypoints(self, out):
        """Publish a frame's Keypoints (in place where its features lie in one, keypoints_wire)."""
        frame, port = out.frame, self.ports[out.camera].keypoints
        if keypoints_wire.publish_in_place(port, frame, self.outputs.descriptor_encoding):
            self.streams[out.camera].count('keypoints_in_place')
            return
        # CDR written from the NumPy arrays: half the cost of building the message
        # (docs/transport.md); the bytes equal rclpy's serialization (test_cdr).
        port.publish(write_keypoints(
            CdrWriter(), frame.header, frame.features, (frame.track_ids, frame.track_ages),
            self.outputs.descriptor_encoding))

    def publish_matches(self, out):
        """Publish a frame's Matches (none after the camera's first frame)."""
        if out.previous is not None:
            frame = out.frame
            self.ports[out.camera].matches.publish(write_matches(
                CdrWriter(), frame.header, out.previous.stamp, out.previous.features,
                frame.features, out.matches))

    def publish_cloud(self, out):
        """Publish a frame's ``c/keypoint_cloud``."""
        frame = out.frame
        self.ports[out.camera].cloud.publish(keypoint_cloud_msg(
            ros_header(frame.header), frame.features, frame.track_ids, frame.track_ages))

    def publish_feature(self, camera, header, columns, camera_ids):
        """Publish one ``c/feature`` (VINS) message."""
        self.ports[camera].feature.publish(vins_feature_msg(ros_header(header), *columns,
                                                            camera_ids=camera_ids))

    def publish_stereo(self, left_camera, left, right, result):
        """Publish a stereo pair's matches on ``left/stereo_matches``."""
        self.ports[left_camera].stereo.publish(write_matches(CdrWriter(), right.header,
                                                             left.stamp, left.features,
                                                             right.features, result))

    def wants_debug(self, camera):
        """Tell whether someone reads ``c/debug_image`` now."""
        return self.ports[camera].debug.get_subscription_count() > 0

    def publish_debug(self, out, canvas):
        """Publish a rendered ``c/debug_image``."""
        header = ros_header(out.frame.header)
        self.ports[out.camera].debug.publish(image_msg(canvas, 'bgr8', header.stamp,
                                                       header.frame_id))
