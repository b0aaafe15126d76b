# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_bench``: the speed of the pipeline and of the node, measured side by side.

Modes (``xfeat_bench MODE --help`` lists the options of each):

``pipeline``
    Detect + describe + match (against the previous frame) per frame, from the
    image bytes on the host to keypoints, scores, descriptors and matches on
    the host, for each resolution and 1, 2, 4, 8, 16 frames in flight (the GPU
    engine submits N frames, then synchronizes once; the CPU engine has no
    asynchrony, so only N = 1 is measured there). Next to it, in the same
    process on the same device: the PyTorch reference of upstream's algorithm
    (:mod:`xfeat_ros.tools.reference_torch`, batches of N) and, with
    ``--upstream DIR``, upstream XFeat itself (``detectAndCompute`` + ``match``).
    Frames are real images (``--images``, default TUM fr2/desk of
    ``../shared/data``) cropped and resized to each resolution, rotated so
    caches do not flatter. Wall time (perf_counter) and, on a GPU, device time
    (CUDA events around the enqueued work) per frame: median, p10 and p90
    after warm-up. Prints a table with ratios and writes JSON.
``cpu``
    ``pipeline`` with the CPU defaults: ONNX Runtime at 640x480, one frame in
    flight, against the reference (and upstream) on the CPU.
``node``
    Starts ``xfeat_node`` (``python -m xfeat_ros.ros.node``) and separate camera
    processes (``xfeat_bench publisher``) for each configuration
    (cameras x Hz; ``max``: as fast as the publisher can), through real rclpy
    transport; after a warm-up, reports the publish and output rates,
    published / received by the node / processed / delivered counts, latency
    from image stamp to Keypoints receipt, the node's CPU load and GPU memory,
    as a table, JSON and a latency histogram PNG.
``publisher``
    The camera process of ``node`` (N cameras at R Hz; driven over stdin).
``plot``
    The latency histogram PNG of a ``node`` JSON file.

Every ROS process this tool starts runs with ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``
and one ``ROS_DOMAIN_ID`` (DDS traffic stays on this machine) and, with ``--dds-profile``
(default: the shipped config/fastdds_shm.xml), the same Fast DDS profile (xfeat_ros.ros.dds).
"""
