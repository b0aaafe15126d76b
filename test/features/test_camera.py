# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Camera models (calibrations, distortion) of xfeat_ros.features.camera, against OpenCV."""

import types

from conftest import DATA_ROOT, NEEDS_SHARED
import cv2
import numpy as np
import pytest
from xfeat_ros.errors import CameraModelError
from xfeat_ros.features.camera import (CameraModel, distort_normalized, read_euroc_extrinsics,
                                       undistort_points)

EUROC = DATA_ROOT / 'data' / 'euroc_v101_stereo'  # ../shared, else the fixtures (cam0 only)
CRITERIA = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 200, 1e-14)
TUM = ([520.9, 521.0, 325.1, 249.7], 'plumb_bob', [0.2312, -0.7849, -0.0033, -0.0001, 0.9172])
RATIONAL = ([500.0, 502.0, 330.0, 235.0], 'rational_polynomial',
            [0.45, 0.12, 0.0008, -0.0012, 0.01, 0.7, 0.25, 0.02])
FISHEYE = ([380.0, 381.0, 320.0, 240.0], 'equidistant', [-0.02, 0.005, -0.002, 0.0003])


def euroc_yaml(name):
    """Return the path of a EuRoC sensor.yaml; skip, saying ../shared is needed, where absent."""
    path = EUROC / name
    if not path.is_file():
        pytest.skip(f'{path} (EuRoC V1_01 stereo calibration) is not in the fixtures: '
                    f'{NEEDS_SHARED}')
    return path


def make_model(name):
    """Return a CameraModel by test name (synthetic ones are 640x480)."""
    if name.startswith('euroc'):
        return CameraModel.from_euroc_yaml(euroc_yaml(f'{name[-4:]}_sensor.yaml'))
    intrinsics, kind, coeffs = {'tum': TUM, 'rational': RATIONAL, 'fisheye': FISHEYE}[name]
    return CameraModel.from_parameters(intrinsics, kind, coeffs, 640, 480)


def image_pixels(model, seed=0):
    """Return a 41 x 31 grid over the whole image plus 500 random pixels, float64 [N, 2]."""
    u, v = np.meshgrid(np.linspace(0, model.width - 1, 41), np.linspace(0, model.height - 1, 31))
    rand = np.random.default_rng(seed).uniform((0, 0), (model.width - 1, model.height - 1),
                                               (500, 2))
    return np.vstack([np.stack([u.ravel(), v.ravel()], axis=1), rand])


def cv_undistort(model, pixels):
    """Undistort with OpenCV's iteration to normalized coordinates (200 iterations, eps 1e-14)."""
    src = pixels.reshape(-1, 1, 2)
    if model.distortion_model == 'equidistant':
        try:
            out = cv2.fisheye.undistortPoints(src, model.matrix, model.coeffs, criteria=CRITERIA)
        except (cv2.error, TypeError):  # an OpenCV without the criteria argument
            out = cv2.fisheye.undistortPoints(src, model.matrix, model.coeffs)
    elif hasattr(cv2, 'undistortPointsIter'):  # OpenCV 4; 5 folded it into undistortPoints
        out = cv2.undistortPointsIter(src, model.matrix, model.coeffs, None, None, CRITERIA)
    else:
        out = cv2.undistortPoints(src, model.matrix, model.coeffs, criteria=CRITERIA)
    return out.reshape(-1, 2)


def cv_project(model, normalized):
    """Project with OpenCV's forward model normalized coordinates [N, 2] to pixels [N, 2]."""
    if model.distortion_model == 'equidistant':
        out = cv2.fisheye.distortPoints(normalized.reshape(-1, 1, 2), model.matrix, model.coeffs)
    else:
        rays = np.hstack([normalized, np.ones((len(normalized), 1))])
        out = cv2.projectPoints(rays, np.zeros(3), np.zeros(3), model.matrix, model.coeffs)[0]
    return out.reshape(-1, 2)


@pytest.mark.parametrize('name', ['tum', 'euroc_cam0', 'euroc_cam1', 'rational', 'fisheye'])
def test_undistort_matches_opencv(name):
    model = make_model(name)
    pixels = image_pixels(model)
    ours = undistort_points(model, pixels)
    assert ours.dtype == np.float64 and ours.shape == pixels.shape
    assert np.all(np.isfinite(ours))
    diff = np.abs(ours - cv_undistort(model, pixels)).max()
    assert diff < 1e-6, f'{name}: max |ours - OpenCV| = {diff:.3g} (normalized)'
    reprojected = cv_project(model, ours)
    round_trip = np.abs(reprojected - pixels).max()
    assert round_trip < 1e-4, f'{name}: OpenCV reprojection of ours is off by {round_trip:.3g} px'
    forward = np.abs(distort_normalized(model, ours) - reprojected).max()
    assert forward < 1e-6, f'{name}: max |distort_normalized - OpenCV| = {forward:.3g} px'


def test_euroc_yaml_fields():
    model = CameraModel.from_euroc_yaml(euroc_yaml('cam0_sensor.yaml'))
    assert (model.distortion_model, model.width, model.height) == ('plumb_bob', 752, 480)
    np.testing.assert_allclose(model.matrix[[0, 1, 0, 1], [0, 1, 2, 2]],
                               [458.654, 457.296, 367.215, 248.375])
    np.testing.assert_allclose(model.coeffs,
                               [-0.28340811, 0.07395907, 0.00019359, 1.76187114e-05, 0.0])


