# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Spread and track-length metrics, the VINS-style KLT tracker and the tracking tool's CLI."""

from dataclasses import dataclass
import json

import numpy as np
import pytest

from xfeat_ros.errors import ParameterError
from xfeat_ros.features.camera import CameraModel
from xfeat_ros.tools.evaluation import tracking
from xfeat_ros.tools.evaluation.klt import KltSettings, KltTracker
from xfeat_ros.tools.evaluation.track_metrics import (continuation_pairs, empty_cells,
                                                      first_frame_lifetimes, frame_stats,
                                                      grid_coverage, nearest_distances,
                                                      summarize, track_ends, track_lengths)


# -- metrics --------------------------------------------------------------------------------------

def test_track_lengths_of_known_tracks():
    # track 1 lives 4 frames, 2 lives 2, 3 lives 1, 4 lives 2 (frames 2-3), 5 lives 1
    frames = [[1, 2, 3], [1, 2], [1, 4], [1, 4, 5]]
    assert track_lengths(frames).tolist() == [4, 2, 1, 2, 1]
    assert track_lengths([[7, 7], [7]]).tolist() == [2]  # an id twice in a frame counts once
    assert track_lengths([]).tolist() == []


def test_continuation_pairs_and_track_ends():
    index0, index1 = continuation_pairs([5, 7, 9, 11], [9, 12, 5])
    assert sorted(zip(index0.tolist(), index1.tolist())) == [(0, 2), (2, 0)]
    assert continuation_pairs([], [1])[0].tolist() == []
    frames = [[1, 2], [1, 2], [1, 3], [1, 3], [1, 3, 2]]
    assert track_ends(frames, 5) == [(1, 0, 4)]
    assert track_ends(frames, 3) == [(1, 0, 4), (2, 0, 4), (3, 2, 4)]


def test_ground_truth_errors_follow_the_true_geometry():
    """Points that move as the true poses say have no epipolar error; moved ones do."""
    model = CameraModel.from_parameters([400.0, 400.0, 320.0, 240.0], 'none', [], 640, 480)
    rng = np.random.default_rng(3)
    scene = np.column_stack([rng.uniform(-1, 1, 40), rng.uniform(-1, 1, 40),
                             rng.uniform(3, 6, 40)])
    poses, trace = [], []
    for index in range(6):   # the camera slides sideways; world = first camera
        position = np.array([0.05 * index, 0.0, 0.0])
        poses.append((np.eye(3), position))
        camera = scene - position
        pixels = camera[:, :2] / camera[:, 2:] * 400.0 + np.array([320.0, 240.0])
        carried = np.zeros(40, bool)
        carried[:10] = index > 0
        trace.append((pixels, np.arange(40, dtype=np.uint64), carried))
    truth = tracking.ground_truth_errors(trace, model, poses)
    assert truth['detected']['pairs'] == 5 * 30 and truth['carried']['pairs'] == 5 * 10
    assert truth['detected']['p90_px'] < 1e-6 and truth['carried']['p90_px'] < 1e-6
    assert truth['track_ends']['pairs'] == 40 and truth['track_ends']['p90_px'] < 1e-6
    trace[3][0][:10, 1] += 4.0  # the carried ones of frame 3 drift off their lines
    drifted = tracking.ground_truth_errors(trace, model, poses)
    assert drifted['carried']['p90_px'] > 3.0 and drifted['detected']['p90_px'] < 1e-6
    poses[2] = None  # a frame without a pose counts in no pair
    assert tracking.ground_truth_errors(trace, model, poses)['detected']['pairs'] == 3 * 30


def test_first_frame_lifetimes_stop_at_the_first_gap():
    frames = [[1, 2, 3], [1, 2], [1], [1, 2]]  # 2 is gone in frame 2: its track ended there
    assert first_frame_lifetimes(frames).tolist() == [4, 2, 1]


def test_summary_of_known_tracks():
    frames_ids = [[1, 2, 3], [1, 2], [1, 4], [1, 4, 5]]
    ages = [[1, 1, 1], [2, 2], [3, 1], [4, 2, 1]]
    records = [frame_stats(np.array([[10.0 * k, 5.0] for k in range(len(a))]), a, 640, 480,
                           cost_ms=10.0 + i) for i, a in enumerate(ages)]
    s = summarize(records, frames_ids)
    assert s['tracks'] == 5 and s['continued_tracks'] == 3
    assert s['track_length_median'] == 2.0
    assert s['track_length_p90'] == pytest.approx(np.percentile([4, 2, 1, 2, 1], 90))
    assert s['continued_length_median'] == 2.0
    assert s['median_age'] == pytest.approx(np.median([1, 2, 2, 2]))
    assert s['first_frame_lifetime_median'] == 2.0 and s['first_frame_survival'] == pytest.approx(
        1 / 3)
    assert s['cost_ms_median'] == pytest.approx(12.0)  # the first frame (warm-up) left out
    assert s['min_distance_px'] == pytest.approx(10.0)
    json.dumps(s, allow_nan=False)


