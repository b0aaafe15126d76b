# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The frames the benchmarks feed: real images, cropped and resized to each resolution."""

import os
from pathlib import Path

import numpy as np

from xfeat_ros.features.image_codec import raw_image
from xfeat_ros.tools.plumbing import REPO


# -- frames --------------------------------------------------------------------------------------

def default_images():
    """TUM fr2/desk of ``../shared/data`` (``$XFEAT_ROS_SHARED`` honoured)."""
    shared = Path(os.environ.get('XFEAT_ROS_SHARED', REPO.parent / 'shared'))
    return shared / 'data' / 'tum_fr2_desk'


def default_weights():
    """``../shared/models/xfeat_backbone.npz`` if present, else '' (the weights lookup)."""
    shared = Path(os.environ.get('XFEAT_ROS_SHARED', REPO.parent / 'shared'))
    path = shared / 'models' / 'xfeat_backbone.npz'
    return str(path) if path.is_file() else ''


def load_images(folder, count):
    """Up to ``count`` images of a folder or sequence, evenly spread, as uint8 RGB [H, W, 3]."""
    from xfeat_ros.tools.image_files import list_sequence, read_image
    paths = [p for _, p in list_sequence(folder)]
    if count and len(paths) > count:
        paths = [paths[round(i * (len(paths) - 1) / max(count - 1, 1))] for i in range(count)]
    images = []
    for path in paths:
        pixels, encoding = read_image(path)
        if encoding == 'mono16':
            pixels = (pixels // 257).astype(np.uint8)
        if pixels.shape[2] == 1:
            pixels = pixels.repeat(3, axis=2)
        images.append(np.ascontiguousarray(pixels))
    return images


def fit_resolution(pixels, width, height):
    """Centre-crop ``pixels`` to the aspect of ``width x height``, then resize to it."""
    import cv2
    h, w = pixels.shape[:2]
    if w * height > h * width:
        crop = round(h * width / height)
        pixels = pixels[:, (w - crop) // 2:(w - crop) // 2 + crop]
    elif w * height < h * width:
        crop = round(w * height / width)
        pixels = pixels[(h - crop) // 2:(h - crop) // 2 + crop]
    if pixels.shape[:2] == (height, width):
        return np.ascontiguousarray(pixels)
    shrink = width < pixels.shape[1]
    return cv2.resize(np.ascontiguousarray(pixels), (width, height),
                      interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)


def frame_message(pixels):
    """Wrap pixels as a ``sensor_msgs/Image``-like rgb8 frame (bytes, as from a driver)."""
    msg = raw_image(pixels, 'rgb8')
    msg.pixels = pixels
    return msg


def parse_resolutions(text):
    """``'640x480,1280x720'`` -> ``[(640, 480), (1280, 720)]`` (width, height)."""
    out = []
    for item in text.split(','):
        width, height = item.lower().strip().split('x')
        if int(width) < 32 or int(height) < 32:
            raise ValueError(f'resolution {item} is under 32 px a side')
        out.append((int(width), int(height)))
    return out
