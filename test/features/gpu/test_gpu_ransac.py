# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The track epipolar check: host reference and device kernels.

The reference: xfeat_ros.features.ransac; the kernels: kernels/ransac.cu.

CPU tests hold the reference to geometry (synthetic scenes with a known
fundamental matrix), to its degenerate cases (few matches, no motion, pure
translation, collinear points) and to OpenCV's FM_RANSAC on real sequences,
including the numbers the node's track tests ask for. GPU tests
(``@pytest.mark.gpu``, skipped with the reason where CuPy or a device is
missing) compare every kernel stage with the reference on the same inputs.

Tolerances: ransac.cu is compiled with --fmad=false and follows the
reference's operation order, so hypotheses differ only through the device's
cbrt / acos / cos (<= 2 ulp in double): models are compared at 1e-5 on
unit-norm entries (>= 99% of them), and a model equal to the reference's
must score exactly the same. The refinement sums in another order, so the
final masks may differ only at the threshold: >= 99.5% equal decisions.
"""

import numpy as np
import pytest

from xfeat_ros.errors import DescriptorLayoutError
from xfeat_ros.features import ransac
from xfeat_ros.features.tracks import next_tracks
from xfeat_ros.tools.image_files import list_sequence, read_grey


MODEL_ATOL = 1e-5
MASK_AGREEMENT = 0.995
K = np.array([[500.0, 0, 320], [0, 500.0, 240], [0, 0, 1]])


def scene(count=300, outliers=0, seed=3, translation=(0.2, 0.05, 0.0), degrees=3.0):
    """Two views of random points at 2-6 m; returns p0, p1 float32 [count, 2], F, outlier ids."""
    rng = np.random.default_rng(seed)
    points = rng.uniform([0, 0, 2], [640, 480, 6], (count, 3))
    rays = np.c_[(points[:, 0] - 320) / 500, (points[:, 1] - 240) / 500, np.ones(count)]
    angle = np.radians(degrees)
    rotation = np.array([[np.cos(angle), 0, np.sin(angle)], [0, 1, 0],
                         [-np.sin(angle), 0, np.cos(angle)]])
    t = np.asarray(translation, float)
    image1 = (rays * points[:, 2:3] @ rotation.T + t) @ K.T
    p0 = points[:, :2].astype(np.float32)
    p1 = (image1[:, :2] / image1[:, 2:]).astype(np.float32)
    bad = rng.choice(count, outliers, replace=False)
    p1[bad] += rng.uniform(60, 150, (outliers, 2)).astype(np.float32)
    skew = np.array([[0, -t[2], t[1]], [t[2], 0, -t[0]], [-t[1], t[0], 0]])
    kinv = np.linalg.inv(K)
    f = kinv.T @ skew @ rotation @ kinv
    return p0, p1, f / np.linalg.norm(f), bad


def epipolar_px(f, p0, p1):
    """Largest of the two point-to-epipolar-line distances, float64 [M]."""
    h0 = np.c_[p0, np.ones(len(p0))].astype(np.float64)
    h1 = np.c_[p1, np.ones(len(p1))].astype(np.float64)
    line1 = h0 @ f.T
    line0 = h1 @ f
    d = np.abs((h1 * line1).sum(axis=1))
    return np.maximum(d / np.hypot(line1[:, 0], line1[:, 1]),
                      d / np.hypot(line0[:, 0], line0[:, 1]))


# -- the reference ---------------------------------------------------------------------------

def test_draws_are_splitmix64_and_samples_distinct():
    assert int(ransac.splitmix64(np.uint64(0))) == 0xE220A8397B1DCDAF  # splitmix64's first output
    draws = ransac.draw(ransac.SEED, np.arange(1000), 0, 10)
    assert draws.min() == 0 and draws.max() == 9
    assert len(np.unique(ransac.draw(ransac.SEED, np.arange(1000), 0, 2 ** 31 - 1))) == 1000
    idx, valid = ransac.sample_indices(8, 512)
    assert valid.all() and idx.min() >= 0 and idx.max() <= 7
    assert all(len(set(row)) == 7 for row in idx.tolist())
    again, _ = ransac.sample_indices(8, 512)
    other, _ = ransac.sample_indices(8, 512, seed=1)
    np.testing.assert_array_equal(idx, again)
    assert (idx != other).any()
    _, valid = ransac.sample_indices(6, 4)
    assert not valid.any()


def test_solve_cubic_roots_and_lower_degrees():
    roots = ransac.solve_cubic([1.0, 1.0, 0.0, 0.0, 0.0, 2.0, 1.0],
                               [0.0, -2.0, 2.0, 0.0, 0.0, -6.0, -3.0],
                               [-7.0, 1.0, 0.0, 4.0, 0.0, 6.0, 3.0],
                               [6.0, -2.0, -2.0, 2.0, 0.0, -2.0, -1.0])
    np.testing.assert_allclose(np.sort(roots[0]), [-3.0, 1.0, 2.0], atol=1e-12)  # (a-1)(a-2)(a+3)
    np.testing.assert_allclose(roots[1, 0], 2.0, atol=1e-12)  # (a-2)(a^2+1): one real root
    assert np.isnan(roots[1, 1:]).all()
    np.testing.assert_allclose(np.sort(roots[2, :2]), [-1.0, 1.0], atol=1e-12)  # 2a^2 - 2
    np.testing.assert_allclose(roots[3, 0], -0.5, atol=1e-12)  # 4a + 2
    assert np.isnan(roots[4]).all()  # the zero polynomial
    np.testing.assert_allclose(roots[5, 0], 1.0, atol=1e-4)  # 2(a-1)^3, triple
    np.testing.assert_allclose(roots[6, 0], 1.0, atol=1e-4)


def test_seven_point_models_contain_the_true_matrix():
    p0, p1, f_true, _ = scene()
    idx, _ = ransac.sample_indices(len(p0), 64)
    models = ransac.seven_point_models(p0[idx], p1[idx]).astype(np.float64)
    finite = ~np.isnan(models[..., 0])
    assert finite[:, 0].all()  # every sample of a general scene has a solution
    assert epipolar_px(f_true, p0, p1).max() < 1e-3  # the scene itself (float32 pixels)
    best = []
    for sample, row in zip(idx, models):
        errors = []
        for model in row[~np.isnan(row[:, 0])]:
            f = model.reshape(3, 3)
            assert abs(np.linalg.det(f)) < 1e-7  # rank 2
            np.testing.assert_allclose(np.linalg.norm(f), 1.0, atol=1e-6)
            assert epipolar_px(f, p0[sample], p1[sample]).max() < 1e-2
            errors.append(epipolar_px(f, p0, p1).max())
        best.append(min(errors))  # the sample's model nearest the scene's geometry
    # float32 pixels (~3e-5 px) in a minimal sample: far below the 3 px threshold
    assert max(best) < 0.5 and np.median(best) < 0.01


def test_homography_samples_give_three_models():
    """A pure image translation fits every [e]x H: the 3-D null space is taken as it is."""
    p0, _, _, _ = scene(40)
    p1 = p0 + np.float32([4.0, -2.0])
    idx, _ = ransac.sample_indices(40, 16)
    models = ransac.seven_point_models(p0[idx], p1[idx])
    assert not np.isnan(models).any()
    assert (ransac.score_models(models.reshape(-1, 9), p0, p1, 3.0) == 40).all()


def test_fit_rejects_planted_outliers():
    p0, p1, _, bad = scene(outliers=30)
    fit = ransac.ransac_fundamental(p0, p1)
    assert fit.mask.dtype == bool and fit.mask.shape == (300,)
    assert not fit.mask[bad].any()
    assert fit.mask[np.setdiff1d(np.arange(300), bad)].mean() > 0.95
    assert fit.count == fit.mask.sum()
    assert abs(np.linalg.det(fit.fundamental)) < 1e-9
    assert epipolar_px(fit.fundamental, p0[fit.mask], p1[fit.mask]).max() <= 3.0
    again = ransac.ransac_fundamental(p0, p1)
    np.testing.assert_array_equal(fit.mask, again.mask)
    np.testing.assert_array_equal(fit.fundamental, again.fundamental)


@pytest.mark.parametrize('count', [0, 1, 6, 7])
def test_too_few_matches_keep_nothing(count):
    p0, p1, _, _ = scene(count)
    fit = ransac.ransac_fundamental(p0, p1)
    assert fit.mask.shape == (count,) and fit.mask.dtype == bool and not fit.mask.any()
    assert fit.count == 0 and np.isnan(fit.fundamental).all()


def test_motion_without_parallax_keeps_every_match():
    """No motion, a pure translation and a general homography: every match fits a family of F."""
    p0, _, _, _ = scene(200)
    h = np.array([[1.02, 0.01, 5.0], [-0.01, 0.99, -3.0], [1e-5, 2e-5, 1.0]])
    mapped = np.c_[p0, np.ones(200)] @ h.T
    for p1 in (p0.copy(), p0 + np.float32([4.0, -2.0]),
               (mapped[:, :2] / mapped[:, 2:]).astype(np.float32)):
        assert ransac.ransac_fundamental(p0, p1).mask.all()
    assert ransac.ransac_fundamental(p0[:8], p0[:8] + 1.0).mask.all()  # eight: the fewest


def test_degenerate_and_random_matches():
    """Points on one line or on one spot verify nothing; random pairs verify few."""
    line = np.stack([np.linspace(0, 600, 50), np.linspace(0, 400, 50)], 1).astype(np.float32)
    assert ransac.ransac_fundamental(line, line + 2.0).count == 0
    spot = np.full((30, 2), 100.0, np.float32)
    assert ransac.ransac_fundamental(spot, spot).count == 0
    rng = np.random.default_rng(5)
    a, b = rng.uniform(0, 600, (2, 500, 2)).astype(np.float32)
    assert ransac.ransac_fundamental(a, b).count < 50


# -- real sequences ----------------------------------------------------------------------------

@pytest.fixture(scope='module')
def sequences(cpu_pipeline, shared_dir):
    """CPU-pipeline features and frame-to-frame matches: TUM fr2/desk 8 frames, EuRoC cam0 20."""
    out = {}
    for name, folder, count in (('tum', 'tum_fr2_desk', 8), ('euroc', 'euroc_v101_stereo', 20)):
        frames = [cpu_pipeline.extract(read_grey(path))
                  for _, path in list_sequence(shared_dir / 'data' / folder)[:count]]
        matches = [cpu_pipeline.match(f0, f1) for f0, f1 in zip(frames, frames[1:])]
        out[name] = (frames, matches)
    return out


def matched_points(frames, matches, i):
    """Points of the matches between frame ``i`` and ``i + 1``."""
    m = matches[i]
    return frames[i].keypoints[m.idx0], frames[i + 1].keypoints[m.idx1]


def test_reference_against_opencv_on_real_pairs(sequences):
    """
    As many inliers as OpenCV's FM_RANSAC, most of its own, and a consistent set.

    Two OpenCV fits of one pair in different match orders agree on only
    74-99% of the decisions (many F fit small baselines), so the bounds are
    on inlier sets, not on equal decisions.
    """
    import cv2
    for name in ('tum', 'euroc'):
        frames, matches = sequences[name]
        for i in (0, 3):
            p0, p1 = matched_points(frames, matches, i)
            fit = ransac.ransac_fundamental(p0, p1)
            _, cv_mask = cv2.findFundamentalMat(p0.astype(np.float64), p1.astype(np.float64),
                                                cv2.FM_RANSAC, 3.0, 0.999)
            cv_mask = cv_mask.ravel() > 0
            assert fit.count >= 0.98 * cv_mask.sum(), name
            assert fit.mask[cv_mask].mean() >= 0.85, name
            _, refit = cv2.findFundamentalMat(p0[fit.mask].astype(np.float64),
                                              p1[fit.mask].astype(np.float64),
                                              cv2.FM_RANSAC, 3.0, 0.999)
            assert refit.mean() >= 0.8, name


def run_tracks(frames, matches):
    """Track ids and ages of a sequence, verified by the reference (the GPU's algorithm)."""
    ids, ages, next_id, _ = next_tracks(frames[0], 0)
    out = [(ids, ages)]
    for i, features in enumerate(frames[1:]):
        previous = type('Previous', (), {'features': frames[i], 'track_ids': ids,
                                         'track_ages': ages})
        mask = ransac.ransac_fundamental(*matched_points(frames, matches, i)).mask
        ids, ages, next_id, _ = next_tracks(features, next_id, previous, matches[i], mask)
        out.append((ids, ages))
    return out


def test_reference_tracks_meet_the_node_track_numbers(sequences):
    """The numbers test_node_tracks asks of the node's (OpenCV) check, with the GPU's algorithm."""
    import cv2
    frames, matches = sequences['euroc']
    tracks = run_tracks(frames, matches)
    survive = np.isin(tracks[0][0], tracks[-1][0])
    print(f'euroc: {survive[:500].mean():.3f} of the 500 strongest survive 20 frames')
    assert survive[:500].mean() >= 0.6
    assert int(np.sum(tracks[-1][1] == 20)) >= 1000
    frames, matches = sequences['tum']
    tracks = run_tracks(frames, matches)
    for i in range(len(frames) - 1):
        common, a, b = np.intersect1d(tracks[i][0], tracks[i + 1][0], return_indices=True)
        assert len(common) > 300
        p0 = frames[i].keypoints[a].astype(np.float64)
        p1 = frames[i + 1].keypoints[b].astype(np.float64)
        assert np.linalg.norm(p1 - p0, axis=1).max() < 100
        _, mask = cv2.findFundamentalMat(p0, p1, cv2.FM_RANSAC, 3.0, 0.999)
        assert mask.mean() >= 0.8


# -- the kernels against the reference ----------------------------------------------------------

@pytest.fixture(scope='module')
def check():
    """One device check for the module (compiles ransac.cu once)."""
    from xfeat_ros.features.gpu.ransac import EpipolarRansac
    return EpipolarRansac()


def gpu_cases(sequences=None):
    """Named (p0, p1) pairs: synthetic with outliers, pure translation, real pairs if given."""
    p0, p1, _, _ = scene(outliers=30)
    translated = scene(60)[0]
    cases = {'outliers': (p0, p1), 'translation': (translated, translated + 3.0)}
    if sequences is not None:
        for name in ('tum', 'euroc'):
            frames, matches = sequences[name]
            cases[name] = matched_points(frames, matches, 0)
    return cases


def run_device(check, cp, p0, p1):
    """Device fit of host points plus the hypothesis models and scores it left in scratch."""
    fit = check.fit(p0, p1)
    return fit, check.models.get().reshape(-1, 3, 9), check.scores.get()


@pytest.mark.parametrize('case', ['outliers', 'translation', 'tum', 'euroc'])
@pytest.mark.gpu
def test_gpu_stages_match_reference(check, cp, sequences, case):
    p0, p1 = gpu_cases(sequences)[case]
    fit, models, scores = run_device(check, cp, p0, p1)
    idx, valid = ransac.sample_indices(len(p0), check.samples)
    expected = ransac.seven_point_models(p0[idx], p1[idx])
    expected[~valid] = np.nan
    nan_device, nan_host = np.isnan(models[..., 0]), np.isnan(expected[..., 0])
    assert (nan_device == nan_host).mean() >= 0.995
    both = ~nan_device & ~nan_host
    close = np.abs(models[both] - expected[both]).max(axis=-1) <= MODEL_ATOL
    assert close.mean() >= 0.99, f'{case}: {close.mean():.4f} of the models within tolerance'
    host_scores = ransac.score_models(expected.reshape(-1, 9), p0, p1, check.threshold_px)
    same = (models.reshape(-1, 9) == expected.reshape(-1, 9)).all(axis=1)
    np.testing.assert_array_equal(scores[same], host_scores[same])
    reference = ransac.ransac_fundamental(p0, p1, check.threshold_px, check.samples)
    assert (fit.mask == reference.mask).mean() >= MASK_AGREEMENT
    assert abs(fit.count - reference.count) <= 0.005 * len(p0) + 1
    assert abs(np.linalg.det(fit.fundamental)) < 1e-9


@pytest.mark.parametrize('count', [4096, 1000, 33, 8, 7])
@pytest.mark.gpu
def test_gpu_score_counts_equal_the_reference(check, cp, count):
    """The score stage alone: given models (some NaN) against ``count`` device matches."""
    from xfeat_ros.features.gpu.ops import DeviceCount
    from xfeat_ros.features.gpu.ransac import alloc_epipolar_output
    p0, p1, _, _ = scene(4096, outliers=600, seed=5)
    truth = ransac.ransac_fundamental(p0[:500], p1[:500], check.threshold_px, 256).fundamental
    rng = np.random.default_rng(count)
    models = (truth.reshape(1, 9) + rng.normal(0.0, 1e-4, (check.num_models, 9))
              * np.abs(truth).max()).astype(np.float32)
    models[rng.random(check.num_models) < 0.1] = np.nan
    stream = cp.cuda.Stream(non_blocking=False)
    out = alloc_epipolar_output(4096)
    stages = dict(check.stages(cp.asarray(p0), cp.asarray(p1),
                               DeviceCount(cp.asarray(np.array([count], np.int32)), 4096),
                               out, stream))
    check.models.set(models.reshape(-1))
    check.scores.fill(12345)  # the stage zeroes them itself
    stages['score']()
    stream.synchronize()
    want = ransac.score_models(models, p0[:count], p1[:count], check.threshold_px)
    if count < ransac.MIN_MATCHES:
        want = np.where(want < 0, -1, 0)
    np.testing.assert_array_equal(check.scores.get(), want)
    assert count < ransac.MIN_MATCHES or want.max() > 0.5 * count  # inliers were counted


@pytest.mark.gpu
def test_gpu_device_count_indices_and_few_matches(check, cp):
    """Matches through index arrays with a device count equal the host-gathered fit."""
    from xfeat_ros.features.gpu.ops import DeviceCount
    from xfeat_ros.features.gpu.ransac import alloc_epipolar_output
    p0, p1, _, _ = scene(400, outliers=40, seed=9)
    rng = np.random.default_rng(2)
    order0, order1 = rng.permutation(400), rng.permutation(400)
    kp0, kp1 = np.empty_like(p0), np.empty_like(p1)
    kp0[order0], kp1[order1] = p0, p1  # match i is kp0[order0[i]] -> kp1[order1[i]]
    stream = cp.cuda.Stream(non_blocking=False)  # ordered after set-up work
    out = alloc_epipolar_output(512)
    d_kp0, d_kp1 = cp.asarray(kp0), cp.asarray(kp1)
    d_i0 = cp.asarray(order0.astype(np.int32))
    d_i1 = cp.asarray(order1.astype(np.int32))
    for count in (400, 250, 8, 7, 1, 0):
        out.mask.fill(7)
        out.inliers.fill(-5)
        device_count = DeviceCount(cp.asarray(np.array([count], np.int32)), 400)
        check.enqueue(d_kp0, d_kp1, device_count, out, stream, d_i0, d_i1)
        stream.synchronize()
        mask = out.mask.get()
        assert set(np.unique(mask[:400])) <= {0, 1} and (mask[count:400] == 0).all()
        host = check.fit(p0[:count], p1[:count])
        np.testing.assert_array_equal(mask[:count].astype(bool), host.mask)
        assert int(out.inliers.get()[0]) == host.count
        if count < ransac.MIN_MATCHES:
            assert host.count == 0 and not mask[:400].any()
        else:
            assert host.count >= 0.85 * count
    empty = check.fit(np.zeros((0, 2)), np.zeros((0, 2)))
    assert empty.count == 0 and empty.mask.shape == (0,)


def test_refine_gathers_the_points_it_has_room_for():
    """Dynamic shared memory of the refinement: 16 bytes a match up to the limit, else none."""
    from xfeat_ros.features.gpu import kernels
    from xfeat_ros.features.gpu.ransac import refine_shared_bytes
    most = kernels.RANSAC_REFINE_SHARED_POINTS
    assert [refine_shared_bytes(n) for n in (0, 1, 300, most, most + 1)] == [
        0, 16, 4800, 16 * most, 0]
    assert 16 * most <= 200 * 1024  # beside the kernel's static shared memory, below 227 KiB


@pytest.mark.gpu
@pytest.mark.parametrize('matches', [300, 4096, 9000])
def test_gpu_refine_gathered_and_direct_points_agree(check, cp, monkeypatch, matches):
    """The refinement with its points in shared memory equals the one reading them directly."""
    from xfeat_ros.features.gpu import kernels
    from xfeat_ros.features.gpu.ransac import refine_shared_bytes
    p0, p1, _, _ = scene(matches, outliers=matches // 10, seed=5)
    gathered = check.fit(p0, p1)
    assert (refine_shared_bytes(matches) > 0) == (matches <= kernels.RANSAC_REFINE_SHARED_POINTS)
    monkeypatch.setattr(kernels, 'RANSAC_REFINE_SHARED_POINTS', 0)
    assert refine_shared_bytes(matches) == 0
    direct = check.fit(p0, p1)
    np.testing.assert_array_equal(gathered.mask, direct.mask)
    np.testing.assert_array_equal(gathered.fundamental, direct.fundamental)
    assert gathered.count == direct.count >= 0.85 * matches
    reference = ransac.ransac_fundamental(p0, p1, check.threshold_px, check.samples)
    assert (gathered.mask == reference.mask).mean() >= MASK_AGREEMENT
    assert abs(gathered.count - reference.count) <= 0.005 * matches + 1


@pytest.mark.gpu
def test_gpu_graph_capture_and_determinism(check, cp):
    from xfeat_ros.features.gpu.ops import DeviceCount
    from xfeat_ros.features.gpu.ransac import alloc_epipolar_output
    p0, p1, _, _ = scene(300, outliers=30)
    stream = cp.cuda.Stream(non_blocking=False)  # ordered after set-up work
    d0, d1 = cp.asarray(p0), cp.asarray(p1)
    count = cp.asarray(np.array([300], np.int32))
    direct, graphed = alloc_epipolar_output(300), alloc_epipolar_output(300)
    check.enqueue(d0, d1, DeviceCount(count, 300), direct, stream)
    stream.synchronize()
    first = (direct.mask.get(), direct.fundamental.get())
    check.enqueue(d0, d1, DeviceCount(count, 300), direct, stream)
    stream.synchronize()
    np.testing.assert_array_equal(direct.mask.get(), first[0])  # bitwise repeatable
    np.testing.assert_array_equal(direct.fundamental.get(), first[1])
    stream.begin_capture()
    check.enqueue(d0, d1, DeviceCount(count, 300), graphed, stream)
    graph = stream.end_capture()
    for value in (300, 120, 5):
        count.set(np.array([value], np.int32), stream=stream)
        graph.launch(stream)
        stream.synchronize()
        host = check.fit(p0[:value], p1[:value])
        np.testing.assert_array_equal(graphed.mask.get()[:value].astype(bool), host.mask)
        assert not graphed.mask.get()[value:].any()


@pytest.mark.gpu
def test_gpu_layout_errors(check, cp):
    from xfeat_ros.features.gpu.ransac import alloc_epipolar_output
    stream = cp.cuda.Stream(non_blocking=False)  # ordered after set-up work
    good = cp.zeros((16, 2), cp.float32)
    out = alloc_epipolar_output(16)
    with pytest.raises(DescriptorLayoutError, match='float32'):
        check.enqueue(good.astype(cp.float64), good, 16, out, stream)
    with pytest.raises(DescriptorLayoutError, match='holds 8'):
        check.enqueue(good, good, 16, alloc_epipolar_output(8), stream)
    with pytest.raises(DescriptorLayoutError, match='int32'):
        check.enqueue(good, good, 16, out, stream, cp.zeros(16, cp.int64), None)
    with pytest.raises(DescriptorLayoutError, match='16 keypoints'):
        check.enqueue(good[:4], good, 16, out, stream)
    with pytest.raises(DescriptorLayoutError, match='3 points on side 0'):
        check.fit(np.zeros((3, 2)), np.zeros((4, 2)))
