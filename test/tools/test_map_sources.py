# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
xfeat_map's sources: dataset layouts, ground truth, and the cameras COLMAP gives back.

The layouts are read by xfeat_eval's readers (xfeat_ros.tools.evaluation.datasets).
There is no KITTI data here: the KITTI trees are built in the tests, the
end-to-end one from the real TUM fr2/desk frames of test/data (undistorted, so
the pinhole P0 is exact), numbered 100, 101, ... as KITTI numbers its frames,
with a poses file whose line k is frame k's pose and whose other lines are a
different trajectory (10 degrees and 10 cm a frame): an image paired with the
wrong line shows as an APE of metres.
"""

import json
import logging

import cv2
import numpy as np
import pytest

from xfeat_ros.errors import DatasetError
from xfeat_ros.features.camera import CameraModel
from xfeat_ros.tools import colmap_db, mapping
from xfeat_ros.tools.evaluation import datasets
from xfeat_ros.tools.map_sources import (associate, MappingError, open_folder,
                                         read_tum_trajectory, tum_camera)

K_TUM = np.array([[520.9, 0.0, 325.1], [0.0, 521.0, 249.7], [0.0, 0.0, 1.0]])
DIST_TUM = np.array([0.2312, -0.7849, -0.0033, -0.0001, 0.9172])
FIRST = 100      # KITTI frame number of the first image
FRAMES = 8       # the TUM frames of test/data
POSE_LINES = 130
KITTI_ARGS = ['--top-k', '1024', '--no-plot']


def _rotation(axis, degrees):
    from scipy.spatial.transform import Rotation
    return Rotation.from_rotvec(np.radians(degrees) * np.asarray(axis, float)).as_matrix()


def _write_images(folder, names, size=(48, 64)):
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        cv2.imwrite(str(folder / name), np.full(size, 128, np.uint8))


def pose_line(rotation, position):
    return ' '.join(f'{v:.9e}' for v in np.c_[rotation, position].ravel()) + '\n'


def other_pose(k):
    """Return the pose of frame k of another trajectory: 10 degrees about y per frame."""
    return _rotation((0, 1, 0), 10.0 * k), np.array([0.1 * k, 0.0, 0.0])


def kitti_tree(root, images, poses=None, times=True):
    """
    Build ``root/dataset/sequences/00`` (image_0 from ``images`` {number: grey}, calib.txt).

    ``poses`` {number: (R, t)} go to ``dataset/poses/00.txt`` (POSE_LINES lines, the
    others :func:`other_pose`); ``times``: ``times.txt`` with 0.1 s per frame number.
    """
    sequence = root / 'dataset' / 'sequences' / '00'
    (sequence / 'image_0').mkdir(parents=True)
    for number, pixels in images.items():
        cv2.imwrite(str(sequence / 'image_0' / f'{number:06d}.png'), pixels)
    projection = np.c_[K_TUM, np.zeros(3)]
    (sequence / 'calib.txt').write_text(''.join(
        f'P{i}: ' + ' '.join(f'{v:.6e}' for v in projection.ravel()) + '\n' for i in range(4)))
    if times:
        (sequence / 'times.txt').write_text(''.join(f'{0.1 * k:.6e}\n'
                                                    for k in range(POSE_LINES)))
    if poses is not None:
        lines = [pose_line(*other_pose(k)) for k in range(POSE_LINES)]
        for number, (rotation, position) in poses.items():
            lines[number] = pose_line(rotation, position)
        (root / 'dataset' / 'poses').mkdir()
        (root / 'dataset' / 'poses' / '00.txt').write_text(''.join(lines))
    return sequence


# -- ground truth files ------------------------------------------------------------------


def test_tum_trajectory_files(tmp_path):
    path = tmp_path / 'gt.txt'
    path.write_text('# comment\n2.0 1 2 3 0 0 0 1\n1.0 0 0 0 0 0 0.7071068 0.7071068\n')
    stamps, poses = read_tum_trajectory(path)
    assert stamps.tolist() == [10 ** 9, 2 * 10 ** 9]
    np.testing.assert_allclose(poses[1][:3, 3], [1, 2, 3])
    np.testing.assert_allclose(poses[0][:3, :3], _rotation((0, 0, 1), 90), atol=1e-6)
    truth = (stamps, poses)
    np.testing.assert_array_equal(associate(10 ** 9 + 19_000_000, truth), poses[0])
    assert associate(10 ** 9 + 21_000_000, truth) is None
    assert associate(None, truth) is None
    nine = tmp_path / 'nine.txt'
    nine.write_text('5.5 5.4999 1 1 1 0 0 0 1\n')
    assert read_tum_trajectory(nine)[0].tolist() == [5_500_000_000]
    for text, message in (('1 2 3\n', 'fields'), ('a 0 0 0 0 0 0 1\n', 'stamp'),
                          ('1 0 0 0 0 0 x 1\n', 'numbers'), ('# nothing\n', 'no poses')):
        path.write_text(text)
        with pytest.raises(DatasetError, match=message):
            read_tum_trajectory(path)


def test_tum_camera_from_folder_name(tmp_path):
    for name, fx in (('rgbd_dataset_freiburg1_xyz', 517.3), ('tum_fr2_desk', 520.9),
                     ('fr3_office', 535.4)):
        (tmp_path / name).mkdir()
        assert tum_camera(tmp_path / name).matrix[0, 0] == fx
    for name in ('desk', 'fr22', 'frames'):
        (tmp_path / name).mkdir()
        assert tum_camera(tmp_path / name) is None
    assert tum_camera(tmp_path / 'fr3_office').distortion_model == 'none'
    assert datasets.TUM_FR2['fx'] == 520.9 and datasets.TUM_FR2['dist'][4] == 0.9172


def test_tum_folder_truth_is_the_readers(data_dir):
    """xfeat_map's TUM frames get the poses xfeat_eval's reader gives the same images."""
    folder = data_dir / 'data' / 'tum_fr2_desk'
    frames = [item.frame for item in open_folder(folder).items()]
    evaluated = {f.path.name: f for f in datasets.tum_frames(folder)}
    assert len(frames) == len(evaluated) >= FRAMES
    for frame in frames:
        pose = evaluated[frame.name.split('/')[-1]]
        np.testing.assert_array_equal(frame.pose[:3, :3], pose.rotation)
        np.testing.assert_array_equal(frame.pose[:3, 3], pose.position)


# -- layouts -----------------------------------------------------------------------------


def test_kitti_flat_layout(tmp_path):
    _write_images(tmp_path / 'image_0', ['000000.png', '000001.png', '000002.png'])
    (tmp_path / 'calib.txt').write_text('P0: 700 0 300 0 0 710 200 0 0 0 1 0\n')
    source = open_folder(tmp_path)
    assert source.kind == 'kitti' and source.count == 3
    assert source.cameras['image_0'].matrix[1, 1] == 710
    frames = [item.frame for item in source.items()]
    assert [f.name for f in frames] == ['image_0/000000.png', 'image_0/000001.png',
                                        'image_0/000002.png']
    assert all(f.pose is None and f.stamp_ns is None for f in frames)
    assert 'looked for' in source.truth and 'poses.txt' in source.truth
    (tmp_path / 'poses.txt').write_text('1 0 0 0 0 1 0 0 0 0 1 0\n' * 2
                                        + '1 0 0 5 0 1 0 0 0 0 1 0\n')
    (tmp_path / 'times.txt').write_text('0.0\n0.1\n0.2\n')
    source = open_folder(tmp_path)
    frames = [item.frame for item in source.items()]
    assert frames[2].pose[0, 3] == 5 and frames[2].stamp_ns == 200_000_000
    assert source.truth == str(tmp_path / 'poses.txt')
    (tmp_path / 'poses.txt').write_text('1 0 0 0 0 1 0 0 0 0 1 0\n')
    with pytest.raises(DatasetError, match='000001.png is frame 1, but .* frames 0-0 only'):
        open_folder(tmp_path)


def test_kitti_own_layout_pairs_by_frame_number(tmp_path):
    grey = np.full((48, 64), 128, np.uint8)
    numbers = (FIRST, FIRST + 1, FIRST + 2)
    truth = {n: (_rotation((0, 0, 1), n), np.array([n, 2.0 * n, 0.0])) for n in numbers}
    sequence = kitti_tree(tmp_path, {n: grey for n in numbers}, truth)
    source = open_folder(sequence)
    assert source.kind == 'kitti'
    assert source.truth == str(tmp_path / 'dataset' / 'poses' / '00.txt')
    frames = [item.frame for item in source.items()]
    assert [f.name for f in frames] == [f'image_0/{n:06d}.png' for n in numbers]
    for frame, number in zip(frames, numbers):
        np.testing.assert_allclose(frame.pose[:3, 3], [number, 2.0 * number, 0.0])
        np.testing.assert_allclose(frame.pose[:3, :3], truth[number][0], atol=1e-8)
        assert frame.stamp_ns == number * 100_000_000   # line `number` of times.txt
    assert [f.rank for f in frames] == [0, 1, 2]
    # xfeat_eval reads the same tree the same way (one reader).
    evaluated, _ = datasets.kitti_frames(sequence)
    for frame, pose in zip(frames, evaluated):
        np.testing.assert_array_equal(frame.pose[:3, 3], pose.position)
    (sequence / 'times.txt').write_text('0.0\n' * 101)
    with pytest.raises(DatasetError, match='is frame 101, but .*times.txt holds the times '
                                           'of frames 0-100 only'):
        open_folder(sequence)
    (sequence / 'times.txt').unlink()
    (tmp_path / 'dataset' / 'poses' / '00.txt').unlink()
    source = open_folder(sequence)
    assert all(item.frame.pose is None for item in source.items())
    assert source.truth == ('no poses, looked for ' + str(sequence / 'poses.txt') + ' and '
                            + str(tmp_path / 'dataset' / 'poses' / '00.txt'))
    with pytest.raises(DatasetError, match='poses.txt and .*poses/00.txt'):
        datasets.kitti_frames(sequence)   # xfeat_eval needs the poses


def test_source_without_truth_says_so_in_one_line(tmp_path, weights_npz, caplog):
    pytest.importorskip('pycolmap')
    pytest.importorskip('evo')
    grey = np.full((48, 64), 128, np.uint8)
    sequence = kitti_tree(tmp_path, {n: grey for n in (FIRST, FIRST + 1)})
    with caplog.at_level(logging.WARNING, logger='xfeat_map'):
        code = mapping.main([sequence, '--out', tmp_path / 'out', '--weights', weights_npz]
                            + KITTI_ARGS)
    assert code == mapping.EXIT_NO_MODEL   # a flat grey image has no features
    said = [r.getMessage() for r in caplog.records if 'ground-truth' in r.getMessage()]
    assert len(said) == 1 and '\n' not in said[0], said
    assert 'looked for' in said[0] and 'poses/00.txt' in said[0]
    summary = json.loads((tmp_path / 'out' / 'summary.json').read_text())
    assert summary['ground_truth'] is None and summary['ape_rmse_m'] is None
    assert summary['mapper']['fixed_intrinsics'] is None   # no model to read back


def test_plain_folder_needs_intrinsics(tmp_path):
    _write_images(tmp_path, ['b.png', 'a.png'])
    with pytest.raises(MappingError, match='--intrinsics'):
        open_folder(tmp_path)
    source = open_folder(tmp_path, CameraModel.from_parameters((50, 50, 32, 24)))
    assert source.kind == 'plain' and 'give --groundtruth' in source.truth
    assert [(i.frame.name, i.frame.rank) for i in source.items()] == [('a.png', 0), ('b.png', 1)]
    item = next(source.items())
    assert (item.image.height, item.image.width, item.image.encoding) == (48, 64, 'mono8')


def test_euroc_stereo_layout_and_truth(tmp_path, shared_dir):
    import shutil
    euroc = shared_dir / 'data' / 'euroc_v101_stereo'
    for camera in ('cam0', 'cam1'):
        (tmp_path / camera).mkdir()
        for path in sorted((euroc / camera).iterdir())[:3]:
            shutil.copy(path, tmp_path / camera / path.name)
        shutil.copy(euroc / f'{camera}_sensor.yaml', tmp_path)
    source = open_folder(tmp_path, stereo=True)
    assert source.kind == 'euroc' and set(source.cameras) == {'cam0', 'cam1'}
    assert 'looked for' in source.truth and 'data.csv' in source.truth
    frames = [item.frame for item in source.items()]
    assert [f.rank for f in frames] == [0, 0, 1, 1, 2, 2]
    assert [f.camera for f in frames] == ['cam0', 'cam1'] * 3
    assert all(f.pose is None for f in frames)
    # Body poses at the image stamps: the camera pose is body pose x T_BS.
    stamps = [f.stamp_ns for f in frames[::2]]
    csv = tmp_path / 'state_groundtruth_estimate0' / 'data.csv'
    csv.parent.mkdir()
    csv.write_text('#timestamp,p_x,p_y,p_z,q_w,q_x,q_y,q_z\n' + ''.join(
        f'{s},{i},0,0,1,0,0,0\n' for i, s in enumerate(stamps)))
    frames = [item.frame for item in open_folder(tmp_path).items()]
    from xfeat_ros.features.camera import read_euroc_extrinsics
    t_bs = read_euroc_extrinsics(tmp_path / 'cam0_sensor.yaml')
    np.testing.assert_allclose(frames[2].pose[:3, 3], t_bs[:3, 3] + [2, 0, 0])
    with pytest.raises(MappingError, match='stereo'):
        open_folder(tmp_path, CameraModel.from_parameters((1, 1, 1, 1)), stereo=True)


# -- end to end: a KITTI tree from real frames, and the cameras read back -----------------


@pytest.fixture(scope='module')
def kitti_sequence(data_dir, tmp_path_factory):
    """Build KITTI's own layout of the TUM frames of test/data, numbered from FIRST."""
    frames = datasets.tum_frames(data_dir / 'data' / 'tum_fr2_desk')[:FRAMES]
    grey = {FIRST + k: cv2.undistort(cv2.imread(str(f.path), cv2.IMREAD_GRAYSCALE), K_TUM,
                                     DIST_TUM) for k, f in enumerate(frames)}
    poses = {FIRST + k: (f.rotation, f.position) for k, f in enumerate(frames)}
    return kitti_tree(tmp_path_factory.mktemp('kitti'), grey, poses)


