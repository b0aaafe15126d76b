# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
A KLT front-end with VINS-Fusion's settings: the yardstick for track length.

Our own implementation (OpenCV calls only) of the steps VINS' feature
tracker takes per frame, with the numbers of its EuRoC configuration
(:class:`KltSettings`):

1. the previous frame's corners are tracked into the new frame with
   pyramidal Lucas-Kanade (``cv2.calcOpticalFlowPyrLK``, 21 x 21 window,
   ``maxLevel`` 3);
2. reverse check (``flow_back`` 1): each tracked corner is tracked back
   into the previous frame (21 x 21, ``maxLevel`` 1, 30 iterations or 0.01
   eps, starting from its old position) and kept only when both directions
   succeed and it comes back within 0.5 px;
3. corners outside the image border (1 px, on rounded coordinates) are dropped;
4. outlier rejection with a fundamental matrix (``cv2.findFundamentalMat``,
   RANSAC, ``F_threshold`` 1.0 px, confidence 0.99, at least 8 corners),
   fitted as VINS-Mono does on points lifted to the undistorted normalized
   plane and projected with a virtual focal length of 460 px (on the raw
   pixels when no camera model is given). VINS-Fusion keeps this call
   commented out; ``reject_with_f`` False skips it;
5. surviving corners age by one; the mask: corners in order of age (the
   longest-tracked first, ties in their current order), each kept only where
   no older kept corner lies within ``min_dist`` (30 px), blocking a disc of
   that radius around itself;
6. new corners (``cv2.goodFeaturesToTrack``, quality 0.01, ``min_dist`` 30,
   under the mask) fill up to ``max_cnt`` (150), each a new track of age 1.

No CLAHE equalization (VINS-Fusion's tracker has it commented out) and no
motion prediction (that needs the estimator's pose).
"""

from dataclasses import dataclass

import numpy as np

VINS_FOCAL_LENGTH = 460.0  # the virtual focal length of VINS' fundamental-matrix check


@dataclass(frozen=True)
class KltSettings:
    """The tracker's numbers (VINS-Fusion's EuRoC configuration by default)."""

    max_cnt: int = 150
    min_dist: int = 30
    quality: float = 0.01
    window: int = 21
    max_level: int = 3
    flow_back: bool = True
    back_max_level: int = 1
    back_max_px: float = 0.5
    border_px: int = 1
    reject_with_f: bool = True
    f_threshold: float = 1.0
    f_confidence: float = 0.99

    def describe(self):
        """Return the settings as a JSON-ready dict."""
        return dict(self.__dict__)


class KltTracker:
    """One camera's KLT tracks (see the module doc); :meth:`track` takes a grey uint8 image."""

    def __init__(self, settings=KltSettings(), camera=None):
        """``camera``: a :class:`~xfeat_ros.features.camera.CameraModel` for the F check."""
        self.settings = settings
        self.camera = camera
        self.previous = None                          # grey uint8 [H, W]
        self.points = np.zeros((0, 2), np.float32)    # corners of the previous frame
        self.ids = np.zeros(0, np.int64)
        self.ages = np.zeros(0, np.int64)
        self.next_id = 0

    def _lifted(self, points, width, height):
        """Return the F check's points: undistorted at VINS' focal length, or as given."""
        if self.camera is None:
            return points.astype(np.float64)
        from xfeat_ros.features.camera import undistort_points
        normalized = undistort_points(self.camera, points)
        return np.stack([VINS_FOCAL_LENGTH * normalized[:, 0] + width / 2.0,
                         VINS_FOCAL_LENGTH * normalized[:, 1] + height / 2.0], axis=1)

    def _flow(self, image):
        """Track the previous corners into ``image`` (steps 1-4); return them and a keep mask."""
        import cv2
        s = self.settings
        size = (s.window, s.window)
        previous = self.points.reshape(-1, 1, 2)
        current, status, _ = cv2.calcOpticalFlowPyrLK(self.previous, image, previous, None,
                                                      winSize=size, maxLevel=s.max_level)
        keep = status.reshape(-1) > 0
        current = current.reshape(-1, 2)
        if s.flow_back:
            criteria = (cv2.TERM_CRITERIA_COUNT + cv2.TERM_CRITERIA_EPS, 30, 0.01)
            back, back_status, _ = cv2.calcOpticalFlowPyrLK(
                image, self.previous, current.reshape(-1, 1, 2), previous.copy(),
                winSize=size, maxLevel=s.back_max_level, criteria=criteria,
                flags=cv2.OPTFLOW_USE_INITIAL_FLOW)
            returned = np.linalg.norm(back.reshape(-1, 2) - self.points, axis=1)
            keep &= (back_status.reshape(-1) > 0) & (returned <= s.back_max_px)
        height, width = image.shape[:2]
        rounded = np.round(current)
        keep &= ((rounded[:, 0] >= s.border_px) & (rounded[:, 0] < width - s.border_px)
                 & (rounded[:, 1] >= s.border_px) & (rounded[:, 1] < height - s.border_px))
        if s.reject_with_f and keep.sum() >= 8:
            kept = np.nonzero(keep)[0]
            _, inliers = cv2.findFundamentalMat(
                self._lifted(current[kept], width, height),
                self._lifted(self.points[kept], width, height),
                cv2.FM_RANSAC, s.f_threshold, s.f_confidence)
            if inliers is not None:
                keep[kept[inliers.reshape(-1) == 0]] = False
        return current, keep

    def _mask(self, points, ages, shape):
        """Return the corners kept, longest-tracked first, and the mask for new ones (step 5)."""
        import cv2
        mask = np.full(shape, 255, np.uint8)
        kept = []
        for i in np.argsort(-ages, kind='stable'):
            x, y = int(round(points[i, 0])), int(round(points[i, 1]))
            if mask[y, x] == 255:
                kept.append(i)
                cv2.circle(mask, (x, y), self.settings.min_dist, 0, -1)
        return np.asarray(kept, np.int64), mask

    def track(self, image):
        """
        Track into the grey uint8 ``image``; return ``(points float32 [N, 2], ids, ages)``.

        ``ages`` count the frames each corner's track has lived, this one
        included (1 for a new corner).
        """
        import cv2
        image = np.ascontiguousarray(image, dtype=np.uint8)
        if image.ndim != 2:
            raise ValueError(f'KltTracker.track needs a grey [H, W] image, got {image.shape}')
        s = self.settings
        points, ids, ages = self.points, self.ids, self.ages
        if self.previous is not None and len(points):
            if self.previous.shape != image.shape:
                points, ids, ages = points[:0], ids[:0], ages[:0]
            else:
                current, keep = self._flow(image)
                points, ids, ages = current[keep], ids[keep], ages[keep] + 1
        kept, mask = self._mask(points, ages, image.shape)
        points, ids, ages = points[kept].reshape(-1, 2), ids[kept], ages[kept]
        wanted = s.max_cnt - len(points)
        if wanted > 0:
            found = cv2.goodFeaturesToTrack(image, wanted, s.quality, s.min_dist, mask=mask)
            if found is not None:
                found = found.reshape(-1, 2).astype(np.float32)
                points = np.concatenate([points, found])
                ids = np.concatenate([ids, np.arange(self.next_id, self.next_id + len(found))])
                ages = np.concatenate([ages, np.ones(len(found), np.int64)])
                self.next_id += len(found)
        self.previous = image
        self.points = points.astype(np.float32)
        self.ids, self.ages = ids, ages
        return self.points.copy(), ids.copy(), ages.copy()
