# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_bench: its helpers, the PyTorch reference, and the command end to end on the CPU."""

import json
import os
import subprocess
import sys

from golden_util import parity
import numpy as np
import pytest

from xfeat_ros import bench


def test_percentile_matches_numpy():
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0]
    for q in (0, 10, 25, 50, 90, 99, 100):
        assert bench.percentile(values, q) == pytest.approx(np.percentile(values, q))
    assert bench.percentile([7.0], 99) == 7.0
    assert np.isnan(bench.percentile([], 50))


def test_summaries():
    s = bench.summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s['median_ms'] == 3.0 and s['p10_ms'] == pytest.approx(1.4)
    assert s['p90_ms'] == pytest.approx(4.6) and s['n'] == 5 and s['mean_ms'] == 3.0
    lat = bench.latency_summary([float(v) for v in range(1, 101)])
    assert lat['median_ms'] == 50.5 and lat['p99_ms'] == pytest.approx(99.01)
    assert lat['max_ms'] == 100.0 and lat['n'] == 100
    assert bench.summarize([]) == {'n': 0} and bench.latency_summary([]) == {'n': 0}
    assert bench.ratio(6.0, 2.0) == 3.0 and bench.ratio(None, 2.0) is None


def test_cpu_percent():
    # 150 ticks of 100 Hz in 2 s: 0.75 of one core
    assert bench.cpu_percent(50, 200, 2.0, 100) == pytest.approx(75.0)
    assert bench.cpu_percent(None, 200, 2.0, 100) is None
    assert bench.proc_cpu_ticks(os.getpid()) >= 0


def test_parsers():
    assert bench.parse_resolutions('640x480, 1920X1080') == [(640, 480), (1920, 1080)]
    with pytest.raises(ValueError):
        bench.parse_resolutions('16x480')
    assert bench.parse_ints('1,2,16') == [1, 2, 16]
    assert bench.parse_node_configs('1x30,8x120,8xmax') == [(1, 30.0), (8, 120.0), (8, 0.0)]
    assert [bench.config_label(c, r) for c, r in ((8, 120.0), (8, 0.0), (1, 7.5))] == \
        ['8x120', '8xmax', '1x7.5']
    assert bench.split_cameras(['a', 'b', 'c'], 2) == [['a', 'c'], ['b']]
    assert bench.ros_param(['cam0', 'cam1']) == "['cam0','cam1']"
    assert bench.ros_param('') == "''" and bench.ros_param(True) == 'true'


def test_final_counts_and_node_counts():
    log = ('[INFO] [1.0] [xfeat]: engine: pytorch on cuda:0\n'
           "[INFO] [2.0] [xfeat]: final counts: {'cam0': {'received': 14, 'accepted': 14, "
           "'published': 12, 'dropped_queue_full': 2}}\n")
    final = bench.parse_final_counts(log)
    assert final == {'cam0': {'received': 14, 'accepted': 14, 'published': 12,
                              'dropped_queue_full': 2}}
    assert bench.node_counts(final, 4, 4) == (10, 8)
    older = {'cam0': {'accepted': 10, 'dropped_queue_full': 2, 'rejected': 1, 'published': 9}}
    assert bench.node_counts(older, 0, 0) == (13, 9)
    assert bench.parse_final_counts('no such line') is None


def test_header_from_cdr():
    # CDR little endian: encapsulation, sec, nanosec, frame_id length (with NUL), chars
    raw = (b'\x00\x01\x00\x00' + (1234).to_bytes(4, 'little') + (5678).to_bytes(4, 'little')
           + (4).to_bytes(4, 'little') + b'w17\x00' + b'\x00' * 8)
    assert bench.header_from_cdr(raw) == (1234 * 10 ** 9 + 5678, 'w17')
    big = (b'\x00\x00\x00\x00' + (-2).to_bytes(4, 'big', signed=True)
           + (9).to_bytes(4, 'big') + (2).to_bytes(4, 'big') + b'5\x00')
    assert bench.header_from_cdr(big) == (-2 * 10 ** 9 + 9, '5')


@pytest.mark.ros
def test_header_from_cdr_of_a_real_message():
    from rclpy.serialization import serialize_message
    from xfeat_ros.messages import message_types
    msg = message_types()[0]()
    msg.header.stamp.sec, msg.header.stamp.nanosec = 1795974504, 918648329
    msg.header.frame_id = '1234'
    assert bench.header_from_cdr(serialize_message(msg)) == (1795974504918648329, '1234')


def test_fit_resolution_crops_to_aspect():
    pixels = np.zeros((480, 640, 3), np.uint8)
    pixels[:, 320:] = 255  # right half white
    out = bench.fit_resolution(pixels, 320, 180)
    assert out.shape == (180, 320, 3) and out.flags['C_CONTIGUOUS']
    assert out[:, :150].max() == 0 and out[:, 170:].min() == 255
    assert np.array_equal(bench.fit_resolution(pixels, 640, 480), pixels)


