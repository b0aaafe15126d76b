# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The sequences ``xfeat_map`` reads: frames, cameras and ground truth.

:func:`open_source` recognises a folder or a bag and returns a :class:`Source`
whose cameras are known before the first frame and whose :meth:`Source.items`
streams the frames in time order:

* a plain image folder (name order; intrinsics from the command line);
* TUM RGB-D ``rgb/<seconds>.png`` (+ ``groundtruth.txt``); intrinsics from the
  command line or, when the folder name says fr1/fr2/fr3 (freiburg1..3), the
  dataset's published calibration;
* EuRoC ``cam0/<ns>.png`` or ``mav0/cam0/data/<ns>.png`` with the Kalibr
  ``sensor.yaml`` (``cam0_sensor.yaml`` beside ``cam0/`` also works); with
  ``stereo`` cam1 too, as a second camera; ground truth from
  ``state_groundtruth_estimate0/data.csv`` when present (body pose x T_BS);
* KITTI odometry ``image_0/<frame>.png`` + ``calib.txt`` (P0) [+ ``times.txt``, and
  ``poses.txt`` beside them or, in KITTI's own layout ``dataset/sequences/NN``,
  ``dataset/poses/NN.txt``]: each image gets the pose and time of its frame number;
* a rosbag2 bag with a ``sensor_msgs/Image`` topic (its CameraInfo when recorded);
* a bag written by ``xfeat_offline``: its Keypoints are the features and its
  Matches the matches of consecutive frames, as they are.

