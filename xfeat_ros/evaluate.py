# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_eval``: accuracy of XFeat matches on data with geometric ground truth.

Each dataset folder is recognised by its layout:

* homography sequences, HPatches (``1.ppm`` .. ``6.ppm`` with ``H_1_2`` ..
  ``H_1_6``) or Oxford (``img1.ppm`` .. with ``H1to2p`` ..): every pair 1 -> k
  is matched, a homography is fitted to the matches (fixed settings, written
  to the output), and scored by the mean corner error against the ground
  truth and the MHA (share of pairs with corner error <= 1/3/5 px);
* pose sequences, TUM RGB-D (``rgb/<seconds>.png`` + ``groundtruth.txt``;
  intrinsics from flags, TUM fr2 by default, or ``--intrinsics`` YAML) and
  KITTI odometry (a sequence folder with ``image_0/<frame>.png`` and
  ``calib.txt``, its poses in ``poses.txt`` beside them or, in KITTI's own
  layout ``dataset/sequences/NN`` + ``dataset/poses/NN.txt``, two levels up;
  line k of the poses is frame k, images are paired with poses by their frame
  number): frame pairs ``(i, i + gap)`` at several gaps, relative pose from
  the essential matrix, rotation and translation-direction errors in degrees,
  pose AUC at 5/10/20 degrees of ``max(rotation, translation)`` error;
* pose pair lists (a ``.txt`` in SuperGlue's ScanNet / YFCC form or a
  ``.json`` like upstream XFeat's MegaDepth-1500 list, see
  :mod:`xfeat_ros.pair_lists`): every listed pair with its own intrinsics and
  relative pose, scored as the pose sequences are.

Every method sees the same pairs: the xfeat_ros engines named by ``--backend``
(CPU and GPU alike, through the engine contract) and, with ``--upstream DIR``,
upstream XFeat itself (``detectAndCompute`` + ``match``, loaded with the same
weights). With ``--descriptor-encoding`` the xfeat_ros methods are evaluated
once per wire encoding of the descriptors (float32, float16, int8; see
:mod:`xfeat_ros.encoding`): the descriptors are encoded and decoded after
extraction and matched by mutual NN as a consumer of the wire format would,
and the tables add the encoded bytes per frame and the share of the engine's
float32 matches reproduced. The output folder gets ``results.md``,
``results.json`` and PNG plots (accuracy curves, errors along each pose
sequence, the best and worst pair of each method with inliers green and
outliers red). Metric conventions
are in :mod:`xfeat_ros.metrics`.

The robust fits are deterministic for a given order of the matches (OpenCV's
RANSAC and USAC fits sample by match index from their own fixed-state
generator; ``cv2.setRNGSeed`` does not change them, see
:mod:`xfeat_ros.geometry`), and every pair is fitted with its matches in a
canonical order. One match more or less still changes the samples and so the
estimate. With ``--fit-orders N`` every pair is also fitted with its matches
in N seeded random orders (the matches are computed once) and the summaries
add the mean and standard deviation over orders of the MHA and AUC of each
order: the typical value of the fit's order distribution, not one draw.
"""

import argparse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
import json
import logging
import os
from pathlib import Path
import platform
import re
import subprocess
import sys
import time

import numpy as np

from xfeat_ros.cli import error_line, one_line_errors
from xfeat_ros.errors import (BackendError, DatasetError, ParameterError, WeightsError,
                              XFeatError)
from xfeat_ros.geometry import (essential_pose, estimate_homography, HOMOGRAPHY_METHODS,
                                quaternion_to_matrix, RANSAC_SEED, relative_pose)
from xfeat_ros.image_files import IMAGE_SUFFIXES, list_sequence, read_image
from xfeat_ros.metrics import (accuracy_at, corner_error, pose_auc, rotation_error_deg,
                               translation_error_deg)
from xfeat_ros.pair_lists import is_pair_list, read_pair_list, unrotate_points

LOG = logging.getLogger('xfeat_eval')

MHA_THRESHOLDS = (1.0, 3.0, 5.0)
AUC_THRESHOLDS = (5.0, 10.0, 20.0)
TUM_FR2 = {'fx': 520.9, 'fy': 521.0, 'cx': 325.1, 'cy': 249.7,
           'dist': [0.2312, -0.7849, -0.0033, -0.0001, 0.9172]}
TUM_MAX_STAMP_GAP_S = 0.02  # association of images to 8-column ground truth
MIN_POSE_MATCHES = 5
DRAWN_MATCHES = 300


# -- datasets --------------------------------------------------------------------------------


@dataclass
class HomographyPair:
    """Hold one image pair of a homography sequence; ``homography`` float64 3x3 maps 1 -> k."""

    name: str
    path0: Path
    path1: Path
    homography: np.ndarray


@dataclass
class Camera:
    """Hold a pinhole camera: ``matrix`` float64 3x3, ``dist`` OpenCV coefficients or None."""

    matrix: np.ndarray
    dist: object = None

    def describe(self):
        """Return a JSON-ready description."""
        k = self.matrix
        return {'fx': k[0, 0], 'fy': k[1, 1], 'cx': k[0, 2], 'cy': k[1, 2],
                'dist': None if self.dist is None else [float(d) for d in self.dist]}


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
    camera: Camera = None


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
    return frames, Camera(projection[:, :3].copy(), None)


def _kitti_numbers(values, count, path, what):
    try:
        numbers = np.array(values, dtype=np.float64)
    except ValueError as exc:
        raise DatasetError(f'{path} {what}: not numbers ({exc})') from exc
    if numbers.size != count:
        raise DatasetError(f'{path} {what}: {numbers.size} numbers, expected {count}')
    return numbers


def load_camera_yaml(path):
    """
    Read intrinsics from a small YAML file.

    Either ``fx, fy, cx, cy`` and optional ``dist`` (OpenCV order k1 k2 p1 p2
    [k3]), or the EuRoC/Kalibr form ``intrinsics: [fu, fv, cu, cv]`` with
    ``distortion_coefficients``. An OpenCV ``%YAML:1.0`` first line is allowed.
    """
    import yaml
    try:
        text = Path(path).read_text()
        data = yaml.safe_load(re.sub(r'^%YAML:1\.0', '', text))
    except (OSError, yaml.YAMLError) as exc:
        raise DatasetError(f'cannot read intrinsics from {path}: {exc}') from exc
    if not isinstance(data, dict):
        raise DatasetError(f'{path}: not a YAML mapping')
    if 'intrinsics' in data:
        fx, fy, cx, cy = (float(v) for v in data['intrinsics'])
        dist = data.get('distortion_coefficients')
    elif all(key in data for key in ('fx', 'fy', 'cx', 'cy')):
        fx, fy, cx, cy = (float(data[key]) for key in ('fx', 'fy', 'cx', 'cy'))
        dist = data.get('dist')
    else:
        raise DatasetError(f'{path}: needs fx, fy, cx, cy (and dist) or intrinsics: [...]')
    return camera_from(fx, fy, cx, cy, dist)


def camera_from(fx, fy, cx, cy, dist=None):
    """Return a :class:`Camera` from focal lengths, principal point and distortion."""
    matrix = np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])
    if dist is not None:
        dist = np.asarray(dist, dtype=np.float64).reshape(-1)
        dist = dist if dist.size and np.any(dist) else None
    return Camera(matrix, dist)


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


# -- methods ---------------------------------------------------------------------------------


class EngineMethod:
    """Wrap an xfeat_ros frame engine (CPU or GPU): ``extract``/``match`` on numbered slots."""

    def __init__(self, engine, slots):
        """Wrap ``engine`` with ``slots`` pre-allocated slots."""
        self.engine = engine
        self.name = f'xfeat_ros {engine.name} ({engine.device})'
        self.slots = [engine.alloc_slot() for _ in range(slots)]
        self.keypoints = [None] * slots

    def extract(self, slot, pixels, encoding):
        """Detect and describe an image into ``slot``; returns keypoints float32 [N, 2]."""
        from xfeat_ros.image_codec import image_msg
        self.engine.submit(image_msg(pixels, encoding), self.slots[slot])
        self.engine.synchronize()
        self.keypoints[slot] = self.engine.features(self.slots[slot]).keypoints
        return self.keypoints[slot]

    def match(self, slot0, slot1):
        """Return the mutual-NN matches ``(idx0, idx1)`` int64 [M] of two extracted slots."""
        self.engine.submit_match(self.slots[slot0], self.slots[slot1])
        self.engine.synchronize()
        result = self.engine.matches(self.slots[slot1])
        return result.idx0, result.idx1


class UpstreamMethod:
    """Run upstream XFeat (``detectAndCompute`` + ``match``) from a checkout, with our weights."""

    def __init__(self, directory, weights, slots, top_k, threshold, min_cossim, device='cpu'):
        """Import ``modules.xfeat`` from ``directory`` and load the weights dict into its net."""
        try:
            import torch
        except ModuleNotFoundError as exc:
            raise BackendError('--upstream needs PyTorch (the torch module), which is not '
                               'installed') from exc
        directory = str(Path(directory).resolve())
        if not (Path(directory) / 'modules' / 'xfeat.py').is_file():
            raise BackendError(f'{directory} has no modules/xfeat.py (an upstream checkout)')
        if directory not in sys.path:
            sys.path.insert(0, directory)
        try:
            from modules.xfeat import XFeat
        except ModuleNotFoundError as exc:
            raise BackendError(f'upstream XFeat ({directory}) needs the Python module '
                               f'{exc.name!r}, which is not installed') from exc
        self.torch = torch
        self.device = torch.device(device)
        model = XFeat(weights=None, top_k=top_k, detection_threshold=threshold)
        state = {key: torch.from_numpy(np.asarray(value)) for key, value in weights.items()}
        missing, unexpected = model.net.load_state_dict(state, strict=False)
        missing = [key for key in missing if not key.startswith('fine_matcher.')]
        if missing or unexpected:
            raise WeightsError(f'upstream net does not take these weights: missing {missing}, '
                               f'unexpected {unexpected}')
        model.dev = self.device
        self.model = model.to(self.device).eval()
        self.top_k = int(top_k)
        self.threshold = float(threshold)
        self.min_cossim = float(min_cossim)
        self.name = f'upstream XFeat ({self.device})'
        self.outputs = [None] * slots

    def extract(self, slot, pixels, encoding):
        """Run ``detectAndCompute`` on the image; returns keypoints float32 [N, 2]."""
        scale = 65535.0 if encoding == 'mono16' else 255.0
        x = self.torch.from_numpy(pixels.astype(np.float32) / scale).permute(2, 0, 1)[None]
        out = self.model.detectAndCompute(x.to(self.device), top_k=self.top_k,
                                          detection_threshold=self.threshold)[0]
        self.outputs[slot] = out
        return out['keypoints'].cpu().numpy().astype(np.float32)

    def match(self, slot0, slot1):
        """Return upstream's ``match`` of two extracted slots: ``(idx0, idx1)`` int64 [M]."""
        idx0, idx1 = self.model.match(self.outputs[slot0]['descriptors'],
                                      self.outputs[slot1]['descriptors'], self.min_cossim)
        return idx0.cpu().numpy().astype(np.int64), idx1.cpu().numpy().astype(np.int64)


