# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The tensor-core matcher (FP16 candidates, exact FP32 re-check) bitwise against FP32.

``mnn_approx_tc`` + ``mnn_refine_tc`` against ``mnn_best`` on random,
near-tie, tied and real descriptors, widths 64 and 128, counts from one to
4096, device counts below the bound, and thousands of exact ties. The FP32
kernel is itself checked against a float64 oracle in test_gpu_kernels.py,
and the real descriptors against the NumPy matcher of the CPU path here.

GPU tests carry ``@pytest.mark.gpu`` and are skipped (with the reason) where
CuPy or a CUDA device is missing.
"""

import zlib

from golden_util import GOLDEN_IMAGES
import numpy as np
import pytest
from test_gpu_kernels import correspondences, poison, unit_rows
from xfeat_ros.features.gpu import kernels, matching, ops
from xfeat_ros.features.match import mutual_nn_match


def device_sets(cp, d0, d1, width, counts=None):
    """
    Device ``(side0, side1, out)`` of host descriptors, the outputs poisoned.

    ``counts`` (n0, n1): device counts below the host bounds ``len(d0)``, ``len(d1)``.
    """
    capacity = max(len(d0), 1)
    out = matching.MatchOutput(poison(cp, capacity, np.int32), poison(cp, capacity, np.int32),
                               poison(cp, capacity, np.float32), poison(cp, 1, np.int32))
    sides = []
    for i, d in enumerate((d0, d1)):
        count = len(d)
        if counts is not None:
            count = ops.DeviceCount(cp.asarray(np.array([counts[i]], np.int32)), len(d))
        sides.append(matching.DescriptorSet(cp.asarray(d.reshape(-1)), count, width))
    return sides[0], sides[1], out


def host_matches(out):
    """Host ``(idx0, idx1, sim)`` of a device match output (after a sync)."""
    m = int(out.count.get()[0])
    return out.idx0[:m].get(), out.idx1[:m].get(), out.similarity[:m].get()


def device_match(cp, stream, d0, d1, width, min_cossim, tensor_cores, counts=None):
    """Run the matcher on host descriptors; host (idx0, idx1, sim) (``counts``: as above)."""
    side0, side1, out = device_sets(cp, d0, d1, width, counts)
    matching.mutual_nn_match(side0, side1, out, matching.MatchScratch(), min_cossim, stream,
                             width=width, tensor_cores=tensor_cores)
    stream.synchronize()
    return host_matches(out)


def assert_same(cp, stream, d0, d1, width, counts=None):
    """Tensor cores == FP32 kernel, bit for bit, with and without the similarity floor."""
    fp = None
    for min_cossim in (0.82, -1.0):
        tc = device_match(cp, stream, d0, d1, width, min_cossim, True, counts)
        fp = device_match(cp, stream, d0, d1, width, min_cossim, False, counts)
        for a, b, name in zip(tc, fp, ('idx0', 'idx1', 'similarity')):
            np.testing.assert_array_equal(a, b, err_msg=f'{name} (min_cossim {min_cossim})')
    return fp


def near_ties(rng, n0, n1, width, eps):
    """Build sets whose best and runner-up similarities differ by about ``eps`` (and ties)."""
    d0 = unit_rows(rng, n0, width)
    d1 = unit_rows(rng, n1, width)
    for i in range(min(n0, n1 // 3)):
        base = d0[i] + 0.05 * unit_rows(rng, 1, width)[0]
        for j, scale in ((3 * i, 0.0), (3 * i + 1, eps), (3 * i + 2, 0.0)):
            v = base + scale * unit_rows(rng, 1, width)[0]
            d1[j] = v / np.linalg.norm(v)
    d1[2::3][:min(n0, n1 // 3)] = d1[0::3][:min(n0, n1 // 3)]  # exact duplicates: ties
    dup = min(4, n0 // 2)
    d0[n0 // 2:n0 // 2 + dup] = d0[:dup]  # duplicated rows on side 0 too
    return d0.astype(np.float32), d1.astype(np.float32)


@pytest.mark.gpu
@pytest.mark.parametrize('width', [64, 128])
@pytest.mark.parametrize('n0,n1', [(1, 1), (5, 300), (257, 300), (1000, 1200), (4096, 4096),
                                   (4096, 700)])
@pytest.mark.parametrize('kind', ['random', 'ties_1e-3', 'ties_1e-6'])
def test_tensor_core_matcher_equals_fp32(cp, stream, width, n0, n1, kind):
    rng = np.random.default_rng(zlib.crc32(f'{width}{n0}{n1}{kind}'.encode()))
    if kind == 'random':
        d0, d1 = correspondences(rng, n0, n1, width)
    else:
        d0, d1 = near_ties(rng, n0, n1, width, float(kind.split('_')[1]))
    fp = assert_same(cp, stream, d0, d1, width)
    assert n0 < 5 or len(fp[0]) > 0


@pytest.mark.gpu
@pytest.mark.parametrize('width', [64, 128])
@pytest.mark.parametrize('n0,n1', [(600, 3000), (4096, 4096)])
def test_tensor_core_matcher_with_every_row_tied(cp, stream, width, n0, n1):
    """
    Whole blocks of identical rows: every candidate ties.

    Side 1 holds 8 distinct rows, each repeated; side 0 noisy copies of them
    and exact copies. Ties go to the smallest index in both directions.
    """
    rng = np.random.default_rng(width + n0)
    base = unit_rows(rng, 8, width)
    d1 = base[rng.integers(0, 8, n1)]
    d0 = base[rng.integers(0, 8, n0)] + 0.02 * unit_rows(rng, n0, width)
    d0[::3] = base[rng.integers(0, 8, len(d0[::3]))]
    d0 = (d0 / np.linalg.norm(d0, axis=1, keepdims=True)).astype(np.float32)
    fp = assert_same(cp, stream, d0, d1.astype(np.float32), width)
    assert len(fp[0]) >= 1


@pytest.mark.gpu
@pytest.mark.parametrize('width', [64, 128])
@pytest.mark.parametrize('counts', [(3000, 4000), (4096, 1), (0, 4096), (129, 65)])
def test_tensor_core_matcher_with_device_counts(cp, stream, width, counts):
    """Counts on the device below the bounds the grids are sized by (4096 x 4096)."""
    rng = np.random.default_rng(sum(counts) + width)
    d0, d1 = correspondences(rng, 4096, 4096, width)
    d0[counts[0]:] = d1[0]  # rows past the counts would win if they were read
    d1[counts[1]:] = d0[0]
    fp = assert_same(cp, stream, d0, d1, width, counts)
    want = device_match(cp, stream, d0[:counts[0]], d1[:counts[1]], width, -1.0, False) \
        if min(counts) else ([], [], [])
    np.testing.assert_array_equal(fp[0], want[0])
    np.testing.assert_array_equal(fp[1], want[1])


@pytest.mark.gpu
def test_tensor_core_matcher_on_real_descriptors(cp, stream, cpu_pipeline, shared_dir):
    """Golden TUM pairs: tensor cores == FP32 kernel == the NumPy matcher's pairs."""
    from xfeat_ros.tools.image_files import read_grey
    stems = list(GOLDEN_IMAGES)[3:7]
    feats = [cpu_pipeline.extract(read_grey(shared_dir / 'data' / GOLDEN_IMAGES[s]))
             for s in stems]
    for fa, fb in zip(feats, feats[1:]):
        tc = device_match(cp, stream, fa.descriptors, fb.descriptors, 64, 0.82, True)
        fp = device_match(cp, stream, fa.descriptors, fb.descriptors, 64, 0.82, False)
        for a, b in zip(tc, fp):
            np.testing.assert_array_equal(a, b)
        idx0, idx1, _ = mutual_nn_match(fa.descriptors, fb.descriptors, 0.82)
        want = set(zip(idx0.tolist(), idx1.tolist()))
        got = set(zip(tc[0].tolist(), tc[1].tolist()))
        assert len(got ^ want) <= 2 and len(got) > 500


