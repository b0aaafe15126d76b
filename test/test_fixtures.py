# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The fixtures in test/data: every file listed with its sha256, small, and true to ../shared."""

import re

from conftest import FIXTURES
import numpy as np
import pytest
from xfeat_ros.features.weights import PACKAGED, sha256_file

SUM_LINE = re.compile(r'^([0-9a-f]{64})  (\S+)$', re.MULTILINE)
MAX_BYTES = 8 * 10 ** 6  # fixtures plus the packaged weights


def listed_sums():
    """Return ``{relative path: sha256}`` from the fixtures' README."""
    return {path: digest for digest, path in
            SUM_LINE.findall((FIXTURES / 'README.md').read_text())}


def fixture_files():
    return sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob('*')
                  if p.is_file() and p.name != 'README.md')


def test_every_fixture_is_listed_with_its_sha256():
    sums = listed_sums()
    assert sorted(sums) == fixture_files()
    for path, digest in sums.items():
        assert sha256_file(FIXTURES / path) == digest, path


def test_fixtures_and_weights_stay_small():
    total = sum((FIXTURES / p).stat().st_size for p in fixture_files()) + PACKAGED.stat().st_size
    assert total <= MAX_BYTES, f'{total} bytes'


def test_fixtures_have_what_the_short_tests_need():
    golden = FIXTURES / 'golden'
    for stem in ('rgb_1311868169.163498', 'rgb_1311868169.263274', 'cam0_1403715273262142976'):
        with np.load(golden / f'{stem}.npz') as data:
            assert data['keypoints'].shape == (4096, 2) and data['descriptors'].shape[1] == 64
    stamps = [line.split()[0] for line in
              (FIXTURES / 'data' / 'tum_fr2_desk' / 'groundtruth.txt').read_text().splitlines()
              if not line.startswith('#')]
    images = sorted(p.stem for p in (FIXTURES / 'data' / 'tum_fr2_desk' / 'rgb').iterdir())
    assert stamps == images and len(images) == 8  # every frame has its pose


def test_fixtures_are_true_to_shared(shared_dir):
    """Files said to be byte-identical are; the JPEGs are the PNGs re-encoded."""
    from xfeat_ros.tools.image_files import read_image
    for path in fixture_files():
        original = shared_dir / path
        if path.endswith('.jpg'):
            png, _ = read_image(original.with_suffix('.png'))
            jpg, _ = read_image(FIXTURES / path)
            mse = np.mean((png.astype(float) - jpg.astype(float)) ** 2)
            assert 10 * np.log10(255.0 ** 2 / mse) > 30.0, path  # JPEG q90 of the same frame
        elif path.endswith('groundtruth.txt'):
            lines = original.read_text().splitlines()
            assert (FIXTURES / path).read_text().splitlines() == lines[:10]
        else:
            assert sha256_file(FIXTURES / path) == sha256_file(original), path
    assert sha256_file(PACKAGED) == sha256_file(shared_dir / 'models' / 'xfeat_backbone.npz')


@pytest.mark.parametrize('path', ['tum_fr2_desk/ALIKE_LICENSE_BSD3.txt',
                                  'euroc_v101_stereo/KIMERA_VIO_LICENSE.BSD'])
def test_licences_travel_with_the_frames(path):
    text = (FIXTURES / 'data' / path).read_text()
    assert 'Redistribution and use in source and binary forms' in text
