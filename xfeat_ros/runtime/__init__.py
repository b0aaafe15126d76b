# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The ROS-free front-end core, shared by the node and ``xfeat_offline``.

Data flow (none of these modules imports rclpy)::

    image message -> CameraStream.accept (checks, counters)        stream.py
      (the node first counts images lost before it)                gaps.py
      -> Scheduler: per-camera queues, groups, slots, engine,      scheduler.py
         CPU fallback, stereo pairing on the engine                stereo.py
      -> FrontEnd.finish: tracks, Keypoints/Matches, keypoint      frontend.py
         cloud, VINS features, stereo matches, debug image         vins.py
      -> a Sink: the node's publishers, or a bag writer

The adapters (:mod:`xfeat_ros.ros.node`, :mod:`xfeat_ros.tools.offline`) own the
transport: subscriptions/publishers or bag reading/writing.
"""
