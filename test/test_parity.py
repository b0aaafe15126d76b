# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""CPU pipeline against upstream XFeat outputs (../shared/golden, else test/data/golden)."""

from conftest import NEEDS_SHARED
from golden_util import GOLDEN_IMAGES, GOLDEN_PAIRS, load_golden, match_agreement, parity
import numpy as np
import pytest

from xfeat_ros.image_files import read_grey
from xfeat_ros.match import mutual_nn_match
from xfeat_ros.postprocess import detect, heatmap_from_logits, l2_normalize

FOUND_MIN = 0.99
COSINE_MIN = 0.999
SCORE_REL_MAX = 1e-4
MATCH_AGREE_MIN = 0.98


@pytest.fixture(scope='module')
def golden(data_dir):
    """Golden arrays per image and per pair (those present; the fixtures have a few)."""
    return load_golden(data_dir)


@pytest.fixture(scope='module')
def features(cpu_pipeline, data_dir, golden):
    """Our features for every golden image present, computed once."""
    return {stem: cpu_pipeline.extract(read_grey(data_dir / 'data' / rel))
            for stem, rel in GOLDEN_IMAGES.items() if stem in golden}


def present(golden, *keys):
    """Skip, saying ../shared is needed, unless every golden key is present."""
    for key in keys:
        if key not in golden:
            pytest.skip(f'golden {key} is not in the fixtures: {NEEDS_SHARED}')


@pytest.mark.parametrize('stem', list(GOLDEN_IMAGES))
def test_detection_parity(stem, features, golden):
    present(golden, stem)
    f = features[stem]
    g = golden[stem]
    assert tuple(f.image_hw) == tuple(g['image_hw'])
    p = parity(g, f.keypoints, f.scores, f.descriptors)
    assert p.found >= FOUND_MIN, f'{stem}: only {p.found:.4f} of golden keypoints found'
    assert p.min_cosine >= COSINE_MIN, f'{stem}: descriptor cosine {p.min_cosine}'
    assert p.max_score_rel <= SCORE_REL_MAX, f'{stem}: score rel diff {p.max_score_rel}'
    assert np.all(np.diff(f.scores) <= 0), 'scores must be sorted descending'
    np.testing.assert_allclose(np.linalg.norm(f.descriptors, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize('pair', GOLDEN_PAIRS, ids=lambda p: f'{p[0]}__{p[1]}')
@pytest.mark.parametrize('min_cossim,suffix', [(0.82, '082'), (-1.0, 'none')])
def test_match_parity(pair, min_cossim, suffix, features, golden):
    a, b = pair
    present(golden, a, b, pair)
    fa, fb = features[a], features[b]
    map_a = parity(golden[a], fa.keypoints, fa.scores, fa.descriptors).mapping
    map_b = parity(golden[b], fb.keypoints, fb.scores, fb.descriptors).mapping
    idx0, idx1, _ = mutual_nn_match(fa.descriptors, fb.descriptors, min_cossim)
    agree = match_agreement(golden[pair], map_a, map_b, idx0, idx1, suffix)
    assert agree >= MATCH_AGREE_MIN, f'{a}->{b}: {agree:.4f} of golden matches reproduced'
    assert abs(len(idx0) - len(golden[pair][f'idx0_{suffix}'])) <= 0.02 * max(len(idx0), 1)


def test_postprocess_on_golden_dense_maps(golden):
    """Post-processing alone, fed upstream's own dense maps, reproduces upstream."""
    present(golden, 'oxford_graf_img1')
    g = golden['oxford_graf_img1']
    # Invert the dense maps to backbone-like inputs: feats are already unit
    # length; logits whose softmax gives the heatmap (dustbin logit -inf-like).
    heat = g['heatmap']
    mh, mw = heat.shape
    cells = heat.reshape(mh // 8, 8, mw // 8, 8).transpose(1, 3, 0, 2)
    cells = cells.reshape(64, mh // 8, mw // 8)
    dustbin = np.clip(1.0 - cells.sum(axis=0, keepdims=True), 1e-30, None)
    logits = np.log(np.concatenate([cells, dustbin]).astype(np.float64) + 1e-38).astype(np.float32)
    np.testing.assert_allclose(heatmap_from_logits(logits), heat, rtol=1e-4, atol=1e-7)
    kpts, scores, desc = detect(g['feats'], logits, g['reliability'], 4096, 0.05)
    p = parity(g, kpts, scores, desc)
    assert p.found >= 0.999 and p.min_cosine >= 0.9999 and p.max_score_rel <= 1e-4
    np.testing.assert_allclose(l2_normalize(g['feats'], 0), g['feats'], atol=1e-6)
