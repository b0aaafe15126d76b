# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Unit tests of xfeat_ros.features.match: mutual nearest neighbours and descriptor layout.

The oracle is a brute-force double loop over pairs with float64 dot products,
independent of the vectorised implementation (and of its index types).
"""

import numpy as np
import pytest

from xfeat_ros.errors import DescriptorLayoutError, XFeatError
from xfeat_ros.features.match import check_descriptors, column_maximisers, mutual_nn_match

SIM_ATOL = 1e-6


def unit(rng, n, width):
    """Return random unit-length float32 descriptors [n, width]."""
    d = rng.standard_normal((n, width))
    return (d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32)


def oracle_match(desc0, desc1, min_cossim):
    """Brute-force mutual NN: python loops, first index wins a tie, strict threshold."""
    n0, n1 = len(desc0), len(desc1)
    sim = [[float(np.dot(desc0[i].astype(np.float64), desc1[j].astype(np.float64)))
            for j in range(n1)] for i in range(n0)]
    best1 = []
    for i in range(n0):
        b = 0
        for j in range(1, n1):
            if sim[i][j] > sim[i][b]:
                b = j
        best1.append(b)
    best0 = []
    for j in range(n1):
        b = 0
        for i in range(1, n0):
            if sim[i][j] > sim[b][j]:
                b = i
        best0.append(b)
    out = []
    for i in range(n0):
        j = best1[i]
        if best0[j] == i and (min_cossim <= 0 or sim[i][j] > min_cossim):
            out.append((i, j, sim[i][j]))
    return out


def noisy_copies(rng, base, noise):
    """Return unit descriptors near the ``base`` rows, shuffled, and the permutation."""
    perm = rng.permutation(len(base))
    d = base[perm] + noise * rng.standard_normal(base.shape).astype(np.float32)
    return (d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32), perm


@pytest.mark.parametrize('width', [64, 128])
@pytest.mark.parametrize('n0,n1', [(1, 1), (1, 9), (9, 1), (23, 31), (40, 17)])
@pytest.mark.parametrize('min_cossim', [0.82, 0.5, 0.0, -1.0])
def test_mnn_matches_brute_force_oracle(width, n0, n1, min_cossim):
    rng = np.random.default_rng([width, n0, n1, int(10 * min_cossim) + 20])
    base = unit(rng, max(n0, n1), width)
    # Half the set: noisy copies of the other side (real matches); rest random.
    d0 = np.concatenate([base[:n0 // 2], unit(rng, n0 - n0 // 2, width)])
    # Per-row noise: similarities of the true pairs spread over ~0.7 .. 1.
    noise = rng.uniform(0.0, 1.0, size=(n1 // 2 + 1, 1)) / np.sqrt(width)
    copies, _ = noisy_copies(rng, base[:n1 // 2 + 1], noise.astype(np.float32))
    d1 = np.concatenate([copies, unit(rng, n1, width)])[:n1]
    idx0, idx1, sim = mutual_nn_match(d0, d1, min_cossim)
    expected = oracle_match(d0, d1, min_cossim)
    assert idx0.dtype == np.int64 and idx1.dtype == np.int64 and sim.dtype == np.float32
    assert list(zip(idx0.tolist(), idx1.tolist())) == [(i, j) for i, j, _ in expected]
    np.testing.assert_allclose(sim, [s for _, _, s in expected], rtol=0, atol=SIM_ATOL)
    assert np.all(np.diff(idx0) > 0)
    assert len(set(idx1.tolist())) == len(idx1)


@pytest.mark.parametrize('width', [64, 128])
def test_mnn_recovers_a_permutation(width):
    rng = np.random.default_rng(width)
    base = unit(rng, 60, width)
    copies, perm = noisy_copies(rng, base, 0.02)
    idx0, idx1, sim = mutual_nn_match(base, copies, 0.82)
    # copies[k] is a noisy base[perm[k]]: base[i] matches copies[argsort(perm)[i]].
    inverse = np.argsort(perm)
    np.testing.assert_array_equal(idx0, np.arange(60))
    np.testing.assert_array_equal(idx1, inverse)
    assert np.all(sim > 0.9)
    assert mutual_nn_match(base, copies, -1.0)[0].shape == (60,)


def test_min_cossim_is_strict():
    d0 = np.zeros((1, 64), dtype=np.float32)
    d0[0, 0] = 1.0
    d1 = np.zeros((1, 64), dtype=np.float32)
    d1[0, 0] = 0.75                      # exact in float32, so the dot is exactly 0.75
    d1[0, 1] = np.sqrt(1 - 0.75 ** 2)
    assert float((d0 @ d1.T)[0, 0]) == 0.75
    assert len(mutual_nn_match(d0, d1, 0.75)[0]) == 0
    idx0, idx1, sim = mutual_nn_match(d0, d1, np.nextafter(0.75, 0))
    assert idx0.tolist() == [0] and idx1.tolist() == [0]
    assert sim.tolist() == [0.75]


def test_min_cossim_at_threshold_0_82():
    """A pair whose similarity is the float32 closest to 0.82 from above matches."""
    above = np.nextafter(np.float32(0.82), np.float32(1))
    d0 = np.zeros((1, 128), dtype=np.float32)
    d0[0, 0] = 1.0
    d1 = np.zeros((1, 128), dtype=np.float32)
    d1[0, 0] = above
    d1[0, 1] = np.sqrt(1 - float(above) ** 2)
    assert len(mutual_nn_match(d0, d1, 0.82)[0]) == 1
    assert len(mutual_nn_match(d0, d1, float(above))[0]) == 0


@pytest.mark.parametrize('min_cossim', [0.0, -0.5, -1.0, -2.0])
def test_non_positive_min_cossim_disables_filter(min_cossim):
    d0 = np.zeros((2, 64), dtype=np.float32)
    d1 = np.zeros((2, 64), dtype=np.float32)
    d0[0, 0] = 1.0
    d1[0, 0] = -1.0          # similarity -1 with d0[0]
    d0[1, 1] = 1.0
    d1[1, 2] = 1.0           # similarity 0 with everything
    idx0, idx1, sim = mutual_nn_match(d0[:1], d1[:1], min_cossim)
    assert idx0.tolist() == [0] and idx1.tolist() == [0] and sim.tolist() == [-1.0]
    idx0, idx1, sim = mutual_nn_match(d0, d1, min_cossim)
    assert list(zip(idx0.tolist(), idx1.tolist())) == [(0, 1), (1, 0)]
    np.testing.assert_array_equal(sim, [0.0, 0.0])
    assert len(mutual_nn_match(d0[:1], d1[:1], 0.01)[0]) == 0


def test_not_mutual_is_not_a_match():
    # a0 and a1 both prefer b0; b0 prefers a1. a0 gets nothing.
    d0 = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    d1 = np.array([[0.8, 0.6], [-1.0, 0.0]], dtype=np.float32)
    # sim = [[0.8, -1.0], [0.96, -0.6]]: b1 also prefers a1, but a1 prefers b0.
    idx0, idx1, sim = mutual_nn_match(d0, d1, -1.0)
    assert list(zip(idx0.tolist(), idx1.tolist())) == [(1, 0)]
    np.testing.assert_allclose(sim, [0.96], rtol=0, atol=SIM_ATOL)


@pytest.mark.parametrize('n0,n1', [(0, 0), (0, 5), (5, 0)])
@pytest.mark.parametrize('width', [64, 128])
def test_empty_sides_give_empty_typed_outputs(n0, n1, width):
    rng = np.random.default_rng(0)
    idx0, idx1, sim = mutual_nn_match(unit(rng, n0, width) if n0 else
                                      np.zeros((0, width), np.float32),
                                      unit(rng, n1, width) if n1 else
                                      np.zeros((0, width), np.float32))
    assert idx0.shape == (0,) and idx0.dtype == np.int64
    assert idx1.shape == (0,) and idx1.dtype == np.int64
    assert sim.shape == (0,) and sim.dtype == np.float32


@pytest.mark.parametrize('w0,w1', [(64, 128), (128, 64), (64, 63)])
def test_width_mismatch_raises(w0, w1):
    rng = np.random.default_rng(1)
    with pytest.raises(DescriptorLayoutError) as info:
        mutual_nn_match(unit(rng, 3, w0), unit(rng, 4, w1))
    assert str(w0) in str(info.value) and str(w1) in str(info.value)
    assert isinstance(info.value, XFeatError)
    with pytest.raises(DescriptorLayoutError):
        mutual_nn_match(np.zeros((0, w0), np.float32), np.zeros((0, w1), np.float32))


def test_check_descriptors_views_the_first_count_rows():
    buf = np.arange(10 * 64, dtype=np.float32)
    view = check_descriptors(buf, 7, 64)
    assert view.shape == (7, 64) and view.dtype == np.float32
    np.testing.assert_array_equal(view, buf[:7 * 64].reshape(7, 64))
    # Same buffer read as width 128: different rows, never a silent stride.
    view128 = check_descriptors(buf, 5, 128)
    np.testing.assert_array_equal(view128[1], buf[128:256])
    # A 2-D buffer and a python list are flattened.
    np.testing.assert_array_equal(check_descriptors(buf.reshape(10, 64), 3, 64), view[:3])
    np.testing.assert_array_equal(check_descriptors([1.0, 2.0, 3.0, 4.0], 2, 2),
                                  [[1.0, 2.0], [3.0, 4.0]])
    assert check_descriptors(np.zeros(0, np.float32), 0, 64).shape == (0, 64)


def test_check_descriptors_exact_capacity():
    buf = np.ones(3 * 128, dtype=np.float32)
    assert check_descriptors(buf, 3, 128).shape == (3, 128)


@pytest.mark.parametrize('size,count,width', [
    (64 * 3 - 1, 3, 64),     # one value short
    (64, 2, 64),
    (0, 1, 128),
    (127, 1, 128),
])
def test_check_descriptors_short_buffer_raises(size, count, width):
    with pytest.raises(DescriptorLayoutError, match=f'{count} x {width}'):
        check_descriptors(np.zeros(size, np.float32), count, width)


@pytest.mark.parametrize('width', [0, -64])
def test_check_descriptors_non_positive_width_raises(width):
    with pytest.raises(DescriptorLayoutError, match='width'):
        check_descriptors(np.zeros(128, np.float32), 2, width)


@pytest.mark.parametrize('count', [-1, -100])
def test_check_descriptors_negative_count_raises(count):
    with pytest.raises(DescriptorLayoutError):
        check_descriptors(np.zeros(128, np.float32), count, 64)


def test_check_then_match_round_trip():
    rng = np.random.default_rng(2)
    d0 = unit(rng, 20, 128)
    capacity = np.zeros(50 * 128, np.float32)
    capacity[:20 * 128] = d0.ravel()
    capacity[20 * 128:] = 7.0            # stale data past the count must not be read
    view = check_descriptors(capacity, 20, 128)
    idx0, idx1, sim = mutual_nn_match(view, d0, 0.82)
    np.testing.assert_array_equal(idx0, np.arange(20))
    np.testing.assert_array_equal(idx1, np.arange(20))
    np.testing.assert_allclose(sim, 1.0, rtol=0, atol=SIM_ATOL)


@pytest.mark.parametrize('rows', [1, 7, 300])
def test_column_maximisers_counts_every_row_at_the_maximum(rows):
    rng = np.random.default_rng(rows)
    sim = rng.integers(0, 3, (rows, 50)).astype(np.float32)  # many ties
    col_max = sim.max(axis=0)
    got = column_maximisers(sim, col_max)
    np.testing.assert_array_equal(got, np.count_nonzero(sim == col_max, axis=0))


def test_column_maximisers_past_16_bits():
    sim = np.ones((np.iinfo(np.uint16).max + 2, 2), dtype=np.float32)
    assert column_maximisers(sim, sim.max(axis=0)).tolist() == [sim.shape[0]] * 2
