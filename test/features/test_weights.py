# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Tests of xfeat_ros.features.weights: loading, checking, lookup order, download, xfeat_weights.

No network is used: ``urllib.request.urlopen`` is replaced by fakes, and the
cache directory is redirected to ``tmp_path`` through ``XDG_CACHE_HOME``.
PyTorch files are made with torch where it is installed (the CPU path does
not need it); the tests that read them skip, saying so, where it is not.
"""

import os
from pathlib import Path
import subprocess
import urllib.error
import urllib.request

import numpy as np
import pytest

from xfeat_ros.errors import WeightsError, XFeatError
from xfeat_ros.features import weights as W
from xfeat_ros.features.weights import (ENV_VAR, expected_shapes, find_weights, git_blob_id,
                                        load_weights, resolve_weights, sha256_file,
                                        weights_summary)
from xfeat_ros.tools import weights_cli

N_TENSORS = 77
# From shared/models/README.md (the packaged .npz is the same file).
SHA256_PT = 'fc8c0763b41de41e60eeba3d85941354cc144f1398b00e82263af369130d1345'
SHA256_NPZ = '88af23fb87f57929a0a5ad7d9764fa5440d619672aab7138fd43422d3f19aefd'


def need_torch():
    """Return torch; skip the test where it is not installed (CPU-only set-up)."""
    return pytest.importorskip('torch', reason='PyTorch files need torch, which the CPU-only '
                                               'set-up does not install')


@pytest.fixture(scope='module')
def weights_pt(weights_npz, tmp_path_factory):
    """
    Path of the backbone weights as a PyTorch state dict.

    ../shared/models/xfeat_backbone.pt where ../shared is present, else the
    packaged .npz saved with torch.save (the same tensors).
    """
    from conftest import HAVE_SHARED, MODELS
    if HAVE_SHARED:
        return MODELS / 'xfeat_backbone.pt'
    with np.load(weights_npz) as data:
        return save_pt(tmp_path_factory.mktemp('pt') / 'xfeat_backbone.pt',
                       {k: data[k] for k in data.files})


@pytest.fixture(scope='module')
def state_dict(weights_npz):
    """Return the reference tensors as float32 arrays, read directly with numpy."""
    with np.load(weights_npz) as data:
        return {k: data[k].copy() for k in data.files}


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No weights env var, cache under tmp_path; returns the cache file path."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
    return tmp_path / 'xdg' / 'xfeat_ros' / 'xfeat.pt'


def save_pt(path, arrays):
    torch = need_torch()
    torch.save({k: torch.from_numpy(np.asarray(v)) for k, v in arrays.items()}, path)
    return path


def save_npz(path, arrays):
    np.savez(path, **arrays)
    return path


class FakeResponse:
    """Stand-in for the object ``urlopen`` returns."""

    def __init__(self, data):
        self.data = data

    def read(self):
        return self.data

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ----------------------------------------------------------------------------- loading

def test_expected_shapes_count():
    shapes = expected_shapes()
    assert len(shapes) == N_TENSORS
    assert shapes['block1.0.layer.0.weight'] == (4, 1, 3, 3)
    assert shapes['keypoint_head.3.weight'] == (65, 64, 1, 1)
    assert shapes['skip1.1.bias'] == (24,)
    assert not any('fine_matcher' in k or 'num_batches' in k for k in shapes)


@pytest.mark.parametrize('which', ['npz', 'pt'])
def test_load_shared_weights(which, weights_npz, weights_pt, state_dict):
    path = weights_npz if which == 'npz' else weights_pt
    loaded = load_weights(path)
    assert len(loaded) == N_TENSORS
    shapes = expected_shapes()
    assert set(loaded) == set(shapes)
    for name, value in loaded.items():
        assert value.dtype == np.float32, name
        assert value.shape == shapes[name], name
        np.testing.assert_array_equal(value, state_dict[name])


def test_packaged_weights_match_their_published_sha256(weights_npz):
    assert weights_npz == W.PACKAGED and W.PACKAGED_SHA256 == SHA256_NPZ
    assert sha256_file(weights_npz) == SHA256_NPZ
    notice = (W.PACKAGED.parent / 'NOTICE.md').read_text()
    assert SHA256_NPZ in notice and 'Apache' in notice and 'Potje' in notice


def test_shared_files_match_their_published_sha256(shared_dir):
    assert sha256_file(shared_dir / 'models' / 'xfeat_backbone.pt') == SHA256_PT
    assert sha256_file(shared_dir / 'models' / 'xfeat_backbone.npz') == SHA256_NPZ


def test_load_accepts_str_path(weights_npz):
    assert len(load_weights(str(weights_npz))) == N_TENSORS


def test_extra_keys_are_ignored(tmp_path, state_dict):
    full = dict(state_dict)
    full['fine_matcher.0.weight'] = np.ones((512, 128), np.float32)
    full['fine_matcher.0.bias'] = np.ones(512, np.float32)
    full['fine_matcher.1.running_mean'] = np.zeros(512, np.float32)
    for name in expected_shapes():
        if name.endswith('running_mean'):
            full[name.replace('running_mean', 'num_batches_tracked')] = np.array(7)
    assert len(full) > N_TENSORS + 3
    path = save_pt(tmp_path / 'xfeat.pt', full)
    loaded = load_weights(path)
    assert set(loaded) == set(expected_shapes())
    for name, value in loaded.items():
        np.testing.assert_array_equal(value, state_dict[name])
    loaded_npz = load_weights(save_npz(tmp_path / 'xfeat.npz', full))
    assert set(loaded_npz) == set(expected_shapes())


def test_float64_and_pth_suffix_load_as_float32(tmp_path, state_dict):
    doubles = {k: v.astype(np.float64) for k, v in state_dict.items()}
    loaded = load_weights(save_pt(tmp_path / 'weights.pth', doubles))
    assert all(v.dtype == np.float32 for v in loaded.values())


@pytest.mark.parametrize('fmt', ['pt', 'npz'])
def test_missing_key_raises(tmp_path, state_dict, fmt):
    broken = dict(state_dict)
    del broken['block3.1.layer.1.running_var']
    saver = save_pt if fmt == 'pt' else save_npz
    with pytest.raises(WeightsError, match='block3.1.layer.1.running_var'):
        load_weights(saver(tmp_path / f'w.{fmt}', broken))


@pytest.mark.parametrize('fmt', ['pt', 'npz'])
def test_wrong_shape_raises(tmp_path, state_dict, fmt):
    broken = dict(state_dict)
    broken['keypoint_head.3.weight'] = np.zeros((64, 64, 1, 1), np.float32)
    saver = save_pt if fmt == 'pt' else save_npz
    with pytest.raises(WeightsError, match='keypoint_head.3.weight'):
        load_weights(saver(tmp_path / f'w.{fmt}', broken))


@pytest.mark.parametrize('bad', [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize('fmt', ['pt', 'npz'])
def test_non_finite_value_raises(tmp_path, state_dict, fmt, bad):
    broken = dict(state_dict)
    value = broken['block5.2.layer.0.weight'].copy()
    value[3, 5, 1, 2] = bad
    broken['block5.2.layer.0.weight'] = value
    saver = save_pt if fmt == 'pt' else save_npz
    with pytest.raises(WeightsError, match='block5.2.layer.0.weight'):
        load_weights(saver(tmp_path / f'w.{fmt}', broken))


@pytest.mark.parametrize('suffix', ['.pt', '.npz', '.pth'])
def test_random_bytes_raise(tmp_path, suffix):
    path = tmp_path / f'corrupt{suffix}'
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, np.uint8).tobytes())
    with pytest.raises(WeightsError) as info:
        load_weights(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize('cut', ['empty', 'half', 'tail'])
@pytest.mark.parametrize('suffix', ['.pt', '.npz'])
def test_truncated_file_raises(tmp_path, weights_npz, weights_pt, suffix, cut):
    """A half-downloaded or empty file is a WeightsError, whatever its format."""
    data = (weights_npz if suffix == '.npz' else weights_pt).read_bytes()
    data = {'empty': b'', 'half': data[:len(data) // 2], 'tail': data[:-16]}[cut]
    path = tmp_path / f'truncated{suffix}'
    path.write_bytes(data)
    with pytest.raises(WeightsError):
        load_weights(path)


def test_corrupted_member_of_npz_raises(tmp_path, weights_npz):
    data = bytearray(weights_npz.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(64)  # zip directory intact, one member's bytes wrong
    path = tmp_path / 'flipped.npz'
    path.write_bytes(bytes(data))
    with pytest.raises(WeightsError):
        load_weights(path)


def test_pt_holding_a_tensor_not_a_dict_raises(tmp_path):
    torch = need_torch()
    path = tmp_path / 'tensor.pt'
    torch.save(torch.zeros(3), path)
    with pytest.raises(WeightsError, match='not a state dict'):
        load_weights(path)


def test_npz_with_object_array_raises(tmp_path, state_dict):
    broken = dict(state_dict)
    broken['skip1.1.bias'] = np.array([None, 1], dtype=object)
    path = tmp_path / 'object.npz'
    np.savez(path, **broken)
    with pytest.raises(WeightsError, match='Python objects') as info:
        load_weights(path)
    assert 'allow_pickle' not in str(info.value)


@pytest.mark.parametrize('name,content,says', [
    ('README.md', b'# xfeat_ros\n\nXFeat learned features', 'not a weights file'),
    ('junk.npz', b'\x00junk' * 100, 'not an .npz weights file'),
    ('text.pt', b'hello, not a tensor', 'not a weights file'),
], ids=['readme', 'junk-npz', 'text-pt'])
def test_not_a_weights_file_is_one_clear_line(tmp_path, name, content, says):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(WeightsError, match=says) as info:
        load_weights(path)
    message = str(info.value)
    assert str(path) in message and '\n' not in message
    assert 'allow_pickle' not in message and 'weights_only' not in message


@pytest.mark.parametrize('name', ['missing.pt', 'missing.npz', 'sub/dir/missing.pt'])
def test_load_nonexistent_file_names_it(tmp_path, name):
    path = tmp_path / name
    with pytest.raises(WeightsError) as info:
        load_weights(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, XFeatError)


def test_load_directory_raises(tmp_path):
    with pytest.raises(WeightsError):
        load_weights(tmp_path)


# ----------------------------------------------------------------------------- lookup order

@pytest.fixture
def candidates(tmp_path, clean_env):
    """Explicit, env and cache files that all exist (contents do not matter)."""
    explicit = tmp_path / 'explicit.npz'
    env = tmp_path / 'env.pt'
    explicit.write_bytes(b'explicit')
    env.write_bytes(b'env')
    clean_env.parent.mkdir(parents=True)
    clean_env.write_bytes(b'cache')
    return explicit, env, clean_env


@pytest.fixture
def no_download(monkeypatch):
    """Record calls of download_weights instead of downloading."""
    calls = []

    def fake(destination, *args, **kwargs):
        calls.append(Path(destination))
        Path(destination).parent.mkdir(parents=True, exist_ok=True)
        Path(destination).write_bytes(b'downloaded')
        return Path(destination)

    monkeypatch.setattr(W, 'download_weights', fake)
    return calls


def test_cache_dir_follows_xdg(clean_env):
    assert W.cache_dir() == clean_env.parent


def test_cache_dir_defaults_to_home(monkeypatch, tmp_path):
    monkeypatch.delenv('XDG_CACHE_HOME', raising=False)
    monkeypatch.setenv('HOME', str(tmp_path))
    assert W.cache_dir() == tmp_path / '.cache' / 'xfeat_ros'


def test_explicit_path_wins(candidates, monkeypatch, no_download):
    explicit, env, _ = candidates
    monkeypatch.setenv(ENV_VAR, str(env))
    assert resolve_weights(str(explicit)) == explicit
    assert resolve_weights(explicit) == explicit
    assert no_download == []


def test_explicit_path_wins_over_broken_env(candidates, monkeypatch, no_download):
    explicit, _, _ = candidates
    monkeypatch.setenv(ENV_VAR, '/nonexistent/weights.pt')
    assert resolve_weights(str(explicit)) == explicit


def test_env_wins_over_cache(candidates, monkeypatch, no_download):
    _, env, _ = candidates
    monkeypatch.setenv(ENV_VAR, str(env))
    assert resolve_weights('') == env
    assert no_download == []


def test_cache_wins_over_packaged(candidates, no_download):
    _, _, cache = candidates
    assert resolve_weights('') == cache
    assert resolve_weights() == cache
    assert find_weights('') == (cache, 'user cache')
    assert no_download == []


def test_empty_env_var_is_ignored(candidates, monkeypatch, no_download):
    monkeypatch.setenv(ENV_VAR, '')
    assert resolve_weights('') == candidates[2]


def test_packaged_copy_is_last_and_nothing_is_downloaded(clean_env, no_download, monkeypatch):
    def offline(*args, **kwargs):
        raise AssertionError('the lookup must not touch the network')

    monkeypatch.setattr(urllib.request, 'urlopen', offline)
    assert resolve_weights('') == W.PACKAGED and W.PACKAGED.is_file()
    assert find_weights('') == (W.PACKAGED, 'packaged copy')
    assert no_download == [] and not clean_env.exists()
    assert len(load_weights(resolve_weights(''))) == N_TENSORS


@pytest.mark.parametrize('origin', ['parameter', 'env', 'cache', 'packaged'])
def test_summary_names_the_file_and_where_it_was_found(candidates, monkeypatch, origin):
    explicit, env, cache = candidates
    if origin == 'env':
        monkeypatch.setenv(ENV_VAR, str(env))
    if origin == 'packaged':
        cache.unlink()
    want = {'parameter': (explicit, 'weights parameter'), 'env': (env, f'${ENV_VAR}'),
            'cache': (cache, 'user cache'), 'packaged': (W.PACKAGED, 'packaged copy')}[origin]
    summary = weights_summary(str(explicit) if origin == 'parameter' else '')
    assert summary == f'weights: {want[0]} ({want[1]})'


def test_missing_packaged_copy_says_what_to_set(clean_env, monkeypatch):
    monkeypatch.setattr(W, 'PACKAGED', clean_env.parent / 'gone.npz')
    with pytest.raises(WeightsError, match=ENV_VAR):
        resolve_weights('')


def test_explicit_path_is_expanded(tmp_path, clean_env, monkeypatch, no_download):
    monkeypatch.setenv('HOME', str(tmp_path))
    (tmp_path / 'w.npz').write_bytes(b'x')
    assert resolve_weights('~/w.npz') == tmp_path / 'w.npz'


@pytest.mark.parametrize('origin', ['explicit', 'env'])
def test_nonexistent_path_names_it(tmp_path, clean_env, monkeypatch, no_download, origin):
    missing = tmp_path / 'nowhere' / 'xfeat.pt'
    if origin == 'env':
        monkeypatch.setenv(ENV_VAR, str(missing))
        with pytest.raises(WeightsError) as info:
            resolve_weights('')
        assert ENV_VAR in str(info.value)
    else:
        with pytest.raises(WeightsError) as info:
            resolve_weights(str(missing))
    assert str(missing) in str(info.value)
    assert no_download == []


def test_directory_path_is_not_a_file(tmp_path, clean_env, no_download):
    with pytest.raises(WeightsError, match='not a file'):
        resolve_weights(str(tmp_path))


# ----------------------------------------------------------------------------- download

@pytest.mark.parametrize('exc', [urllib.error.URLError('no route to host'),
                                 urllib.error.HTTPError('u', 404, 'Not Found', None, None),
                                 TimeoutError('timed out'), ValueError('bad url')])
def test_download_failure_says_where_to_put_the_file(clean_env, monkeypatch, exc):
    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr(urllib.request, 'urlopen', fail)
    with pytest.raises(WeightsError) as info:
        W.download_weights(clean_env)
    message = str(info.value)
    assert str(clean_env) in message
    assert 'packaged copy' in message
    assert W.UPSTREAM_URL in message
    assert info.value.__cause__ is exc
    assert not clean_env.exists()


def test_successful_download_writes_atomically(tmp_path, monkeypatch):
    data = np.random.default_rng(3).integers(0, 256, 200_000, np.uint8).tobytes()
    destination = tmp_path / 'new' / 'dir' / 'xfeat.pt'
    seen = {}

    def fake_urlopen(url, timeout=None):
        seen['url'] = url
        seen['timeout'] = timeout
        return FakeResponse(data)

    real_replace = os.replace

    def spy_replace(src, dst):
        # At the moment of the rename the temp file is complete, beside the destination,
        # and the destination does not exist yet.
        seen['src'] = Path(src)
        assert Path(src).parent == Path(dst).parent
        assert Path(src).read_bytes() == data
        assert not Path(dst).exists()
        real_replace(src, dst)

    monkeypatch.setattr(urllib.request, 'urlopen', fake_urlopen)
    monkeypatch.setattr(os, 'replace', spy_replace)
    got = W.download_weights(destination, url='https://example.invalid/xfeat.pt',
                             blob_id=git_blob_id(data), timeout=5.0)
    assert Path(got) == destination
    assert destination.read_bytes() == data
    assert seen['url'] == 'https://example.invalid/xfeat.pt' and seen['timeout'] == 5.0
    assert seen['src'] != destination
    assert sorted(p.name for p in destination.parent.iterdir()) == ['xfeat.pt']


def test_download_replaces_existing_file(tmp_path, monkeypatch):
    destination = tmp_path / 'xfeat.pt'
    destination.write_bytes(b'old partial file')
    data = b'new weights' * 1000
    real_replace = os.replace

    def spy_replace(src, dst):
        assert Path(dst).read_bytes() == b'old partial file'
        real_replace(src, dst)

    monkeypatch.setattr(urllib.request, 'urlopen', lambda *a, **k: FakeResponse(data))
    monkeypatch.setattr(os, 'replace', spy_replace)
    W.download_weights(destination, url='https://example.invalid/x', blob_id=git_blob_id(data))
    assert destination.read_bytes() == data
    assert [p.name for p in tmp_path.iterdir()] == ['xfeat.pt']


def test_blob_id_mismatch_raises_and_writes_nothing(tmp_path, monkeypatch):
    data = b'not the weights you are looking for'
    monkeypatch.setattr(urllib.request, 'urlopen', lambda *a, **k: FakeResponse(data))
    destination = tmp_path / 'cache' / 'xfeat.pt'
    with pytest.raises(WeightsError) as info:
        W.download_weights(destination, url='https://example.invalid/x',
                           blob_id=W.UPSTREAM_GIT_BLOB)
    assert git_blob_id(data) in str(info.value)
    assert W.UPSTREAM_GIT_BLOB in str(info.value)
    assert not destination.exists()
    assert not destination.parent.exists() or list(destination.parent.iterdir()) == []


def test_download_command_with_wrong_content_fails_in_one_line(clean_env, monkeypatch,
                                                               capsys):
    monkeypatch.setattr(urllib.request, 'urlopen', lambda *a, **k: FakeResponse(b'html'))
    assert weights_cli.main(['download']) == 1
    err = capsys.readouterr().err
    assert err.startswith('xfeat_weights: error: ') and W.UPSTREAM_GIT_BLOB in err
    assert err.count('\n') == 1 and not clean_env.exists()


def test_download_command_fills_the_cache_the_lookup_then_uses(clean_env, monkeypatch, capsys,
                                                               weights_pt):
    data = weights_pt.read_bytes()
    monkeypatch.setattr(urllib.request, 'urlopen', lambda *a, **k: FakeResponse(data))
    monkeypatch.setattr(W, 'UPSTREAM_GIT_BLOB', git_blob_id(data))
    assert weights_cli.main(['download']) == 0
    assert clean_env.read_bytes() == data
    assert f'downloaded {clean_env}' in capsys.readouterr().out
    assert weights_cli.main(['download']) == 0  # already there: kept
    assert 'already there' in capsys.readouterr().out
    assert weights_cli.main(['which']) == 0
    assert capsys.readouterr().out.strip() == f'weights: {clean_env} (user cache)'
    assert len(load_weights(resolve_weights(''))) == N_TENSORS


def test_which_and_check_commands(clean_env, capsys, tmp_path, weights_npz):
    assert weights_cli.main(['which']) == 0
    assert capsys.readouterr().out.strip() == f'weights: {W.PACKAGED} (packaged copy)'
    assert weights_cli.main(['check', str(weights_npz)]) == 0
    assert f'{N_TENSORS} XFeat tensors, sha256 {SHA256_NPZ}' in capsys.readouterr().out
    bad = tmp_path / 'README.md'
    bad.write_text('# not weights\n')
    assert weights_cli.main(['check', str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith('xfeat_weights: error: ') and err.count('\n') == 1
    assert weights_cli.main(['which', '--weights', str(tmp_path / 'missing.npz')]) == 1
    assert 'not a file' in capsys.readouterr().err


def test_downloaded_shared_weights_load(tmp_path, monkeypatch, weights_pt):
    data = weights_pt.read_bytes()
    monkeypatch.setattr(urllib.request, 'urlopen', lambda *a, **k: FakeResponse(data))
    path = W.download_weights(tmp_path / 'xfeat.pt', url='https://example.invalid/x',
                              blob_id=git_blob_id(data))
    assert len(load_weights(path)) == N_TENSORS


# ----------------------------------------------------------------------------- blob id

@pytest.mark.parametrize('content', [b'', b'hello\n', b'\0' * 10, b'blob 5\0abcde',
                                     bytes(range(256)) * 300],
                         ids=['empty', 'hello', 'zeros', 'blob-header', 'bytes-76800'])
def test_git_blob_id_matches_git_hash_object(tmp_path, content):
    path = tmp_path / 'blob'
    path.write_bytes(content)
    out = subprocess.run(['git', 'hash-object', '--no-filters', str(path)], check=True,
                         capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    assert git_blob_id(content) == out


def test_git_blob_id_known_values():
    assert git_blob_id(b'') == 'e69de29bb2d1d6434b8b29ae775ad8c2e48c5391'
    assert git_blob_id(b'hello\n') == 'ce013625030ba8dba906f756967f9e9ca394464a'


def test_git_blob_id_of_shared_weights(tmp_path, weights_pt):
    out = subprocess.run(['git', 'hash-object', '--no-filters', str(weights_pt)], check=True,
                         capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    assert git_blob_id(weights_pt.read_bytes()) == out