def create_engine_method(backend, args, slots):
    """Build an :class:`EngineMethod` for ``backend`` as the node would (auto: GPU first)."""
    from xfeat_ros.engine import create_engine, EngineConfig
    engine = create_engine(EngineConfig(backend, args.weights, args.gpu, args.threads, args.top_k,
                                        args.threshold, args.min_cossim), LOG)
    return EngineMethod(engine, slots)


class EncodedMethod:
    """
    Run an :class:`EngineMethod` with its descriptors sent through a wire encoding.

    ``extract`` runs the engine, encodes its float32 [N, 64] descriptors with
    :func:`xfeat_ros.encoding.encode_descriptors` and keeps the decoded float32
    [N, 64] copy; ``match`` is what a consumer of the wire format does:
    :func:`xfeat_ros.match.mutual_nn_match` on two decoded sets. Several
    encodings can wrap the same engine method (they share its slots; methods
    run one after another). Each match also runs the engine's own match and
    reports, through :meth:`match_extras`, how many of those (float32)
    matches the encoded descriptors reproduce and the encoded bytes per frame.
    """

    def __init__(self, method_engine, encoding, min_cossim):
        """Wrap ``method_engine`` (an :class:`EngineMethod`) for ``encoding``."""
        from xfeat_ros.descriptor_format import check_encoding
        check_encoding(encoding)
        self.inner = method_engine
        self.encoding = encoding
        self.min_cossim = float(min_cossim)
        self.name = f'{method_engine.name} {encoding}'
        slots = len(method_engine.slots)
        self.descriptors = [None] * slots
        self.frame_bytes = [0] * slots
        self.extras = {}

    def extract(self, slot, pixels, encoding):
        """Detect and describe through the engine; returns keypoints float32 [N, 2]."""
        from xfeat_ros.descriptor_format import decode_descriptors, encode_descriptors
        keypoints = self.inner.extract(slot, pixels, encoding)
        features = self.inner.engine.features(self.inner.slots[slot])
        wire = encode_descriptors(features.descriptors, self.encoding)
        self.descriptors[slot] = decode_descriptors(wire, self.encoding,
                                                    features.descriptors.shape[1])
        self.frame_bytes[slot] = int(wire.size)
        return keypoints

    def match(self, slot0, slot1):
        """Return mutual-NN matches ``(idx0, idx1)`` int64 [M] of the decoded descriptors."""
        from xfeat_ros.match import mutual_nn_match
        idx0, idx1, _ = mutual_nn_match(self.descriptors[slot0], self.descriptors[slot1],
                                        self.min_cossim)
        ref0, ref1 = self.inner.match(slot0, slot1)
        width = max(len(self.descriptors[slot1]), 1)
        reproduced = np.isin(ref0.astype(np.int64) * width + ref1,
                             idx0.astype(np.int64) * width + idx1)
        self.extras = {'descriptor_bytes0': self.frame_bytes[slot0],
                       'descriptor_bytes1': self.frame_bytes[slot1],
                       'float32_matches': len(ref0),
                       'float32_matches_reproduced': int(reproduced.sum())}
        return idx0, idx1

    def match_extras(self):
        """Return the encoding facts of the last match (bytes of both frames, agreement)."""
        return dict(self.extras)