def test_grid_coverage_with_known_empty_cells():
    # 80 x 60 image, 8 x 6 cells of 10 px: fill every cell except (3, 2) and (7, 5)
    points = [(c * 10 + 5, r * 10 + 5) for r in range(6) for c in range(8)
              if (c, r) not in ((3, 2), (7, 5))]
    assert grid_coverage(points, 80, 60) == pytest.approx(46 / 48)
    assert empty_cells(points, 80, 60) == [(3, 2), (7, 5)]
    assert grid_coverage(points * 3, 80, 60) == pytest.approx(46 / 48)  # duplicates: same cells
    assert grid_coverage([(80.0, 60.0)], 80, 60) == pytest.approx(1 / 48)  # the edge: last cell
    assert empty_cells([(80.0, 60.0)], 80, 60)[-1] == (6, 5)
    assert grid_coverage(np.zeros((0, 2)), 80, 60) == 0.0
    assert grid_coverage([(1, 1), (79, 59)], 80, 60, grid=(2, 1)) == 1.0
    with pytest.raises(ValueError):
        grid_coverage([(1, 1)], 0, 60)


def test_nearest_distances_and_the_closest_pair():
    points = np.array([[0.0, 0.0], [3.0, 4.0], [100.0, 0.0], [100.0, 2.0]])
    np.testing.assert_allclose(nearest_distances(points), [5.0, 5.0, 2.0, 2.0])
    np.testing.assert_allclose(nearest_distances(points, block=3), [5.0, 5.0, 2.0, 2.0])
    assert nearest_distances(points[:1]).size == 0
    record = frame_stats(points, [1, 1, 2, 3], 640, 480)
    assert record['min_distance_px'] == pytest.approx(2.0)
    assert record['p1_distance_px'] == pytest.approx(np.percentile([5, 5, 2, 2], 1))
    assert record['keypoints'] == 4 and record['median_age'] == 1.5
    lone = frame_stats(points[:1], [1], 640, 480)
    assert lone['min_distance_px'] is None and lone['p1_distance_px'] is None


# -- KLT ------------------------------------------------------------------------------------------

