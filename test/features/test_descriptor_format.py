# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Descriptor wire encodings (xfeat_ros.features.descriptor_format) and their effect on matching.

Round-trip error bounds on random unit vectors, the exact little-endian
layout, typed errors; mutual-NN agreement of decoded descriptors with float32
on the golden upstream descriptors (../shared/golden); the evaluation wrapper
:class:`xfeat_ros.tools.evaluation.methods.EncodedMethod` (float32 reproduces the engine
exactly) and ``xfeat_eval --descriptor-encoding`` on oxford_graf: MHA@3px
with MAGSAC on its stable pairs, and MHA@3px with RANSAC averaged over match
orders (``--fit-orders``). Set ``XFEAT_ROS_LONG_TESTS=1`` for the 2000-order
check of the 1 % claim (about 2 minutes on 2 cores).
"""

import array
import json
import math
import os

from golden_util import GOLDEN_PAIRS, load_golden
import numpy as np
import pytest

from xfeat_ros.errors import DescriptorLayoutError, ParameterError, XFeatError
from xfeat_ros.features.descriptor_format import (bytes_per_descriptor, check_encoding,
                                                  decode_descriptors, encode_descriptors,
                                                  ENCODINGS, INT8_SCALE)
from xfeat_ros.features.match import mutual_nn_match
from xfeat_ros.tools.evaluation import cli, methods
from xfeat_ros.tools.image_files import read_image

DIM = 64
ITEMSIZE = {'float32': 4, 'float16': 2, 'int8': 1}
WIRE = {'float32': np.dtype('<f4'), 'float16': np.dtype('<f2'), 'int8': np.dtype('<i1')}

# Round to nearest with a 10-bit mantissa: components in [0.5, 1] are 2**-11
# apart, so the error is at most 2**-12 (the brief's bound 2**-11 holds with room).
FLOAT16_MAX_ERR = 2.0 ** -12
INT8_MAX_ERR = 0.5 / INT8_SCALE + 1e-7

# Mutual-NN agreement with float32 on the 8 golden pairs (share of float32
# matches reproduced). Measured 2026-11-29 (graf, TUM, EuRoC and the three
# cross-scene pairs):
#   min_cossim 0.82: float16 pooled 0.9987, worst pair 0.9980;
#                    int8 pooled 0.9735, worst pair 0.8789 (a cross-scene pair with
#                    190 mostly ambiguous matches), worst same-scene pair 0.9627.
#   no threshold:    float16 pooled 0.9988, worst 0.9980; int8 pooled 0.9659, worst 0.8744.
AGREEMENT_MIN = {
    ('float16', 0.82): (0.998, 0.995),   # (pooled, every pair)
    ('int8', 0.82): (0.97, 0.85),
    ('float16', -1.0): (0.998, 0.995),
    ('int8', -1.0): (0.96, 0.85),
}
INT8_SAME_SCENE_MIN = 0.95  # measured worst 0.9627 (graf 2 -> 3, min_cossim 0.82)


def unit_rows(seed, n, dim=DIM):
    """Return random unit-length float32 [n, dim] descriptors."""
    d = np.random.default_rng(seed).standard_normal((n, dim))
    return (d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32)


def hard_rows():
    """Return unit rows float32 [6, 4] with extreme components (one-hot, +-1/2, ties)."""
    rows = np.array([[1, 0, 0, 0], [-1, 0, 0, 0], [0.5, -0.5, 0.5, -0.5],
                     [0.6, 0.8, 0, 0], [0, 0, -0.8, 0.6], [1e-3, 0, 0, 1]], dtype=np.float64)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def round_trip(descriptors, encoding):
    """Return ``decode(encode(descriptors))`` float32 [N, D]."""
    wire = encode_descriptors(descriptors, encoding)
    return decode_descriptors(wire, encoding, descriptors.shape[1])


# -- the codec -------------------------------------------------------------------------------


def test_constants():
    assert ENCODINGS == ('float32', 'float16', 'int8') and INT8_SCALE == 127
    for encoding in ENCODINGS:
        assert check_encoding(encoding) is None


@pytest.mark.parametrize('encoding', ENCODINGS)
def test_byte_counts(encoding):
    d = unit_rows(1, 37)
    wire = encode_descriptors(d, encoding)
    assert wire.dtype == np.uint8 and wire.ndim == 1 and wire.flags['C_CONTIGUOUS']
    assert wire.size == 37 * DIM * ITEMSIZE[encoding]
    assert bytes_per_descriptor(encoding, DIM) == DIM * ITEMSIZE[encoding]
    assert bytes_per_descriptor(encoding, 1) == ITEMSIZE[encoding]


def test_float32_round_trip_is_exact():
    d = np.concatenate([unit_rows(2, 500), np.pad(hard_rows(), ((0, 0), (0, DIM - 4)))])
    out = round_trip(d, 'float32')
    assert out.dtype == np.float32 and out.shape == d.shape
    np.testing.assert_array_equal(out, d)
    assert out.flags['WRITEABLE'] and out.flags['C_CONTIGUOUS']


def test_float16_error_bound():
    for d in (unit_rows(3, 2000), hard_rows()):
        out = round_trip(d, 'float16')
        assert out.dtype == np.float32 and out.shape == d.shape
        assert np.abs(out - d).max() <= FLOAT16_MAX_ERR
        np.testing.assert_array_equal(out, d.astype(np.float16).astype(np.float32))
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-3)


def test_int8_error_bound_before_and_after_renormalization():
    for d in (unit_rows(4, 2000), hard_rows()):
        wire = encode_descriptors(d, 'int8')
        q = wire.view(WIRE['int8']).reshape(d.shape)
        assert q.min() >= -127 and q.max() <= 127  # -128 is never written
        np.testing.assert_array_equal(q, np.clip(np.rint(127 * d), -127, 127))
        assert np.abs(q / np.float32(INT8_SCALE) - d).max() <= INT8_MAX_ERR
        out = decode_descriptors(wire, 'int8', d.shape[1])
        assert out.dtype == np.float32 and out.shape == d.shape
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
        expected = q / np.linalg.norm(q.astype(np.float64), axis=1, keepdims=True)
        np.testing.assert_allclose(out, expected, atol=1e-6)
    one_hot = encode_descriptors(hard_rows()[:2], 'int8').view(WIRE['int8'])
    np.testing.assert_array_equal(one_hot, [127, 0, 0, 0, -127, 0, 0, 0])


def test_int8_zero_rows_stay_zero():
    d = np.zeros((3, DIM), np.float32)
    d[1, 5] = 1.0
    d[2, :] = 0.003  # every component rounds to 0
    out = round_trip(d, 'int8')
    np.testing.assert_array_equal(out[0], 0.0)
    np.testing.assert_array_equal(out[2], 0.0)
    np.testing.assert_array_equal(out[1], d[1])
    assert np.all(np.isfinite(out))


@pytest.mark.parametrize('encoding', ENCODINGS)
def test_little_endian_layout(encoding):
    d = np.array([[1.0, -0.5, 0.25, 0.0]], np.float32)
    wire = encode_descriptors(d, encoding)
    if encoding == 'int8':
        expected = np.clip(np.rint(127 * d), -127, 127).astype(WIRE['int8']).tobytes()
    else:
        expected = d.astype(WIRE[encoding]).tobytes()
    assert wire.tobytes() == expected
    literal = {'float32': b'\x00\x00\x80\x3f\x00\x00\x00\xbf\x00\x00\x80\x3e\x00\x00\x00\x00',
               'float16': b'\x00\x3c\x00\xb8\x00\x34\x00\x00',
               'int8': b'\x7f\xc0\x20\x00'}  # -63.5 rounds to even -64
    assert wire.tobytes() == literal[encoding]
    # Big-endian input is stored little-endian all the same.
    assert encode_descriptors(d.astype('>f4'), encoding).tobytes() == literal[encoding]
    back = decode_descriptors(literal[encoding], encoding, 4)
    if encoding == 'int8':
        np.testing.assert_allclose(back, np.array([[127, -64, 32, 0]]) / np.sqrt(
            127 ** 2 + 64 ** 2 + 32 ** 2), atol=1e-7)
    else:
        np.testing.assert_array_equal(back, d)


@pytest.mark.parametrize('encoding', ENCODINGS)
def test_bytes_like_inputs(encoding):
    d = unit_rows(5, 9)
    wire = encode_descriptors(d, encoding)
    expected = decode_descriptors(wire, encoding, DIM)
    for data in (wire.tobytes(), bytearray(wire.tobytes()), memoryview(wire.tobytes()),
                 array.array('B', wire.tobytes()), wire.reshape(9, -1)):
        np.testing.assert_array_equal(decode_descriptors(data, encoding, DIM), expected)
    out = decode_descriptors(wire, encoding, DIM)
    out[0, 0] = 7.0  # a copy: the wire buffer is untouched
    np.testing.assert_array_equal(decode_descriptors(wire, encoding, DIM), expected)


@pytest.mark.parametrize('encoding', ENCODINGS)
def test_empty(encoding):
    wire = encode_descriptors(np.zeros((0, DIM), np.float32), encoding)
    assert wire.dtype == np.uint8 and wire.shape == (0,)
    for data in (wire, b''):
        out = decode_descriptors(data, encoding, DIM)
        assert out.shape == (0, DIM) and out.dtype == np.float32


@pytest.mark.parametrize('encoding', ENCODINGS)
def test_wrong_length_is_a_layout_error(encoding):
    wire = encode_descriptors(unit_rows(6, 3), encoding)
    with pytest.raises(DescriptorLayoutError, match='not a multiple'):
        decode_descriptors(wire[:-1], encoding, DIM)
    with pytest.raises(DescriptorLayoutError, match='not a multiple'):
        decode_descriptors(wire, encoding, 100)
    for dim in (0, -64, 1.5, None):
        with pytest.raises(DescriptorLayoutError, match='width'):
            decode_descriptors(wire, encoding, dim)
    with pytest.raises(DescriptorLayoutError, match='uint8'):
        decode_descriptors(wire.view(np.int8), encoding, DIM)
    with pytest.raises(DescriptorLayoutError, match='bytes-like'):
        decode_descriptors([1, 2, 3], encoding, DIM)


@pytest.mark.parametrize('encoding', ENCODINGS)
def test_malformed_descriptors_are_layout_errors(encoding):
    with pytest.raises(DescriptorLayoutError, match='2-D'):
        encode_descriptors(np.zeros(DIM, np.float32), encoding)
    with pytest.raises(DescriptorLayoutError, match='width'):
        encode_descriptors(np.zeros((3, 0), np.float32), encoding)
    bad = unit_rows(7, 2)
    bad[1, 3] = np.nan
    with pytest.raises(DescriptorLayoutError, match='NaN'):
        encode_descriptors(bad, encoding)
    with pytest.raises(DescriptorLayoutError, match='real'):
        encode_descriptors(np.array([['a', 'b']]), encoding)


def test_unknown_encoding_is_a_parameter_error():
    d = unit_rows(8, 2)
    for call in (lambda: encode_descriptors(d, 'bfloat16'),
                 lambda: decode_descriptors(b'', 'uint8', DIM),
                 lambda: bytes_per_descriptor('float64', DIM),
                 lambda: check_encoding('INT8')):
        with pytest.raises(ParameterError, match='float32, float16, int8') as info:
            call()
        assert isinstance(info.value, XFeatError)


# -- matching on the golden upstream descriptors ---------------------------------------------


@pytest.fixture(scope='module')
def golden(shared_dir):
    """Golden arrays per image and per pair."""
    return load_golden(shared_dir)


def agreement(golden, encoding, min_cossim):
    """Return ``{pair: share of float32 matches reproduced}`` and the pooled share."""
    shares, total, reproduced = {}, 0, 0
    for a, b in GOLDEN_PAIRS:
        d0, d1 = golden[a]['descriptors'], golden[b]['descriptors']
        ref0, ref1, _ = mutual_nn_match(d0, d1, min_cossim)
        idx0, idx1, _ = mutual_nn_match(round_trip(d0, encoding), round_trip(d1, encoding),
                                        min_cossim)
        ref = set(zip(ref0.tolist(), ref1.tolist()))
        hits = len(ref & set(zip(idx0.tolist(), idx1.tolist())))
        shares[(a, b)] = hits / max(len(ref), 1)
        total += len(ref)
        reproduced += hits
    return shares, reproduced / total


def test_golden_float32_matches_are_upstream_matches(golden):
    for a, b in GOLDEN_PAIRS:
        idx0, idx1, _ = mutual_nn_match(round_trip(golden[a]['descriptors'], 'float32'),
                                        round_trip(golden[b]['descriptors'], 'float32'), 0.82)
        np.testing.assert_array_equal(idx0, golden[(a, b)]['idx0_082'])
        np.testing.assert_array_equal(idx1, golden[(a, b)]['idx1_082'])


@pytest.mark.parametrize('encoding,min_cossim', list(AGREEMENT_MIN))
def test_golden_match_agreement(golden, encoding, min_cossim):
    shares, pooled = agreement(golden, encoding, min_cossim)
    pooled_min, pair_min = AGREEMENT_MIN[(encoding, min_cossim)]
    assert pooled >= pooled_min, f'{encoding}: {pooled:.4f} of float32 matches reproduced'
    worst = min(shares, key=shares.get)
    assert shares[worst] >= pair_min, f'{encoding} {worst}: {shares[worst]:.4f}'
    if encoding == 'int8' and min_cossim > 0:
        same_scene = {p: s for p, s in shares.items() if p[0].split('_')[0] == p[1].split('_')[0]
                      or {p[0][:4], p[1][:4]} == {'cam0', 'cam1'}}
        assert len(same_scene) == 6 and min(same_scene.values()) >= INT8_SAME_SCENE_MIN


# -- evaluation ------------------------------------------------------------------------------


@pytest.fixture(scope='module')
def engine_method(weights):
    """Return an :class:`methods.EngineMethod` over a CPU engine (ONNX Runtime), 2 slots."""
    from xfeat_ros.features.backbone import OnnxRuntimeBackbone
    from xfeat_ros.features.engine import CpuEngine
    from xfeat_ros.features.network_onnx import build_model
    return methods.EngineMethod(CpuEngine(OnnxRuntimeBackbone(build_model(weights))), 2)


def test_encoded_float32_is_exactly_the_engine(engine_method, shared_dir):
    graf = shared_dir / 'data' / 'oxford_graf'
    for encoding in ENCODINGS:
        method = methods.EncodedMethod(engine_method, encoding, 0.82)
        assert method.name == f'xfeat_ros onnxruntime (cpu) {encoding}'
        kp0 = method.extract(0, *read_image(graf / 'img1.ppm'))
        kp1 = method.extract(1, *read_image(graf / 'img3.ppm'))
        assert len(kp0) == len(kp1) == 4096
        idx0, idx1 = method.match(0, 1)
        ref0, ref1 = engine_method.match(0, 1)
        extras = method.match_extras()
        assert extras['descriptor_bytes0'] == extras['descriptor_bytes1'] == (
            4096 * DIM * ITEMSIZE[encoding])
        assert extras['float32_matches'] == len(ref0) > 1000
        if encoding == 'float32':
            np.testing.assert_array_equal(idx0, ref0)
            np.testing.assert_array_equal(idx1, ref1)
            assert idx0.dtype == ref0.dtype == np.int64
            assert extras['float32_matches_reproduced'] == len(ref0)
        else:
            assert extras['float32_matches_reproduced'] >= 0.95 * len(ref0)
    with pytest.raises(ParameterError):
        methods.EncodedMethod(engine_method, 'float64', 0.82)


def test_descriptor_encoding_option():
    assert methods.descriptor_encodings(None) is None
    assert methods.descriptor_encodings(['int8,float16', 'float32', 'int8']) == [
        'int8', 'float16', 'float32']
    with pytest.raises(ParameterError, match='choices'):
        methods.descriptor_encodings(['float32,half'])
    with pytest.raises(ParameterError):
        methods.descriptor_encodings([','])


def test_eval_unknown_encoding_exits_2(shared_dir, weights_npz, tmp_path):
    assert cli.main([shared_dir / 'data' / 'oxford_graf', '--out', tmp_path,
                     '--weights', weights_npz, '--descriptor-encoding', 'half',
                     '--no-plots']) == 2


def test_eval_graf_mha_per_encoding(shared_dir, weights_npz, tmp_path):
    """
    MHA@3px of float16 and int8 equals float32's on graf (CPU engine).

    The fit is MAGSAC on pairs 1-2 .. 1-4, where its outcome at 3 px does not
    depend on the match order. Both MAGSAC and RANSAC (the default) sample
    by match index from OpenCV's own fixed-state generator (cv2.setRNGSeed
    changes neither), so the same matches in another order, or one match
    more or less, give another estimate. Over 2000 orders (xfeat_eval
    --fit-orders 2000; the counts are graf_orders2000_under_3px in
    bench/results/cpu-2vcpu/descriptor_encoding.json) MAGSAC kept 1-2 and 1-3 under 3 px in every
    order and 1-4 over 3 px in at least 1999, for every encoding; 1-5
    straddles 3 px (under it in 1523 / 1279 / 1577 of 2000 orders for
    float32 / float16 / int8) and 1-6 fails. With RANSAC a single order's
    MHA@3px over the 5 pairs has a standard deviation of 0.16 over orders;
    see test_eval_graf_mha_over_orders_per_encoding. Measured here
    (canonical order): 1.28 / 2.02 / 3.43 px (float32, float16) and 1.23 /
    2.02 / 3.51 px (int8).
    """
    status = cli.main([shared_dir / 'data' / 'oxford_graf', '--out', tmp_path,
                       '--weights', weights_npz, '--descriptor-encoding',
                       'float32,float16,int8', '--homography-method', 'magsac',
                       '--max-pairs', '3', '--no-plots'])
    assert status == 0
    results = json.loads((tmp_path / 'results.json').read_text())
    names = [f'xfeat_ros onnxruntime (cpu) {e}' for e in ENCODINGS]
    assert results['methods'] == names and results['descriptor_encodings'] == list(ENCODINGS)
    graf = results['datasets'][0]
    base = graf['summary'][names[0]]
    assert base['mha@3px'] == pytest.approx(2 / 3)
    for encoding, name in zip(ENCODINGS, names):
        summary = graf['summary'][name]
        assert abs(summary['mha@3px'] - base['mha@3px']) <= 0.01, (encoding, summary)
        assert summary['bytes_per_frame'] == 4096 * DIM * ITEMSIZE[encoding]
        assert summary['match_agreement'] >= {'float32': 1.0, 'float16': 0.995,
                                              'int8': 0.95}[encoding]
        for pair, ref in zip(graf['pairs'][name], graf['pairs'][names[0]]):
            assert abs(pair['corner_error_px'] - ref['corner_error_px']) <= 0.25, pair['pair']
    table = (tmp_path / 'results.md').read_text()
    assert '| bytes/frame | agreement with float32 |' in table
    assert '| 262144 |' in table and '| 1048576 | 1.0000 |' in table


# Order-averaged MHA@3px with RANSAC on graf 1-2 .. 1-5 (xfeat_eval --fit-orders;
# pair 1-6 is left out for time: ~110 ms per fit, and over 2000 orders its corner
# error never came below 6 px for any encoding, so it adds 0 to every order's MHA).
# One order's MHA@3px on these 4 pairs has a standard deviation of 0.20 over
# orders, so a mean over N orders is good to about 0.2 / sqrt(N). Measured
# 2026-11-29 (mean over orders 0..N-1, float32 / float16 / int8):
#   N = 10:   0.425 / 0.500 / 0.400   (float16 - float32 = +0.075)
#   N = 200:  0.440 / 0.434 / 0.468   (-0.006 / +0.028)
#   N = 500:  0.456 / 0.442 / 0.463   (-0.014 / +0.007)
#   N = 2000: 0.457 / 0.454 / 0.460   (-0.003 / +0.003; standard error 0.0045 each)
# The 1 % claim (within 0.01 of float32) therefore needs ~2000 orders to be
# seen at all (test_eval_graf_mha_2000_orders_within_1_percent, long); 10 or 200
# orders cannot resolve 0.01, and the fast test checks what they can: a
# difference within two standard errors, and per-pair corner errors.
ORDERS_FAST = 200
ORDERS_LONG = 2000
CORNER_CAP_PX = 10.0  # failed or wild fits count as 10 px in the per-pair means


def eval_graf_orders(shared_dir, weights_npz, out, orders):
    """Run xfeat_eval with RANSAC and ``orders`` fit orders on graf 1-2 .. 1-5; results."""
    status = cli.main([shared_dir / 'data' / 'oxford_graf', '--out', out,
                       '--weights', weights_npz, '--descriptor-encoding',
                       'float32,float16,int8', '--max-pairs', '4',
                       '--fit-orders', str(orders), '--no-plots'])
    assert status == 0
    results = json.loads((out / 'results.json').read_text())
    graf = results['datasets'][0]
    names = [f'xfeat_ros onnxruntime (cpu) {e}' for e in ENCODINGS]
    assert results['methods'] == names and results['settings']['fit_orders'] == orders
    return graf, names


def capped_mean_errors(records):
    """Return the mean over orders of each pair's corner error, capped: float64 [pairs]."""
    errors = np.array([[CORNER_CAP_PX if e is None else min(e, CORNER_CAP_PX)
                        for e in r['corner_error_px_orders']] for r in records])
    return errors.mean(axis=1)


