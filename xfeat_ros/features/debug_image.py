# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The ``<camera>/debug_image`` overlay (host, OpenCV).

The image is shown in grey (the network's own input, before resizing) so the
colours stand out: each keypoint is a dot coloured by its detection score
(relative to the frame's best) or by its track age, and each match to the
previous frame is a line from the keypoint's previous position to its current
one (green when it continued a track, red when the epipolar check rejected it).
Images of at least :data:`LEGEND_MIN_WH` get a small legend in the bottom-left
corner saying so (:func:`draw_legend`).
"""

import numpy as np

COLOR_BY = ('score', 'age')
AGE_SATURATION = 30  # frames; older tracks get the last colour of the map
CONTINUED_BGR = (0, 200, 0)
REJECTED_BGR = (0, 0, 220)
LEGEND_MIN_WH = (320, 240)  # smaller images get no legend (it would hide too much)
LEGEND_WH = (232, 52)       # the legend box, pixels


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


def draw_legend(canvas, color_by='score'):
    """
    Draw the colour legend into the bottom-left corner of BGR uint8 ``canvas`` (in place).

    Row 1: the keypoint colour bar (score relative to the frame's best, or
    track age 1 .. :data:`AGE_SATURATION`+ frames); row 2: the two match line
    colours. Returns the legend's ``(x0, y0, x1, y1)`` box, or None where the
    canvas is under :data:`LEGEND_MIN_WH`.
    """
    import cv2
    height, width = canvas.shape[:2]
    if width < LEGEND_MIN_WH[0] or height < LEGEND_MIN_WH[1]:
        return None
    x0, y0 = 4, height - 4 - LEGEND_WH[1]
    x1, y1 = x0 + LEGEND_WH[0], height - 4
    canvas[y0:y1, x0:x1] = (canvas[y0:y1, x0:x1] // 4).astype(np.uint8)  # darkened backing
    font, scale, white = cv2.FONT_HERSHEY_SIMPLEX, 0.4, (255, 255, 255)
    low, high = ('score 0', 'best') if color_by == 'score' else ('age 1', f'{AGE_SATURATION}+')
    bar = keypoint_colors(np.linspace(0.0, 1.0, 80), 1.0)
    bar_x = x0 + 52
    canvas[y0 + 8:y0 + 18, bar_x:bar_x + 80] = bar[None, :, :]
    cv2.putText(canvas, low, (x0 + 4, y0 + 17), font, scale, white, 1, cv2.LINE_AA)
    cv2.putText(canvas, high, (bar_x + 86, y0 + 17), font, scale, white, 1, cv2.LINE_AA)
    row = y0 + 38
    cv2.line(canvas, (x0 + 4, row), (x0 + 24, row), CONTINUED_BGR, 2, cv2.LINE_AA)
    cv2.putText(canvas, 'track', (x0 + 28, row + 4), font, scale, white, 1, cv2.LINE_AA)
    cv2.line(canvas, (x0 + 80, row), (x0 + 100, row), REJECTED_BGR, 2, cv2.LINE_AA)
    cv2.putText(canvas, 'epipolar reject', (x0 + 104, row + 4), font, scale, white, 1,
                cv2.LINE_AA)
    return x0, y0, x1, y1


def render_debug_image(grey, keypoints, scores, ages, color_by='score', previous_points=None,
                       current_points=None, continued=None):
    """
    Draw keypoints and matches on a grey image; return BGR uint8 [H, W, 3].

    ``grey`` float [H, W] in [0, 1] (as :func:`xfeat_ros.features.image_codec.decode_image_msg`
    returns it); ``keypoints`` float [N, 2] pixels, ``scores`` float [N],
    ``ages`` uint [N]; ``color_by`` one of :data:`COLOR_BY`. Matches:
    ``previous_points``/``current_points`` float [M, 2] pixels and
    ``continued`` bool [M] (True: the match continued a track). The legend
    (:func:`draw_legend`) is drawn last, over everything in its corner.
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
    draw_legend(canvas, color_by)
    return canvas