@pytest.mark.gpu
@pytest.mark.parametrize('width', [64, 128])
@pytest.mark.parametrize('n,count', [(1, None), (300, None), (4096, 3000), (65, 0)])
def test_fp16_operands_equal_numpy_float16(cp, stream, width, n, count):
    """
    ``halve_sides``: the tiles' operands are NumPy's float16 (nearest, ties to even), bit for bit.

    With subnormal, tie, signed-zero and largest-finite values; rows past a
    device count are left as they were (poisoned here).
    """
    rng = np.random.default_rng(n + width)
    d = unit_rows(rng, n, width).reshape(-1)
    specials = np.array([2.0 ** -15, -2.0 ** -20, 2.0 ** -25, 2.0 ** -26, 3 * 2.0 ** -25,
                         1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, -0.0, 0.0, 65504, 1e-8],
                        np.float32)
    d[:len(specials)] = specials
    expect = d.astype(np.float16).view(np.uint16)
    side = count if count is not None else n
    c, b = ops.count_args(ops.DeviceCount(cp.asarray(np.array([count], np.int32)), n)
                          if count is not None else n)
    src = cp.asarray(d)
    halves = [poison(cp, n * width, np.uint16) for _ in range(2)]
    module = kernels.match_tc_module(width, 0)
    with stream:
        ops.function(module, 'halve_sides')(
            matching.halve_grid(n, width), (256,), (src, c, b, halves[0], src, c, b, halves[1]))
    stream.synchronize()
    for h in halves:
        got = h.get()
        np.testing.assert_array_equal(got[:side * width], expect[:side * width])
        assert (got[side * width:] == 0x7F).all()
