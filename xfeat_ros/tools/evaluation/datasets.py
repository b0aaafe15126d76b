# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The inputs of ``xfeat_eval``: dataset layouts and their ground truth.

:func:`load_dataset` recognises a folder or a pair list (:data:`LAYOUTS`) and
returns a :class:`Dataset`: homography pairs (HPatches, Oxford) or pose frames
(TUM RGB-D, KITTI odometry) with their camera (a
:class:`~xfeat_ros.camera.CameraModel`), or the pairs of a pose pair list
(:mod:`xfeat_ros.pair_lists`).
"""

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
import logging
from pathlib import Path

import numpy as np

from xfeat_ros.camera import CameraModel
from xfeat_ros.errors import CameraModelError, DatasetError
from xfeat_ros.geometry import quaternion_to_matrix
from xfeat_ros.image_files import IMAGE_SUFFIXES, list_sequence
from xfeat_ros.pair_lists import is_pair_list, read_pair_list

LOG = logging.getLogger('xfeat_eval')

TUM_FR2 = {'fx': 520.9, 'fy': 521.0, 'cx': 325.1, 'cy': 249.7,
           'dist': [0.2312, -0.7849, -0.0033, -0.0001, 0.9172]}
TUM_MAX_STAMP_GAP_S = 0.02  # association of images to 8-column ground truth


@dataclass
class HomographyPair:
    """Hold one image pair of a homography sequence; ``homography`` float64 3x3 maps 1 -> k."""

    name: str
    path0: Path
    path1: Path
    homography: np.ndarray


@dataclass
class PoseFrame:
    """Hold one frame of a pose sequence: camera-to-world ``rotation`` 3x3, ``position`` [3]."""

    name: str
    path: Path
    rotation: np.ndarray
    position: np.ndarray


@dataclass
class Dataset:
    """Hold a dataset: ``kind`` 'homography' (``pairs``) or 'pose' (``frames``, ``camera``)."""

    name: str
    path: Path
    layout: str
    kind: str
    pairs: list = None
    frames: list = None
    camera: CameraModel = None


def _image_by_stem(folder, stem):
    for suffix in IMAGE_SUFFIXES:
        for candidate in (folder / (stem + suffix), folder / (stem + suffix.upper())):
            if candidate.is_file():
                return candidate
    return None


def read_matrix(path, shape=(3, 3)):
    """Read whitespace-separated numbers from a text file as float64 of ``shape``."""
    try:
        values = np.array(Path(path).read_text().split(), dtype=np.float64)
    except (OSError, ValueError) as exc:
        raise DatasetError(f'cannot read a matrix from {path}: {exc}') from exc
    if values.size != int(np.prod(shape)):
        raise DatasetError(f'{path} holds {values.size} numbers, expected {np.prod(shape)}')
    return values.reshape(shape)


def homography_pairs(folder):
    """
    Return ``(layout, [HomographyPair])`` of an HPatches or Oxford folder, pairs 1 -> k.

    Raises :class:`DatasetError` when the reference image or a ground-truth
    homography of an image is missing.
    """
    folder = Path(folder)
    if _image_by_stem(folder, '1') is not None:
        layout, ref_stem, image_stem, gt_name = 'hpatches', '1', '{k}', 'H_1_{k}'
    elif _image_by_stem(folder, 'img1') is not None:
        layout, ref_stem, image_stem, gt_name = 'oxford', 'img1', 'img{k}', 'H1to{k}p'
    else:
        raise DatasetError(f'{folder}: no 1.ppm (HPatches) or img1.ppm (Oxford) reference image')
    ref = _image_by_stem(folder, ref_stem)
    pairs = []
    for k in range(2, 100):
        image = _image_by_stem(folder, image_stem.format(k=k))
        if image is None:
            break
        gt = folder / gt_name.format(k=k)
        if not gt.is_file():
            raise DatasetError(f'{folder}: image {image.name} has no ground truth {gt.name}')
        pairs.append(HomographyPair(f'1-{k}', ref, image, read_matrix(gt)))
    if not pairs:
        raise DatasetError(f'{folder}: only the reference image, no pair to evaluate')
    return layout, pairs


def _stamp_ns(text):
    try:
        return int(Decimal(text) * 10 ** 9)
    except InvalidOperation:
        return None


def _tum_pose(values):
    tx, ty, tz, qx, qy, qz, qw = (float(v) for v in values)
    return quaternion_to_matrix(qx, qy, qz, qw), np.array([tx, ty, tz])


def tum_frames(folder):
    """
    Return the frames of a TUM RGB-D folder that have a ground-truth pose, in time order.

    ``groundtruth.txt`` lines are either ``image_ts gt_ts tx ty tz qx qy qz qw``
    (one per image, matched by the image stamp) or the TUM original
    ``ts tx ty tz qx qy qz qw`` (the nearest pose within 20 ms is taken).
    Raises :class:`DatasetError` when the file is missing or no image has a pose.
    """
    folder = Path(folder)
    gt_path = folder / 'groundtruth.txt'
    if not gt_path.is_file():
        raise DatasetError(f'{folder}: TUM layout needs {gt_path.name} (camera poses)')
    by_image, by_time = {}, []
    for line in gt_path.read_text().splitlines():
        fields = line.split()
        if not fields or fields[0].startswith('#'):
            continue
        if len(fields) == 9:
            by_image[_stamp_ns(fields[0])] = _tum_pose(fields[2:])
        elif len(fields) == 8:
            by_time.append((_stamp_ns(fields[0]), _tum_pose(fields[1:])))
        else:
            raise DatasetError(f'{gt_path}: a line with {len(fields)} fields (expected 8 or 9)')
    stamps = np.array(sorted(s for s, _ in by_time), dtype=np.int64)
    poses = dict(by_time)
    frames = []
    for stamp, path in list_sequence(folder):
        pose = by_image.get(stamp)
        if pose is None and stamps.size:
            nearest = stamps[np.argmin(np.abs(stamps - stamp))]
            if abs(int(nearest) - stamp) <= TUM_MAX_STAMP_GAP_S * 1e9:
                pose = poses[int(nearest)]
        if pose is None:
            LOG.warning('%s: no ground-truth pose for %s, skipped', folder, path.name)
            continue
        frames.append(PoseFrame(path.stem, path, pose[0], pose[1]))
    if not frames:
        raise DatasetError(f'{gt_path}: no image of {folder} has a ground-truth pose')
    return frames


def kitti_poses_file(folder):
    """
    Return the poses file of a KITTI sequence folder; DatasetError saying where it looked.

    ``poses.txt`` in the folder, or KITTI's own layout: for
    ``<root>/sequences/NN`` the file ``<root>/poses/NN.txt``.
    """
    candidates = [folder / 'poses.txt']
    if folder.parent.name == 'sequences':
        candidates.append(folder.parent.parent / 'poses' / f'{folder.name}.txt')
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise DatasetError(f'{folder}: KITTI layout needs its poses, looked for '
                       + ' and '.join(str(c) for c in candidates))


def kitti_frames(folder):
    """
    Return ``(frames, camera)`` of a KITTI odometry sequence folder.

    ``image_0/<frame>.png`` (frame numbers as names, 000000.png ...), the poses
    (:func:`kitti_poses_file`: line k is the 3x4 ``[R | t]`` camera-to-world
    pose of frame k) and ``calib.txt`` with the ``P0:`` projection (rectified
    images: no distortion). Each image gets the pose of its frame number, not
    of its position in the folder, so a folder holding frames 100-119 gets
    poses 100-119. Raises :class:`DatasetError` for a missing file, an image
    name that is not a frame number, or a frame the poses do not reach.
    """
    folder = Path(folder)
    calib = folder / 'calib.txt'
    if not calib.is_file():
        raise DatasetError(f'{folder}: KITTI layout needs {calib.name} (P0: projection)')
    poses_path = kitti_poses_file(folder)
    projection = None
    for line in calib.read_text().splitlines():
        if line.startswith('P0:'):
            projection = _kitti_numbers(line.split()[1:], 12, calib, 'P0').reshape(3, 4)
    if projection is None:
        raise DatasetError(f'{calib}: no P0 line')
    poses = [_kitti_numbers(line.split(), 12, poses_path, f'line {k + 1}').reshape(3, 4)
             for k, line in enumerate(poses_path.read_text().splitlines()) if line.strip()]
    frames = []
    for _, path in list_sequence(folder / 'image_0'):
        if not path.stem.isdigit():
            raise DatasetError(f'{path}: KITTI images are named by frame number '
                               '(000000.png, 000001.png, ...)')
        number = int(path.stem)
        if number >= len(poses):
            raise DatasetError(f'{path} is frame {number}, but {poses_path} holds the poses '
                               f'of frames 0-{len(poses) - 1} only')
        pose = poses[number]
        frames.append(PoseFrame(path.stem, path, pose[:, :3], pose[:, 3]))
    try:
        camera = CameraModel(projection[:, :3].copy())
    except CameraModelError as exc:
        raise DatasetError(f'{calib}: P0 is not a pinhole projection ({exc})') from exc
    return frames, camera


def _kitti_numbers(values, count, path, what):
    try:
        numbers = np.array(values, dtype=np.float64)
    except ValueError as exc:
        raise DatasetError(f'{path} {what}: not numbers ({exc})') from exc
    if numbers.size != count:
        raise DatasetError(f'{path} {what}: {numbers.size} numbers, expected {count}')
    return numbers


def describe_camera(camera):
    """Return a JSON-ready description of a :class:`~xfeat_ros.camera.CameraModel`."""
    k = camera.matrix
    return {'fx': k[0, 0], 'fy': k[1, 1], 'cx': k[0, 2], 'cy': k[1, 2],
            'dist': [float(d) for d in camera.coeffs] if camera.coeffs.size else None}


LAYOUTS = (
    'HPatches (1.ppm .. and H_1_2 ..), Oxford (img1.ppm .. and H1to2p ..), '
    'TUM RGB-D (rgb/ and groundtruth.txt), KITTI odometry (a sequence folder with image_0/ '
    'and calib.txt, poses in poses.txt beside them or ../../poses/NN.txt for '
    'dataset/sequences/NN), or a pose pair list file (.txt as the SuperGlue ScanNet/YFCC '
    'lists, .json as the MegaDepth-1500 list of upstream XFeat)')


def load_dataset(folder, camera=None, image_root=None):
    """
    Recognise and load a dataset folder or pair list (see :data:`LAYOUTS`).

    ``camera`` is used for TUM folders (KITTI and pair lists bring their own
    calibration); ``image_root`` is where a pair list's images are (default:
    its folder). Raises :class:`DatasetError` for an unrecognised input,
    saying which layouts exist.
    """
    folder = Path(folder)
    if is_pair_list(folder):
        return Dataset(folder.stem, folder, 'pair list', 'pairs',
                       pairs=read_pair_list(folder, image_root))
    if not folder.is_dir():
        raise DatasetError(f'{folder} is not a folder or a pair list' if not folder.exists()
                           else f'{folder}: not a folder or a pair list (.txt, .json)')
    name = folder.name
    if (folder / 'rgb').is_dir():
        return Dataset(name, folder, 'tum', 'pose', frames=tum_frames(folder), camera=camera)
    if (folder / 'image_0').is_dir():
        frames, kitti_camera = kitti_frames(folder)
        return Dataset(name, folder, 'kitti', 'pose', frames=frames, camera=kitti_camera)
    if _image_by_stem(folder, '1') is not None or _image_by_stem(folder, 'img1') is not None:
        layout, pairs = homography_pairs(folder)
        return Dataset(name, folder, layout, 'homography', pairs=pairs)
    hint = ''
    if (folder / 'sequences').is_dir():
        hint = f'; for KITTI give one sequence, e.g. {folder / "sequences" / "00"}'
    raise DatasetError(f'{folder}: not a recognised layout, expected {LAYOUTS}{hint}')
