# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Tools built on the ROS-free core that need packages the node does not.

* :mod:`xfeat_ros.tools.mapping`: ``xfeat_map``, a COLMAP reconstruction of a
  recorded sequence from XFeat features (needs the ``map`` extra: pycolmap, evo).
"""