Ground truth is a camera-to-world 4x4 pose per frame (None where unknown).
A TUM file (``--groundtruth``) can give it to any source with stamps. The
dataset layouts are read by xfeat_eval's readers
(:mod:`xfeat_ros.tools.evaluation.datasets`), the one home of each layout.
"""

from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np

from xfeat_ros.errors import ImageError, XFeatError
from xfeat_ros.features.camera import CameraModel, read_euroc_extrinsics
from xfeat_ros.logs import package_logger
from xfeat_ros.tools.evaluation.datasets import (associate, pose_matrix, read_kitti,
                                                 read_tum_trajectory, tum_camera)
from xfeat_ros.tools.image_files import IMAGE_SUFFIXES, list_sequence, read_image

LOG = package_logger('xfeat_map')
IMAGE_TYPE = 'sensor_msgs/msg/Image'
INFO_TYPE = 'sensor_msgs/msg/CameraInfo'
KEYPOINTS_TYPE = 'xfeat_ros_msgs/msg/Keypoints'
MATCHES_TYPE = 'xfeat_ros_msgs/msg/Matches'


class MappingError(XFeatError):
    """A mapping source, setting or back-end step cannot be used as asked."""


@dataclass
class FrameInfo:
    """
    One frame of a sequence.

    ``name``: the image name in the COLMAP database (unique, relative to the
    source's image root); ``camera``: key into :attr:`Source.cameras`;
    ``stamp_ns``: int or None; ``rank``: position in time (frames of one
    instant, e.g. a stereo pair, share it); ``pose``: float64 [4, 4]
    camera-to-world ground truth or None.
    """

    name: str
    camera: str
    stamp_ns: object
    rank: int
    pose: object = None


@dataclass
class RawImage:
    """The fields of a ``sensor_msgs/Image`` the engines read, for images from files."""

    height: int
    width: int
    encoding: str
    step: int
    is_bigendian: int
    data: bytes

    @classmethod
    def from_pixels(cls, pixels, encoding):
        """Build from [H, W, C] uint8/uint16 pixels (little-endian bytes)."""
        little = np.ascontiguousarray(pixels).astype(pixels.dtype.newbyteorder('<'), copy=False)
        h, w, c = pixels.shape
        return cls(h, w, encoding, w * c * pixels.dtype.itemsize, 0, little.tobytes())


@dataclass
class Item:
    """What :meth:`Source.items` yields: a frame with its image or its features."""

    frame: FrameInfo
    image: object = None      # RawImage or sensor_msgs/Image (image sources)
    features: object = None   # xfeat_ros.features.pipeline.Features (xfeat_offline bags)


@dataclass
class Source:
    """
    A recognised sequence.

    ``kind``: plain, tum, euroc, kitti, image-bag or features-bag;
    ``cameras``: {key: CameraModel}; ``trajectory_camera``: the camera whose
    poses form the trajectory; ``image_root``: folder the image names are
    relative to (None for bags: images are written out when COLMAP needs them);
    ``count``: frames expected; ``topic``: the bag topic read; ``counts``:
    rejected frames by reason; ``bag_matches``: {(stamp0, stamp1): (idx0, idx1)}
    of a features bag; ``truth``: where the ground truth came from, or, with
    none, where it was looked for (said in one line when no frame has a pose).
    """

    kind: str
    path: Path
    cameras: dict
    trajectory_camera: str
    image_root: object
    count: int
    produce: object = None
    topic: str = ''
    counts: Counter = field(default_factory=Counter)
    bag_matches: dict = field(default_factory=dict)
    truth: str = 'give --groundtruth TUM_FILE'

    def items(self):
        """Yield :class:`Item` in time order."""
        return self.produce(self)


def _stamp_ns(text, unit):
    try:
        return int(Decimal(text) * unit)
    except InvalidOperation:
        return None


def _euroc_layout(folder, camera):
    """(image folder, sensor yaml or None) of one EuRoC camera, or None when absent."""
    layouts = ((folder / camera, (folder / f'{camera}_sensor.yaml',
                                  folder / camera / 'sensor.yaml')),
               (folder / 'mav0' / camera / 'data', (folder / 'mav0' / camera / 'sensor.yaml',)))
    for images, yamls in layouts:
        if images.is_dir():
            return images, next((y for y in yamls if y.is_file()), None)
    return None


def euroc_truth_candidates(folder):
    """Where the ground truth of a EuRoC folder may be."""
    return (folder / 'mav0' / 'state_groundtruth_estimate0' / 'data.csv',
            folder / 'state_groundtruth_estimate0' / 'data.csv')


def read_euroc_truth(folder, sensor_yaml):
    """Camera-to-world ground truth (stamps, poses) of EuRoC, or None without the csv."""
    for csv in euroc_truth_candidates(folder):
        if csv.is_file():
            break
    else:
        return None
    body_from_camera = read_euroc_extrinsics(sensor_yaml)
    try:
        data = np.loadtxt(csv, delimiter=',', comments='#', usecols=range(8), ndmin=2)
    except (OSError, ValueError) as exc:
        raise MappingError(f'cannot read EuRoC ground truth {csv}: {exc}') from exc
    order = np.argsort(data[:, 0])
    poses = np.stack([pose_matrix(row[1:4], (row[5], row[6], row[7], row[4])) @ body_from_camera
                      for row in data[order]])
    return data[order, 0].astype(np.int64), poses


def _kitti(folder):
    """(camera, [(stamp_ns or None, path, pose or None)], truth) of a KITTI odometry folder."""
    sequence = read_kitti(folder, need_poses=False)
    if sequence.poses_path is not None:
        truth = str(sequence.poses_path)
    else:
        truth = 'no poses, looked for ' + ' and '.join(str(c) for c in sequence.looked_for)
    return sequence.camera, [(sequence.stamp_ns(n), path, sequence.pose(n))
                             for n, path in sequence.images], truth


def _folder_frames(folder, intrinsics, stereo):
    """
    (kind, cameras, trajectory camera, rows, truth) of an image folder.

    ``rows``: [(camera, stamp, path, pose)]; ``truth``: where the ground truth
    comes from, or where it was looked for.
    """
    if (folder / 'image_0').is_dir() and (folder / 'calib.txt').is_file():
        camera, rows, truth = _kitti(folder)
        return 'kitti', {'image_0': intrinsics or camera}, 'image_0', \
            [('image_0', s, p, pose) for s, p, pose in rows], truth
    cam0 = _euroc_layout(folder, 'cam0')
    if cam0 is not None and not (folder / 'rgb').is_dir():
        names = ('cam0', 'cam1') if stereo else ('cam0',)
        cameras, rows, truth = {}, [], None
        for name in names:
            layout = _euroc_layout(folder, name)
            if layout is None:
                raise MappingError(f'{folder}: stereo needs {name}/ beside cam0/')
            images, yaml = layout
            if intrinsics is not None and not stereo:
                cameras[name] = intrinsics
            elif yaml is None:
                raise MappingError(f'{folder}: no {name} sensor.yaml; give --intrinsics')
            else:
                cameras[name] = CameraModel.from_euroc_yaml(yaml)
            if truth is None and yaml is not None and name == 'cam0':
                truth = read_euroc_truth(folder, yaml)
            rows += [(name, _stamp_ns(p.stem, 1), p, truth) for _, p in list_sequence(images)]
        if stereo and intrinsics is not None:
            raise MappingError('stereo EuRoC takes both calibrations from the sensor.yaml '
                               'files; drop --intrinsics')
        found = next((c for c in euroc_truth_candidates(folder) if c.is_file()), None)
        if found is None:
            where = 'looked for ' + ' and '.join(map(str, euroc_truth_candidates(folder)))
        else:
            where = str(found) if truth is not None else f'{found} needs the cam0 sensor.yaml'
        return ('euroc', cameras, 'cam0',
                [(c, s, p, associate(s, t)) for c, s, p, t in rows], where)
    if stereo:
        raise MappingError(f'{folder}: --stereo needs a EuRoC folder (cam0/ and cam1/)')
    frames = list_sequence(folder)
    kind = 'tum' if (folder / 'rgb').is_dir() and frames[0][0] is not None else 'plain'
    camera = intrinsics or (tum_camera(folder) if kind == 'tum' else None)
    if camera is None:
        raise MappingError(f'{folder}: no calibration known for this {kind} folder; give '
                           '--intrinsics FX FY CX CY (and --distortion) or --camera-yaml')
    truth, where = None, 'a plain folder has none; give --groundtruth TUM_FILE'
    if kind == 'tum':
        where = f'looked for {folder / "groundtruth.txt"}'
        if (folder / 'groundtruth.txt').is_file():
            truth = read_tum_trajectory(folder / 'groundtruth.txt')
            where = str(folder / 'groundtruth.txt')
    return kind, {'cam0': camera}, 'cam0', [('cam0', s, p, associate(s, truth))
                                            for s, p in frames], where


def _rank(rows):
    """Sort (camera, stamp, path, pose) rows in time order and give each instant a rank."""
    if all(r[1] is not None for r in rows):
        rows = sorted(rows, key=lambda r: (r[1], r[0]))
        stamps = sorted({r[1] for r in rows})
        ranks = {s: i for i, s in enumerate(stamps)}
        return [(ranks[r[1]],) + tuple(r) for r in rows]
    return [(i,) + tuple(r) for i, r in enumerate(rows)]


def reject(source, name, exc):
    """Count (by error class) and log a frame that cannot be used."""
    source.counts['rejected'] += 1
    source.counts[f'rejected_{type(exc).__name__}'] += 1
    LOG.warning('%s: frame %s rejected: %s', source.path, name, exc)


def open_folder(folder, intrinsics=None, stereo=False, truth=None, max_frames=0):
    """Open an image folder (plain, TUM, EuRoC, KITTI) as a :class:`Source`."""
    folder = Path(folder)
    kind, cameras, main, rows, where = _folder_frames(folder, intrinsics, stereo)
    ranked = _rank(rows)
    if max_frames > 0:
        ranked = [r for r in ranked if r[0] < max_frames]
    frames = []
    for rank, camera, stamp, path, pose in ranked:
        if truth is not None:
            pose = associate(stamp, truth)
        frames.append((FrameInfo(str(path.relative_to(folder)), camera, stamp, rank, pose),
                       path))

    def produce(source):
        for frame, path in frames:
            try:
                pixels, encoding = read_image(path)
            except ImageError as exc:
                reject(source, frame.name, exc)
                continue
            yield Item(frame, RawImage.from_pixels(pixels, encoding))

    return Source(kind, folder, cameras, main, folder, len(frames), produce,
                  truth=where if truth is None else '--groundtruth')


def is_image_folder(path):
    """Return True if ``path`` is a folder holding images (directly or in a known layout)."""
    path = Path(path)
    if not path.is_dir():
        return False
    subfolders = [path] + [path / s for s in ('rgb', 'cam0', 'image_0', 'mav0/cam0/data')]
    return any(p.is_dir() and any(f.suffix.lower() in IMAGE_SUFFIXES for f in p.iterdir())
               for p in subfolders)