def match_extras(method):
    """Return the extra per-pair record fields of ``method``'s last match (may be empty)."""
    extras = getattr(method, 'match_extras', None)
    return extras() if extras is not None else {}


def descriptor_encodings(values):
    """
    Return the encodings named by repeated and comma-separated ``values``, in order, once each.

    ``values`` None (the option not given) returns None. Raises
    :class:`xfeat_ros.errors.ParameterError` for an unknown name.
    """
    from xfeat_ros.descriptor_format import check_encoding
    if values is None:
        return None
    names = []
    for value in values:
        for name in (n.strip() for n in value.split(',')):
            if name:
                check_encoding(name)
                if name not in names:
                    names.append(name)
    if not names:
        raise ParameterError('--descriptor-encoding names no encoding')
    return names


# -- evaluation ------------------------------------------------------------------------------


@dataclass
class Settings:
    """Hold the fixed settings of the geometric fits (all stated in the output)."""

    homography_method: str = 'ransac'
    homography_threshold_px: float = 3.0
    homography_max_iters: int = 10000
    homography_confidence: float = 0.9999
    pose_threshold_px: float = 1.0
    sign_agnostic: bool = True
    gaps: tuple = (1, 2, 4)
    max_pairs: int = 0
    frames: int = 0
    fit_orders: int = 0

    def describe(self):
        """Return a JSON-ready description, with the OpenCV calls spelled out."""
        flag = 'cv2.RANSAC' if self.homography_method == 'ransac' else 'cv2.USAC_MAGSAC'
        described = {
            'homography_fit': (f'cv2.findHomography({flag}, ransacReprojThreshold='
                               f'{self.homography_threshold_px}, maxIters='
                               f'{self.homography_max_iters}, confidence='
                               f'{self.homography_confidence}); cv2.setRNGSeed({RANSAC_SEED}) '
                               'is called but does not change it'),
            'match_order': ('matches sorted by (x0, y0, x1, y1) before each fit: the fits are '
                            'deterministic for a given match order, not seeded (OpenCV samples '
                            'by match index with its own fixed-state generator; another order '
                            'or one match more or less gives another estimate)'),
            'corner_error': 'mean distance of the 4 pixel-centre corners of image 1 '
                            '(0,0),(w-1,0),(w-1,h-1),(0,h-1) mapped by estimate and truth; '
                            'failed fit = inf',
            'pose_fit': ('undistorted points, cv2.findEssentialMat(RANSAC, prob=0.999, '
                         f'threshold={self.pose_threshold_px} px / mean focal) (not changed '
                         'by cv2.setRNGSeed), cv2.recoverPose; under '
                         f'{MIN_POSE_MATCHES} matches or no inlier = failure (inf)'),
            'translation_error': 'sign-agnostic min(a, 180-a)' if self.sign_agnostic
                                 else 'signed angle',
            'pose_auc': 'SuperGlue/LoFTR error_auc of max(rotation, translation) error',
            'gaps': list(self.gaps), 'max_pairs': self.max_pairs, 'frames': self.frames,
            'fit_orders': self.fit_orders,
        }
        if self.fit_orders:
            described['fit_orders_method'] = (
                f'each pair also fitted {self.fit_orders} times, order k = 0..'
                f'{self.fit_orders - 1} being the canonical order permuted by '
                'np.random.default_rng(k).permutation(matches); *_orders_mean / '
                '*_orders_std: mean and population standard deviation over the orders of '
                'the metric (MHA or AUC) of each order')
        return described


def _finite(value):
    value = float(value)
    return value if np.isfinite(value) else None


def canonical_order(points0, points1):
    """
    Sort matched pixels float [M, 2] x 2 by (x0, y0, x1, y1); returns both, reordered.

    RANSAC draws its samples by index, so the same matches in another order
    give another estimate. Methods that order tied keypoints differently
    (upstream's unstable sort of equal scores) get the same fit this way.
    """
    order = np.lexsort((points1[:, 1], points1[:, 0], points0[:, 1], points0[:, 0]))
    return points0[order], points1[order]


def fit_orders(count, orders):
    """
    Return the match orders of ``--fit-orders``: ``orders`` permutations int64 [count].

    Order k is ``np.random.default_rng(k).permutation(count)``, the same for
    every run (and for every pair with ``count`` matches).
    """
    return [np.random.default_rng(k).permutation(count) for k in range(orders)]


def map_orders(fit, count, orders):
    """
    Return ``[fit(order) for order in fit_orders(count, orders)]``, fitted on all cores.

    OpenCV releases the GIL in its fits, so threads run them in parallel; each
    fit depends only on its order, so the results are those of a serial loop.
    """
    permutations = fit_orders(count, orders)
    if not permutations:
        return []
    with ThreadPoolExecutor(max_workers=min(len(permutations), os.cpu_count() or 1)) as pool:
        return list(pool.map(fit, permutations))


def fit_homography(points0, points1, settings):
    """Fit a homography to float [M, 2] x 2 pixels with ``settings``; see estimate_homography."""
    return estimate_homography(points0, points1, settings.homography_method,
                               settings.homography_threshold_px, settings.homography_max_iters,
                               settings.homography_confidence)


def evaluate_homography(method, dataset, settings):
    """
    Score ``method`` on every pair 1 -> k of a homography dataset.

    Returns one dict per pair: ``pair``, ``keypoints0/1``, ``matches``,
    ``inliers``, ``corner_error_px`` (inf on failure) and, for drawing,
    ``points0/1`` float [M, 2] and ``inlier_mask`` bool [M]. With
    ``settings.fit_orders`` N > 0 also ``corner_error_px_orders``: list of N
    floats, the corner errors of the same matches fitted in the orders of
    :func:`fit_orders` (the canonical fit stays ``corner_error_px``).
    """
    pairs = dataset.pairs[:settings.max_pairs] if settings.max_pairs else dataset.pairs
    pixels0, encoding0 = read_image(pairs[0].path0)
    kp0 = method.extract(0, pixels0, encoding0)
    records = []
    for pair in pairs:
        pixels1, encoding1 = read_image(pair.path1)
        kp1 = method.extract(1, pixels1, encoding1)
        idx0, idx1 = method.match(0, 1)
        points0, points1 = canonical_order(kp0[idx0], kp1[idx1])
        height, width = pixels0.shape[:2]
        estimate, inliers = fit_homography(points0, points1, settings)
        error = corner_error(estimate, pair.homography, width, height)
        orders = {}
        if settings.fit_orders:
            orders['corner_error_px_orders'] = map_orders(
                lambda p: corner_error(fit_homography(points0[p], points1[p], settings)[0],
                                       pair.homography, width, height),
                len(points0), settings.fit_orders)
        records.append({'pair': pair.name, 'image0': pair.path0.name, 'image1': pair.path1.name,
                        'keypoints0': len(kp0), 'keypoints1': len(kp1), 'matches': len(idx0),
                        'inliers': int(inliers.sum()), 'corner_error_px': error, **orders,
                        **match_extras(method),
                        'points0': points0, 'points1': points1, 'inlier_mask': inliers})
        LOG.info('%s %s %s: %d matches, %d inliers, corner error %.2f px', method.name,
                 dataset.name, pair.name, len(idx0), inliers.sum(), error)
    return records


