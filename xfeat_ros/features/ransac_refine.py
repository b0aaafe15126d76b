# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The least-squares refinement of a RANSAC model: the host reference of ``kernels/ransac_refine.cu``.

:func:`refit` is one round of :func:`xfeat_ros.features.ransac.ransac_fundamental`'s
step 4: the normalised 8-point fit of the current inliers in double
precision, by inverse iteration on ``A^T A`` (shifted by ``CHOLESKY_SHIFT``
times its trace, Cholesky-factored) from the current model, then the nearest
rank-2 matrix (the smallest eigenvector of ``g^T g`` by cyclic Jacobi). Every
sum runs in the device's order, so the kernel's fits equal these bit for bit.
Also the numeric helpers the hypotheses share (sequential sums,
de-normalisation, unit norm).
"""

import math

import numpy as np

REFINE_ROUNDS = 3
INVERSE_ITERATIONS = 6
CHOLESKY_SHIFT = 1e-10   # times trace(A^T A), keeps the factorisation defined on exact data
JACOBI_SWEEPS = 10
JACOBI_TOLERANCE = 1e-15  # times trace: a smaller off-diagonal entry is not rotated away
SQRT2 = math.sqrt(2.0)


def sequential_sum(values):
    """Sum along the last axis strictly left to right (the kernel's order)."""
    total = values[..., 0]
    for k in range(1, values.shape[-1]):
        total = total + values[..., k]
    return total


def denormalise(f, s0, tx0, ty0, s1, tx1, ty1):
    """``T1^T f T0`` for [..., 9] ``f`` with ``T = [[s, 0, tx], [0, s, ty], [0, 0, 1]]``."""
    g = np.empty_like(f)
    for r in range(3):
        g[..., 3 * r] = f[..., 3 * r] * s0
        g[..., 3 * r + 1] = f[..., 3 * r + 1] * s0
        g[..., 3 * r + 2] = f[..., 3 * r] * tx0 + f[..., 3 * r + 1] * ty0 + f[..., 3 * r + 2]
    out = np.empty_like(f)
    for c in range(3):
        out[..., c] = s1 * g[..., c]
        out[..., 3 + c] = s1 * g[..., 3 + c]
        out[..., 6 + c] = tx1 * g[..., c] + ty1 * g[..., 3 + c] + g[..., 6 + c]
    return out


def unit_norm(f):
    """``f`` [..., 9] over its Frobenius norm (sequential sum of squares); norm returned too."""
    norm = np.sqrt(sequential_sum(f * f))
    with np.errstate(divide='ignore', invalid='ignore'):
        return f / norm[..., None], norm


def _cholesky(a):
    """Lower Cholesky factor of a 9 x 9 list of lists, or None when not positive definite."""
    n = len(a)
    low = [[0.0] * n for _ in range(n)]
    for j in range(n):
        diag = a[j][j]
        for k in range(j):
            diag -= low[j][k] * low[j][k]
        if not diag > 0.0:
            return None
        low[j][j] = math.sqrt(diag)
        for i in range(j + 1, n):
            value = a[i][j]
            for k in range(j):
                value -= low[i][k] * low[j][k]
            low[i][j] = value / low[j][j]
    return low


def _smallest_eigenvector(ata, start):
    """
    Inverse iteration on ``ata + shift I`` from ``start`` (9 floats); None if it fails.

    Both substitutions multiply by the reciprocals of the factor's diagonal, and
    the back substitution subtracts ``z[8], z[7], ...`` in that order: the
    device's lane ``i`` owns entry ``i`` and receives the others as they are
    solved, so its chain of dependent operations holds no division. The vector
    is scaled to unit length once, after the last iteration (its direction is
    what the iterations make; its length stays within double's range: each
    iteration scales it by at most ``1 / shift`` and at least ``1 / (trace +
    shift)``).
    """
    trace = 0.0
    for k in range(9):
        trace += ata[k][k]
    if not trace > 0.0:
        return None
    shift = CHOLESKY_SHIFT * trace
    low = _cholesky([[ata[i][j] + (shift if i == j else 0.0) for j in range(9)]
                     for i in range(9)])
    if low is None:
        return None
    inverse = [1.0 / low[i][i] for i in range(9)]
    x = list(start)
    for _ in range(INVERSE_ITERATIONS):
        y = [0.0] * 9
        for i in range(9):
            value = x[i]
            for k in range(i):
                value -= low[i][k] * y[k]
            y[i] = value * inverse[i]
        z = [0.0] * 9
        for i in range(8, -1, -1):
            value = y[i]
            for k in range(8, i, -1):
                value -= low[k][i] * z[k]
            z[i] = value * inverse[i]
        x = z
    norm = 0.0
    for k in range(9):
        norm += x[k] * x[k]
    norm = math.sqrt(norm)
    if not (norm > 0.0 and math.isfinite(norm)):
        return None
    return [v / norm for v in x]


def _jacobi_smallest(m):
    """
    Return the unit eigenvector of the smallest eigenvalue of a symmetric 3 x 3 list.

    An off-diagonal entry within ``JACOBI_TOLERANCE`` times the trace is left
    alone: its rotation would turn the eigenvectors by at most that over the
    gap of their eigenvalues, the accuracy ``m`` (a product ``g^T g``) has
    anyway. Runs all JACOBI_SWEEPS sweeps; the device (``ransac_refine.cu``)
    stops at the first sweep that changes no bit of ``a`` and ``v`` (one that
    rotates nothing), a fixed point every later sweep would repeat, so both
    return the same bits.
    """
    a = [row[:] for row in m]
    v = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    tolerance = JACOBI_TOLERANCE * (a[0][0] + a[1][1] + a[2][2])
    for _ in range(JACOBI_SWEEPS):
        for p, q in ((0, 1), (0, 2), (1, 2)):
            if abs(a[p][q]) <= tolerance:
                continue
            theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q])
            t = math.copysign(1.0, theta) / (abs(theta) + math.sqrt(theta * theta + 1.0))
            c = 1.0 / math.sqrt(t * t + 1.0)
            s = t * c
            for k in range(3):
                akp, akq = a[k][p], a[k][q]
                a[k][p] = c * akp - s * akq
                a[k][q] = s * akp + c * akq
            for k in range(3):
                apk, aqk = a[p][k], a[q][k]
                a[p][k] = c * apk - s * aqk
                a[q][k] = s * apk + c * aqk
            for k in range(3):
                vkp, vkq = v[k][p], v[k][q]
                v[k][p] = c * vkp - s * vkq
                v[k][q] = s * vkp + c * vkq
    best = 0
    for k in (1, 2):
        if a[k][k] < a[best][best]:
            best = k
    return [v[0][best], v[1][best], v[2][best]]


