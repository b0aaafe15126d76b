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
* KITTI odometry ``image_0/`` + ``calib.txt`` (P0) [+ ``poses.txt``, ``times.txt``];
* a rosbag2 bag with a ``sensor_msgs/Image`` topic (its CameraInfo when recorded);
* a bag written by ``xfeat_offline``: its Keypoints are the features and its
  Matches the matches of consecutive frames, as they are.

Ground truth is a camera-to-world 4x4 pose per frame (None where unknown).
A TUM file (``--groundtruth``) can give it to any source with stamps.
"""

from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
import logging
from pathlib import Path
import re

import numpy as np

from xfeat_ros.camera import CameraModel, read_euroc_extrinsics
from xfeat_ros.errors import ImageError, XFeatError
from xfeat_ros.geometry import quaternion_to_matrix
from xfeat_ros.image_files import IMAGE_SUFFIXES, list_sequence, read_image

LOG = logging.getLogger('xfeat_map')
MAX_STAMP_GAP_NS = 20_000_000  # ground truth further than 20 ms from an image is not its pose
# Published TUM RGB-D calibrations (ROS default intrinsics for freiburg3: no distortion).
TUM_CAMERAS = {
    '1': ((517.3, 516.5, 318.6, 255.3), (0.2624, -0.9531, -0.0054, 0.0026, 1.1633)),
    '2': ((520.9, 521.0, 325.1, 249.7), (0.2312, -0.7849, -0.0033, -0.0001, 0.9172)),
    '3': ((535.4, 539.2, 320.1, 247.6), ()),
}
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
    features: object = None   # xfeat_ros.pipeline.Features (xfeat_offline bags)


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
    of a features bag.
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

    def items(self):
        """Yield :class:`Item` in time order."""
        return self.produce(self)


def _stamp_ns(text, unit):
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
    (then keyed by the image stamp); ``#`` starts a comment.
    """
    rows = []
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise MappingError(f'cannot read ground truth {path}: {exc}') from exc
    for number, line in enumerate(lines, 1):
        fields = line.replace(',', ' ').split()
        if not fields or fields[0].startswith('#'):
            continue
        if len(fields) not in (8, 9):
            raise MappingError(f'{path}:{number}: {len(fields)} fields (TUM needs 8, or 9 '
                               'with the image stamp first)')
        try:
            values = [float(v) for v in fields[-7:]]
        except ValueError as exc:
            raise MappingError(f'{path}:{number}: not numbers ({exc})') from exc
        stamp = _stamp_ns(fields[0], 10 ** 9)
        if stamp is None:
            raise MappingError(f'{path}:{number}: bad stamp {fields[0]!r}')
        rows.append((stamp, pose_matrix(values[:3], values[3:])))
    if not rows:
        raise MappingError(f'{path}: no poses')
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


def _euroc_layout(folder, camera):
    """(image folder, sensor yaml or None) of one EuRoC camera, or None when absent."""
    layouts = ((folder / camera, (folder / f'{camera}_sensor.yaml',
                                  folder / camera / 'sensor.yaml')),
               (folder / 'mav0' / camera / 'data', (folder / 'mav0' / camera / 'sensor.yaml',)))
    for images, yamls in layouts:
        if images.is_dir():
            return images, next((y for y in yamls if y.is_file()), None)
    return None


def read_euroc_truth(folder, sensor_yaml):
    """Camera-to-world ground truth (stamps, poses) of EuRoC, or None without the csv."""
    for csv in (folder / 'mav0' / 'state_groundtruth_estimate0' / 'data.csv',
                folder / 'state_groundtruth_estimate0' / 'data.csv'):
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
    """(camera, [(stamp_ns or None, path, pose or None)]) of a KITTI odometry folder."""
    projection = None
    for line in (folder / 'calib.txt').read_text().splitlines():
        if line.startswith('P0:'):
            projection = np.array(line.split()[1:], dtype=np.float64).reshape(3, 4)
    if projection is None:
        raise MappingError(f'{folder / "calib.txt"}: no P0 line')
    k = projection[:, :3]
    camera = CameraModel.from_parameters((k[0, 0], k[1, 1], k[0, 2], k[1, 2]))
    images = [p for _, p in list_sequence(folder / 'image_0')]
    poses = [None] * len(images)
    if (folder / 'poses.txt').is_file():
        rows = [np.array(line.split(), dtype=np.float64).reshape(3, 4) for line in
                (folder / 'poses.txt').read_text().splitlines() if line.strip()]
        if len(rows) < len(images):
            raise MappingError(f'{folder}: {len(images)} images but {len(rows)} poses')
        poses = [np.vstack([row, (0.0, 0.0, 0.0, 1.0)]) for row in rows]
    stamps = [None] * len(images)
    if (folder / 'times.txt').is_file():
        stamps = [_stamp_ns(line.strip(), 10 ** 9)
                  for line in (folder / 'times.txt').read_text().splitlines() if line.strip()]
    return camera, list(zip(stamps, images, poses))


def _folder_frames(folder, intrinsics, stereo):
    """(kind, cameras, trajectory camera, [(camera, stamp, path, pose)]) of an image folder."""
    if (folder / 'image_0').is_dir() and (folder / 'calib.txt').is_file():
        camera, rows = _kitti(folder)
        return 'kitti', {'image_0': intrinsics or camera}, 'image_0', \
            [('image_0', s, p, pose) for s, p, pose in rows]
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
        return 'euroc', cameras, 'cam0', [(c, s, p, associate(s, t)) for c, s, p, t in rows]
    if stereo:
        raise MappingError(f'{folder}: --stereo needs a EuRoC folder (cam0/ and cam1/)')
    frames = list_sequence(folder)
    kind = 'tum' if (folder / 'rgb').is_dir() and frames[0][0] is not None else 'plain'
    camera = intrinsics or (tum_camera(folder) if kind == 'tum' else None)
    if camera is None:
        raise MappingError(f'{folder}: no calibration known for this {kind} folder; give '
                           '--intrinsics FX FY CX CY (and --distortion) or --camera-yaml')
    truth = None
    if kind == 'tum' and (folder / 'groundtruth.txt').is_file():
        truth = read_tum_trajectory(folder / 'groundtruth.txt')
    return kind, {'cam0': camera}, 'cam0', [('cam0', s, p, associate(s, truth))
                                            for s, p in frames]


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
    kind, cameras, main, rows = _folder_frames(folder, intrinsics, stereo)
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

    return Source(kind, folder, cameras, main, folder, len(frames), produce)


def is_image_folder(path):
    """Return True if ``path`` is a folder holding images (directly or in a known layout)."""
    path = Path(path)
    if not path.is_dir():
        return False
    subfolders = [path] + [path / s for s in ('rgb', 'cam0', 'image_0', 'mav0/cam0/data')]
    return any(p.is_dir() and any(f.suffix.lower() in IMAGE_SUFFIXES for f in p.iterdir())
               for p in subfolders)