def pose_errors(points0, points1, camera, truth, settings):
    """
    Fit the relative pose to matched pixels and score it against the truth.

    ``points0``/``points1`` float [M, 2] pixels, ``camera`` a :class:`Camera`,
    ``truth`` ``(R float64 3x3, t float64 [3])`` from camera 0 to camera 1.
    Returns ``(rotation error deg, translation error deg, inlier_mask bool
    [M])``; both errors inf when there are under :data:`MIN_POSE_MATCHES`
    matches or no inlier.
    """
    rot_err = trans_err = float('inf')
    inliers = np.zeros(len(points0), dtype=bool)
    if len(points0) >= MIN_POSE_MATCHES:
        rotation, t_unit, inliers = essential_pose(points0, points1, camera.matrix, camera.dist,
                                                   settings.pose_threshold_px)
        if inliers.any():
            rot_err = rotation_error_deg(rotation, truth[0])
            trans_err = translation_error_deg(t_unit, truth[1], settings.sign_agnostic)
    return rot_err, trans_err, inliers


def pose_pairs(count, gaps, max_pairs=0):
    """Return the frame pairs ``(i, i + gap)`` for each gap, at most ``max_pairs`` per gap."""
    pairs = []
    for gap in gaps:
        gap_pairs = [(i, i + gap) for i in range(count - gap)]
        pairs += gap_pairs[:max_pairs] if max_pairs else gap_pairs
    return pairs


def evaluate_pose(method, dataset, settings):
    """
    Score ``method`` on frame pairs ``(i, i + gap)`` of a pose dataset.

    Frames are extracted once each (into a ring of ``max(gaps) + 1`` slots)
    and matched against the earlier frame of every pair they close. Returns
    one dict per pair: ``frame0/1`` (indices), ``gap``, ``matches``,
    ``inliers``, ``rotation_error_deg``, ``translation_error_deg``,
    ``pose_error_deg`` (their max; inf on failure), the true motion
    (``gt_rotation_deg``, ``gt_baseline``) and, for drawing, ``points0/1`` and
    ``inlier_mask``. With ``settings.fit_orders`` N > 0 also
    ``rotation_error_deg_orders``, ``translation_error_deg_orders`` and
    ``pose_error_deg_orders``: lists of N floats from the same matches fitted
    in the orders of :func:`fit_orders`.
    """
    frames = dataset.frames[:settings.frames] if settings.frames else dataset.frames
    pairs = pose_pairs(len(frames), settings.gaps, settings.max_pairs)
    closing = {}
    for i, j in pairs:
        closing.setdefault(j, []).append(i)
    ring = max(settings.gaps) + 1
    last = max((j for _, j in pairs), default=-1)
    keypoints = {}
    records = []
    camera = dataset.camera
    for j in range(last + 1):
        pixels, encoding = read_image(frames[j].path)
        keypoints[j] = method.extract(j % ring, pixels, encoding)
        keypoints.pop(j - ring, None)
        for i in sorted(closing.get(j, []), reverse=True):
            idx0, idx1 = method.match(i % ring, j % ring)
            points0, points1 = canonical_order(keypoints[i][idx0], keypoints[j][idx1])
            truth = relative_pose((frames[i].rotation, frames[i].position),
                                  (frames[j].rotation, frames[j].position))
            r_gt, t_gt = truth
            rot_err, trans_err, inliers = pose_errors(points0, points1, camera, truth, settings)
            orders = {}
            if settings.fit_orders:
                errors = np.array(map_orders(
                    lambda p: pose_errors(points0[p], points1[p], camera, truth, settings)[:2],
                    len(points0), settings.fit_orders), dtype=np.float64).reshape(-1, 2)
                orders = {'rotation_error_deg_orders': errors[:, 0].tolist(),
                          'translation_error_deg_orders': errors[:, 1].tolist(),
                          'pose_error_deg_orders': errors.max(axis=1).tolist()}
            records.append({'frame0': i, 'frame1': j, 'image0': frames[i].path.name,
                            'image1': frames[j].path.name, 'gap': j - i,
                            'keypoints0': len(keypoints[i]), 'keypoints1': len(keypoints[j]),
                            'matches': len(idx0), 'inliers': int(inliers.sum()),
                            'rotation_error_deg': rot_err, 'translation_error_deg': trans_err,
                            'pose_error_deg': max(rot_err, trans_err), **orders,
                            'gt_rotation_deg': rotation_error_deg(np.eye(3), r_gt),
                            'gt_baseline': float(np.linalg.norm(t_gt)),
                            **match_extras(method), 'points0': points0,
                            'points1': points1, 'inlier_mask': inliers})
            LOG.info('%s %s %d-%d: %d matches, %d inliers, rotation %.2f, translation %.2f deg',
                     method.name, dataset.name, i, j, len(idx0), inliers.sum(), rot_err,
                     trans_err)
    return records


def normalized_points(points, matrix):
    """Return pixels float [M, 2] in normalized camera coordinates of intrinsics ``matrix``."""
    homogeneous = np.c_[np.asarray(points, np.float64).reshape(-1, 2), np.ones(len(points))]
    rays = homogeneous @ np.linalg.inv(matrix).T
    return rays[:, :2] / rays[:, 2:]


def pair_pose_errors(points0, points1, pair, settings):
    """
    :func:`pose_errors` for a listed pair: each image has its own intrinsics.

    Points are normalized with ``pair.K0`` / ``pair.K1`` and the RANSAC
    threshold is ``settings.pose_threshold_px`` over the mean of the four focal
    lengths (the LoFTR / SuperGlue convention).
    """
    focal = np.mean([pair.K0[0, 0], pair.K0[1, 1], pair.K1[0, 0], pair.K1[1, 1]])
    unit = Settings(**{**settings.__dict__, 'pose_threshold_px': settings.pose_threshold_px
                       / focal})
    return pose_errors(normalized_points(points0, pair.K0), normalized_points(points1, pair.K1),
                       Camera(np.eye(3)), (pair.rotation, pair.t), unit)


def read_upright(path, rot):
    """Return ``(pixels, encoding, stored (h, w))`` of an image turned by ``np.rot90(rot)``."""
    pixels, encoding = read_image(path)
    return np.ascontiguousarray(np.rot90(pixels, rot)), encoding, pixels.shape[:2]


