# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The algorithm and its engines.

XFeat's model, pre- and post-processing, matching, geometry, cameras and tracks;
the engine contract and the CPU engine (:mod:`.engine`), the one factory
(:mod:`.factory`) and the GPU engine (:mod:`.gpu`).

Imports nothing of the runtime, ROS or tools wings (checked by the layering contract
in setup.cfg).
"""