def texture(seed=3, size=(400, 560)):
    """Return a smooth random texture with many corners, uint8."""
    import cv2
    rng = np.random.default_rng(seed)
    noise = rng.uniform(0, 255, (size[0] // 8, size[1] // 8)).astype(np.float32)
    big = cv2.resize(noise, (size[1], size[0]), interpolation=cv2.INTER_CUBIC)
    return np.clip(cv2.GaussianBlur(big, (0, 0), 2.0), 0, 255).astype(np.uint8)


def translating(frames, step=(2, 1), shape=(240, 320)):
    """Return windows of one texture moved ``step`` px (x, y) a frame: the scene moves by -step."""
    big = texture()
    return [big[20 + k * step[1]:20 + k * step[1] + shape[0],
                20 + k * step[0]:20 + k * step[0] + shape[1]] for k in range(frames)]


@pytest.mark.parametrize('camera', [None, CameraModel.from_opencv([300, 300, 160, 120])])
def test_klt_tracks_persist_on_a_translating_texture(camera):
    images = translating(8)
    tracker = KltTracker(KltSettings(), camera)
    history = [tracker.track(image) for image in images]
    points0, ids0, ages0 = history[0]
    assert 50 <= len(ids0) <= 150 and ages0.tolist() == [1] * len(ids0)
    assert nearest_distances(points0).min() >= 29.0  # goodFeaturesToTrack's min_dist 30
    # corners away from the edge that leaves the view live on every frame with their id
    inside = (points0[:, 0] > 40) & (points0[:, 1] > 30)
    points, ids, ages = history[-1]
    alive = np.isin(ids0[inside], ids)
    assert alive.mean() >= 0.95
    lengths = first_frame_lifetimes([h[1] for h in history])
    assert np.median(lengths) == len(images)
    # each survivor moved by the scene's motion, (-2, -1) px a frame, and has age 8
    where = {int(i): k for k, i in enumerate(ids)}
    for p0, i in zip(points0[inside][alive], ids0[inside][alive]):
        k = where[int(i)]
        np.testing.assert_allclose(points[k], p0 - 7 * np.array([2.0, 1.0]), atol=0.2)
        assert ages[k] == len(images)
    assert len(ids) <= 150 and len(set(ids.tolist())) == len(ids)


def test_klt_keeps_the_longest_tracked_first_and_refills():
    images = translating(6, step=(3, 0))
    tracker = KltTracker(KltSettings(max_cnt=60, min_dist=30))
    for image in images:
        points, ids, ages = tracker.track(image)
        assert len(points) <= 60
        assert np.all(np.diff(ages[ages > 1]) <= 0)  # survivors come oldest first
    assert ages.max() == len(images)
    assert tracker.next_id > 60 or len(points) == 60  # new corners took the leavers' places


def test_klt_starts_over_on_a_new_image_size():
    tracker = KltTracker()
    tracker.track(translating(1)[0])
    points, ids, ages = tracker.track(translating(1, shape=(200, 300))[0])
    assert ages.tolist() == [1] * len(ages) and ids.min() > 0
    with pytest.raises(ValueError):
        tracker.track(np.zeros((10, 10, 3), np.uint8))


# -- the tool -------------------------------------------------------------------------------------

@pytest.mark.parametrize('argv, words', [
    (['/nonexistent/sequence'], 'is not a folder'),
    (['.', '--frames', '1'], '--frames'),
    (['.', '--min-distance', '-1'], '--min-distance'),
    (['.', '--carry-frames', '-2'], '--carry-frames'),
    (['.', '--no-klt', '--no-xfeat'], 'nothing to run'),
])
def test_cli_answers_a_mistake_in_one_line(argv, words, capsys):
    assert tracking.main(argv) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('xfeat_tracks: error:') and words in err[0]


def test_min_distance_needs_an_engine_setting(monkeypatch):
    import xfeat_ros.features.engine as engine

    @dataclass(frozen=True)
    class OldConfig:
        backend: str = 'auto'
        weights: object = ''
        num_threads: int = 0
        top_k: int = 0
        threshold: float = 0.0
        min_cossim: float = 0.0
    monkeypatch.setattr(engine, 'EngineConfig', OldConfig)
    assert tracking.engine_config({}, 150, 0).top_k == 150
    with pytest.raises(ParameterError, match='only 0'):
        tracking.engine_config({}, 150, 20)


def test_tool_on_real_frames(shared_dir, weights_npz, tmp_path, capsys):
    """The node's path and KLT on the first TUM frames: the JSON and the table."""
    from xfeat_ros.features.engine import EngineConfig
    spread = 'min_distance' in EngineConfig.__dataclass_fields__
    out = tmp_path / 'tracks.json'
    argv = [shared_dir / 'data' / 'tum_fr2_desk', '--frames', '3', '--top-k', '64',
            '--weights', weights_npz, '--out', out]
    if spread:
        argv += ['--min-distance', '0', '20']
    assert tracking.main(argv) == 0
    table = capsys.readouterr().out
    results = json.loads(out.read_text())
    runs = results['runs']
    assert [r['front_end'] for r in runs] == ['xfeat cpu'] * (2 if spread else 1) + [
        'klt (vins settings)']
    xfeat = runs[0]
    assert len(xfeat['per_frame']) == 3 and xfeat['summary']['frames'] == 3
    assert all(f['keypoints'] <= 64 for f in xfeat['per_frame'])
    assert xfeat['per_frame'][0]['median_age'] == 1.0  # the first frame starts every track
    assert runs[-1]['f_check_points'] == 'undistorted, focal 460'  # TUM fr2 from the name
    if spread:
        assert runs[1]['summary']['min_distance_px'] >= 20.0
    assert table.count('| tum_fr2_desk (3 frames) |') == len(runs)


def test_tool_reports_ground_truth_and_carried_tracks(weights_npz, tmp_path, capsys):
    """TUM frames with their poses: each run's epipolar errors, carried pairs apart."""
    from conftest import DATA_ROOT
    out = tmp_path / 'tracks.json'
    argv = [DATA_ROOT / 'data' / 'tum_fr2_desk', '--frames', '5', '--top-k', '150',
            '--carry-frames', '0', '3', '--weights', weights_npz, '--out', out]
    assert tracking.main(argv) == 0
    table = capsys.readouterr().out
    runs = json.loads(out.read_text())['runs']
    assert [(r['front_end'], r.get('carry_frames')) for r in runs] == [
        ('xfeat cpu', 0), ('xfeat cpu', 3), ('klt (vins settings)', None)]
    plain, carried, klt = (r['ground_truth'] for r in runs)
    assert plain['carried']['pairs'] == 0 and carried['carried']['pairs'] > 100
    assert klt['detected']['pairs'] > 100
    for truth in (plain, carried, klt):
        assert truth['detected']['pairs'] > 50
        assert 0 < truth['detected']['median_px'] < 5.0
    assert carried['carried']['median_px'] < 5.0
    assert runs[1]['summary']['median_age'] > runs[0]['summary']['median_age']
    assert 'carried: pairs' in table and table.count('| tum_fr2_desk |') == 3