def test_kitti_map_scores_against_the_frames_own_poses(kitti_sequence, weights_npz, tmp_path):
    import pycolmap
    pytest.importorskip('evo')
    out = tmp_path / 'out'
    assert mapping.main([kitti_sequence, '--out', out, '--weights', weights_npz]
                        + KITTI_ARGS) == 0
    summary = json.loads((out / 'summary.json').read_text())
    assert summary['kind'] == 'kitti' and summary['registered_images'] == FRAMES
    assert summary['ground_truth'].endswith('poses/00.txt')
    assert summary['ground_truth_frames'] == summary['scored_frames'] == FRAMES
    # Lines 0-7 (the order of the images) would be the other trajectory: metres off.
    assert summary['ape_rmse_m'] < 0.02, summary['ape_rmse_m']
    # The intrinsics read back from the reconstruction are the calibration's.
    written = [520.9, 521.0, 325.6, 250.2]
    assert summary['cameras']['image_0'] == {'model': 'PINHOLE', 'params': written}
    assert summary['reconstruction_cameras'] == summary['cameras']
    assert summary['mapper']['fixed_intrinsics'] is True
    assert summary['intrinsics_changed'] == []
    model = pycolmap.Reconstruction(str(out / summary['model']))
    assert [list(c.params) for c in model.cameras.values()] == [written]
    with pycolmap.Database.open(str(out / 'database.db')) as db:
        assert all(c.has_prior_focal_length for c in db.read_all_cameras())