def test_folded_model_gives_nan_beyond_fold():
    # r_d = r (1 - 0.5 r^2) peaks at r = sqrt(2/3), r_d = 0.544: no pixel beyond has an inverse.
    model = CameraModel.from_parameters([500.0, 500.0, 0.0, 0.0], 'plumb_bob', [-0.5, 0, 0, 0])
    out = undistort_points(model, [[0.5 * 500, 0.0], [0.6 * 500, 0.0]])
    assert np.all(np.isfinite(out[0])) and np.all(np.isnan(out[1]))
    np.testing.assert_allclose(distort_normalized(model, out[:1]), [[250.0, 0.0]], atol=1e-9)


def info(k=(500.0, 0, 320, 0, 500, 240, 0, 0, 1), d=(), model='plumb_bob'):
    """Return a CameraInfo-like namespace for a 640x480 camera."""
    return types.SimpleNamespace(k=list(k), d=list(d), distortion_model=model, width=640,
                                 height=480)


@pytest.mark.parametrize('msg, model, coeffs', [
    (info(), 'none', []),
    (info(model=''), 'none', []),
    (info(d=[0.1, -0.2, 0.01, 0.02]), 'plumb_bob', [0.1, -0.2, 0.01, 0.02, 0.0]),
    (info(d=[0.0] * 5), 'plumb_bob', [0.0] * 5),
    (info(d=range(1, 9), model='rational_polynomial'), 'rational_polynomial', range(1, 9)),
    (info(d=[*range(1, 9), 0, 0, 0, 0, 0, 0], model='rational_polynomial'),
     'rational_polynomial', range(1, 9)),
    (info(d=[0.1, 0.01, 0.001, 0.0001], model='equidistant'), 'equidistant',
     [0.1, 0.01, 0.001, 0.0001]),
])
def test_from_camera_info(msg, model, coeffs):
    camera = CameraModel.from_camera_info(msg)
    assert camera.distortion_model == model and (camera.width, camera.height) == (640, 480)
    assert camera.matrix.dtype == np.float64 and camera.coeffs.dtype == np.float64
    np.testing.assert_array_equal(camera.matrix, np.reshape(msg.k, (3, 3)))
    np.testing.assert_array_equal(camera.coeffs, list(coeffs))


@pytest.mark.parametrize('msg, match', [
    (info(k=[0.0] * 9), 'uncalibrated'),
    (info(k=(0.0, 0, 320, 0, 500, 240, 0, 0, 1)), 'fx, fy > 0'),
    (info(k=(500.0, 0, 320, 0, -5, 240, 0, 0, 1)), 'fx, fy > 0'),
    (info(k=(500.0, 0, np.nan, 0, 500, 240, 0, 0, 1)), 'finite'),
    (info(k=(500.0, 0, 320, 0, 500, 240, 0, 0)), '9 values'),
    (info(d=[0.1] * 4, model='kannala_brandt'), 'supported: none, plumb_bob'),
    (info(d=[0.1] * 3), 'plumb_bob distortion needs 4 or 5'),
    (info(d=[0.1] * 8), 'plumb_bob distortion needs 4 or 5'),
    (info(d=[0.1] * 7, model='rational_polynomial'), 'needs 8'),
    (info(d=[0.1] * 9, model='rational_polynomial'), 'needs 8'),
    (info(d=[0.1] * 5, model='equidistant'), 'needs 4'),
    (info(d=[0.1], model='none'), 'none distortion needs 0'),
    (info(d=[0.1, np.inf, 0, 0]), 'non-finite'),
])
def test_from_camera_info_rejects(msg, match):
    with pytest.raises(CameraModelError, match=match):
        CameraModel.from_camera_info(msg)


def test_from_parameters_rejects():
    with pytest.raises(CameraModelError, match='intrinsics'):
        CameraModel.from_parameters([500.0, 500.0, 320.0])
    with pytest.raises(CameraModelError, match='negative image size'):
        CameraModel.from_parameters([500.0, 500.0, 320.0, 240.0], width=-1)


@pytest.mark.parametrize('text, match', [
    (None, 'cannot read'),
    ('%YAML:1.0\n- just a list\n', 'not a mapping'),
    ('%YAML:1.0\nresolution: [752, 480]\n', 'malformed'),
    ('intrinsics: [1, 1, 0, 0]\ndistortion_model: fov\n', 'unknown distortion_model'),
    ('intrinsics: [1, 1, 0, 0]\ncamera_model: omni\n', 'pinhole'),
    ('intrinsics: [1, 1, 0, 0]\nT_BS: {cols: 4, rows: 4, data: [1, 2]}\n', 'T_BS'),
    ('T_BS: {cols: 4, rows: 4, data: [2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]}\n',
     'not a rigid'),
], ids=['missing', 'list', 'no-intrinsics', 'fov', 'omni', 'short-T_BS', 'scaled-T_BS'])
def test_bad_euroc_yaml(tmp_path, text, match):
    path = tmp_path / 'sensor.yaml'
    if text is not None:
        path.write_text(text)
    with pytest.raises(CameraModelError, match=match):
        if 'T_BS' in (text or ''):
            read_euroc_extrinsics(path)
        else:
            CameraModel.from_euroc_yaml(path)


@pytest.mark.parametrize('name', ['tum', 'rational', 'fisheye'])
def test_empty_and_bad_shapes(name):
    model = make_model(name)
    for function in (undistort_points, distort_normalized):
        out = function(model, np.zeros((0, 2)))
        assert out.shape == (0, 2) and out.dtype == np.float64
        for bad in (np.zeros((4, 3)), np.zeros(2)):
            with pytest.raises(CameraModelError, match=r'\[N, 2\]'):
                function(model, bad)
