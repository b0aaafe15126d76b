# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The ROS 2 adapter: the node, its parameters, messages, DDS profile and transport.

Builds on the ROS-free runtime (:mod:`xfeat_ros.runtime`) and the engines
(:mod:`xfeat_ros.features`); the tools wing is the only one above it.
"""
