# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
RANSAC fundamental-matrix check of matches: the host reference of ``kernels/ransac*.cu``.

The algorithm the GPU runs, written with NumPy in the same operation order
(double precision for the solvers, float32 for scoring all hypotheses), so the
device kernels can be tested against it stage by stage:

1. ``SAMPLES`` minimal samples of 7 distinct matches, drawn deterministically:
   draw ``a`` of sample ``h`` is ``splitmix64(seed ^ (h << 32 | a))``'s high
   32 bits scaled to ``[0, M)``; a draw that repeats an earlier match of the
   sample is drawn again (the draw counter runs on).
2. Each sample is normalised on its own (centroid, mean distance sqrt 2),
   its 7 x 9 epipolar system reduced by Gauss-Jordan elimination with full
   pivoting to a 2-D null space F1, F2, and ``det(F2 + a (F1 - F2)) = 0``
   solved (a cubic: up to 3 models). When the seventh pivot vanishes, the 7
   matches follow one homography (no motion, a pure image translation, a
   plane): every ``[e]x H`` fits, and the 3 null vectors are the models. A
   smaller rank (collinear or coincident points) gives none. Models are
   de-normalised to pixels and scaled to unit Frobenius norm.
3. Every model is scored in float32 against every match: a match is an inlier
   when both point-to-epipolar-line distances are within ``threshold_px``
   (OpenCV's FM_RANSAC criterion), tested without division as
   ``d^2 <= t^2 min(|l0|^2, |l1|^2)``.
4. The best model (most inliers, the first on ties) is refined in double:
   normalised 8-point least squares on its inliers (inverse iteration from the
   current model), rank 2 by removing the smallest singular direction, up to
   ``REFINE_ROUNDS`` rounds, each kept only when the inliers do not shrink. The
   final mask is that model's inliers, tested in double.

Fewer than :data:`MIN_MATCHES` matches verify nothing (an all-False mask).
"""

from dataclasses import dataclass
import math

import numpy as np

from xfeat_ros.features.ransac_refine import (denormalise, REFINE_ROUNDS, refit, sequential_sum,
                                              SQRT2, unit_norm)

MIN_MATCHES = 8
SAMPLE_SIZE = 7
MODELS_PER_SAMPLE = 3
SAMPLES = 1024
SEED = 0x7EAC5EED
MAX_DRAWS = 256          # draws per sample before it is given up (never with >= 8 matches)
PIVOT_EPS = 1e-9         # smallest pivot of the normalised 7 x 9 system
CUBIC_EPS = 1e-12        # a leading coefficient below this (relative) lowers the degree
NEWTON_STEPS = 2

_U64 = np.uint64


@dataclass
class EpipolarFit:
    """Result of a fit: ``mask`` bool [M], ``count`` inliers, ``fundamental`` float64 [3, 3]."""

    mask: np.ndarray
    count: int
    fundamental: np.ndarray


def splitmix64(values):
    """Return the splitmix64 finaliser of uint64 ``values`` (wrapping arithmetic)."""
    with np.errstate(over='ignore'):
        z = np.asarray(values, _U64) + _U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    return z ^ (z >> _U64(31))


def draw(seed, sample, attempt, count):
    """Index in ``[0, count)`` of draw ``attempt`` of ``sample`` (arrays broadcast)."""
    key = (np.asarray(sample, _U64) << _U64(32)) | np.asarray(attempt, _U64)
    z = splitmix64(key ^ _U64(seed))
    return ((z >> _U64(32)) * _U64(count)) >> _U64(32)


def sample_indices(count, samples=SAMPLES, seed=SEED):
    """
    Minimal samples: int64 [samples, 7] distinct match indices and bool [samples] validity.

    A sample is invalid only when it needs more than :data:`MAX_DRAWS` draws
    (possible only with fewer than 7 distinct matches).
    """
    idx = np.full((samples, SAMPLE_SIZE), -1, np.int64)
    valid = np.ones(samples, bool)
    if count < SAMPLE_SIZE:
        return idx, np.zeros(samples, bool)
    attempt = np.zeros(samples, np.int64)
    rows_all = np.arange(samples)
    for k in range(SAMPLE_SIZE):
        pending = valid.copy()
        while pending.any():
            rows = rows_all[pending]
            j = draw(seed, rows, attempt[rows], count).astype(np.int64)
            attempt[rows] += 1
            fresh = ~(idx[rows, :k] == j[:, None]).any(axis=1)
            idx[rows[fresh], k] = j[fresh]
            pending[rows[fresh]] = False
            spent = pending & (attempt >= MAX_DRAWS)
            valid &= ~spent
            pending &= ~spent
    return idx, valid


def _normalisation(x, y):
    """Centroid and scale (sqrt 2 / mean distance) of [S, n] coordinates, sequential sums."""
    n = x.shape[-1]
    cx = sequential_sum(x) / n
    cy = sequential_sum(y) / n
    dx = x - cx[..., None]
    dy = y - cy[..., None]
    mean = sequential_sum(np.sqrt(dx * dx + dy * dy)) / n
    with np.errstate(divide='ignore'):
        scale = SQRT2 / mean
    return cx, cy, scale


def _det3(m):
    """Return the determinants of [..., 9] row-major 3 x 3 matrices (first-row cofactors)."""
    return (m[..., 0] * (m[..., 4] * m[..., 8] - m[..., 5] * m[..., 7])
            - m[..., 1] * (m[..., 3] * m[..., 8] - m[..., 5] * m[..., 6])
            + m[..., 2] * (m[..., 3] * m[..., 7] - m[..., 4] * m[..., 6]))


def _null_space(a):
    """
    Gauss-Jordan with full pivoting of [S, 7, 9] systems (modified in place).

    Returns the null vectors [S, 3, 9] and the rank [S]: 7 (two null vectors,
    the third row NaN), 6 (three: a sample whose matches all follow one
    homography, e.g. a pure image translation or no motion, so that every
    ``[e]x H`` fits) or 0 (degenerate: a pivot at most :data:`PIVOT_EPS`
    before the seventh).
    """
    count = a.shape[0]
    rows = np.arange(count)
    perm = np.tile(np.arange(9), (count, 1))
    rank = np.full(count, SAMPLE_SIZE)
    for k in range(SAMPLE_SIZE):
        sub = np.abs(a[:, k:, k:]).reshape(count, -1)
        flat = sub.argmax(axis=1)  # first maximum in row-major order
        small = ~(sub[rows, flat] > PIVOT_EPS) & (rank == SAMPLE_SIZE)
        rank[small] = k if k == SAMPLE_SIZE - 1 else 0
        act = rows[rank == SAMPLE_SIZE]
        r = k + flat[act] // (9 - k)
        c = k + flat[act] % (9 - k)
        row_k = a[act, k].copy()
        a[act, k] = a[act, r]
        a[act, r] = row_k
        col_k = a[act, :, k].copy()
        a[act, :, k] = a[act, :, c]
        a[act, :, c] = col_k
        perm_k = perm[act, k].copy()
        perm[act, k] = perm[act, c]
        perm[act, c] = perm_k
        sys_a = a[act]
        sys_a[:, k, :] = sys_a[:, k, :] / sys_a[:, k, k:k + 1]
        for i in range(SAMPLE_SIZE):
            if i != k:
                sys_a[:, i, :] = sys_a[:, i, :] - sys_a[:, i, k:k + 1] * sys_a[:, k, :]
        a[act] = sys_a
    null = np.zeros((count, 3, 9))
    for group, first_free in ((SAMPLE_SIZE, 7), (SAMPLE_SIZE - 1, 6)):
        sel = rows[rank == group]
        for t in range(9 - first_free):
            for i in range(first_free):
                null[sel, t, perm[sel, i]] = -a[sel, i, first_free + t]
            null[sel, t, perm[sel, first_free + t]] = 1.0
    null[rank == SAMPLE_SIZE, 2] = np.nan
    return null, rank


def solve_cubic(c3, c2, c1, c0):
    """
    Real roots of ``c3 a^3 + c2 a^2 + c1 a + c0`` for arrays of coefficients.

    Returns float64 [S, 3] roots (NaN where fewer) after :data:`NEWTON_STEPS`
    Newton steps; degrees below 3 (relative :data:`CUBIC_EPS`) are solved as such.
    """
    c3, c2, c1, c0 = (np.asarray(v, np.float64) for v in (c3, c2, c1, c0))
    roots = np.full(c3.shape + (3,), np.nan)
    top = np.maximum(np.maximum(np.abs(c3), np.abs(c2)), np.maximum(np.abs(c1), np.abs(c0)))
    cubic = np.abs(c3) > CUBIC_EPS * top
    quadratic = ~cubic & (np.abs(c2) > CUBIC_EPS * top)
    linear = ~cubic & ~quadratic & (np.abs(c1) > CUBIC_EPS * top)
    with np.errstate(all='ignore'):
        b, c, d = c2 / c3, c1 / c3, c0 / c3
        p = c - b * b / 3.0
        q = 2.0 * b * b * b / 27.0 - b * c / 3.0 + d
        h = q * 0.5
        disc = h * h + p * p * p / 27.0
        one = cubic & (disc > 0)
        u = np.cbrt(-h - np.copysign(np.sqrt(disc), h))
        roots[..., 0] = np.where(one, u - p / (3.0 * u) - b / 3.0, roots[..., 0])
        three = cubic & ~(disc > 0)
        r = np.sqrt(-p / 3.0)
        triple = three & (r == 0)
        roots[..., 0] = np.where(triple, -b / 3.0, roots[..., 0])
        trig = three & (r != 0)
        phi = np.arccos(np.clip(-h / (r * r * r), -1.0, 1.0)) / 3.0
        for k, shift in enumerate((0.0, -2.0 * math.pi / 3.0, 2.0 * math.pi / 3.0)):
            roots[..., k] = np.where(trig, 2.0 * r * np.cos(phi + shift) - b / 3.0,
                                     roots[..., k])
        for _ in range(NEWTON_STEPS):
            a = roots
            f = ((c3[..., None] * a + c2[..., None]) * a + c1[..., None]) * a + c0[..., None]
            g = (3.0 * c3[..., None] * a + 2.0 * c2[..., None]) * a + c1[..., None]
            roots = np.where(cubic[..., None] & (g != 0), a - f / g, a)
        qd = c1 * c1 - 4.0 * c2 * c0
        qq = -0.5 * (c1 + np.copysign(np.sqrt(qd), c1))
        real = quadratic & (qd >= 0)
        roots[..., 0] = np.where(real, qq / c2, roots[..., 0])
        roots[..., 1] = np.where(real & (qq != 0), c0 / qq, roots[..., 1])
        roots[..., 0] = np.where(linear, -c0 / c1, roots[..., 0])
    return roots


def seven_point_models(p0, p1):
    """
    Fundamental matrices of 7-point samples: p0, p1 float [S, 7, 2] pixels.

    Returns float32 [S, 3, 9] row-major models in pixels with unit Frobenius
    norm, NaN rows where a sample has fewer than 3 (or no) solutions; a
    homography-degenerate sample gives its 3 null vectors.
    """
    p0 = np.asarray(p0, np.float64)
    p1 = np.asarray(p1, np.float64)
    cx0, cy0, s0 = _normalisation(p0[..., 0], p0[..., 1])
    cx1, cy1, s1 = _normalisation(p1[..., 0], p1[..., 1])
    ok = np.isfinite(s0) & np.isfinite(s1)
    s0 = np.where(ok, s0, 1.0)
    s1 = np.where(ok, s1, 1.0)
    x0 = (p0[..., 0] - cx0[:, None]) * s0[:, None]
    y0 = (p0[..., 1] - cy0[:, None]) * s0[:, None]
    x1 = (p1[..., 0] - cx1[:, None]) * s1[:, None]
    y1 = (p1[..., 1] - cy1[:, None]) * s1[:, None]
    system = np.stack([x1 * x0, x1 * y0, x1, y1 * x0, y1 * y0, y1, x0, y0,
                       np.ones_like(x0)], axis=-1)
    null, rank = _null_space(system)
    f1, f2 = null[:, 0], null[:, 1]
    diff = f1 - f2
    d0 = _det3(f2)
    d1 = _det3(f2 + 1.0 * diff)
    dm1 = _det3(f2 + -1.0 * diff)
    d2 = _det3(f2 + 2.0 * diff)
    c2 = 0.5 * (d1 + dm1) - d0
    s = 0.5 * (d1 - dm1)
    c3 = (d2 - 4.0 * c2 - d0 - 2.0 * s) / 6.0
    c1 = s - c3
    roots = solve_cubic(c3, c2, c1, d0)
    models = f2[:, None, :] + roots[..., None] * diff[:, None, :]
    homography = rank == SAMPLE_SIZE - 1
    models[homography] = null[homography]
    roots[homography] = 0.0
    roots[rank == 0] = np.nan
    models = denormalise(models, s0[:, None], (-s0 * cx0)[:, None], (-s0 * cy0)[:, None],
                         s1[:, None], (-s1 * cx1)[:, None], (-s1 * cy1)[:, None])
    models, norm = unit_norm(models)
    good = ok[:, None] & np.isfinite(roots) & (norm > 0) & np.isfinite(norm)
    return np.where(good[..., None], models, np.nan).astype(np.float32)


def inlier_test(f, x0, y0, x1, y1, t2):
    """
    Inlier mask of every model against every match, in ``f``'s dtype.

    ``f`` [K, 9]; coordinates [M]; ``t2`` the squared threshold. Returns bool [K, M].
    """
    f = [f[:, k:k + 1] for k in range(9)]
    a = f[0] * x0 + f[1] * y0 + f[2]
    b = f[3] * x0 + f[4] * y0 + f[5]
    c = f[6] * x0 + f[7] * y0 + f[8]
    d = x1 * a + y1 * b + c
    a0 = f[0] * x1 + f[3] * y1 + f[6]
    b0 = f[1] * x1 + f[4] * y1 + f[7]
    with np.errstate(invalid='ignore', over='ignore'):
        return d * d <= t2 * np.minimum(a * a + b * b, a0 * a0 + b0 * b0)


def score_models(models, points0, points1, threshold_px, chunk=256):
    """
    Inlier count of each float32 [K, 9] model (-1 for a NaN model), in float32.

    ``points0``/``points1`` float32 [M, 2] pixels.
    """
    models = np.asarray(models, np.float32).reshape(-1, 9)
    p0 = np.asarray(points0, np.float32)
    p1 = np.asarray(points1, np.float32)
    t = np.float32(threshold_px)
    t2 = t * t
    scores = np.empty(len(models), np.int64)
    for start in range(0, len(models), chunk):
        part = models[start:start + chunk]
        scores[start:start + chunk] = inlier_test(part, p0[:, 0], p0[:, 1], p1[:, 0], p1[:, 1],
                                                  t2).sum(axis=1)
    scores[np.isnan(models).any(axis=1)] = -1
    return scores


def fundamental_inliers(fundamental, points0, points1, threshold_px):
    """
    Return a bool [M] mask: each point within ``threshold_px`` of the other's epipolar line.

    :func:`inlier_test` (the larger of the two point-to-line distances) in
    double precision, for one known ``fundamental`` and float [M, 2] points.
    """
    p0 = np.asarray(points0, np.float64).reshape(-1, 2)
    p1 = np.asarray(points1, np.float64).reshape(-1, 2)
    t = float(threshold_px)
    return inlier_test(np.asarray(fundamental, np.float64).reshape(1, 9), p0[:, 0], p0[:, 1],
                       p1[:, 0], p1[:, 1], t * t)[0]


def empty_fit(count):
    """Return the fit of matches that cannot be verified: nothing kept."""
    return EpipolarFit(np.zeros(count, bool), 0, np.full((3, 3), np.nan))


def ransac_fundamental(points0, points1, threshold_px=3.0, samples=SAMPLES, seed=SEED):
    """
    Fit one fundamental matrix to matches ``points0 -> points1`` (float [M, 2] pixels).

    Returns an :class:`EpipolarFit`; fewer than :data:`MIN_MATCHES` matches
    (or no usable sample) keep nothing.
    """
    p0 = np.asarray(points0, np.float32).reshape(-1, 2)
    p1 = np.asarray(points1, np.float32).reshape(-1, 2)
    count = len(p0)
    if count < MIN_MATCHES:
        return empty_fit(count)
    idx, valid = sample_indices(count, samples, seed)
    models = seven_point_models(p0[np.maximum(idx, 0)], p1[np.maximum(idx, 0)])
    models[~valid] = np.nan
    scores = score_models(models.reshape(-1, 9), p0, p1, threshold_px)
    best = int(np.argmax(scores))
    if scores[best] < 0:
        return empty_fit(count)
    q0, q1 = p0.astype(np.float64), p1.astype(np.float64)
    f = models.reshape(-1, 9)[best].astype(np.float64)
    mask = fundamental_inliers(f, q0, q1, threshold_px)
    kept = int(mask.sum())
    for _ in range(REFINE_ROUNDS):
        if kept < MIN_MATCHES:
            break
        fitted = refit(f, q0, q1, mask)
        if fitted is None:
            break
        new_mask = fundamental_inliers(fitted, q0, q1, threshold_px)
        new_kept = int(new_mask.sum())
        if new_kept < kept:
            break
        f, mask, kept = fitted, new_mask, new_kept
    if kept < MIN_MATCHES:
        return empty_fit(count)
    return EpipolarFit(mask, kept, f.reshape(3, 3))
