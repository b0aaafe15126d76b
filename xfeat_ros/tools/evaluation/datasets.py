# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The dataset readers of ``xfeat_eval`` and ``xfeat_map``: layouts and their ground truth.

:func:`load_dataset` recognises a folder or a pair list (:data:`LAYOUTS`) and
returns a :class:`Dataset`: homography pairs (HPatches, Oxford) or pose frames
(TUM RGB-D, KITTI odometry) with their camera (a
:class:`~xfeat_ros.features.camera.CameraModel`), or the pairs of a pose pair list
(:mod:`xfeat_ros.tools.evaluation.pair_lists`).

The readers of the sequence layouts are shared with ``xfeat_map``
(:mod:`xfeat_ros.tools.map_sources`): TUM trajectory files and their
association to image stamps (:func:`read_tum_trajectory`, :func:`associate`),
the published TUM calibrations (:func:`tum_camera`) and KITTI odometry
sequences (:func:`read_kitti`: each image gets the pose and time of its frame
number, in the flat layout or in KITTI's own ``dataset/sequences/NN`` with
``dataset/poses/NN.txt``).
"""

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
import re

import numpy as np

from xfeat_ros.errors import CameraModelError, DatasetError
from xfeat_ros.features.camera import CameraModel
from xfeat_ros.features.geometry import quaternion_to_matrix
from xfeat_ros.logs import package_logger
from xfeat_ros.tools.evaluation.pair_lists import is_pair_list, read_pair_list
from xfeat_ros.tools.image_files import IMAGE_SUFFIXES, list_sequence

LOG = package_logger('xfeat_eval')

# Published TUM RGB-D calibrations (ROS default intrinsics for freiburg3: no distortion).
TUM_CAMERAS = {
    '1': ((517.3, 516.5, 318.6, 255.3), (0.2624, -0.9531, -0.0054, 0.0026, 1.1633)),
    '2': ((520.9, 521.0, 325.1, 249.7), (0.2312, -0.7849, -0.0033, -0.0001, 0.9172)),
    '3': ((535.4, 539.2, 320.1, 247.6), ()),
}
TUM_FR2 = {**dict(zip(('fx', 'fy', 'cx', 'cy'), TUM_CAMERAS['2'][0])),
           'dist': list(TUM_CAMERAS['2'][1])}
MAX_STAMP_GAP_NS = 20_000_000  # ground truth further than 20 ms from an image is not its pose


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


def _stamp_ns(text, unit=10 ** 9):
    try:
        return int(Decimal(text) * unit)
    except InvalidOperation:
        return None


def pose_matrix(position, quat_xyzw):
    """Camera-to-world 4x4 from a position [3] and a unit quaternion (x, y, z, w)."""
    pose = np.eye(4)
    pose[:3, :3] = quaternion_to_matrix(*quat_xyzw)
    pose[:3, 3] = position
    return pose


def read_tum_trajectory(path):
    """
    Read a TUM trajectory file: ``(stamps_ns int64 [N], poses float64 [N, 4, 4])``, time order.

    Lines are ``t tx ty tz qx qy qz qw`` or ``image_t gt_t tx ty tz qx qy qz qw``
    (then keyed by the image stamp); ``#`` starts a comment. Raises
    :class:`DatasetError` for an unreadable file or line, or a file without poses.
    """
    rows = []
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f'cannot read ground truth {path}: {exc}') from exc
    for number, line in enumerate(lines, 1):
        fields = line.replace(',', ' ').split()
        if not fields or fields[0].startswith('#'):
            continue
        if len(fields) not in (8, 9):
            raise DatasetError(f'{path}:{number}: {len(fields)} fields (TUM needs 8, or 9 '
                               'with the image stamp first)')
        try:
            values = [float(v) for v in fields[-7:]]
        except ValueError as exc:
            raise DatasetError(f'{path}:{number}: not numbers ({exc})') from exc
        stamp = _stamp_ns(fields[0])
        if stamp is None:
            raise DatasetError(f'{path}:{number}: bad stamp {fields[0]!r}')
        rows.append((stamp, pose_matrix(values[:3], values[3:])))
    if not rows:
        raise DatasetError(f'{path}: no poses')
    rows.sort(key=lambda row: row[0])
    return np.array([r[0] for r in rows], dtype=np.int64), np.stack([r[1] for r in rows])


def associate(stamp_ns, truth, max_gap_ns=MAX_STAMP_GAP_NS):
    """Return the pose of ``truth`` (stamps, poses) nearest to ``stamp_ns`` within the gap."""
    if truth is None or stamp_ns is None or not len(truth[0]):
        return None
    stamps, poses = truth
    i = int(np.searchsorted(stamps, stamp_ns))
    best = min((j for j in (i - 1, i) if 0 <= j < len(stamps)),
               key=lambda j: abs(int(stamps[j]) - stamp_ns))
    return poses[best] if abs(int(stamps[best]) - stamp_ns) <= max_gap_ns else None


def tum_camera(folder):
    """Return the published TUM camera of a folder named after fr1..fr3 (freiburgN), or None."""
    found = re.search(r'(?:freiburg|fr)([123])(?![0-9])', Path(folder).resolve().name)
    if not found:
        return None
    intrinsics, coeffs = TUM_CAMERAS[found.group(1)]
    return CameraModel.from_parameters(intrinsics, 'plumb_bob' if coeffs else 'none', coeffs)


def tum_frames(folder):
    """
    Return the frames of a TUM RGB-D folder that have a ground-truth pose, in time order.

    ``groundtruth.txt`` (:func:`read_tum_trajectory`) lines are either
    ``image_ts gt_ts tx ty tz qx qy qz qw`` (one per image, matched by the
    image stamp) or the TUM original ``ts tx ty tz qx qy qz qw`` (the nearest
    pose within 20 ms is taken). Raises :class:`DatasetError` when the file is
    missing or no image has a pose.
    """
    folder = Path(folder)
    gt_path = folder / 'groundtruth.txt'
    if not gt_path.is_file():
        raise DatasetError(f'{folder}: TUM layout needs {gt_path.name} (camera poses)')
    truth = read_tum_trajectory(gt_path)
    frames = []
    for stamp, path in list_sequence(folder):
        pose = associate(stamp, truth)
        if pose is None:
            LOG.warning('%s: no ground-truth pose for %s, skipped', folder, path.name)
            continue
        frames.append(PoseFrame(path.stem, path, pose[:3, :3].copy(), pose[:3, 3].copy()))
    if not frames:
        raise DatasetError(f'{gt_path}: no image of {folder} has a ground-truth pose')
    return frames


def kitti_pose_candidates(folder):
    """
    Where the poses of a KITTI sequence folder may be, in the order they are looked for.

    ``poses.txt`` in the folder, or KITTI's own layout: for
    ``<root>/sequences/NN`` the file ``<root>/poses/NN.txt``.
    """
    folder = Path(folder)
    candidates = [folder / 'poses.txt']
    if folder.parent.name == 'sequences':
        candidates.append(folder.parent.parent / 'poses' / f'{folder.name}.txt')
    return candidates


def kitti_poses_file(folder):
    """Return the poses file of a KITTI sequence folder; DatasetError saying where it looked."""
    candidates = kitti_pose_candidates(folder)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise DatasetError(f'{folder}: KITTI layout needs its poses, looked for '
                       + ' and '.join(str(c) for c in candidates))


@dataclass
class KittiSequence:
    """
    A KITTI odometry sequence, by frame number.

    ``images``: ``[(frame number, path)]`` in frame order; ``poses``: float64
    [3, 4] ``[R | t]`` camera-to-world per frame number (line k of the poses
    file is frame k), or None without a poses file; ``stamps_ns``: int per
    frame number (line k of ``times.txt``), or None without it;
    ``poses_path``: the file read, or None; ``looked_for``: where the poses
    were looked for.
    """

    folder: Path
    camera: CameraModel
    images: list
    poses: list = None
    stamps_ns: list = None
    poses_path: Path = None
    looked_for: tuple = ()

    def pose(self, number):
        """Return frame ``number``'s camera-to-world 4x4 pose, or None without poses."""
        if self.poses is None:
            return None
        return np.vstack([self.poses[number], (0.0, 0.0, 0.0, 1.0)])

    def stamp_ns(self, number):
        """Return frame ``number``'s time (ns), or None without ``times.txt``."""
        return None if self.stamps_ns is None else self.stamps_ns[number]