def rank2(g):
    """Nearest rank-2 matrix (Frobenius) of a 3 x 3 row-major list: ``g - (g v) v^T``."""
    m = [[sum(g[3 * k + i] * g[3 * k + j] for k in range(3)) for j in range(3)]
         for i in range(3)]
    v = _jacobi_smallest(m)
    gv = [g[3 * r] * v[0] + g[3 * r + 1] * v[1] + g[3 * r + 2] * v[2] for r in range(3)]
    return [g[3 * r + c] - gv[r] * v[c] for r in range(3) for c in range(3)]


def refit(f, p0, p1, inliers):
    """
    One least-squares round: the rank-2 normalised 8-point fit of ``inliers``.

    Starts the inverse iteration from ``f`` (float64 [9], pixels); returns the
    unit-norm float64 [9] pixel model or None when the fit is undefined.
    """
    q0, q1 = p0[inliers], p1[inliers]
    n = len(q0)
    c0 = [float(v) for v in q0.sum(axis=0) / n]
    c1 = [float(v) for v in q1.sum(axis=0) / n]
    mean0 = float(np.sqrt(((q0 - c0) ** 2).sum(axis=1)).sum() / n)
    mean1 = float(np.sqrt(((q1 - c1) ** 2).sum(axis=1)).sum() / n)
    if not (mean0 > 0 and mean1 > 0):
        return None
    f = [float(v) for v in f]
    s0, s1 = SQRT2 / mean0, SQRT2 / mean1
    r0, r1 = mean0 / SQRT2, mean1 / SQRT2  # 1 / s0, 1 / s1 within an ulp: for the start only
    x0, y0 = (q0[:, 0] - c0[0]) * s0, (q0[:, 1] - c0[1]) * s0
    x1, y1 = (q1[:, 0] - c1[0]) * s1, (q1[:, 1] - c1[1]) * s1
    rows = np.stack([x1 * x0, x1 * y0, x1, y1 * x0, y1 * y0, y1, x0, y0, np.ones(n)], axis=1)
    ata = (rows.T @ rows).tolist()
    # the current model in normalised coordinates: T1^-T f T0^-1
    g = [0.0] * 9
    for r in range(3):
        g[3 * r] = f[3 * r] * r0
        g[3 * r + 1] = f[3 * r + 1] * r0
        g[3 * r + 2] = f[3 * r] * c0[0] + f[3 * r + 1] * c0[1] + f[3 * r + 2]
    start = [g[c] * r1 for c in range(3)] + [g[3 + c] * r1 for c in range(3)] + [
        c1[0] * g[c] + c1[1] * g[3 + c] + g[6 + c] for c in range(3)]
    norm = math.sqrt(sum(v * v for v in start))
    if not norm > 0:
        return None
    x = _smallest_eigenvector(ata, [v / norm for v in start])
    if x is None:
        return None
    fitted = denormalise(np.array(rank2(x)), s0, -s0 * c0[0], -s0 * c0[1], s1, -s1 * c1[0],
                         -s1 * c1[1])
    fitted, norm = unit_norm(fitted)
    return fitted if norm > 0 and np.isfinite(fitted).all() else None
