# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Image files and sequences on disk (for xfeat_play, the demo, tests, tools).

Layouts understood by :func:`list_sequence`:

* a plain folder of images, played in name order (no timestamps);
* TUM RGB-D: ``<dir>/rgb/<seconds.fraction>.png`` (stamps from the names);
* EuRoC: ``<dir>/cam0/<nanoseconds>.png`` or ``<dir>/mav0/cam0/data/<ns>.png``.
"""

from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np

from xfeat_ros.errors import ImageError
from xfeat_ros.features.image_codec import grey_pixels

IMAGE_SUFFIXES = ('.png', '.jpg', '.jpeg', '.ppm', '.pgm', '.bmp', '.tif', '.tiff')


def read_image(path):
    """
    Read an image file as ``(pixels, encoding)``.

    ``pixels`` is uint8 [H, W, 3] RGB (``rgb8``), uint8 [H, W, 1] (``mono8``) or
    uint16 [H, W, 1] (``mono16``), exactly as stored (no conversion of depth).
    """
    import cv2
    pixels = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if pixels is None:
        raise ImageError(f'cannot read image file {path}')
    if pixels.ndim == 2:
        encoding = 'mono16' if pixels.dtype == np.uint16 else 'mono8'
        return np.ascontiguousarray(pixels[:, :, None]), encoding
    if pixels.dtype != np.uint8:
        pixels = (pixels // 257).astype(np.uint8)
    if pixels.shape[2] == 4:
        pixels = pixels[:, :, :3]
    return np.ascontiguousarray(pixels[:, :, ::-1]), 'rgb8'


def read_grey(path):
    """Read an image file as grey float32 [H, W] in [0, 1] (mean of R, G, B)."""
    return grey_pixels(*read_image(path))


def _stamp_ns(stem, unit_ns):
    try:
        return int(Decimal(stem) * unit_ns)
    except InvalidOperation:
        return None


def list_sequence(folder):
    """List ``(stamp_ns or None, path)`` of a sequence folder, in time order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ImageError(f'{folder} is not a folder' if folder.exists()
                         else f'{folder} does not exist')
    for sub, unit in (('rgb', 10 ** 9), ('cam0', 1), (Path('mav0/cam0/data'), 1)):
        candidate = folder / sub
        if candidate.is_dir():
            frames = [(_stamp_ns(p.stem, unit), p) for p in sorted(candidate.iterdir())
                      if p.suffix.lower() in IMAGE_SUFFIXES]
            if frames and all(stamp is not None for stamp, _ in frames):
                return sorted(frames)
    frames = [(None, p) for p in sorted(folder.iterdir()) if p.suffix.lower() in IMAGE_SUFFIXES]
    if not frames:
        raise ImageError(f'no images found in {folder}')
    return frames