def test_reference_reproduces_upstream_golden(shared_dir):
    torch = pytest.importorskip('torch')
    from xfeat_ros.image_files import read_image
    from xfeat_ros.reference_torch import ReferenceXFeat
    ref = ReferenceXFeat(str(shared_dir / 'models' / 'xfeat_backbone.npz'))
    outs = []
    for stem in ('rgb_1311868169.163498', 'rgb_1311868169.263274'):
        pixels, _ = read_image(shared_dir / 'data' / 'tum_fr2_desk' / 'rgb' /
                               f'{stem[4:]}.png')
        out = ref.detect_and_compute(torch.from_numpy(pixels)[None])[0]
        golden = dict(np.load(shared_dir / 'golden' / f'{stem}.npz'))
        p = parity(golden, out['keypoints'].numpy(), out['scores'].numpy(),
                   out['descriptors'].numpy())
        assert p.found >= 0.99 and p.min_cosine >= 0.999 and p.max_score_rel <= 1e-4
        outs.append((out, p))
    pair = dict(np.load(shared_dir / 'golden' /
                        'rgb_1311868169.163498__rgb_1311868169.263274.npz'))
    idx0, idx1 = ref.match(outs[0][0]['descriptors'], outs[1][0]['descriptors'], 0.82)
    golden = set(zip(pair['idx0_082'].tolist(), pair['idx1_082'].tolist()))
    mapped = {(int(outs[0][1].mapping[a]), int(outs[1][1].mapping[b])) for a, b in golden}
    assert len(mapped & set(zip(idx0.tolist(), idx1.tolist()))) >= 0.98 * len(golden)


def run_bench(args, timeout):
    done = subprocess.run([sys.executable, '-m', 'xfeat_ros.bench', *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_cpu_mode_end_to_end(shared_dir, tmp_path):
    pytest.importorskip('torch')
    out = tmp_path / 'cpu.json'
    text = run_bench(['cpu', '--resolutions', '160x128', '--frames', '3', '--warmup', '1',
                      '--num-images', '3', '--top-k', '512', '--json', str(out)], 120)
    assert 'ref/ours' in text
    data = json.loads(out.read_text())
    assert data['mode'] == 'cpu' and data['settings']['device'] == 'cpu'
    assert data['environment']['python'] and data['environment']['cores']
    rows = {r['contender']: r for r in data['results']}
    assert set(rows) == {'xfeat_ros', 'reference'}
    for row in rows.values():
        assert row['resolution'] == '160x128' and row['in_flight'] == 1 and row['frames'] == 3
        assert 0 < row['wall']['p10_ms'] <= row['wall']['median_ms'] <= row['wall']['p90_ms']
        assert 0 < row['keypoints'] <= 512 and row['matches'] > 0
    # same algorithm, same frames: the same amount of work
    assert abs(rows['xfeat_ros']['keypoints'] - rows['reference']['keypoints']) <= 2
    ratios = data['ratios'][0]
    assert ratios['reference_over_ours'] == pytest.approx(
        rows['reference']['wall']['median_ms'] / rows['xfeat_ros']['wall']['median_ms'])


@pytest.mark.ros
def test_node_mode_end_to_end(shared_dir, tmp_path):
    pytest.importorskip('matplotlib')
    out, png = tmp_path / 'node.json', tmp_path / 'node.png'
    text = run_bench(['node', '--configs', '1x5', '--duration', '3', '--backend', 'onnxruntime',
                      '--resolution', '320x240', '--top-k', '512', '--num-images', '3',
                      '--warmup-frames', '2', '--drain-idle', '8', '--json', str(out),
                      '--queue-size', '50',  # on a loaded machine too, nothing is dropped
                      '--png', str(png), '--log-dir', str(tmp_path / 'logs')], 150)
    assert '1x5' in text
    data = json.loads(out.read_text())
    settings = data['settings']
    assert settings['ros_automatic_discovery_range'] == 'LOCALHOST'
    assert settings['input_qos_reliability'] == 'reliable'
    (row,) = data['configs']
    assert row['error'] is None and row['node_exit_code'] == 0
    assert row['label'] == '1x5' and row['cameras'] == 1 and row['target_hz'] == 5.0
    # 5 Hz of small images: nothing may be lost anywhere
    assert row['published'] == 15
    assert row['node_received'] == row['node_processed'] == row['delivered'] == 15
    assert row['dropped'] == 0 and row['duplicates'] == 0
    assert row['warmup'] == {'published': 2, 'delivered': 2}
    assert 4.0 < row['publish_hz'] < 6.0 and 3.0 < row['output_hz'] < 6.0
    lat = row['latency']
    assert lat['n'] == 15 and 0 < lat['median_ms'] <= lat['p99_ms'] <= lat['max_ms'] < 5000
    assert len(row['latencies_ms']) == 15 and min(row['latencies_ms']) > 0
    assert row['node_cpu_percent'] is not None and row['node_cpu_percent'] >= 0
    assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    png2 = tmp_path / 'again.png'
    run_bench(['plot', str(out), '--png', str(png2)], 60)
    assert png2.stat().st_size > 1000
