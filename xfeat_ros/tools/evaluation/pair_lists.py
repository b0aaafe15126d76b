# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Pose-benchmark pair lists for ``xfeat_eval``: image pairs with intrinsics and relative pose.

Two public forms are read as they are published, with no conversion:

* text, one pair per line, the form of SuperGlue's ScanNet and YFCC /
  PhotoTourism test lists (``scannet_test_pairs_with_gt.txt``): ``name0 name1
  rot0 rot1`` then ``K0`` (9 numbers, row-major), ``K1`` (9) and ``T_0to1``
  (16, row-major 4x4): 38 fields;
* JSON, a list of objects with ``pair_names`` [name0, name1], ``K0``, ``K1``
  (3x3) and ``T_0to1`` (4x4), as in the MegaDepth-1500 list that upstream
  XFeat ships (``assets/megadepth_1500.json``); ``rot0``/``rot1`` optional.

Names are image paths relative to an image root (by default the list's own
folder). ``K0``/``K1`` are the intrinsics of the image files as stored;
``T_0to1`` takes points from camera 0 to camera 1 (``x1 = R x0 + t``).
``rot0``/``rot1`` (0-3) say how many times ``np.rot90`` turns each stored image
upright before matching, as those benchmarks do; the geometry stays that of
the stored images (see :func:`unrotate_points`).
"""

from dataclasses import dataclass
import json
from pathlib import Path

import numpy as np

from xfeat_ros.errors import XFeatError

TEXT_FIELDS = 38
PAIR_LIST_SUFFIXES = ('.txt', '.json')


class PairListError(XFeatError):
    """A pair list cannot be read: unknown form, wrong field count, bad matrix, missing image."""


@dataclass
class PosePair:
    """One pair of a pose benchmark (float64 ``K0``/``K1`` 3x3, ``rotation`` 3x3, ``t`` [3])."""

    name: str
    path0: Path
    path1: Path
    K0: np.ndarray
    K1: np.ndarray
    rotation: np.ndarray
    t: np.ndarray
    rot0: int = 0
    rot1: int = 0


def is_pair_list(path):
    """Return whether ``path`` is a file a pair list may be (``.txt`` or ``.json``)."""
    path = Path(path)
    return path.is_file() and path.suffix.lower() in PAIR_LIST_SUFFIXES


def _matrix(values, shape, what):
    try:
        matrix = np.asarray(values, dtype=np.float64).reshape(shape)
    except (TypeError, ValueError) as exc:
        raise PairListError(f'{what}: not a {shape[0]}x{shape[1]} matrix ({exc})') from exc
    if not np.all(np.isfinite(matrix)):
        raise PairListError(f'{what}: holds non-finite values')
    return matrix


def _pair(root, where, name0, name1, rot0, rot1, k0, k1, t_0to1):
    try:
        rot0, rot1 = int(rot0), int(rot1)
    except (TypeError, ValueError) as exc:
        raise PairListError(f'{where}: rot0/rot1 must be integers 0-3') from exc
    if not {rot0, rot1} <= {0, 1, 2, 3}:
        raise PairListError(f'{where}: rot0/rot1 must be 0-3, got {rot0} {rot1}')
    k0 = _matrix(k0, (3, 3), f'{where} K0')
    k1 = _matrix(k1, (3, 3), f'{where} K1')
    transform = _matrix(t_0to1, (4, 4), f'{where} T_0to1')
    rotation = transform[:3, :3]
    if not np.allclose(rotation @ rotation.T, np.eye(3), atol=1e-3):
        raise PairListError(f'{where}: T_0to1 does not hold a rotation')
    paths = (root / name0, root / name1)
    for path in paths:
        if not path.is_file():
            raise PairListError(f'{where}: image {path} does not exist (image root {root})')
    return PosePair(f'{Path(name0).stem}-{Path(name1).stem}', *paths, k0, k1, rotation,
                    transform[:3, 3].copy(), rot0, rot1)


def read_pair_list(path, image_root=None):
    """
    Return the :class:`PosePair` list of a text or JSON pair list.

    ``image_root`` (default: the list's folder) is where the names are found.
    Raises :class:`PairListError` naming the line or entry of any problem.
    """
    path = Path(path)
    root = Path(image_root) if image_root else path.parent
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise PairListError(f'cannot read pair list {path}: {exc}') from exc
    pairs = []
    if path.suffix.lower() == '.json':
        try:
            entries = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PairListError(f'{path}: not JSON ({exc})') from exc
        if not isinstance(entries, list):
            raise PairListError(f'{path}: expected a JSON list of pairs')
        for i, entry in enumerate(entries):
            where = f'{path} entry {i}'
            try:
                name0, name1 = entry['pair_names']
                pairs.append(_pair(root, where, name0, name1, entry.get('rot0', 0),
                                   entry.get('rot1', 0), entry['K0'], entry['K1'],
                                   entry['T_0to1']))
            except (KeyError, TypeError, ValueError) as exc:
                raise PairListError(f'{where}: needs pair_names [2], K0, K1, T_0to1 '
                                    f'({exc!r})') from exc
    else:
        for number, line in enumerate(text.splitlines(), 1):
            fields = line.split()
            if not fields or fields[0].startswith('#'):
                continue
            where = f'{path} line {number}'
            if len(fields) != TEXT_FIELDS:
                raise PairListError(
                    f'{where}: {len(fields)} fields, expected {TEXT_FIELDS} (name0 name1 rot0 '
                    'rot1, K0 9, K1 9, T_0to1 16)')
            pairs.append(_pair(root, where, *fields[:4], fields[4:13], fields[13:22],
                               fields[22:38]))
    if not pairs:
        raise PairListError(f'{path}: no pairs')
    return pairs


def unrotate_points(points, rot, shape_hw):
    """
    Map pixels of ``np.rot90(image, rot)`` back to the stored image (float [N, 2] x, y).

    ``shape_hw`` is the stored image's (height, width). Pixel centres map onto
    pixel centres, so the inverse is exact for every ``rot`` in 0-3.
    """
    points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    height, width = shape_hw
    x, y = points[:, 0], points[:, 1]
    if rot % 4 == 1:
        return np.c_[width - 1 - y, x]
    if rot % 4 == 2:
        return np.c_[width - 1 - x, height - 1 - y]
    if rot % 4 == 3:
        return np.c_[y, height - 1 - x]
    return points.copy()