def test_eval_graf_mha_over_orders_per_encoding(shared_dir, weights_npz, tmp_path):
    """
    Order-averaged MHA@3px (RANSAC, 200 orders) of float16 and int8 against float32 on graf.

    The difference must lie within two standard errors of a difference of
    two 200-order means (about 0.04; measured -0.006 and +0.028), and every
    pair's mean corner error over the orders (capped at 10 px) within 0.5 px
    of float32's (measured at most 0.25 px; 0.35 px for int8 on 1-4, whose
    errors lie near 6 px, over 2000 orders). See the comment above
    ORDERS_FAST for why 0.01 is not checked here.
    """
    graf, names = eval_graf_orders(shared_dir, weights_npz, tmp_path, ORDERS_FAST)
    base = graf['summary'][names[0]]
    assert base['pairs'] == 4 and base['fit_orders'] == ORDERS_FAST
    for encoding, name in zip(ENCODINGS, names):
        summary = graf['summary'][name]
        for t in (1, 3, 5):
            assert 0.0 <= summary[f'mha@{t}px_orders_mean'] <= 1.0
        difference = summary['mha@3px_orders_mean'] - base['mha@3px_orders_mean']
        standard_error = math.hypot(summary['mha@3px_orders_std'],
                                    base['mha@3px_orders_std']) / math.sqrt(ORDERS_FAST)
        assert abs(difference) <= 2.0 * standard_error, (encoding, difference, standard_error)
        assert summary['bytes_per_frame'] == 4096 * DIM * ITEMSIZE[encoding]
        np.testing.assert_allclose(capped_mean_errors(graf['pairs'][name]),
                                   capped_mean_errors(graf['pairs'][names[0]]), atol=0.5,
                                   err_msg=encoding)
    assert 0.3 <= base['mha@3px_orders_mean'] <= 0.6  # measured 0.44
    table = (tmp_path / 'results.md').read_text()
    assert f'| MHA@3px {ORDERS_FAST} orders |' in table


@pytest.mark.skipif(not os.environ.get('XFEAT_ROS_LONG_TESTS'),
                    reason='set XFEAT_ROS_LONG_TESTS=1 (2000 RANSAC fits per pair, ~2 min)')
def test_eval_graf_mha_2000_orders_within_1_percent(shared_dir, weights_npz, tmp_path):
    """
    Order-averaged MHA@3px (RANSAC, 2000 orders) of float16 and int8 is within 0.01 of float32.

    Graf 1-2 .. 1-5; measured 0.457 / 0.454 / 0.460 (float32 / float16 /
    int8), each good to about 0.0045 (one standard error).
    """
    graf, names = eval_graf_orders(shared_dir, weights_npz, tmp_path, ORDERS_LONG)
    base = graf['summary'][names[0]]['mha@3px_orders_mean']
    for encoding, name in zip(ENCODINGS, names):
        mha = graf['summary'][name]['mha@3px_orders_mean']
        assert abs(mha - base) <= 0.01, (encoding, mha, base)
