# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The node's fast transport: images taken and Keypoints written through rcl as CDR bytes.

Plain rclpy (``rcl_io: false``) is the simple path; this package is the fast one behind
the same node (see docs/transport.md).
"""