def evaluate_pair_list(method, dataset, settings):
    """
    Score ``method`` on every pair of a pose pair list (``settings.max_pairs``: the first N).

    Each image is turned upright (``rot0``/``rot1``) for extraction and its
    keypoints mapped back to the stored image, whose intrinsics and pose the
    list gives. Returns pose records as :func:`evaluate_pose` does (``pair``
    names the pair, ``gap`` is 0).
    """
    pairs = dataset.pairs[:settings.max_pairs] if settings.max_pairs else dataset.pairs
    records = []
    for pair in pairs:
        keypoints = []
        for slot, (path, rot) in enumerate(((pair.path0, pair.rot0), (pair.path1, pair.rot1))):
            pixels, encoding, stored_hw = read_upright(path, rot)
            keypoints.append(unrotate_points(method.extract(slot, pixels, encoding), rot,
                                             stored_hw))
        idx0, idx1 = method.match(0, 1)
        points0, points1 = canonical_order(keypoints[0][idx0], keypoints[1][idx1])
        rot_err, trans_err, inliers = pair_pose_errors(points0, points1, pair, settings)
        records.append({'pair': pair.name, 'image0': pair.path0.name,
                        'image1': pair.path1.name, 'gap': 0, 'keypoints0': len(keypoints[0]),
                        'keypoints1': len(keypoints[1]), 'matches': len(idx0),
                        'inliers': int(inliers.sum()), 'rotation_error_deg': rot_err,
                        'translation_error_deg': trans_err,
                        'pose_error_deg': max(rot_err, trans_err),
                        'gt_rotation_deg': rotation_error_deg(np.eye(3), pair.rotation),
                        'gt_baseline': float(np.linalg.norm(pair.t)), **match_extras(method),
                        'points0': points0, 'points1': points1, 'inlier_mask': inliers})
        LOG.info('%s %s %s: %d matches, %d inliers, rotation %.2f, translation %.2f deg',
                 method.name, dataset.name, pair.name, len(idx0), inliers.sum(), rot_err,
                 trans_err)
    return records


def _median(values):
    values = [v for v in values if np.isfinite(v)]
    return float(np.median(values)) if values else float('inf')


def summarize_encoding(records):
    """
    Summarize the encoding fields of records (empty dict where records have none).

    ``bytes_per_frame``: median over the distinct frames of the pairs of the
    encoded descriptor bytes (N * D * itemsize); ``match_agreement``: share of
    all the engine's float32 matches over the pairs that the encoded
    descriptors reproduce (1.0 when there are none).
    """
    if not records or 'descriptor_bytes0' not in records[0]:
        return {}
    frame_bytes = {}
    for r in records:
        frame_bytes[r['image0']] = r['descriptor_bytes0']
        frame_bytes[r['image1']] = r['descriptor_bytes1']
    reference = sum(r['float32_matches'] for r in records)
    reproduced = sum(r['float32_matches_reproduced'] for r in records)
    return {'bytes_per_frame': float(np.median(list(frame_bytes.values()))),
            'match_agreement': reproduced / reference if reference else 1.0}


def summarize_orders(records, key, metric, names):
    """
    Summarize the ``--fit-orders`` errors of records (empty dict where records have none).

    ``records[i][key]``: list of N errors (one per order); ``metric(errors,
    thresholds)`` the accuracy of one order's errors over the records;
    ``names``: ``{threshold: metric name}``. Returns ``fit_orders`` N and, per
    threshold, ``<name>_orders_mean`` and ``<name>_orders_std``: the mean and
    population standard deviation over the N orders of the metric of each
    order.
    """
    if not records or key not in records[0]:
        return {}
    thresholds = list(names)
    errors = np.array([r[key] for r in records], dtype=np.float64)  # [pairs, orders]
    per_order = np.array([metric(errors[:, k], thresholds) for k in range(errors.shape[1])],
                         dtype=np.float64).reshape(errors.shape[1], len(thresholds))
    summary = {'fit_orders': errors.shape[1]}
    for t, values in zip(thresholds, per_order.T):
        summary[f'{names[t]}_orders_mean'] = float(values.mean())
        summary[f'{names[t]}_orders_std'] = float(values.std())
    return summary


def summarize_homography(records):
    """Summarize homography records: pairs, MHA at 1/3/5 px, mean error, medians."""
    errors = [r['corner_error_px'] for r in records]
    mha = accuracy_at(errors, MHA_THRESHOLDS)
    finite = [e for e in errors if np.isfinite(e)]
    return {'pairs': len(records),
            **{f'mha@{t:g}px': float(a) for t, a in zip(MHA_THRESHOLDS, mha)},
            'mean_corner_error_px': float(np.mean(errors)) if records else float('inf'),
            'failures': len(errors) - len(finite),
            'median_matches': _median([r['matches'] for r in records]),
            'median_inliers': _median([r['inliers'] for r in records]),
            **summarize_orders(records, 'corner_error_px_orders', accuracy_at,
                               {t: f'mha@{t:g}px' for t in MHA_THRESHOLDS}),
            **summarize_encoding(records)}


def summarize_pose(records):
    """
    Summarize pose records: pairs, AUC at 5/10/20 deg, median errors and counts.

    No records (a gap longer than the sequence): AUCs and medians are None,
    shown as '-', not as an AUC of 0.
    """
    if not records:
        return {'pairs': 0, **{f'auc@{t:g}deg': None for t in AUC_THRESHOLDS},
                'median_rotation_error_deg': None, 'median_translation_error_deg': None,
                'failures': 0, 'median_matches': None, 'median_inliers': None}
    auc = pose_auc([r['pose_error_deg'] for r in records], AUC_THRESHOLDS)
    return {'pairs': len(records),
            **{f'auc@{t:g}deg': float(a) for t, a in zip(AUC_THRESHOLDS, auc)},
            'median_rotation_error_deg': _median([r['rotation_error_deg'] for r in records]),
            'median_translation_error_deg': _median(
                [r['translation_error_deg'] for r in records]),
            'failures': sum(not np.isfinite(r['pose_error_deg']) for r in records),
            'median_matches': _median([r['matches'] for r in records]),
            'median_inliers': _median([r['inliers'] for r in records]),
            **summarize_orders(records, 'pose_error_deg_orders', pose_auc,
                               {t: f'auc@{t:g}deg' for t in AUC_THRESHOLDS}),
            **summarize_encoding(records)}


# -- output ------------------------------------------------------------------------------------


def slug(text):
    """Return the file-name form of a method or dataset name."""
    return re.sub(r'[^A-Za-z0-9]+', '_', text).strip('_').lower()


def _fmt(value, digits=2):
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return 'fail' if value is not None else '-'
    if isinstance(value, float):
        return f'{value:.{digits}f}'
    return str(value)


def _encoding_cells(summary, shown):
    """Return the Markdown cells of bytes per frame and match agreement (where ``shown``)."""
    if not shown:
        return ''
    if 'bytes_per_frame' not in summary:
        return ' - | - |'
    return (f" {_fmt(summary['bytes_per_frame'], 0)} | "
            f"{_fmt(summary['match_agreement'], 4)} |")


def _order_cells(summary, names, digits):
    """Return the Markdown cells 'mean +- std' of the ``--fit-orders`` metrics ``names``."""
    cells = ''
    for name in names:
        mean = summary.get(f'{name}_orders_mean')
        std = summary.get(f'{name}_orders_std')
        cells += (' - |' if mean is None
                  else f' {_fmt(mean, digits)} +- {_fmt(std, digits)} |')
    return cells


