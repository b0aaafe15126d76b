# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
r"""
Find, download, verify and load XFeat backbone weights (upstream key names).

Lookup order (:func:`resolve_weights`): an explicit path -> the
``XFEAT_ROS_WEIGHTS`` environment variable -> the user cache directory ->
download of upstream's ``weights/xfeat.pt`` from a URL pinned to one commit,
verified against the git blob id that commit records for the file (the
repository's own content address: SHA-1 of ``b'blob <size>\\0' + content``).

Weights load as a dict of float32 NumPy arrays from either a PyTorch state dict
(``.pt``/``.pth``, needs torch) or an ``.npz`` with the same keys. Keys that
sparse detection does not use (``fine_matcher.*``, ``num_batches_tracked``) are
ignored; a missing or mis-shaped backbone tensor is a :class:`WeightsError`.
"""

import hashlib
import logging
import os
from pathlib import Path
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib

import numpy as np

from xfeat_ros.errors import WeightsError

LOG = logging.getLogger(__name__)

ENV_VAR = 'XFEAT_ROS_WEIGHTS'
UPSTREAM_COMMIT = '9539f1f3363d6556fdbcf48c15f4b20c6095ccc0'
UPSTREAM_URL = (
    'https://github.com/verlab/accelerated_features/raw/'
    f'{UPSTREAM_COMMIT}/weights/xfeat.pt')
UPSTREAM_GIT_BLOB = '9da942e9c7406b8add3746bf98d4b1840233cd92'
CACHE_NAME = 'xfeat.pt'


def _basic(prefix, cin, cout, k):
    return {f'{prefix}.layer.0.weight': (cout, cin, k, k),
            f'{prefix}.layer.1.running_mean': (cout,),
            f'{prefix}.layer.1.running_var': (cout,)}


def _conv(prefix, cin, cout):
    return {f'{prefix}.weight': (cout, cin, 1, 1), f'{prefix}.bias': (cout,)}


def expected_shapes():
    """Map every backbone tensor name (upstream ``XFeatModel``) to its shape."""
    shapes = {}
    layers = {
        'block1': [(1, 4, 3), (4, 8, 3), (8, 8, 3), (8, 24, 3)],
        'block2': [(24, 24, 3), (24, 24, 3)],
        'block3': [(24, 64, 3), (64, 64, 3), (64, 64, 1)],
        'block4': [(64, 64, 3), (64, 64, 3), (64, 64, 3)],
        'block5': [(64, 128, 3), (128, 128, 3), (128, 128, 3), (128, 64, 1)],
        'block_fusion': [(64, 64, 3), (64, 64, 3)],
        'heatmap_head': [(64, 64, 1), (64, 64, 1)],
        'keypoint_head': [(64, 64, 1), (64, 64, 1), (64, 64, 1)],
    }
    for block, specs in layers.items():
        for i, (cin, cout, k) in enumerate(specs):
            shapes.update(_basic(f'{block}.{i}', cin, cout, k))
    shapes.update(_conv('skip1.1', 1, 24))
    shapes.update(_conv('block_fusion.2', 64, 64))
    shapes.update(_conv('heatmap_head.2', 64, 1))
    shapes.update(_conv('keypoint_head.3', 64, 65))
    return shapes


def cache_dir():
    """User cache directory of xfeat_ros (``$XDG_CACHE_HOME/xfeat_ros``)."""
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(Path.home(), '.cache')
    return Path(base) / 'xfeat_ros'


def git_blob_id(data):
    r"""Git's content address of a file: SHA-1 of ``b'blob <len>\\0' + data``."""
    digest = hashlib.sha1(usedforsecurity=False)
    digest.update(b'blob %d\0' % len(data))
    digest.update(data)
    return digest.hexdigest()


def sha256_file(path):
    """Hex SHA-256 of a file (used to key caches derived from weights)."""
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b''):
            digest.update(chunk)
    return digest.hexdigest()


def download_weights(destination, url=UPSTREAM_URL, blob_id=UPSTREAM_GIT_BLOB,
                     timeout=60.0):
    """Download upstream weights to ``destination`` after checking their blob id."""
    destination = Path(destination)
    LOG.info('downloading XFeat weights from %s', url)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data = response.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise WeightsError(
            f'could not download XFeat weights from {url} ({exc}). Offline? Put '
            f'upstream weights/xfeat.pt at {destination}, or set {ENV_VAR} or the '
            "node's 'weights' parameter to a .pt or .npz file") from exc
    got = git_blob_id(data)
    if got != blob_id:
        raise WeightsError(f'downloaded weights have git blob id {got}, expected {blob_id}')
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=destination.parent, delete=False) as tmp:
        tmp.write(data)
    os.replace(tmp.name, destination)
    return destination


def resolve_weights(path='', download=True):
    """Return the weights file to use, following the documented lookup order."""
    for candidate, origin in ((path, 'the weights path'),
                              (os.environ.get(ENV_VAR, ''), ENV_VAR)):
        if candidate:
            candidate = Path(candidate).expanduser()
            if not candidate.is_file():
                raise WeightsError(f'{origin} names {candidate}, which is not a file')
            return candidate
    cached = cache_dir() / CACHE_NAME
    if cached.is_file():
        return cached
    if not download:
        raise WeightsError(
            f'no XFeat weights: set the weights parameter or {ENV_VAR}, or put '
            f'upstream weights/xfeat.pt at {cached}')
    return download_weights(cached)


def _load_torch(path):
    try:
        import torch
    except ImportError as exc:
        raise WeightsError(
            f'{path} is a PyTorch file but torch is not installed; '
            'convert it to .npz or install torch') from exc
    try:
        state = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as exc:  # torch raises many types for a corrupt file
        raise WeightsError(f'cannot read PyTorch weights {path}: {exc}') from exc
    if not isinstance(state, dict):
        raise WeightsError(f'{path} holds a {type(state).__name__}, not a state dict')
    return {k: v.detach().cpu().numpy() for k, v in state.items() if hasattr(v, 'detach')}


def _load_npz(path):
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise WeightsError(f'cannot read NumPy weights {path}: {exc}') from exc


def load_weights(path):
    """
    Load a backbone state dict as ``{name: float32 ndarray}`` and check it.

    Accepts upstream's full ``xfeat.pt`` (with ``fine_matcher.*``), a
    backbone-only state dict, or an ``.npz`` with the same keys.
    """
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f'weights file {path} does not exist')
    raw = _load_npz(path) if path.suffix == '.npz' else _load_torch(path)
    shapes = expected_shapes()
    missing = sorted(set(shapes) - set(raw))
    if missing:
        raise WeightsError(
            f'{path} lacks {len(missing)} XFeat tensors, e.g. {missing[:3]}')
    weights = {}
    for name, shape in shapes.items():
        value = np.asarray(raw[name], dtype=np.float32)
        if value.shape != shape:
            raise WeightsError(f'{path}: {name} has shape {value.shape}, expected {shape}')
        if not np.all(np.isfinite(value)):
            raise WeightsError(f'{path}: {name} holds non-finite values')
        weights[name] = value
    return weights
