# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The tools: command lines built on the runtime, apart from it (the node never imports them).

* :mod:`xfeat_ros.tools.bench`: ``xfeat_bench``, the speed of the pipeline and of the node.
* :mod:`xfeat_ros.tools.evaluation`: ``xfeat_eval``, match accuracy on data with ground truth.
* :mod:`xfeat_ros.tools.demo`: ``xfeat_demo``, the node on a sample sequence, scored.
* :mod:`xfeat_ros.tools.offline`: ``xfeat_offline``, a rosbag2 bag through the core, no transport.
* :mod:`xfeat_ros.tools.mapping`: ``xfeat_map``, a COLMAP reconstruction of a
  recorded sequence from XFeat features (needs the ``map`` extra: pycolmap, evo).
* :mod:`xfeat_ros.tools.plumbing`: what they share: upstream XFeat, environment
  records, starting and stopping a node process (also used by the test harness
  and ``bench/soak.py``).
"""
