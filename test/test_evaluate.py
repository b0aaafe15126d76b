# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_eval`` end to end on the CPU path with tiny settings, on ../shared/data.

Oxford graf 1->2 and 1->3 and the first TUM fr2/desk frames at gaps 1 to 3;
plus the dataset layouts (HPatches, KITTI built from the same files) and the
typed errors for missing ground truth. Set ``XFEAT_ROS_UPSTREAM`` to an
upstream XFeat checkout to also compare against upstream.
"""

import json
import os
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest

from xfeat_ros import evaluate
from xfeat_ros.errors import XFeatError


@pytest.fixture(scope='module')
def run(shared_dir, weights_npz, tmp_path_factory):
    """Run ``xfeat_eval`` once on graf (2 pairs) and TUM (4 frames, gaps 1-3, 2 pairs each)."""
    out = tmp_path_factory.mktemp('eval')
    data = shared_dir / 'data'
    status = evaluate.main([data / 'oxford_graf', data / 'tum_fr2_desk', '--out', out,
                            '--weights', weights_npz, '--max-pairs', '2', '--frames', '4',
                            '--gaps', '1', '2', '3'])
    assert status == 0
    return out, json.loads((out / 'results.json').read_text())


def test_json_is_well_formed(run):
    out, results = run
    for key in ('command', 'date', 'machine', 'versions', 'weights', 'top_k', 'min_cossim',
                'methods', 'settings', 'datasets', 'plots'):
        assert key in results
    assert results['methods'] == ['xfeat_ros onnxruntime (cpu)']
    assert 'cv2.findHomography' in results['settings']['homography_fit']
    assert 'setRNGSeed(0)' in results['settings']['homography_fit']
    graf, tum = results['datasets']
    assert (graf['layout'], graf['kind']) == ('oxford', 'homography')
    assert (tum['layout'], tum['kind']) == ('tum', 'pose')
    assert tum['camera']['fx'] == pytest.approx(520.9)
    assert set(graf['summary']['xfeat_ros onnxruntime (cpu)']) >= {
        'pairs', 'mha@1px', 'mha@3px', 'mha@5px', 'mean_corner_error_px', 'median_matches'}
    assert set(tum['summary']['xfeat_ros onnxruntime (cpu)']) == {'1', '2', '3', 'all'}
    assert (out / 'results.md').read_text().count('| xfeat_ros onnxruntime (cpu) |') == 5


def test_graf_corner_error_under_3px(run):
    _, results = run
    graf = results['datasets'][0]
    pairs = graf['pairs']['xfeat_ros onnxruntime (cpu)']
    assert [p['pair'] for p in pairs] == ['1-2', '1-3']
    for pair in pairs:
        assert pair['corner_error_px'] is not None and pair['corner_error_px'] < 3.0
        assert pair['keypoints0'] == 4096 and pair['matches'] > 500
        assert 0.3 * pair['matches'] < pair['inliers'] <= pair['matches']
    summary = graf['summary']['xfeat_ros onnxruntime (cpu)']
    assert summary['pairs'] == 2 and summary['mha@3px'] == 1.0 and summary['mha@5px'] == 1.0


def test_tum_rotation_errors_sensible(run):
    _, results = run
    tum = results['datasets'][1]
    pairs = tum['pairs']['xfeat_ros onnxruntime (cpu)']
    # --max-pairs 2 per gap, --frames 4 leaves one pair at gap 3
    assert sorted((p['frame0'], p['frame1']) for p in pairs) == [
        (0, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
    for pair in pairs:
        assert pair['matches'] > 300 and pair['inliers'] > 100
        assert pair['gt_rotation_deg'] > 0.5  # the camera really turns between frames
        assert pair['rotation_error_deg'] < (2.0 if pair['gap'] == 1 else 3.0)
        assert 0.0 <= pair['translation_error_deg'] <= 90.0
    summary = tum['summary']['xfeat_ros onnxruntime (cpu)']
    assert [summary[g]['pairs'] for g in ('1', '2', '3', 'all')] == [2, 2, 1, 5]
    assert summary['all']['failures'] == 0
    for key in ('auc@5deg', 'auc@10deg', 'auc@20deg'):
        assert 0.0 <= summary['all'][key] <= 1.0
    assert summary['all']['auc@5deg'] <= summary['all']['auc@10deg'] <= summary['all'][
        'auc@20deg']


def test_plots_exist_and_are_real_images(run):
    import cv2
    out, results = run
    names = set(results['plots'])
    method = 'xfeat_ros_onnxruntime_cpu'
    assert names == {'oxford_graf_mha.png', 'tum_fr2_desk_pose_cdf.png',
                     'tum_fr2_desk_pose_along.png',
                     f'matches_oxford_graf_{method}_best.png',
                     f'matches_oxford_graf_{method}_worst.png',
                     f'matches_tum_fr2_desk_{method}_best.png',
                     f'matches_tum_fr2_desk_{method}_worst.png'}
    for name in names:
        image = cv2.imread(str(out / name))
        assert image is not None and image.shape[0] > 200 and image.shape[1] > 400, name
        assert image.std() > 10, name  # not blank
    matches = cv2.imread(str(out / f'matches_oxford_graf_{method}_best.png'))
    green = (matches[:, :, 1] > 150) & (matches[:, :, 0] < 80) & (matches[:, :, 2] < 80)
    assert green.sum() > 1000  # inlier lines are drawn


def link_files(pairs):
    for link, target in pairs:
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, link)


def test_hpatches_layout_equals_oxford(shared_dir, tmp_path):
    graf = shared_dir / 'data' / 'oxford_graf'
    link_files([(tmp_path / f'{k}.ppm', graf / f'img{k}.ppm') for k in range(1, 4)]
               + [(tmp_path / f'H_1_{k}', graf / f'H1to{k}p') for k in (2, 3)])
    layout, pairs = evaluate.homography_pairs(tmp_path)
    assert layout == 'hpatches' and [p.name for p in pairs] == ['1-2', '1-3']
    _, oxford = evaluate.homography_pairs(graf)
    assert [p.name for p in oxford] == ['1-2', '1-3', '1-4', '1-5', '1-6']
    np.testing.assert_array_equal(pairs[1].homography, oxford[1].homography)


def test_kitti_layout(shared_dir, tmp_path):
    tum = evaluate.tum_frames(shared_dir / 'data' / 'tum_fr2_desk')[:4]
    link_files([(tmp_path / 'image_0' / f'{k:06d}.png', f.path) for k, f in enumerate(tum)])
    (tmp_path / 'poses.txt').write_text(''.join(
        ' '.join(f'{v:.9f}' for v in np.c_[f.rotation, f.position].ravel()) + '\n'
        for f in tum))
    (tmp_path / 'calib.txt').write_text('P0: 520.9 0 325.1 0 0 521.0 249.7 0 0 0 1 0\n'
                                        'P1: 520.9 0 325.1 -100 0 521.0 249.7 0 0 0 1 0\n')
    dataset = evaluate.load_dataset(tmp_path)
    assert (dataset.layout, dataset.kind, len(dataset.frames)) == ('kitti', 'pose', 4)
    assert dataset.camera.dist is None and dataset.camera.matrix[1, 1] == 521.0
    for frame, original in zip(dataset.frames, tum):
        np.testing.assert_allclose(frame.rotation, original.rotation, atol=1e-8)
        np.testing.assert_allclose(frame.position, original.position, atol=1e-8)
    (tmp_path / 'poses.txt').write_text('1 0 0 0 0 1 0 0 0 0 1 0\n')
    with pytest.raises(evaluate.DatasetError, match='4 images but 1 poses'):
        evaluate.load_dataset(tmp_path)


def test_missing_ground_truth_is_a_typed_error(shared_dir, tmp_path):
    tum = shared_dir / 'data' / 'tum_fr2_desk'
    first = sorted((tum / 'rgb').iterdir())[0]
    link_files([(tmp_path / 'tum' / 'rgb' / first.name, first)])
    with pytest.raises(evaluate.DatasetError, match='groundtruth.txt'):
        evaluate.load_dataset(tmp_path / 'tum')
    graf = shared_dir / 'data' / 'oxford_graf'
    link_files([(tmp_path / 'graf' / f'img{k}.ppm', graf / f'img{k}.ppm') for k in (1, 2)])
    with pytest.raises(evaluate.DatasetError, match='H1to2p'):
        evaluate.load_dataset(tmp_path / 'graf')
    with pytest.raises(evaluate.DatasetError, match='not a recognised layout'):
        evaluate.load_dataset(tmp_path / 'tum' / 'rgb')
    assert issubclass(evaluate.DatasetError, XFeatError)
    assert evaluate.main([tmp_path / 'graf', '--out', tmp_path / 'out']) == 2


def test_intrinsics_yaml(shared_dir, tmp_path):
    euroc = evaluate.load_camera_yaml(shared_dir / 'data' / 'euroc_v101_stereo' /
                                      'cam0_sensor.yaml')
    assert euroc.matrix[0, 0] == pytest.approx(458.654) and euroc.dist.shape == (4,)
    plain = tmp_path / 'camera.yaml'
    plain.write_text('fx: 500\nfy: 501\ncx: 320\ncy: 240\ndist: [0, 0, 0, 0]\n')
    camera = evaluate.load_camera_yaml(plain)
    assert camera.matrix[1, 2] == 240 and camera.dist is None
    plain.write_text('focal: 500\n')
    with pytest.raises(evaluate.DatasetError):
        evaluate.load_camera_yaml(plain)


def test_pose_pairs():
    assert evaluate.pose_pairs(4, (1, 2)) == [(0, 1), (1, 2), (2, 3), (0, 2), (1, 3)]
    assert evaluate.pose_pairs(4, (1, 4), max_pairs=2) == [(0, 1), (1, 2)]


def test_command_line_help():
    result = subprocess.run([sys.executable, '-m', 'xfeat_ros.evaluate', '--help'],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and '--upstream' in result.stdout


@pytest.mark.skipif(not os.environ.get('XFEAT_ROS_UPSTREAM'),
                    reason='set XFEAT_ROS_UPSTREAM to an upstream XFeat checkout')
def test_upstream_side_by_side(shared_dir, weights_npz, tmp_path):
    pytest.importorskip('torch')
    pytest.importorskip('tqdm')
    status = evaluate.main([shared_dir / 'data' / 'oxford_graf', '--out', tmp_path,
                            '--weights', weights_npz, '--max-pairs', '1', '--no-plots',
                            '--upstream', Path(os.environ['XFEAT_ROS_UPSTREAM'])])
    assert status == 0
    results = json.loads((tmp_path / 'results.json').read_text())
    ours, upstream = (results['datasets'][0]['pairs'][m] for m in results['methods'])
    assert abs(ours[0]['matches'] - upstream[0]['matches']) <= 0.01 * upstream[0]['matches']
    assert ours[0]['corner_error_px'] == pytest.approx(upstream[0]['corner_error_px'], abs=0.5)
