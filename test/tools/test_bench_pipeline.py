# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""xfeat_bench pipeline / cpu modes: frames, the PyTorch reference, and the cpu mode end to end."""

import json
import os
import subprocess
import sys

from golden_util import parity
import numpy as np
import pytest

from xfeat_ros.tools.bench import frames, pipeline


def test_fit_resolution_crops_to_aspect():
    pixels = np.zeros((480, 640, 3), np.uint8)
    pixels[:, 320:] = 255  # right half white
    out = frames.fit_resolution(pixels, 320, 180)
    assert out.shape == (180, 320, 3) and out.flags['C_CONTIGUOUS']
    assert out[:, :150].max() == 0 and out[:, 170:].min() == 255
    assert np.array_equal(frames.fit_resolution(pixels, 640, 480), pixels)


def test_parsers():
    assert frames.parse_resolutions('640x480, 1920X1080') == [(640, 480), (1920, 1080)]
    with pytest.raises(ValueError):
        frames.parse_resolutions('16x480')
    assert pipeline.parse_ints('1,2,16') == [1, 2, 16]


def test_reference_reproduces_upstream_golden(shared_dir):
    torch = pytest.importorskip('torch')
    from xfeat_ros.tools.image_files import read_image
    from xfeat_ros.tools.reference_torch import ReferenceXFeat
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
    done = subprocess.run([sys.executable, '-m', 'xfeat_ros.tools.bench', *args],
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


def _row(contender, n, wall, rep=None, device=None):
    row = {'resolution': '640x480', 'contender': contender, 'in_flight': n,
           'wall': {'median_ms': wall, 'p10_ms': wall, 'p90_ms': wall}}
    if device is not None:
        row['device'] = {'median_ms': device}
    if rep is not None:
        row['repeat'] = rep
    return row


def test_ratios_of_repeats_are_paired_then_their_median():
    from xfeat_ros.tools.bench.report import best_against_best, pipeline_ratios, pipeline_table
    # upstream's one-frame time swings between repeats; each repeat pairs its own runs
    rows = [_row('xfeat_ros', 1, 0.6, 0, 0.5), _row('upstream', 1, 6.0, 0, 5.0),
            _row('xfeat_ros', 1, 0.5, 1, 0.5), _row('upstream', 1, 4.0, 1, 3.0),
            _row('xfeat_ros', 1, 0.8, 2, 0.5), _row('upstream', 1, 4.8, 2, 4.0),
            _row('xfeat_ros', 8, 0.3, 0), _row('upstream', 8, 1.2, 0),
            _row('xfeat_ros', 8, 0.2, 1), _row('upstream', 8, 1.4, 1),
            _row('xfeat_ros', 8, 0.4, 2), _row('upstream', 8, 1.3, 2)]
    [one, eight] = pipeline_ratios(rows)
    assert one['in_flight'] == 1 and one['repeats'] == 3
    assert one['upstream_over_ours_runs'] == pytest.approx([10.0, 8.0, 6.0])
    assert one['upstream_over_ours'] == pytest.approx(8.0)  # not 4.8 / 0.6 of medians
    assert one['xfeat_ros_ms'] == pytest.approx(0.6) and one['upstream_ms'] == pytest.approx(4.8)
    assert one['upstream_over_ours_device_runs'] == pytest.approx([10.0, 6.0, 8.0])
    assert eight['upstream_over_ours_runs'] == pytest.approx([4.0, 7.0, 3.25])
    # best against best: per repeat (ours at 8 every time, upstream at 8, 8, 8)
    [best] = best_against_best(rows)
    assert best['xfeat_ros_n'] == 8 and best['upstream_n'] == 8
    assert best['upstream_over_ours_runs'] == pytest.approx([4.0, 7.0, 3.25])
    assert best['upstream_over_ours'] == pytest.approx(4.0)
    # the table pairs each repeat's row with the same repeat's
    table = pipeline_table({'results': rows})
    assert ' 10.00x' in table and '  8.00x' in table and '  6.00x' in table


def test_one_repeat_leaves_the_entries_as_they_were():
    from xfeat_ros.tools.bench.report import best_against_best, pipeline_ratios
    rows = [_row('xfeat_ros', 1, 0.5), _row('upstream', 1, 4.0), _row('xfeat_ros', 8, 0.25),
            _row('upstream', 8, 1.0)]
    ratios = pipeline_ratios(rows)
    assert [r['upstream_over_ours'] for r in ratios] == pytest.approx([8.0, 4.0])
    assert all('repeats' not in r and 'upstream_over_ours_runs' not in r for r in ratios)
    [best] = best_against_best(rows)
    assert best == {'resolution': '640x480', 'xfeat_ros_ms': 0.25, 'xfeat_ros_n': 8,
                    'upstream_ms': 1.0, 'upstream_n': 8, 'upstream_over_ours': 4.0}


def test_repeat_must_be_positive(capsys):
    from xfeat_ros.tools.bench.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(['cpu', '--repeat', '0'])
    assert exit_info.value.code == 2
    assert 'must be at least 1' in capsys.readouterr().err
