# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_eval`` inputs: KITTI's own layout paired by frame number, pose pair lists, refusals.

There is no KITTI data here: the KITTI tree is built from real TUM fr2/desk
frames (undistorted, so the pinhole P0 is exact), numbered 100, 101, ... as
KITTI numbers its frames, with a poses file whose line k is frame k's pose and
whose other lines are a different trajectory (10 degrees a frame), so an image
paired with the wrong line shows as a large error.
"""

import json

import cv2
import numpy as np
import pytest

from xfeat_ros.errors import DatasetError
from xfeat_ros.features.geometry import relative_pose
from xfeat_ros.tools.evaluation import cli, datasets
from xfeat_ros.tools.evaluation.pair_lists import PairListError, read_pair_list, unrotate_points

K_TUM = np.array([[520.9, 0.0, 325.1], [0.0, 521.0, 249.7], [0.0, 0.0, 1.0]])
DIST_TUM = np.array([0.2312, -0.7849, -0.0033, -0.0001, 0.9172])
FIRST = 100  # KITTI frame number of the first image
FRAMES = 8
POSE_LINES = 130


def pose_line(rotation, position):
    return ' '.join(f'{v:.9e}' for v in np.c_[rotation, position].ravel()) + '\n'


def other_pose(k):
    """Return the pose of frame k of another trajectory: 10 degrees about y per frame."""
    angle = np.radians(10.0 * k)
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]]), np.array([0.1 * k, 0.0, 0.0])


@pytest.fixture(scope='module')
def tum(data_dir):
    """Return the first TUM frames with their poses, and their undistorted grey pixels."""
    frames = datasets.tum_frames(data_dir / 'data' / 'tum_fr2_desk')[:FRAMES]
    grey = [cv2.undistort(cv2.imread(str(f.path), cv2.IMREAD_GRAYSCALE), K_TUM, DIST_TUM)
            for f in frames]
    return frames, grey


@pytest.fixture(scope='module')
def kitti(tum, tmp_path_factory):
    """Build dataset/sequences/00/{image_0/000100.png.., calib.txt} and dataset/poses/00.txt."""
    frames, grey = tum
    root = tmp_path_factory.mktemp('kitti') / 'dataset'
    sequence = root / 'sequences' / '00'
    (sequence / 'image_0').mkdir(parents=True)
    for k, pixels in enumerate(grey):
        cv2.imwrite(str(sequence / 'image_0' / f'{FIRST + k:06d}.png'), pixels)
    projection = np.c_[K_TUM, np.zeros(3)]
    (sequence / 'calib.txt').write_text(
        ''.join(f'P{i}: ' + ' '.join(f'{v:.6e}' for v in projection.ravel()) + '\n'
                for i in range(4)))
    lines = [pose_line(*other_pose(k)) for k in range(POSE_LINES)]
    for k, frame in enumerate(frames):
        lines[FIRST + k] = pose_line(frame.rotation, frame.position)
    (root / 'poses').mkdir()
    (root / 'poses' / '00.txt').write_text(''.join(lines))
    return root


def test_frame_100_gets_pose_line_100(kitti, tum):
    dataset = datasets.load_dataset(kitti / 'sequences' / '00')
    assert (dataset.layout, dataset.kind) == ('kitti', 'pose')
    assert [f.name for f in dataset.frames] == [f'{FIRST + k:06d}' for k in range(FRAMES)]
    lines = (kitti / 'poses' / '00.txt').read_text().splitlines()
    for frame, original in zip(dataset.frames, tum[0]):
        line = np.array(lines[int(frame.name)].split(), np.float64).reshape(3, 4)
        np.testing.assert_array_equal(np.c_[frame.rotation, frame.position], line)
        np.testing.assert_allclose(frame.rotation, original.rotation, atol=1e-8)
    assert dataset.camera.matrix[0, 0] == pytest.approx(520.9)
    assert dataset.camera.distortion_model == 'none'  # rectified: no distortion


def test_kitti_layout_gives_the_right_poses(kitti, weights_npz, tmp_path):
    out = tmp_path / 'eval'
    assert cli.main([kitti / 'sequences' / '00', '--out', out, '--weights', weights_npz,
                     '--gaps', '1', '2', '--no-plots']) == 0
    summary = json.loads((out / 'results.json').read_text())['datasets'][0]
    assert summary['layout'] == 'kitti'
    records = summary['pairs']['xfeat_ros onnxruntime (cpu)']
    assert len(records) == (FRAMES - 1) + (FRAMES - 2)
    errors = [r['rotation_error_deg'] for r in records]
    print(f'KITTI layout from TUM frames {FIRST}-{FIRST + FRAMES - 1}: rotation error median '
          f'{np.median(errors):.3f} max {max(errors):.3f} deg; AUC@5/10/20 ',
          [summary['summary']['xfeat_ros onnxruntime (cpu)']['all'][f'auc@{t}deg']
           for t in (5, 10, 20)])
    assert np.median(errors) < 1.0 and max(errors) < 3.0  # a wrong line would be ~10 deg off


def test_kitti_refuses_what_it_cannot_pair(kitti, tmp_path):
    import shutil
    sequence = tmp_path / 'dataset' / 'sequences' / '00'
    shutil.copytree(kitti / 'sequences' / '00', sequence)
    (tmp_path / 'dataset' / 'poses').mkdir()
    (tmp_path / 'dataset' / 'poses' / '00.txt').write_text(
        ''.join(pose_line(*other_pose(k)) for k in range(FIRST + 3)))
    with pytest.raises(DatasetError, match=r'000103.png is frame 103, but .*00.txt '
                       r'holds the poses of frames 0-102 only'):
        datasets.load_dataset(sequence)
    (tmp_path / 'dataset' / 'poses' / '00.txt').unlink()
    with pytest.raises(DatasetError, match='poses.txt and .*poses/00.txt'):
        datasets.load_dataset(sequence)
    (sequence / 'poses.txt').write_text(''.join(pose_line(*other_pose(k))
                                                for k in range(POSE_LINES)))
    assert len(datasets.load_dataset(sequence).frames) == FRAMES  # the flat layout
    (sequence / 'image_0' / 'left.png').write_bytes(
        (sequence / 'image_0' / f'{FIRST:06d}.png').read_bytes())
    with pytest.raises(DatasetError, match='named by frame number'):
        datasets.load_dataset(sequence)


def test_unrecognised_layout_says_what_it_expected(kitti, tmp_path):
    with pytest.raises(DatasetError) as info:
        datasets.load_dataset(tmp_path)
    message = str(info.value)
    for layout in ('HPatches', 'Oxford', 'TUM', 'KITTI', 'pair list', 'H_1_2', 'H1to2p',
                   'groundtruth.txt', 'image_0/', 'calib.txt', 'sequences/NN'):
        assert layout in message, layout
    with pytest.raises(DatasetError, match='give one sequence, e.g. .*sequences/00'):
        datasets.load_dataset(kitti)
    help_text = cli.build_parser().format_help()
    assert 'KITTI odometry' in help_text and 'pair list' in help_text


# -- pair lists ------------------------------------------------------------------------------


@pytest.fixture(scope='module')
def pair_lists(tum, tmp_path_factory):
    """Write a SuperGlue-form text list and an XFeat-form JSON list of the same TUM pairs."""
    frames, grey = tum
    root = tmp_path_factory.mktemp('pairs')
    (root / 'images').mkdir()
    for frame, pixels in zip(frames, grey):
        cv2.imwrite(str(root / 'images' / f'{frame.name}.png'), pixels)
    pairs = [(0, 1, 0), (1, 3, 0), (2, 5, 0), (0, 4, 0), (3, 4, 2), (4, 7, 0)]  # (i, j, rot)
    lines, entries = [], []
    for i, j, rot in pairs:
        rotation, t = relative_pose((frames[i].rotation, frames[i].position),
                                    (frames[j].rotation, frames[j].position))
        transform = np.eye(4)
        transform[:3, :3], transform[:3, 3] = rotation, t
        names = [f'images/{frames[i].name}.png', f'images/{frames[j].name}.png']
        lines.append(' '.join(names + [str(rot), str(rot)]
                              + [f'{v:.9g}' for v in np.r_[K_TUM.ravel(), K_TUM.ravel(),
                                                           transform.ravel()]]) + '\n')
        entries.append({'pair_names': names, 'K0': K_TUM.tolist(), 'K1': K_TUM.tolist(),
                        'T_0to1': transform.tolist(), 'rot0': rot, 'rot1': rot})
    (root / 'pairs_with_gt.txt').write_text(''.join(lines))
    (root / 'pairs.json').write_text(json.dumps(entries))
    return root, len(pairs)


def test_pair_lists_read_as_published(pair_lists):
    root, count = pair_lists
    text = read_pair_list(root / 'pairs_with_gt.txt')
    as_json = read_pair_list(root / 'pairs.json')
    assert len(text) == len(as_json) == count
    for a, b in zip(text, as_json):
        assert (a.name, a.path0, a.path1, a.rot0) == (b.name, b.path0, b.path1, b.rot0)
        np.testing.assert_allclose(a.rotation, b.rotation, atol=1e-8)
        np.testing.assert_allclose(a.t, b.t, atol=1e-8)
    assert text[4].rot0 == text[4].rot1 == 2


@pytest.mark.parametrize('name', ['pairs_with_gt.txt', 'pairs.json'])
def test_pair_list_runs_without_conversion(pair_lists, weights_npz, tmp_path, name):
    root, count = pair_lists
    out = tmp_path / 'eval'
    assert cli.main([root / name, '--out', out, '--weights', weights_npz]) == 0
    data = json.loads((out / 'results.json').read_text())['datasets'][0]
    assert (data['layout'], data['kind']) == ('pair list', 'pairs')
    records = data['pairs']['xfeat_ros onnxruntime (cpu)']
    assert len(records) == count
    errors = [r['rotation_error_deg'] for r in records]
    assert max(errors) < 3.0, errors  # rot 2 too: keypoints mapped back to the stored image
    assert all(r['matches'] > 300 for r in records)
    summary = data['summary']['xfeat_ros onnxruntime (cpu)']['all']
    assert summary['pairs'] == count and summary['auc@20deg'] > 0.3
    assert '| all | 6 |' in (out / 'results.md').read_text()
    assert (out / f'{root.name}_pose_cdf.png'.replace(root.name, name.split('.')[0])).is_file()


def test_pair_list_errors(pair_lists, tmp_path):
    root, _ = pair_lists
    bad = tmp_path / 'short.txt'
    bad.write_text('a.png b.png 0 0 1 2 3\n')
    with pytest.raises(PairListError, match='line 1: 7 fields, expected 38'):
        read_pair_list(bad)
    line = (root / 'pairs_with_gt.txt').read_text().splitlines()[0]
    moved = tmp_path / 'moved.txt'
    moved.write_text(line + '\n')
    with pytest.raises(PairListError, match='does not exist'):
        read_pair_list(moved)
    assert len(read_pair_list(moved, root)) == 1  # --pairs-root
    (tmp_path / 'list.json').write_text('{"not": "a list"}')
    with pytest.raises(PairListError, match='JSON list'):
        read_pair_list(tmp_path / 'list.json')


@pytest.mark.parametrize('rot', [0, 1, 2, 3])
def test_unrotate_points_inverts_rot90(rot):
    image = np.arange(5 * 7).reshape(5, 7)
    turned = np.rot90(image, rot)
    ys, xs = np.mgrid[:turned.shape[0], :turned.shape[1]]
    points = np.c_[xs.ravel(), ys.ravel()].astype(np.float64)
    back = unrotate_points(points, rot, image.shape).astype(int)
    np.testing.assert_array_equal(image[back[:, 1], back[:, 0]], turned.ravel())


# -- output and upstream ---------------------------------------------------------------------


def test_gap_without_pairs_shows_a_dash(data_dir, weights_npz, tmp_path):
    out = tmp_path / 'eval'
    assert cli.main([data_dir / 'data' / 'tum_fr2_desk', '--out', out, '--weights',
                     weights_npz, '--frames', '3', '--gaps', '1', '4', '--no-plots']) == 0
    rows = [line for line in (out / 'results.md').read_text().splitlines()
            if line.startswith('| xfeat_ros')]
    gap4 = next(r for r in rows if r.split('|')[2].strip() == '4')
    cells = [c.strip() for c in gap4.split('|')[3:-1]]
    assert cells[0] == '0' and cells[1:4] == ['-', '-', '-'], gap4
    summary = json.loads((out / 'results.json').read_text())['datasets'][0]['summary']
    assert summary['xfeat_ros onnxruntime (cpu)']['4']['auc@5deg'] is None
    assert summary['xfeat_ros onnxruntime (cpu)']['1']['auc@5deg'] is not None


def test_upstream_without_tqdm_is_one_line(data_dir, weights_npz, tmp_path, monkeypatch,
                                           capsys):
    pytest.importorskip('torch')
    upstream = tmp_path / 'accelerated_features'
    (upstream / 'modules').mkdir(parents=True)
    (upstream / 'modules' / '__init__.py').write_text('')
    (upstream / 'modules' / 'xfeat.py').write_text('import tqdm\n')  # as upstream does
    monkeypatch.setitem(__import__('sys').modules, 'tqdm', None)  # not installed
    status = cli.main([data_dir / 'data' / 'tum_fr2_desk', '--out', tmp_path / 'o',
                       '--weights', weights_npz, '--backend', 'none', '--frames', '2',
                       '--upstream', upstream])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith('xfeat_eval: error: ') and "'tqdm'" in err[0], err
