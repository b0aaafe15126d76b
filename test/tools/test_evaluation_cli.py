# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_eval end to end on the CPU path with tiny settings, on ../shared/data.

Oxford graf 1->2 and 1->3 and the first TUM fr2/desk frames at gaps 1 to 3;
``--fit-orders`` (every graf pair and a few TUM pairs refitted in 3 match
orders). Set ``XFEAT_ROS_UPSTREAM`` to an upstream XFeat checkout to also
compare against upstream.
"""

import json
import os
from pathlib import Path
import subprocess
import sys

import pytest

from xfeat_ros.tools.evaluation import cli


@pytest.fixture(scope='module')
def run(shared_dir, weights_npz, tmp_path_factory):
    """Run ``xfeat_eval`` once on graf (2 pairs) and TUM (4 frames, gaps 1-3, 2 pairs each)."""
    out = tmp_path_factory.mktemp('eval')
    data = shared_dir / 'data'
    status = cli.main([data / 'oxford_graf', data / 'tum_fr2_desk', '--out', out,
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
    status = cli.main([data / 'oxford_graf', data / 'tum_fr2_desk', '--out', out,
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
    assert cli.main([shared_dir / 'data' / 'oxford_graf', '--out', tmp_path / 'c',
                     '--fit-orders', '-1']) == 2


def test_command_line_help():
    result = subprocess.run([sys.executable, '-m', 'xfeat_ros.tools.evaluation', '--help'],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and '--upstream' in result.stdout


@pytest.mark.skipif(not os.environ.get('XFEAT_ROS_UPSTREAM'),
                    reason='set XFEAT_ROS_UPSTREAM to an upstream XFeat checkout')
def test_upstream_side_by_side(shared_dir, weights_npz, tmp_path):
    pytest.importorskip('torch')
    pytest.importorskip('tqdm')
    status = cli.main([shared_dir / 'data' / 'oxford_graf', '--out', tmp_path,
                       '--weights', weights_npz, '--max-pairs', '1', '--no-plots',
                       '--upstream', Path(os.environ['XFEAT_ROS_UPSTREAM'])])
    assert status == 0
    results = json.loads((tmp_path / 'results.json').read_text())
    ours, upstream = (results['datasets'][0]['pairs'][m] for m in results['methods'])
    assert abs(ours[0]['matches'] - upstream[0]['matches']) <= 0.01 * upstream[0]['matches']
    assert ours[0]['corner_error_px'] == pytest.approx(upstream[0]['corner_error_px'], abs=0.5)
