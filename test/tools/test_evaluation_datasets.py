# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
xfeat_eval's inputs: dataset layouts, typed errors, the camera of the flags or of a YAML.

The HPatches and KITTI layouts are built from the same files as Oxford graf and
TUM; the intrinsics YAML is read by xfeat_ros.features.camera (the one calibration type).
"""

import os

import numpy as np
import pytest

from xfeat_ros.errors import CameraModelError, DatasetError, XFeatError
from xfeat_ros.features.camera import CameraModel
from xfeat_ros.tools.evaluation import cli, datasets, protocol


def link_files(pairs):
    for link, target in pairs:
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, link)


def test_hpatches_layout_equals_oxford(shared_dir, tmp_path):
    graf = shared_dir / 'data' / 'oxford_graf'
    link_files([(tmp_path / f'{k}.ppm', graf / f'img{k}.ppm') for k in range(1, 4)]
               + [(tmp_path / f'H_1_{k}', graf / f'H1to{k}p') for k in (2, 3)])
    layout, pairs = datasets.homography_pairs(tmp_path)
    assert layout == 'hpatches' and [p.name for p in pairs] == ['1-2', '1-3']
    _, oxford = datasets.homography_pairs(graf)
    assert [p.name for p in oxford] == ['1-2', '1-3', '1-4', '1-5', '1-6']
    np.testing.assert_array_equal(pairs[1].homography, oxford[1].homography)


def test_kitti_layout(data_dir, tmp_path):
    tum = datasets.tum_frames(data_dir / 'data' / 'tum_fr2_desk')[:4]
    link_files([(tmp_path / 'image_0' / f'{k:06d}.png', f.path) for k, f in enumerate(tum)])
    (tmp_path / 'poses.txt').write_text(''.join(
        ' '.join(f'{v:.9f}' for v in np.c_[f.rotation, f.position].ravel()) + '\n'
        for f in tum))
    (tmp_path / 'calib.txt').write_text('P0: 520.9 0 325.1 0 0 521.0 249.7 0 0 0 1 0\n'
                                        'P1: 520.9 0 325.1 -100 0 521.0 249.7 0 0 0 1 0\n')
    dataset = datasets.load_dataset(tmp_path)
    assert (dataset.layout, dataset.kind, len(dataset.frames)) == ('kitti', 'pose', 4)
    assert dataset.camera.distortion_model == 'none' and dataset.camera.coeffs.size == 0
    assert dataset.camera.matrix[1, 1] == 521.0
    for frame, original in zip(dataset.frames, tum):
        np.testing.assert_allclose(frame.rotation, original.rotation, atol=1e-8)
        np.testing.assert_allclose(frame.position, original.position, atol=1e-8)
    (tmp_path / 'poses.txt').write_text('1 0 0 0 0 1 0 0 0 0 1 0\n')
    with pytest.raises(DatasetError, match='is frame 1, but .* frames 0-0 only'):
        datasets.load_dataset(tmp_path)


def test_missing_ground_truth_is_a_typed_error(shared_dir, tmp_path):
    tum = shared_dir / 'data' / 'tum_fr2_desk'
    first = sorted((tum / 'rgb').iterdir())[0]
    link_files([(tmp_path / 'tum' / 'rgb' / first.name, first)])
    with pytest.raises(DatasetError, match='groundtruth.txt'):
        datasets.load_dataset(tmp_path / 'tum')
    graf = shared_dir / 'data' / 'oxford_graf'
    link_files([(tmp_path / 'graf' / f'img{k}.ppm', graf / f'img{k}.ppm') for k in (1, 2)])
    with pytest.raises(DatasetError, match='H1to2p'):
        datasets.load_dataset(tmp_path / 'graf')
    with pytest.raises(DatasetError, match='not a recognised layout'):
        datasets.load_dataset(tmp_path / 'tum' / 'rgb')
    assert issubclass(DatasetError, XFeatError)
    assert cli.main([tmp_path / 'graf', '--out', tmp_path / 'out']) == 2


def test_intrinsics_yaml(shared_dir, tmp_path):
    euroc = CameraModel.from_yaml(shared_dir / 'data' / 'euroc_v101_stereo' /
                                  'cam0_sensor.yaml')
    # radial-tangential k1 k2 p1 p2: plumb_bob with k3 = 0
    assert euroc.matrix[0, 0] == pytest.approx(458.654) and euroc.distortion_model == 'plumb_bob'
    assert euroc.coeffs.shape == (5,) and euroc.coeffs[4] == 0.0
    plain = tmp_path / 'camera.yaml'
    plain.write_text('fx: 500\nfy: 501\ncx: 320\ncy: 240\ndist: [0, 0, 0, 0]\n')
    camera = CameraModel.from_yaml(plain)
    assert camera.matrix[1, 2] == 240 and camera.distortion_model == 'none'
    assert camera.coeffs.size == 0
    plain.write_text('%YAML:1.0\nfx: 500\nfy: 501\ncx: 320\ncy: 240\ndist: [0.1, 0, 0, 0, 0.01]\n')
    assert CameraModel.from_yaml(plain).coeffs.tolist() == [0.1, 0, 0, 0, 0.01]
    plain.write_text('focal: 500\n')
    with pytest.raises(CameraModelError, match='needs fx, fy, cx, cy'):
        CameraModel.from_yaml(plain)
    assert issubclass(CameraModelError, XFeatError)  # one line from xfeat_eval, exit 2


def test_camera_of_the_flags_and_its_record():
    tum = CameraModel.from_opencv([520.9, 521.0, 325.1, 249.7],
                                  [0.2312, -0.7849, -0.0033, -0.0001, 0.9172])
    assert tum.distortion_model == 'plumb_bob'
    assert datasets.describe_camera(tum) == {'fx': 520.9, 'fy': 521.0, 'cx': 325.1,
                                             'cy': 249.7, 'dist': [0.2312, -0.7849, -0.0033,
                                                                   -0.0001, 0.9172]}
    np.testing.assert_array_equal(protocol.opencv_distortion(tum), tum.coeffs)
    rational = CameraModel.from_opencv([500, 500, 320, 240], [0.1] * 8)
    assert rational.distortion_model == 'rational_polynomial'
    none = CameraModel.from_opencv([500, 500, 320, 240], [0, 0, 0, 0])
    assert datasets.describe_camera(none)['dist'] is None
    assert protocol.opencv_distortion(none) is None
    fisheye = CameraModel.from_parameters([500, 500, 320, 240], 'equidistant', [0.1] * 4)
    with pytest.raises(DatasetError, match='equidistant'):
        protocol.opencv_distortion(fisheye)


def test_kitti_reader_by_frame_number(tmp_path):
    """The one KITTI reader (xfeat_eval and xfeat_map): pose and time of each frame number."""
    import cv2
    sequence = tmp_path / 'dataset' / 'sequences' / '07'
    (sequence / 'image_0').mkdir(parents=True)
    for number in (5, 7):
        cv2.imwrite(str(sequence / 'image_0' / f'{number:06d}.png'),
                    np.full((8, 8), 100, np.uint8))
    (sequence / 'calib.txt').write_text('P0: 700 0 300 0 0 710 200 0 0 0 1 0\n')
    (sequence / 'times.txt').write_text(''.join(f'{k / 10:.1f}\n' for k in range(10)))
    (tmp_path / 'dataset' / 'poses').mkdir()
    poses = tmp_path / 'dataset' / 'poses' / '07.txt'
    poses.write_text(''.join(f'1 0 0 {k} 0 1 0 {-k} 0 0 1 0\n' for k in range(10)))
    read = datasets.read_kitti(sequence, need_poses=False)
    assert [n for n, _ in read.images] == [5, 7] and read.poses_path == poses
    assert read.pose(7)[:3, 3].tolist() == [7, -7, 0] and read.pose(7)[3].tolist() == [0, 0, 0, 1]
    assert read.stamp_ns(7) == 700_000_000 and read.camera.matrix[1, 1] == 710
    frames, camera = datasets.kitti_frames(sequence)
    assert [(f.name, f.position[0]) for f in frames] == [('000005', 5), ('000007', 7)]
    poses.unlink()
    read = datasets.read_kitti(sequence, need_poses=False)
    assert read.poses is None and read.pose(5) is None and read.stamp_ns(5) == 500_000_000
    assert read.looked_for == (sequence / 'poses.txt', poses)
    with pytest.raises(DatasetError, match='looked for .*poses.txt and .*poses/07.txt'):
        datasets.read_kitti(sequence)
    (sequence / 'times.txt').write_text('0.0\nnoon\n')
    with pytest.raises(DatasetError, match="times.txt line 2: not a time in seconds: 'noon'"):
        datasets.read_kitti(sequence, need_poses=False)
