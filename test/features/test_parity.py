# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Both engines against upstream XFeat outputs (../shared/golden, else test/data/golden).

One test per golden image and per golden pair, parametrized over the engines:
``cpu`` (ONNX Runtime + NumPy, the oracle) and ``gpu`` (the PyTorch-backed
GPU engine with its CUDA kernels; marked ``gpu``, so skipped with conftest's
reason where CuPy or a CUDA device is missing). Same thresholds for both
(test/golden_util.py). Every image goes in as it is read from disk: the CPU
engine gets the grey image, the GPU engine the raw ``rgb8``/``mono8`` message.
When ``XFEAT_ROS_REPORT_DIR`` is set, the GPU numbers are added to
``gpu_parity.json`` there.
"""

from conftest import NEEDS_SHARED
from golden_util import (COSINE_MIN, FOUND_MIN, GOLDEN_IMAGES, GOLDEN_PAIRS, load_golden,
                         MATCH_AGREE_MIN, match_agreement, parity, SCORE_REL_MAX, write_report)
import numpy as np
import pytest

from xfeat_ros.features.image_codec import raw_image
from xfeat_ros.features.match import mutual_nn_match
from xfeat_ros.features.postprocess import detect, heatmap_from_logits, l2_normalize
from xfeat_ros.tools.image_files import read_grey, read_image

ENGINES = ['cpu', pytest.param('gpu', marks=pytest.mark.gpu)]
REPORT = {}


class CpuEngine:
    """The CPU pipeline seen through the two calls the parity tests make."""

    name = 'cpu'

    def __init__(self, pipeline):
        self.pipeline = pipeline

    def extract(self, path):
        """Features of one image file."""
        return self.pipeline.extract(read_grey(path))

    def match_pair(self, path_a, path_b, min_cossim, features):
        """``(features a, features b, (idx0, idx1, similarity))`` of two golden images."""
        fa, fb = features
        return fa, fb, mutual_nn_match(fa.descriptors, fb.descriptors, min_cossim)


class GpuEngine:
    """The GPU engine: each image submitted alone, a pair matched on the device."""

    name = 'gpu'

    def __init__(self, engine):
        self.engine = engine

    def extract(self, path):
        """Features of one image file (one slot, one sync)."""
        slot = self.engine.alloc_slot()
        self.engine.submit(raw_image(*read_image(path)), slot)
        self.engine.synchronize()
        return self.engine.features(slot)

    def match_pair(self, path_a, path_b, min_cossim, features):
        """Submit both images and their match; the features are the pair's own."""
        engine = self.engine
        engine.configure(min_cossim=min_cossim)
        try:
            slot_a, slot_b = engine.alloc_slot(), engine.alloc_slot()
            engine.submit(raw_image(*read_image(path_a)), slot_a)
            engine.submit(raw_image(*read_image(path_b)), slot_b)
            engine.submit_match(slot_a, slot_b)
            engine.synchronize()
            m = engine.matches(slot_b)
            return (engine.features(slot_a), engine.features(slot_b),
                    (m.idx0, m.idx1, m.similarity))
        finally:
            engine.configure(min_cossim=0.82)


@pytest.fixture(scope='module', params=ENGINES)
def engine(request, weights_npz):
    """Each engine once per module (the GPU one captures its graphs once)."""
    if request.param == 'cpu':
        return CpuEngine(request.getfixturevalue('cpu_pipeline'))
    from xfeat_ros.features.gpu.factory import create_gpu_engine
    return GpuEngine(create_gpu_engine('pytorch', str(weights_npz), 0, 4096, 0.05, 0.82))


@pytest.fixture(scope='module')
def golden(data_dir):
    """Golden arrays per image and per pair (those present; the fixtures have a few)."""
    return load_golden(data_dir)


