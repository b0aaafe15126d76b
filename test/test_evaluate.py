# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
``xfeat_eval`` end to end on the CPU path with tiny settings, on ../shared/data.

Oxford graf 1->2 and 1->3 and the first TUM fr2/desk frames at gaps 1 to 3;
``--fit-orders`` (every graf pair and a few TUM pairs refitted in 3 match
orders); plus the dataset layouts (HPatches, KITTI built from the same files)
and the typed errors for missing ground truth. Set ``XFEAT_ROS_UPSTREAM`` to an
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
    assert 'does not change it' in results['settings']['homography_fit']
    assert 'deterministic for a given match order' in results['settings']['match_order']
    assert results['settings']['fit_orders'] == 0
    assert 'fit_orders_method' not in results['settings']
    graf, tum = results['datasets']
    assert (graf['layout'], graf['kind']) == ('oxford', 'homography')
    assert (tum['layout'], tum['kind']) == ('tum', 'pose')
    assert tum['camera']['fx'] == pytest.approx(520.9)
    assert set(graf['summary']['xfeat_ros onnxruntime (cpu)']) >= {
        'pairs', 'mha@1px', 'mha@3px', 'mha@5px', 'mean_corner_error_px', 'median_matches'}
    assert set(tum['summary']['xfeat_ros onnxruntime (cpu)']) == {'1', '2', '3', 'all'}
    assert (out / 'results.md').read_text().count('| xfeat_ros onnxruntime (cpu) |') == 5
    assert 'orders' not in (out / 'results.md').read_text().split('### ')[1]  # no --fit-orders
    for summary in (graf['summary']['xfeat_ros onnxruntime (cpu)'],
                    tum['summary']['xfeat_ros onnxruntime (cpu)']['all']):
        assert not any('orders' in key for key in summary)
    assert 'corner_error_px_orders' not in graf['pairs']['xfeat_ros onnxruntime (cpu)'][0]


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


def fit_orders_run(data, weights_npz, out):
    """Run ``xfeat_eval --fit-orders 3`` on all of graf and TUM frames 0-2 (gap 1); results."""
    status = evaluate.main([data / 'oxford_graf', data / 'tum_fr2_desk', '--out', out,
                            '--weights', weights_npz, '--frames', '3', '--gaps', '1',
                            '--fit-orders', '3', '--no-plots'])
    assert status == 0
    return json.loads((out / 'results.json').read_text())


