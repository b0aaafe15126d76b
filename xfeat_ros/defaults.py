# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The one default configuration of detection and matching.

Every engine, pipeline function, node parameter and command line takes its
defaults from here (upstream XFeat's ``detectAndCompute`` / ``match`` values).
"""

TOP_K = 4096        # keypoints per image, best scores first
THRESHOLD = 0.05    # heatmap detection threshold (strict)
MIN_COSSIM = 0.82   # cosine similarity a mutual nearest neighbour must exceed