def _fmt_range(values):
    """Return 'median (min-max)' of float errors (None: failed fit), 'fail' when all failed."""
    finite = [v for v in values if v is not None and np.isfinite(v)]
    if not finite:
        return 'fail'
    failed = len(values) - len(finite)
    text = f'{_fmt(float(np.median([v if v is not None else np.inf for v in values])))}'
    text += f' ({_fmt(min(finite))}-{_fmt(max(finite))}'
    return text + (f', {failed} failed)' if failed else ')')


def markdown_tables(results):
    """
    Return the results as Markdown: per dataset a summary table and a per-pair table.

    Where a method ran with a descriptor encoding, the summary tables get two
    more columns: bytes per frame and match agreement with float32. With
    ``--fit-orders`` N > 0 they get the order-averaged MHA / AUC (mean +- std
    over the N orders) after the single-fit ones, and the per-pair table the
    median (min-max) corner error over the orders.
    """
    lines = []
    for data in results['datasets']:
        methods = list(data['summary'])
        lines += [f"### {data['name']} ({data['layout']}, {data['kind']})", '']
        summaries = [s.get('all', s) for s in data['summary'].values()]
        shown = any('bytes_per_frame' in s for s in summaries)
        head = ' bytes/frame | agreement with float32 |' if shown else ''
        rule = '---|---|' if shown else ''
        orders = max((s.get('fit_orders', 0) for s in summaries), default=0)
        if data['kind'] == 'homography':
            names = [f'mha@{t:g}px' for t in MHA_THRESHOLDS] if orders else []
            order_head = ''.join(f' MHA@{t:g}px {orders} orders |' for t in MHA_THRESHOLDS)
            lines += ['| method | pairs | MHA@1px | MHA@3px | MHA@5px |'
                      + (order_head if orders else '') + ' mean corner err px | '
                      'median matches | median inliers |' + head,
                      '|---|---|---|---|---|' + '---|' * len(names) + '---|---|---|' + rule]
            for m in methods:
                s = data['summary'][m]
                lines.append(f"| {m} | {s['pairs']} | {_fmt(s['mha@1px'])} | "
                             f"{_fmt(s['mha@3px'])} | {_fmt(s['mha@5px'])} |"
                             + _order_cells(s, names, 3)
                             + f" {_fmt(s['mean_corner_error_px'])} | "
                             f"{_fmt(s['median_matches'], 0)}"
                             f" | {_fmt(s['median_inliers'], 0)} |" + _encoding_cells(s, shown))
            per_order = ' | '.join(f'{m}: corner err px over {orders} orders, median (min-max)'
                                   for m in methods)
            lines += ['', '| pair | ' + ' | '.join(
                f'{m}: corner err px (matches / inliers)' for m in methods)
                + (' | ' + per_order if orders else '') + ' |',
                '|---|' + '---|' * len(methods) * (2 if orders else 1)]
            for k, record in enumerate(data['pairs'][methods[0]]):
                cells = []
                for m in methods:
                    r = data['pairs'][m][k]
                    cells.append(f"{_fmt(r['corner_error_px'])} ({r['matches']} / "
                                 f"{r['inliers']})")
                if orders:
                    cells += [_fmt_range(data['pairs'][m][k].get('corner_error_px_orders', []))
                              for m in methods]
                lines.append(f"| {record['pair']} | " + ' | '.join(cells) + ' |')
        else:
            names = [f'auc@{t:g}deg' for t in AUC_THRESHOLDS] if orders else []
            order_head = ''.join(f' AUC@{t:g} {orders} orders |' for t in AUC_THRESHOLDS)
            lines += ['| method | gap | pairs | AUC@5 | AUC@10 | AUC@20 |'
                      + (order_head if orders else '') + ' median rot err deg | '
                      'median transl err deg | failures | median matches | median inliers |'
                      + head, '|---|---|---|---|---|---|' + '---|' * len(names)
                      + '---|---|---|---|---|' + rule]
            for m in methods:
                for gap, s in data['summary'][m].items():
                    lines.append(
                        f"| {m} | {gap} | {s['pairs']} | {_fmt(s['auc@5deg'], 3)} | "
                        f"{_fmt(s['auc@10deg'], 3)} | {_fmt(s['auc@20deg'], 3)} |"
                        + _order_cells(s, names, 3)
                        + f" {_fmt(s['median_rotation_error_deg'])} | "
                        f"{_fmt(s['median_translation_error_deg'])} | {s['failures']} | "
                        f"{_fmt(s['median_matches'], 0)} | {_fmt(s['median_inliers'], 0)} |"
                        + _encoding_cells(s, shown))
        lines.append('')
    return '\n'.join(lines)


def _json_ready(value):
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()
                if k not in ('points0', 'points1', 'inlier_mask')}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return _finite(value)  # inf (failure) -> null
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (np.ndarray, Path)):
        return value.tolist() if isinstance(value, np.ndarray) else str(value)
    return value


def _pyplot():
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def _width(index):
    """Line width of the index-th method: later ones thinner, so equal curves all show."""
    return max(3.5 - 1.3 * index, 1.0)