def test_fit_orders(run, shared_dir, weights_npz, tmp_path):
    method = 'xfeat_ros onnxruntime (cpu)'
    first = fit_orders_run(shared_dir / 'data', weights_npz, tmp_path / 'a')
    second = fit_orders_run(shared_dir / 'data', weights_npz, tmp_path / 'b')
    assert first['settings']['fit_orders'] == 3
    assert 'default_rng(k)' in first['settings']['fit_orders_method']
    graf, tum = first['datasets']
    summary = graf['summary'][method]
    assert summary['pairs'] == 5 and summary['fit_orders'] == 3
    for t in (1, 3, 5):
        assert 0.0 <= summary[f'mha@{t}px_orders_mean'] <= 1.0
        assert 0.0 <= summary[f'mha@{t}px_orders_std'] <= 0.5
    assert (summary['mha@1px_orders_mean'] <= summary['mha@3px_orders_mean']
            <= summary['mha@5px_orders_mean'])
    for gap in ('1', 'all'):
        pose = tum['summary'][method][gap]
        assert pose['pairs'] == 2 and pose['fit_orders'] == 3
        for t in (5, 10, 20):
            assert 0.0 <= pose[f'auc@{t}deg_orders_mean'] <= 1.0
            assert 0.0 <= pose[f'auc@{t}deg_orders_std'] <= 0.5
    # The canonical fit is the one without --fit-orders (the module's run).
    _, plain = run
    for record, ref in zip(graf['pairs'][method], plain['datasets'][0]['pairs'][method]):
        assert record['corner_error_px'] == ref['corner_error_px']
    for record in graf['pairs'][method]:
        assert len(record['corner_error_px_orders']) == 3
    for record in tum['pairs'][method]:
        for key in ('rotation_error_deg_orders', 'translation_error_deg_orders',
                    'pose_error_deg_orders'):
            assert len(record[key]) == 3
        assert record['pose_error_deg_orders'] == [
            max(r, t) for r, t in zip(record['rotation_error_deg_orders'],
                                      record['translation_error_deg_orders'])]
        assert max(record['rotation_error_deg_orders']) < 5.0
    # Orders 0..2 are the same fits in every run; they differ from each other.
    for a, b in zip(first['datasets'], second['datasets']):
        assert a['pairs'] == b['pairs'] and a['summary'] == b['summary']
    errors = [r['corner_error_px_orders'] for r in graf['pairs'][method]]
    assert any(len(set(e)) > 1 for e in errors)
    table = (tmp_path / 'a' / 'results.md').read_text()
    assert '| MHA@1px 3 orders | MHA@3px 3 orders | MHA@5px 3 orders |' in table
    assert '| AUC@5 3 orders | AUC@10 3 orders | AUC@20 3 orders |' in table
    assert 'corner err px over 3 orders, median (min-max)' in table
    assert f" {summary['mha@3px_orders_mean']:.3f} +- {summary['mha@3px_orders_std']:.3f} |" in (
        table)
    assert evaluate.main([shared_dir / 'data' / 'oxford_graf', '--out', tmp_path / 'c',
                          '--fit-orders', '-1']) == 2


def test_summaries_over_orders():
    inf = float('inf')
    # 2 pairs x 4 orders: per-order MHA@3px 1.0, 0.5, 0.5, 0.0
    records = [{'corner_error_px': 1.0, 'corner_error_px_orders': [0.5, 2.0, 4.0, 6.0],
                'matches': 10, 'inliers': 5},
               {'corner_error_px': 2.0, 'corner_error_px_orders': [3.0, inf, 1.5, inf],
                'matches': 10, 'inliers': 5}]
    summary = evaluate.summarize_homography(records)
    assert summary['fit_orders'] == 4
    assert summary['mha@3px_orders_mean'] == pytest.approx(0.5)
    assert summary['mha@3px_orders_std'] == pytest.approx(np.std([1.0, 0.5, 0.5, 0.0]))
    assert summary['mha@1px_orders_mean'] == pytest.approx(0.125)
    assert summary['mha@5px_orders_mean'] == pytest.approx(np.mean([1.0, 0.5, 1.0, 0.0]))
    assert summary['mha@3px'] == 1.0  # the canonical fits
    pose = [{'pose_error_deg': 1.0, 'rotation_error_deg': 1.0, 'translation_error_deg': 1.0,
             'pose_error_deg_orders': [0.0, 10.0], 'matches': 10, 'inliers': 5}]
    summary = evaluate.summarize_pose(pose)
    assert summary['fit_orders'] == 2
    assert summary['auc@20deg_orders_mean'] == pytest.approx((1.0 + 0.75) / 2)
    assert summary['auc@20deg_orders_std'] == pytest.approx(0.125)
    assert summary['auc@5deg_orders_mean'] == pytest.approx(0.5)
    assert 'fit_orders' not in evaluate.summarize_pose([])
    orders = evaluate.fit_orders(50, 3)
    assert len(orders) == 3 and all(sorted(o) == list(range(50)) for o in orders)
    np.testing.assert_array_equal(orders[2], np.random.default_rng(2).permutation(50))
    assert evaluate.map_orders(lambda order: int(order[0]), 50, 3) == [int(o[0]) for o in orders]


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


def test_kitti_layout(data_dir, tmp_path):
    tum = evaluate.tum_frames(data_dir / 'data' / 'tum_fr2_desk')[:4]
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
    with pytest.raises(evaluate.DatasetError, match='is frame 1, but .* frames 0-0 only'):
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
