# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Calibrations: pinhole camera models with lens distortion, from parameters or YAML (NumPy).

Coefficients as in sensor_msgs/CameraInfo: plumb_bob (k1, k2, p1, p2, k3), rational_polynomial
(k1, k2, p1, p2, k3, k4, k5, k6), equidistant = fisheye (k1, k2, k3, k4) on the ray angle.
What relates two views (relative poses, epipolar distances, robust fits) is
:mod:`xfeat_ros.features.geometry`'s.
"""

from dataclasses import dataclass, field

import numpy as np

from xfeat_ros.errors import CameraModelError

MODELS = ('none', 'plumb_bob', 'rational_polynomial', 'equidistant')
EUROC_MODELS = {'radial-tangential': 'plumb_bob', 'radtan': 'plumb_bob', 'none': 'none',
                'equidistant': 'equidistant', 'equi': 'equidistant'}
MAX_ITERATIONS = 50
TOLERANCE = 1e-12


def _coefficients(model, coeffs):
    """Validate float64 coefficients of a model; returns them as float64 [0|5|8|4]."""
    if model not in MODELS:
        raise CameraModelError(
            f'unknown distortion_model {model!r} (supported: {", ".join(MODELS)})')
    c = coeffs.reshape(-1)
    if not np.all(np.isfinite(c)):
        raise CameraModelError(f'non-finite distortion coefficients {c.tolist()}')
    if model == 'none' and not np.any(c):
        return np.zeros(0)
    if model == 'plumb_bob' and len(c) in (4, 5):
        return np.pad(c, (0, 5 - len(c)))
    if model == 'rational_polynomial' and len(c) >= 8 and not np.any(c[8:] != 0):
        return c[:8].copy()
    if model == 'equidistant' and len(c) == 4:
        return c
    expected = {'none': '0 (or all zero)', 'plumb_bob': '4 or 5', 'equidistant': '4',
                'rational_polynomial': '8 (more only if zero)'}[model]
    raise CameraModelError(f'{model} distortion needs {expected} coefficients, got {c.tolist()}')


@dataclass
class CameraModel:
    """
    A calibrated pinhole camera with an optional lens distortion model.

    ``matrix``: float64 [3, 3] K (fx, skew, cx / 0, fy, cy / 0, 0, 1);
    ``distortion_model``: one of :data:`MODELS`; ``coeffs``: float64 [n] with n
    = 0, 5, 8 or 4 for none, plumb_bob, rational_polynomial, equidistant;
    ``width``/``height``: image size in pixels (int, 0 = unknown). Validated
    and normalised on construction; raises :class:`CameraModelError`.
    """

    matrix: np.ndarray
    distortion_model: str = 'none'
    coeffs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    width: int = 0
    height: int = 0

    def __post_init__(self):
        """Check K, the distortion model, its coefficients and the size."""
        try:
            k = np.asarray(self.matrix, dtype=np.float64)
            coeffs = np.asarray(self.coeffs, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise CameraModelError(f'K or coefficients are not numbers: {exc}') from exc
        if k.size != 9:
            raise CameraModelError(f'camera matrix needs 9 values, got {k.size}')
        k = k.reshape(3, 3)
        if not np.any(k):
            raise CameraModelError('camera matrix is all zero: uncalibrated camera')
        if not np.all(np.isfinite(k)) or not (k[0, 0] > 0 and k[1, 1] > 0) or k[1, 0] != 0 \
                or np.any(k[2] != (0.0, 0.0, 1.0)):
            raise CameraModelError(f'camera matrix needs finite fx, fy > 0, [.., 0 0 1]: {k}')
        self.matrix = k
        self.distortion_model = str(self.distortion_model)
        self.coeffs = _coefficients(self.distortion_model, coeffs)
        self.width, self.height = int(self.width), int(self.height)
        if self.width < 0 or self.height < 0:
            raise CameraModelError(f'negative image size {self.width}x{self.height}')

    @classmethod
    def from_parameters(cls, intrinsics, distortion_model='none', coeffs=(), width=0, height=0):
        """Build from intrinsics [fx, fy, cx, cy] (4 floats) and float coefficients."""
        try:
            values = np.asarray(intrinsics, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise CameraModelError(f'intrinsics are not numbers: {exc}') from exc
        if values.size != 4:
            raise CameraModelError(f'intrinsics need [fx, fy, cx, cy], got {values.tolist()}')
        fx, fy, cx, cy = values
        k = np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])
        return cls(k, distortion_model, coeffs, width, height)

    @classmethod
    def from_camera_info(cls, msg):
        """Build from a sensor_msgs/CameraInfo-like object (k: 9 floats, d, model, size)."""
        d = list(msg.d)
        model = msg.distortion_model if d else 'none'
        return cls(np.asarray(msg.k, dtype=np.float64), model, d, msg.width, msg.height)

    @classmethod
    def from_euroc_yaml(cls, path):
        """Build from a EuRoC/Kalibr ``sensor.yaml`` (pinhole, radtan or equidistant)."""
        doc = _read_euroc(path)
        try:
            if doc.get('camera_model', 'pinhole') != 'pinhole':
                raise CameraModelError(f'{path}: camera_model must be pinhole')
            name = doc.get('distortion_model', 'none')
            if name not in EUROC_MODELS:
                raise CameraModelError(f'{path}: unknown distortion_model {name!r} '
                                       f'(supported: {", ".join(EUROC_MODELS)})')
            w, h = doc.get('resolution', (0, 0))
            return cls.from_parameters(doc['intrinsics'], EUROC_MODELS[name],
                                       doc.get('distortion_coefficients', ()), w, h)
        except (KeyError, TypeError, ValueError) as exc:
            raise CameraModelError(f'{path}: malformed camera yaml ({exc!r})') from exc

    @classmethod
    def from_opencv(cls, intrinsics, dist=None, width=0, height=0):
        """
        Build from [fx, fy, cx, cy] and OpenCV coefficients k1 k2 p1 p2 [k3 [k4 k5 k6]].

        None or all-zero coefficients: no distortion; 4 or 5: plumb_bob; 8: rational_polynomial.
        """
        try:
            c = np.asarray([] if dist is None else dist, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise CameraModelError(f'distortion coefficients are not numbers: {exc}') from exc
        if not np.any(c):
            return cls.from_parameters(intrinsics, 'none', (), width, height)
        model = 'rational_polynomial' if len(c) >= 8 else 'plumb_bob'
        return cls.from_parameters(intrinsics, model, c, width, height)

    @classmethod
    def from_yaml(cls, path):
        """
        Build from a small camera YAML: EuRoC/Kalibr or ``fx, fy, cx, cy`` and ``dist``.

        EuRoC/Kalibr: ``intrinsics: [fu, fv, cu, cv]`` with ``distortion_model`` and
        ``distortion_coefficients`` (:meth:`from_euroc_yaml`); otherwise ``fx, fy, cx, cy``
        and optional ``dist`` in OpenCV order (:meth:`from_opencv`). An OpenCV
        ``%YAML:1.0`` first line is allowed.
        """
        doc = _read_euroc(path)
        if 'intrinsics' in doc:
            return cls.from_euroc_yaml(path)
        if not all(key in doc for key in ('fx', 'fy', 'cx', 'cy')):
            raise CameraModelError(f'{path}: needs fx, fy, cx, cy (and dist) or intrinsics: '
                                   '[...]')
        return cls.from_opencv([doc[key] for key in ('fx', 'fy', 'cx', 'cy')], doc.get('dist'))


def _read_euroc(path):
    """Return the mapping of a EuRoC yaml file, without its ``%YAML:1.0`` line."""
    import yaml  # a declared dependency, imported where used as elsewhere in xfeat_ros
    try:
        with open(path, encoding='utf-8') as f:
            text = ''.join(line for line in f if not line.startswith('%YAML'))
        doc = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CameraModelError(f'cannot read camera yaml {path}: {exc}') from exc
    if not isinstance(doc, dict):
        raise CameraModelError(f'{path}: camera yaml is not a mapping')
    return doc


def read_euroc_extrinsics(path):
    """Return T_BS (float64 [4, 4], sensor-to-body) from a EuRoC ``sensor.yaml``."""
    doc = _read_euroc(path)
    try:
        entry = doc['T_BS']
        t = np.asarray(entry['data'], dtype=np.float64)
        t = t.reshape(int(entry['rows']), int(entry['cols']))
    except (KeyError, TypeError, ValueError) as exc:
        raise CameraModelError(f'{path}: malformed T_BS ({exc!r})') from exc
    check_rigid_transform(t, f'{path}: T_BS')
    return t


def check_rigid_transform(t, what):
    """Raise unless ``t`` is a float [4, 4] rigid transform (orthonormal R, last row 0001)."""
    if t.shape != (4, 4) or not np.all(np.isfinite(t)):
        raise CameraModelError(f'{what} must be a finite 4x4 matrix')
    if np.any(t[3] != (0.0, 0.0, 0.0, 1.0)) or \
            np.abs(t[:3, :3].T @ t[:3, :3] - np.eye(3)).max() > 1e-3:
        raise CameraModelError(f'{what} is not a rigid transform')


def _points(values, what):
    """Return ``values`` as float64 [N, 2]; raise CameraModelError otherwise."""
    p = np.asarray(values, dtype=np.float64)
    if p.size == 0:
        return np.zeros((0, 2))
    elif p.ndim != 2 or p.shape[1] != 2:
        raise CameraModelError(f'{what} must have shape [N, 2], got {p.shape}')
    return p


def _radial(c, r2):
    """Radial factor of plumb_bob/rational at r^2 (float64 array), and its r^2 derivative."""
    k1, k2, k3 = c[0], c[1], c[4]
    k4, k5, k6 = c[5:8] if len(c) == 8 else (0.0, 0.0, 0.0)
    num = 1 + r2 * (k1 + r2 * (k2 + r2 * k3))
    den = 1 + r2 * (k4 + r2 * (k5 + r2 * k6))
    with np.errstate(divide='ignore', invalid='ignore'):
        return num / den, ((k1 + r2 * (2 * k2 + 3 * k3 * r2)) * den
                           - (k4 + r2 * (2 * k5 + 3 * k6 * r2)) * num) / (den * den)


def _radtan(c, x, y):
    """Distorted normalized (xd, yd) and the Jacobian terms (a, b, d) of plumb_bob/rational."""
    p1, p2 = c[2], c[3]
    r2 = x * x + y * y
    radial, d_radial = _radial(c, r2)
    xd = x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
    yd = y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
    # Jacobian [[a, b], [b, d]] of (xd, yd) with respect to (x, y).
    a = radial + 2 * x * x * d_radial + 2 * p1 * y + 6 * p2 * x
    b = 2 * x * y * d_radial + 2 * p1 * x + 2 * p2 * y
    d = radial + 2 * y * y * d_radial + 6 * p1 * y + 2 * p2 * x
    return xd, yd, a, b, d


def _theta_d(c, theta):
    """Fisheye distorted angle theta_d(theta) and its derivative, float64 arrays."""
    t2 = theta * theta
    poly = 1 + t2 * (c[0] + t2 * (c[1] + t2 * (c[2] + t2 * c[3])))
    deriv = 1 + t2 * (3 * c[0] + t2 * (5 * c[1] + t2 * (7 * c[2] + t2 * 9 * c[3])))
    return theta * poly, deriv


def _valid_radius(model):
    """Largest ideal radius (float: theta, or |(x, y)|) up to which the radial map increases."""
    if model.distortion_model == 'equidistant':
        r = np.linspace(0.0, np.pi / 2, 20001)
        slope = _theta_d(model.coeffs, r)[1]
    else:
        r = np.linspace(0.0, 20.0, 20001)
        radial, d_radial = _radial(model.coeffs, r * r)
        slope = radial + 2 * r * r * d_radial
    bad = np.flatnonzero(~(slope > 0))
    return r[bad[0] - 1] if len(bad) else r[-1]


def _invert_fisheye(c, xd, yd, limit):
    """Newton on theta_d(theta) for float [N] distorted (xd, yd): ([N, 2] rays, [N] bool ok)."""
    theta_d = np.hypot(xd, yd)
    theta = np.minimum(theta_d, limit)
    for _ in range(MAX_ITERATIONS):
        value, deriv = _theta_d(c, theta)
        step = (value - theta_d) / deriv
        theta = np.clip(theta - step, 0.0, limit)
        if not np.any(np.abs(step) > TOLERANCE):
            break
    ok = (np.abs(_theta_d(c, theta)[0] - theta_d) < 1e-9) & (theta < np.pi / 2)
    scale = np.divide(np.tan(theta), theta_d, out=np.ones_like(theta), where=theta_d > 0)
    return np.stack([xd * scale, yd * scale], axis=1), ok


def _invert_radtan(c, xd, yd, limit):
    """2-D Newton for plumb_bob/rational on float [N] (xd, yd): ([N, 2] rays, [N] bool ok)."""
    x, y = xd.copy(), yd.copy()
    for _ in range(MAX_ITERATIONS):
        ex, ey, a, b, d = _radtan(c, x, y)
        ex, ey, det = ex - xd, ey - yd, a * d - b * b
        dx, dy = (d * ex - b * ey) / det, (a * ey - b * ex) / det
        # Stay inside the monotonic radius so the iteration cannot reach a folded-back root.
        shrink = np.minimum(1.0, limit / np.maximum(np.hypot(x - dx, y - dy), 1e-300))
        x, y = (x - dx) * shrink, (y - dy) * shrink
        if not np.any(np.abs(dx) + np.abs(dy) > TOLERANCE):
            break
    ex, ey = _radtan(c, x, y)[:2]
    ok = (np.hypot(ex - xd, ey - yd) < 1e-9) & (np.hypot(x, y) < limit)
    return np.stack([x, y], axis=1), ok


def distort_normalized(model, points):
    """Project ideal normalized coordinates (x/z, y/z) float [N, 2] to pixels float64 [N, 2]."""
    p = _points(points, 'points')
    x, y = p[:, 0], p[:, 1]
    if model.distortion_model in ('plumb_bob', 'rational_polynomial'):
        x, y = _radtan(model.coeffs, x, y)[:2]
    elif model.distortion_model == 'equidistant':
        r = np.hypot(x, y)
        theta_d = _theta_d(model.coeffs, np.arctan(r))[0]
        scale = np.divide(theta_d, r, out=np.ones_like(r), where=r > 1e-15)
        x, y = x * scale, y * scale
    k = model.matrix
    return np.stack([k[0, 0] * x + k[0, 1] * y + k[0, 2], k[1, 1] * y + k[1, 2]], axis=1)


def undistort_points(model, pixels):
    """
    Undistort pixels float [N, 2] to ideal normalized coordinates float64 [N, 2].

    (x, y, 1) is the viewing ray. Vectorized Newton iterations (analytic Jacobian, at most
    50, to ~1e-12) invert the distortion within the radius where it is monotonic; pixels
    with no inverse there (beyond where the lens model folds back) come out NaN.
    """
    p = _points(pixels, 'pixels')
    k = model.matrix
    yd = (p[:, 1] - k[1, 2]) / k[1, 1]
    xd = (p[:, 0] - k[0, 2] - k[0, 1] * yd) / k[0, 0]
    if model.distortion_model == 'none':
        return np.stack([xd, yd], axis=1)
    invert = _invert_fisheye if model.distortion_model == 'equidistant' else _invert_radtan
    with np.errstate(all='ignore'):
        out, ok = invert(model.coeffs, xd, yd, _valid_radius(model))
    out[~ok] = np.nan
    return out


def ideal_pixels(model, pixels):
    """
    Undistorted pixel coordinates: float [N, 2] pixels -> float64 [N, 2].

    The points a distortion-free camera with the same K would see, so that
    straight lines (and epipolar lines) stay straight.
    """
    normalized = undistort_points(model, pixels)
    k = model.matrix
    return np.stack([k[0, 0] * normalized[:, 0] + k[0, 1] * normalized[:, 1] + k[0, 2],
                     k[1, 1] * normalized[:, 1] + k[1, 2]], axis=1)