def plot_mha(data, path):
    """Write MHA vs corner-error threshold (0..10 px), one curve per method."""
    plt = _pyplot()
    grid = np.linspace(0.0, 10.0, 201)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for m, (method, records) in enumerate(data['pairs'].items()):
        errors = [r['corner_error_px'] for r in records]
        ax.plot(grid, accuracy_at(errors, grid), label=method, linewidth=_width(m))
    ax.set(xlabel='corner error threshold (px)', ylabel='MHA (share of pairs)',
           title=f"{data['name']}: homography accuracy", ylim=(-0.02, 1.02), xlim=(0, 10))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_pose_cdf(data, path):
    """Write the CDFs of rotation, translation and pose (max) error, per method and gap."""
    plt = _pyplot()
    grid = np.linspace(0.0, 20.0, 401)
    keys = (('rotation_error_deg', 'rotation'), ('translation_error_deg', 'translation'),
            ('pose_error_deg', 'max(rotation, translation)'))
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), dpi=100, sharey=True)
    for m, (method, records) in enumerate(data['pairs'].items()):
        colour = f'C{m}'
        for g, gap in enumerate(sorted({r['gap'] for r in records})):
            chosen = [r for r in records if r['gap'] == gap]
            for ax, (key, _) in zip(axes, keys):
                ax.plot(grid, accuracy_at([r[key] for r in chosen], grid), color=colour,
                        linestyle=('-', '--', ':', '-.')[g % 4], linewidth=_width(m),
                        label=f'{method}, gap {gap}')
    for ax, (_, title) in zip(axes, keys):
        ax.set(xlabel=f'{title} error (deg)', title=f"{data['name']}: {title}",
               ylim=(-0.02, 1.02), xlim=(0, 20))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel('share of pairs with error <= x')
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_pose_along(data, path):
    """Write rotation and translation errors along the sequence, one panel per gap."""
    plt = _pyplot()
    gaps = sorted({r['gap'] for records in data['pairs'].values() for r in records})
    fig, axes = plt.subplots(len(gaps), 1, figsize=(9, 2.6 * len(gaps)), dpi=100, sharex=True,
                             squeeze=False)
    for ax, gap in zip(axes[:, 0], gaps):
        for m, (method, records) in enumerate(data['pairs'].items()):
            chosen = [r for r in records if r['gap'] == gap]
            x = [r['frame0'] for r in chosen]
            for key, style, what in (('rotation_error_deg', 'o-', 'rotation'),
                                     ('translation_error_deg', 's--', 'translation')):
                y = np.array([r[key] for r in chosen], dtype=np.float64)
                ax.plot(x, np.where(np.isfinite(y), y, np.nan), style, color=f'C{m}',
                        markersize=3, label=f'{method} {what}')
                failed = ~np.isfinite(y)
                if failed.any():
                    top = np.nanmax(np.r_[np.where(np.isfinite(y), y, np.nan), 1.0])
                    ax.plot(np.asarray(x)[failed], np.full(failed.sum(), top), 'x',
                            color=f'C{m}', markersize=8)
        ax.set(ylabel='error (deg)', title=f"{data['name']}: frame i -> i+{gap}")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel('frame i (x: failed)')
    axes[0, 0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def draw_pair(path0, path1, points0, points1, inlier_mask, title, path):
    """
    Write two images side by side with match lines: inliers green, outliers red.

    ``points0/1`` float [M, 2] pixels, ``inlier_mask`` bool [M]; at most
    :data:`DRAWN_MATCHES` matches are drawn (evenly spaced), over dimmed grey
    images, inliers on top.
    """
    import cv2
    images = []
    for image_path in (path0, path1):
        pixels, encoding = read_image(image_path)
        if encoding == 'mono16':
            pixels = (pixels // 257).astype(np.uint8)
        grey = pixels.astype(np.float32).mean(axis=2, keepdims=True)  # dimmed grey: colours show
        images.append(np.repeat((60 + 0.6 * grey).astype(np.uint8), 3, axis=2))
    banner = 28
    height = max(i.shape[0] for i in images) + banner
    canvas = np.full((height, images[0].shape[1] + images[1].shape[1], 3), 255, np.uint8)
    canvas[banner:banner + images[0].shape[0], :images[0].shape[1]] = images[0]
    canvas[banner:banner + images[1].shape[0], images[0].shape[1]:] = images[1]
    offset0 = np.array([0.0, banner])
    offset1 = np.array([images[0].shape[1], banner])
    order = np.r_[np.nonzero(~inlier_mask)[0], np.nonzero(inlier_mask)[0]]
    if len(order) > DRAWN_MATCHES:
        keep = np.zeros(len(inlier_mask), bool)
        keep[np.linspace(0, len(inlier_mask) - 1, DRAWN_MATCHES).astype(int)] = True
        order = order[keep[order]]
    for k in order:
        colour = (0, 190, 0) if inlier_mask[k] else (0, 0, 255)
        a = tuple(int(round(v)) for v in points0[k] + offset0)
        b = tuple(int(round(v)) for v in points1[k] + offset1)
        cv2.line(canvas, a, b, colour, 1, cv2.LINE_AA)
        cv2.circle(canvas, a, 2, colour, -1, cv2.LINE_AA)
        cv2.circle(canvas, b, 2, colour, -1, cv2.LINE_AA)
    cv2.putText(canvas, title, (6, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1,
                cv2.LINE_AA)
    if not cv2.imwrite(str(path), canvas):
        raise XFeatError(f'cannot write {path}')


def draw_best_and_worst(data, dataset, out):
    """Draw the best and the worst pair of each method; returns the written paths."""
    key = 'corner_error_px' if data['kind'] == 'homography' else 'pose_error_deg'
    unit = 'px' if data['kind'] == 'homography' else 'deg'
    written = []
    for method, records in data['pairs'].items():
        if not records:
            continue
        ranked = sorted(records, key=lambda r: (r[key], -r['inliers']))
        for label, record in (('best', ranked[0]), ('worst', ranked[-1])):
            name = record.get('pair') or f"{record['frame0']}-{record['frame1']}"
            if data['kind'] in ('homography', 'pairs'):
                paths = next((p.path0, p.path1) for p in dataset.pairs if p.name == name)
            else:
                paths = (dataset.frames[record['frame0']].path,
                         dataset.frames[record['frame1']].path)
            title = (f'{method} {dataset.name} {name} ({label}): error {_fmt(record[key])} '
                     f"{unit}, {record['matches']} matches, {record['inliers']} inliers")
            path = out / f'matches_{slug(dataset.name)}_{slug(method)}_{label}.png'
            draw_pair(paths[0], paths[1], record['points0'], record['points1'],
                      record['inlier_mask'], title, path)
            written.append(path)
    return written


def _versions(with_torch):
    import cv2
    versions = {'python': platform.python_version(), 'numpy': np.__version__,
                'opencv': cv2.__version__}
    try:
        import onnxruntime
        versions['onnxruntime'] = onnxruntime.__version__
    except ImportError:
        pass
    if with_torch:
        import torch
        versions['torch'] = torch.__version__
    return versions


def _upstream_commit(directory):
    try:
        result = subprocess.run(['git', '-C', str(directory), 'rev-parse', 'HEAD'],
                                capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return None
    return result.stdout.strip() or None


# -- command line ------------------------------------------------------------------------------


def build_parser():
    """Return the ``xfeat_eval`` argument parser."""
    parser = argparse.ArgumentParser(
        prog='xfeat_eval', description=__doc__.split('\n\n')[0].split(': ', 1)[1],
        epilog=f'Inputs: {LAYOUTS}.', formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('datasets', nargs='+', type=Path,
                        help='dataset folders or pair list files (layouts below)')
    parser.add_argument('--pairs-root', type=Path,
                        help='folder the images of pair lists are relative to (default: the '
                             "list's folder)")
    parser.add_argument('--out', type=Path, default=Path('eval_output'), help='output folder')
    parser.add_argument('--backend', default='onnxruntime',
                        help='comma-separated xfeat_ros backends to evaluate: onnxruntime, '
                             'pytorch, tensorrt, onnxruntime_cuda, auto; "none" for upstream only')
    parser.add_argument('--weights', default='', help='weights (.pt or .npz); empty: lookup')
    parser.add_argument('--gpu', type=int, default=0, help='CUDA device of GPU backends')
    parser.add_argument('--threads', type=int, default=0, help='ONNX Runtime threads (0: auto)')
    parser.add_argument('--top-k', type=int, default=4096)
    parser.add_argument('--threshold', type=float, default=0.05, help='detection threshold')
    parser.add_argument('--min-cossim', type=float, default=0.82)
    parser.add_argument('--upstream', type=Path,
                        help='upstream XFeat checkout (holds modules/; needs torch, tqdm)')
    parser.add_argument('--upstream-device', default='cpu', help='torch device for upstream')
    parser.add_argument('--max-pairs', type=int, default=0,
                        help='pairs per homography dataset and per pose gap (0: all)')
    parser.add_argument('--frames', type=int, default=0,
                        help='first frames of each pose sequence (0: all)')
    parser.add_argument('--gaps', type=int, nargs='+', default=[1, 2, 4],
                        help='frame gaps of pose pairs')
    parser.add_argument('--homography-method', choices=HOMOGRAPHY_METHODS, default='ransac')
    parser.add_argument('--homography-threshold', type=float, default=3.0, help='px')
    parser.add_argument('--homography-max-iters', type=int, default=10000)
    parser.add_argument('--homography-confidence', type=float, default=0.9999)
    parser.add_argument('--pose-threshold', type=float, default=1.0,
                        help='essential-matrix RANSAC threshold (px)')
    parser.add_argument('--fit-orders', type=int, default=0, metavar='N',
                        help='also fit every pair with its matches in N random orders '
                             '(np.random.default_rng(k), k = 0..N-1) and report the mean and '
                             'std over orders of MHA / AUC; 0: the canonical order only')
    parser.add_argument('--signed-translation', action='store_true',
                        help='score the signed translation direction (default: sign-agnostic)')
    parser.add_argument('--intrinsics', type=Path,
                        help='YAML with fx, fy, cx, cy, dist (TUM sequences; else the flags)')
    for key in ('fx', 'fy', 'cx', 'cy'):
        parser.add_argument(f'--{key}', type=float, default=TUM_FR2[key],
                            help='TUM intrinsics (default: freiburg2)')
    parser.add_argument('--dist', type=float, nargs='+', default=TUM_FR2['dist'],
                        help='TUM distortion k1 k2 p1 p2 [k3] (default: freiburg2)')
    parser.add_argument('--descriptor-encoding', action='append', metavar='ENCODING',
                        help='evaluate the xfeat_ros methods with descriptors sent through '
                             'these wire encodings (float32, float16, int8; repeatable or '
                             'comma-separated), one method each, with bytes per frame and '
                             'agreement with float32 matches; default: the plain engine')
    parser.add_argument('--no-plots', action='store_true', help='tables only')
    return parser


def run(args, command='xfeat_eval'):
    """Evaluate every method on every dataset; write the outputs and return the results dict."""
    from xfeat_ros.weights import load_weights, resolve_weights
    camera = (load_camera_yaml(args.intrinsics) if args.intrinsics
              else camera_from(args.fx, args.fy, args.cx, args.cy, args.dist))
    datasets = [load_dataset(folder, camera, args.pairs_root) for folder in args.datasets]
    if any(g < 1 for g in args.gaps):
        raise DatasetError(f'gaps must be positive, got {args.gaps}')
    if args.fit_orders < 0:
        raise ParameterError(f'--fit-orders must be 0 or more, got {args.fit_orders}')
    settings = Settings(args.homography_method, args.homography_threshold,
                        args.homography_max_iters, args.homography_confidence,
                        args.pose_threshold, not args.signed_translation, tuple(args.gaps),
                        args.max_pairs, args.frames, args.fit_orders)
    weights_path = resolve_weights(args.weights)
    args.weights = str(weights_path)
    slots = max(2, max(args.gaps) + 1)
    encodings = descriptor_encodings(args.descriptor_encoding)
    methods = [create_engine_method(b.strip(), args, slots)
               for b in args.backend.split(',') if b.strip() and b.strip() != 'none']
    if encodings:
        methods = [EncodedMethod(m, e, args.min_cossim) for m in methods for e in encodings]
    if args.upstream:
        methods.append(UpstreamMethod(args.upstream, load_weights(weights_path), slots,
                                      args.top_k, args.threshold, args.min_cossim,
                                      args.upstream_device))
    if not methods:
        raise XFeatError('nothing to evaluate: no backend and no --upstream')
    args.out.mkdir(parents=True, exist_ok=True)
    results = {
        'command': command,
        'date': time.strftime('%Y-%m-%d %H:%M:%S %z'),
        'machine': {'platform': platform.platform(), 'processor': platform.processor(),
                    'cores': os.cpu_count()},
        'versions': _versions(args.upstream is not None),
        'weights': str(weights_path), 'top_k': args.top_k, 'threshold': args.threshold,
        'min_cossim': args.min_cossim, 'methods': [m.name for m in methods],
        'descriptor_encodings': encodings,
        'upstream': None if not args.upstream else {
            'dir': str(args.upstream), 'commit': _upstream_commit(args.upstream)},
        'settings': settings.describe(), 'datasets': [], 'plots': []}
    for dataset in datasets:
        data = {'name': dataset.name, 'path': str(dataset.path), 'layout': dataset.layout,
                'kind': dataset.kind, 'summary': {}, 'pairs': {}}
        if dataset.kind == 'pose':
            data['camera'] = dataset.camera.describe()
        for method in methods:
            if dataset.kind == 'homography':
                records = evaluate_homography(method, dataset, settings)
                data['summary'][method.name] = summarize_homography(records)
            elif dataset.kind == 'pairs':
                records = evaluate_pair_list(method, dataset, settings)
                data['summary'][method.name] = {'all': summarize_pose(records)}
            else:
                records = evaluate_pose(method, dataset, settings)
                per_gap = {str(g): summarize_pose([r for r in records if r['gap'] == g])
                           for g in settings.gaps}
                data['summary'][method.name] = {**per_gap, 'all': summarize_pose(records)}
            data['pairs'][method.name] = records
        if not args.no_plots:
            stem = args.out / slug(dataset.name)
            if dataset.kind == 'homography':
                plots = [Path(f'{stem}_mha.png')]
                plot_mha(data, plots[0])
            elif dataset.kind == 'pairs':
                plots = [Path(f'{stem}_pose_cdf.png')]
                plot_pose_cdf(data, plots[0])
            else:
                plots = [Path(f'{stem}_pose_cdf.png'), Path(f'{stem}_pose_along.png')]
                plot_pose_cdf(data, plots[0])
                plot_pose_along(data, plots[1])
            plots += draw_best_and_worst(data, dataset, args.out)
            results['plots'] += [p.name for p in plots]
        results['datasets'].append(data)
    results = _json_ready(results)
    header = ['# xfeat_eval results', '', f"`{results['command']}`", '',
              f"{results['date']}; {results['machine']['platform']}; methods: "
              + ', '.join(results['methods']), '',
              f'top_k {args.top_k}, detection threshold {args.threshold}, min_cossim '
              f'{args.min_cossim}; weights {weights_path.name}'
              + (f"; descriptor encodings {', '.join(encodings)}" if encodings else ''), '']
    header += [f'- {key}: {value}' for key, value in results['settings'].items()] + ['']
    markdown = '\n'.join(header) + '\n' + markdown_tables(results)
    (args.out / 'results.md').write_text(markdown)
    with open(args.out / 'results.json', 'w') as handle:
        json.dump(results, handle, indent=1, allow_nan=False)
    results['markdown'] = markdown
    return results


@one_line_errors('xfeat_eval')
def main(argv=None):
    """Entry point of ``xfeat_eval``; returns the exit status."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')
    try:
        results = run(args, ' '.join(['xfeat_eval'] + argv))
    except XFeatError as exc:
        print(error_line('xfeat_eval', exc), file=sys.stderr)
        return 2
    sys.stdout.write(results['markdown'])
    sys.stdout.write(f'\nwritten to {args.out}/ (results.md, results.json, '
                     f"{len(results['plots'])} plots)\n")
    return 0


if __name__ == '__main__':
    sys.exit(main())