def read_kitti(folder, need_poses=True):
    """
    Read a KITTI odometry sequence folder as a :class:`KittiSequence`.

    ``image_0/<frame>.png`` (frame numbers as names, 000000.png ...),
    ``calib.txt`` with the ``P0:`` projection (rectified images: no
    distortion), the poses (:func:`kitti_pose_candidates`; required when
    ``need_poses``) and ``times.txt`` when present. Each image gets the pose
    and time of its frame number, not of its position in the folder, so a
    folder holding frames 100-119 gets poses 100-119. Raises
    :class:`DatasetError` for a missing file, an image name that is not a
    frame number, or a frame the poses or times do not reach.
    """
    folder = Path(folder)
    calib = folder / 'calib.txt'
    if not calib.is_file():
        raise DatasetError(f'{folder}: KITTI layout needs {calib.name} (P0: projection)')
    poses_path = next((c for c in kitti_pose_candidates(folder) if c.is_file()), None)
    if poses_path is None and need_poses:
        kitti_poses_file(folder)  # raises, saying where it looked
    projection = None
    for line in calib.read_text().splitlines():
        if line.startswith('P0:'):
            projection = _kitti_numbers(line.split()[1:], 12, calib, 'P0').reshape(3, 4)
    if projection is None:
        raise DatasetError(f'{calib}: no P0 line')
    try:
        camera = CameraModel(projection[:, :3].copy())
    except CameraModelError as exc:
        raise DatasetError(f'{calib}: P0 is not a pinhole projection ({exc})') from exc
    images = []
    for _, path in list_sequence(folder / 'image_0'):
        if not path.stem.isdigit():
            raise DatasetError(f'{path}: KITTI images are named by frame number '
                               '(000000.png, 000001.png, ...)')
        images.append((int(path.stem), path))
    sequence = KittiSequence(folder, camera, images, poses_path=poses_path,
                             looked_for=tuple(kitti_pose_candidates(folder)))
    if poses_path is not None:
        sequence.poses = [_kitti_numbers(line.split(), 12, poses_path,
                                         f'line {k + 1}').reshape(3, 4)
                          for k, line in enumerate(poses_path.read_text().splitlines())
                          if line.strip()]
        _check_reach(images, len(sequence.poses), poses_path, 'poses')
    times = folder / 'times.txt'
    if times.is_file():
        sequence.stamps_ns = []
        for k, line in enumerate(t for t in times.read_text().splitlines() if t.strip()):
            stamp = _stamp_ns(line.strip())
            if stamp is None:
                raise DatasetError(f'{times} line {k + 1}: not a time in seconds: {line!r}')
            sequence.stamps_ns.append(stamp)
        _check_reach(images, len(sequence.stamps_ns), times, 'times')
    return sequence


def _check_reach(images, count, path, what):
    for number, image in images:
        if number >= count:
            raise DatasetError(f'{image} is frame {number}, but {path} holds the {what} '
                               f'of frames 0-{count - 1} only')


def kitti_frames(folder):
    """
    Return ``(frames, camera)`` of a KITTI odometry sequence folder (:func:`read_kitti`).

    Every frame needs its pose: a folder without poses is a :class:`DatasetError`.
    """
    sequence = read_kitti(folder, need_poses=True)
    frames = []
    for number, path in sequence.images:
        pose = sequence.pose(number)
        frames.append(PoseFrame(path.stem, path, pose[:3, :3], pose[:3, 3]))
    return frames, sequence.camera


def _kitti_numbers(values, count, path, what):
    try:
        numbers = np.array(values, dtype=np.float64)
    except ValueError as exc:
        raise DatasetError(f'{path} {what}: not numbers ({exc})') from exc
    if numbers.size != count:
        raise DatasetError(f'{path} {what}: {numbers.size} numbers, expected {count}')
    return numbers


def describe_camera(camera):
    """Return a JSON-ready description of a :class:`~xfeat_ros.features.camera.CameraModel`."""
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
