# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
xfeat_ros: XFeat learned features and matches for ROS 2.

Data flow: ``decode`` (sensor_msgs/Image bytes -> grey [0, 1]) -> ``preprocess``
(floor-of-32 bilinear resize) -> backbone (``backbone``: ONNX Runtime on the CPU)
-> ``postprocess`` (heatmap, NMS, scores, top-K, descriptors) -> ``match``
(mutual nearest neighbour) -> ``messages`` (ROS messages; the node in ``node``).
``engine`` is the frame interface the node drives: ``CpuEngine`` here, and
``xfeat_ros.features.gpu`` (CuPy/NVRTC kernels in ``kernels/``, PyTorch / TensorRT
backbones) on a GPU. The core modules import no rclpy.
"""

__version__ = '0.1.0'
