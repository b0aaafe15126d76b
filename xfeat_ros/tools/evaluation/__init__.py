# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_eval``: accuracy of XFeat matches on data with geometric ground truth.

Each dataset folder is recognised by its layout:

* homography sequences, HPatches (``1.ppm`` .. ``6.ppm`` with ``H_1_2`` ..
  ``H_1_6``) or Oxford (``img1.ppm`` .. with ``H1to2p`` ..): every pair 1 -> k
  is matched, a homography is fitted to the matches (fixed settings, written
  to the output), and scored by the mean corner error against the ground
  truth and the MHA (share of pairs with corner error <= 1/3/5 px);
* pose sequences, TUM RGB-D (``rgb/<seconds>.png`` + ``groundtruth.txt``;
  intrinsics from flags, TUM fr2 by default, or ``--intrinsics`` YAML) and
  KITTI odometry (a sequence folder with ``image_0/<frame>.png`` and
  ``calib.txt``, its poses in ``poses.txt`` beside them or, in KITTI's own
  layout ``dataset/sequences/NN`` + ``dataset/poses/NN.txt``, two levels up;
  line k of the poses is frame k, images are paired with poses by their frame
  number): frame pairs ``(i, i + gap)`` at several gaps, relative pose from
  the essential matrix, rotation and translation-direction errors in degrees,
  pose AUC at 5/10/20 degrees of ``max(rotation, translation)`` error;
* pose pair lists (a ``.txt`` in SuperGlue's ScanNet / YFCC form or a
  ``.json`` like upstream XFeat's MegaDepth-1500 list, see
  :mod:`xfeat_ros.tools.evaluation.pair_lists`): every listed pair with its own intrinsics and
  relative pose, scored as the pose sequences are.

Every method sees the same pairs: the xfeat_ros engines named by ``--backend``
(CPU and GPU alike, through the engine contract) and, with ``--upstream DIR``,
upstream XFeat itself (``detectAndCompute`` + ``match``, loaded with the same
weights). With ``--descriptor-encoding`` the xfeat_ros methods are evaluated
once per wire encoding of the descriptors (float32, float16, int8; see
:mod:`xfeat_ros.features.descriptor_format`): the descriptors are encoded and decoded after
extraction and matched by mutual NN as a consumer of the wire format would,
and the tables add the encoded bytes per frame and the share of the engine's
float32 matches reproduced. The output folder gets ``results.md``,
``results.json`` and PNG plots (accuracy curves, errors along each pose
sequence, the best and worst pair of each method with inliers green and
outliers red). Metric conventions
are in :mod:`xfeat_ros.tools.evaluation.metrics`.

The robust fits are deterministic for a given order of the matches (OpenCV's
RANSAC and USAC fits sample by match index from their own fixed-state
generator; ``cv2.setRNGSeed`` does not change them, see
:mod:`xfeat_ros.features.geometry`), and every pair is fitted with its matches in a
canonical order. One match more or less still changes the samples and so the
estimate. With ``--fit-orders N`` every pair is also fitted with its matches
in N seeded random orders (the matches are computed once) and the summaries
add the mean and standard deviation over orders of the MHA and AUC of each
order: the typical value of the fit's order distribution, not one draw.
"""