@pytest.fixture(scope='module')
def features(engine, data_dir, golden):
    """Return the engine's features of every golden image present, computed once."""
    return {stem: engine.extract(data_dir / 'data' / rel)
            for stem, rel in GOLDEN_IMAGES.items() if stem in golden}


@pytest.fixture(scope='module', autouse=True)
def report():
    """Add the GPU's numbers to gpu_parity.json where XFEAT_ROS_REPORT_DIR says."""
    yield
    write_report('gpu_parity.json', REPORT.get('gpu', {}))


def present(golden, *keys):
    """Skip, saying ../shared is needed, unless every golden key is present."""
    for key in keys:
        if key not in golden:
            pytest.skip(f'golden {key} is not in the fixtures: {NEEDS_SHARED}')


@pytest.mark.parametrize('stem', list(GOLDEN_IMAGES))
def test_detection_parity(stem, engine, features, golden):
    present(golden, stem)
    f = features[stem]
    g = golden[stem]
    assert tuple(f.image_hw) == tuple(g['image_hw'])
    p = parity(g, f.keypoints, f.scores, f.descriptors)
    REPORT.setdefault(engine.name, {})[stem] = {
        'found': p.found, 'min_cosine': p.min_cosine, 'max_score_rel': p.max_score_rel,
        f'n_{engine.name}': len(f), 'n_golden': len(g['scores'])}
    assert p.found >= FOUND_MIN, f'{stem}: only {p.found:.4f} of golden keypoints found'
    assert p.min_cosine >= COSINE_MIN, f'{stem}: descriptor cosine {p.min_cosine}'
    assert p.max_score_rel <= SCORE_REL_MAX, f'{stem}: score rel diff {p.max_score_rel}'
    assert np.all(np.diff(f.scores) <= 0), 'scores must be sorted descending'
    np.testing.assert_allclose(np.linalg.norm(f.descriptors, axis=1), 1.0, atol=1e-5)
    assert f.keypoints.dtype == f.scores.dtype == f.descriptors.dtype == np.float32


@pytest.mark.parametrize('pair', GOLDEN_PAIRS, ids=lambda p: f'{p[0]}__{p[1]}')
@pytest.mark.parametrize('min_cossim,suffix', [(0.82, '082'), (-1.0, 'none')])
def test_match_parity(pair, min_cossim, suffix, engine, features, golden, data_dir):
    a, b = pair
    present(golden, a, b, pair)
    fa, fb, (idx0, idx1, sim) = engine.match_pair(
        data_dir / 'data' / GOLDEN_IMAGES[a], data_dir / 'data' / GOLDEN_IMAGES[b], min_cossim,
        (features[a], features[b]))
    map_a = parity(golden[a], fa.keypoints, fa.scores, fa.descriptors).mapping
    map_b = parity(golden[b], fb.keypoints, fb.scores, fb.descriptors).mapping
    agree = match_agreement(golden[pair], map_a, map_b, idx0, idx1, suffix)
    REPORT.setdefault(engine.name, {})[f'{a}__{b}_{suffix}'] = {
        'agreement': agree, f'n_{engine.name}': len(idx0),
        'n_golden': len(golden[pair][f'idx0_{suffix}'])}
    assert agree >= MATCH_AGREE_MIN, f'{a}->{b}: {agree:.4f} of golden matches reproduced'
    assert abs(len(idx0) - len(golden[pair][f'idx0_{suffix}'])) <= 0.02 * max(len(idx0), 1)
    # the engine's matcher equals the CPU matcher (the oracle) on the engine's descriptors
    want0, want1, _ = mutual_nn_match(fa.descriptors, fb.descriptors, min_cossim)
    same = len(set(zip(want0.tolist(), want1.tolist())) & set(zip(idx0.tolist(), idx1.tolist())))
    assert same >= 0.999 * max(len(want0), 1) and abs(len(want0) - len(idx0)) <= 2
    assert idx0.dtype == idx1.dtype == np.int64 and sim.dtype == np.float32


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
