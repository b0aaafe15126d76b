# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The ``<camera>/debug_image`` overlay (host, OpenCV).

The image is shown in grey (the network's own input, before resizing) so the
colours stand out: each keypoint is a dot coloured by its detection score
(relative to the frame's best) or by its track age, and each match to the
previous frame is a line from the keypoint's previous position to its current
one (green when it continued a track, red when the epipolar check rejected it).
"""

import numpy as np

COLOR_BY = ('score', 'age')
AGE_SATURATION = 30  # frames; older tracks get the last colour of the map
CONTINUED_BGR = (0, 200, 0)
REJECTED_BGR = (0, 0, 220)


def keypoint_colors(values, top):
    """
    Return BGR uint8 [N, 3] colours of ``values`` float [N] on a 0..``top`` scale.

    OpenCV's TURBO colour map: low values blue, high values red.
    """
    import cv2
    values = np.asarray(values, dtype=np.float64)
    level = np.clip(values / top, 0.0, 1.0) if top > 0 else np.zeros_like(values)
    lut = cv2.applyColorMap(np.arange(256, dtype=np.uint8).reshape(-1, 1), cv2.COLORMAP_TURBO)
    return lut.reshape(256, 3)[np.round(level * 255).astype(np.int64)]


def render_debug_image(grey, keypoints, scores, ages, color_by='score', previous_points=None,
                       current_points=None, continued=None):
    """
    Draw keypoints and matches on a grey image; return BGR uint8 [H, W, 3].

    ``grey`` float [H, W] in [0, 1] (as :func:`xfeat_ros.decode.decode_image_msg`
    returns it); ``keypoints`` float [N, 2] pixels, ``scores`` float [N],
    ``ages`` uint [N]; ``color_by`` one of :data:`COLOR_BY`. Matches:
    ``previous_points``/``current_points`` float [M, 2] pixels and
    ``continued`` bool [M] (True: the match continued a track).
    """
    import cv2
    canvas = cv2.cvtColor(np.clip(np.rint(np.asarray(grey) * 255.0), 0, 255).astype(np.uint8),
                          cv2.COLOR_GRAY2BGR)
    radius = max(2, int(round(max(canvas.shape[:2]) / 320)))
    if previous_points is not None and len(previous_points):
        flags = np.ones(len(previous_points), bool) if continued is None else continued
        for (x0, y0), (x1, y1), ok in zip(np.rint(previous_points).astype(int).tolist(),
                                          np.rint(current_points).astype(int).tolist(),
                                          flags.tolist()):
            cv2.line(canvas, (x0, y0), (x1, y1), CONTINUED_BGR if ok else REJECTED_BGR, 1,
                     cv2.LINE_AA)
    if len(keypoints):
        if color_by == 'age':
            colors = keypoint_colors(ages, AGE_SATURATION)
        else:
            colors = keypoint_colors(scores, float(np.max(scores)))
        for (x, y), color in zip(np.rint(keypoints).astype(int).tolist(), colors.tolist()):
            cv2.circle(canvas, (x, y), radius, color, -1, cv2.LINE_AA)
    return canvas
