# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The refinement's solvers of the host reference (xfeat_ros.features.ransac_refine) against LAPACK.

The kernel (``ransac_refine.cu``) does the same operations in the same order,
so these hold for it too; the whole check is tested in test_gpu_ransac.py.
Tolerances: the eigenvectors agree with ``numpy.linalg.eigh``'s to within the
conditioning of the problem (rounding over the eigenvalue gap), here at most
1e-10 in angle for the well separated cases drawn.
"""

import numpy as np
import pytest

from xfeat_ros.features import ransac_refine


def psd3(rng, singular_values):
    """``g^T g`` of a random 3 x 3 ``g`` with the given singular values; returns (g, m)."""
    u, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    v, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    g = u @ np.diag(singular_values) @ v.T
    return g, g.T @ g


def angle(a, b):
    """Angle in radians between the lines of two vectors (sign ignored)."""
    cos = abs(float(np.dot(a, b))) / (np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.arccos(min(cos, 1.0)))


@pytest.mark.parametrize('singular', [(1.0, 0.5, 0.1), (1.0, 0.3, 1e-4), (1.0, 0.01, 1e-7),
                                      (3.0, 2.0, 0.0)])
def test_jacobi_smallest_is_the_smallest_eigenvector(singular):
    rng = np.random.default_rng(7)
    for _ in range(20):
        _, m = psd3(rng, singular)
        got = ransac_refine._jacobi_smallest(m.tolist())
        want = np.linalg.eigh(m)[1][:, 0]
        assert abs(np.linalg.norm(got) - 1.0) < 1e-14
        gap = singular[1] ** 2 - singular[2] ** 2
        assert angle(got, want) <= 1e-15 * np.trace(m) / gap + 1e-14


def test_jacobi_of_diagonal_and_zero_matrices_rotates_nothing():
    assert ransac_refine._jacobi_smallest([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0]]) == [
        0.0, 1.0, 0.0]
    assert ransac_refine._jacobi_smallest([[0.0] * 3 for _ in range(3)]) == [1.0, 0.0, 0.0]


def test_rank2_removes_the_smallest_singular_direction():
    rng = np.random.default_rng(11)
    for singular in ((1.0, 0.6, 0.05), (1.0, 0.2, 1e-5)):
        g, _ = psd3(rng, singular)
        got = np.array(ransac_refine.rank2(g.ravel().tolist())).reshape(3, 3)
        u, s, vt = np.linalg.svd(g)
        want = u[:, :2] @ np.diag(s[:2]) @ vt[:2]
        np.testing.assert_allclose(got, want, atol=1e-13)
        assert abs(np.linalg.det(got)) < 1e-14


def test_inverse_iteration_finds_the_null_direction_of_normal_equations():
    rng = np.random.default_rng(5)
    rows = rng.normal(size=(200, 9))
    null = rng.normal(size=9)
    null /= np.linalg.norm(null)
    rows -= np.outer(rows @ null, null)  # exact data: the rows are orthogonal to null
    rows += 1e-6 * rng.normal(size=rows.shape)  # and a little noise
    ata = rows.T @ rows
    start = rng.normal(size=9)
    start = (start / np.linalg.norm(start)).tolist()
    got = ransac_refine._smallest_eigenvector(ata.tolist(), start)
    want = np.linalg.eigh(ata)[1][:, 0]
    assert abs(np.linalg.norm(got) - 1.0) < 1e-14
    assert angle(got, want) < 1e-10
    assert angle(got, null) < 1e-6


def test_inverse_iteration_refuses_an_undefined_system():
    zero = [[0.0] * 9 for _ in range(9)]
    assert ransac_refine._smallest_eigenvector(zero, [1.0] + [0.0] * 8) is None
    negative = [[-1.0 if i == j else 0.0 for j in range(9)] for i in range(9)]
    assert ransac_refine._smallest_eigenvector(negative, [1.0] + [0.0] * 8) is None