def test_changed_intrinsics_fail_loudly(kitti_sequence, weights_npz, tmp_path, capsys,
                                        monkeypatch):
    pytest.importorskip('pycolmap')
    pytest.importorskip('evo')
    fixed = colmap_db.pipeline_options

    def refining(pycolmap, settings, image_root, camera_ids=()):
        options = fixed(pycolmap, settings, image_root, camera_ids)
        options.ba_refine_focal_length = True   # let bundle adjustment move the focal
        options.constant_cameras = set()
        return options

    monkeypatch.setattr(colmap_db, 'pipeline_options', refining)
    out = tmp_path / 'out'
    code = mapping.main([kitti_sequence, '--out', out, '--weights', weights_npz] + KITTI_ARGS)
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == mapping.EXIT_ERROR and len(lines) == 1, lines
    assert 'COLMAP changed the intrinsics' in lines[0] and 'image_0: fx 520.9 ->' in lines[0]
    summary = json.loads((out / 'summary.json').read_text())
    assert summary['mapper']['fixed_intrinsics'] is False
    assert summary['reconstruction_cameras']['image_0']['params'][0] != 520.9
    assert summary['cameras']['image_0']['params'][0] == 520.9


def test_read_back_compares_every_model():
    pycolmap = pytest.importorskip('pycolmap')
    written = pycolmap.Camera(model='OPENCV', width=64, height=48,
                              params=[50, 51, 32.5, 24.5, 0.1, 0.01, 0, 0], camera_id=1)

    def model_with(params):
        reconstruction = pycolmap.Reconstruction()
        reconstruction.add_camera_with_trivial_rig(pycolmap.Camera(
            model='OPENCV', width=64, height=48, params=params, camera_id=1))
        return reconstruction

    same = model_with(list(written.params))
    cameras, changed = colmap_db.read_back_cameras([(0, same)], {'cam0': written})
    assert cameras == {'cam0': colmap_db.camera_record(written)} and changed == []
    moved = model_with([50, 51, 32.5, 24.5, 0.2, 0.01, 0, 0])
    cameras, changed = colmap_db.read_back_cameras([(0, same), (3, moved)], {'cam0': written})
    assert cameras['cam0']['params'][4] == 0.1
    assert changed == ['sparse/3 cam0: k1 0.1 -> 0.2']
    assert colmap_db.read_back_cameras([], {'cam0': written}) == ({'cam0': None}, [])
