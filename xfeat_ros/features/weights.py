# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
r"""
Find, load and check XFeat backbone weights (upstream key names); ``xfeat_weights``.

Lookup order (:func:`find_weights`): an explicit path (the node's ``weights``
parameter, the tools' ``--weights``) -> the ``XFEAT_ROS_WEIGHTS`` environment
variable -> the user cache (``$XDG_CACHE_HOME/xfeat_ros/xfeat.pt``) -> the copy
packaged with xfeat_ros (``xfeat_ros/data/xfeat_backbone.npz``, upstream's
Apache-2.0 weights, see ``NOTICE.md`` there). Nothing is downloaded at run
time: ``xfeat_weights download`` fetches upstream's ``weights/xfeat.pt`` into
the cache from a URL pinned to one commit, verified against the git blob id
that commit records for the file (the repository's own content address:
SHA-1 of ``b'blob <size>\\0' + content``).

Weights load as a dict of float32 NumPy arrays from either a PyTorch state dict
(``.pt``/``.pth``, needs torch) or an ``.npz`` with the same keys. Keys that
sparse detection does not use (``fine_matcher.*``, ``num_batches_tracked``) are
ignored; a missing or mis-shaped backbone tensor is a :class:`WeightsError`.
"""

import hashlib
import os
from pathlib import Path
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib

import numpy as np

from xfeat_ros.errors import WeightsError
from xfeat_ros.logs import package_logger

LOG = package_logger(__name__)

ENV_VAR = 'XFEAT_ROS_WEIGHTS'
UPSTREAM_COMMIT = '9539f1f3363d6556fdbcf48c15f4b20c6095ccc0'
UPSTREAM_URL = (
    'https://github.com/verlab/accelerated_features/raw/'
    f'{UPSTREAM_COMMIT}/weights/xfeat.pt')
UPSTREAM_GIT_BLOB = '9da942e9c7406b8add3746bf98d4b1840233cd92'
CACHE_NAME = 'xfeat.pt'
PACKAGED = Path(__file__).resolve().parents[1] / 'data' / 'xfeat_backbone.npz'
PACKAGED_SHA256 = '88af23fb87f57929a0a5ad7d9764fa5440d619672aab7138fd43422d3f19aefd'
ZIP_MAGIC = b'PK\x03\x04'   # .npz and PyTorch's zip format (torch.save since 1.6)
PICKLE_MAGIC = b'\x80'       # PyTorch's legacy format starts with a pickle protocol byte


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


def download_weights(destination, url=None, blob_id=None, timeout=60.0):
    """
    Download upstream weights to ``destination`` after checking their blob id.

    ``url`` and ``blob_id`` default to :data:`UPSTREAM_URL` and
    :data:`UPSTREAM_GIT_BLOB`. The file is written beside ``destination`` and
    renamed onto it only when complete and verified.
    """
    destination = Path(destination)
    url = url or UPSTREAM_URL
    blob_id = blob_id or UPSTREAM_GIT_BLOB
    LOG.info('downloading XFeat weights from %s', url)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data = response.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise WeightsError(
            f'could not download XFeat weights from {url} ({exc}); offline, the packaged '
            f'copy is used, or put upstream weights/xfeat.pt at {destination}') from exc
    got = git_blob_id(data)
    if got != blob_id:
        raise WeightsError(f'downloaded weights have git blob id {got}, expected {blob_id}')
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=destination.parent, delete=False) as tmp:
        tmp.write(data)
    os.replace(tmp.name, destination)
    return destination


def packaged_weights():
    """Return the path of the weights packaged with xfeat_ros (``PACKAGED``)."""
    if not PACKAGED.is_file():
        raise WeightsError(f'the packaged weights {PACKAGED} are missing from this install; '
                           f'set the weights parameter or {ENV_VAR}')
    return PACKAGED


def find_weights(path=''):
    """
    Return ``(path, origin)`` of the weights to use, following the lookup order.

    ``origin`` says where the file was found ('weights parameter',
    '$XFEAT_ROS_WEIGHTS', 'user cache', 'packaged copy'). A path named by the
    parameter or the variable must exist (no silent fallback): else
    :class:`WeightsError`.
    """
    for candidate, origin in ((path, 'weights parameter'),
                              (os.environ.get(ENV_VAR, ''), f'${ENV_VAR}')):
        if candidate:
            candidate = Path(candidate).expanduser()
            if not candidate.is_file():
                raise WeightsError(f'{origin} names {candidate}, which is not a file')
            return candidate, origin
    cached = cache_dir() / CACHE_NAME
    if cached.is_file():
        return cached, 'user cache'
    return packaged_weights(), 'packaged copy'


def resolve_weights(path=''):
    """Return the weights file to use (:func:`find_weights` without the origin)."""
    return find_weights(path)[0]


def weights_summary(path=''):
    """Return the log line naming the weights file in use: ``weights: <file> (<origin>)``."""
    found, origin = find_weights(path)
    return f'weights: {found} ({origin})'


def _first_line(exc):
    """Return the first line of an exception's message (libraries add long advice)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


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
        raise WeightsError(f'cannot read PyTorch weights {path}: {_first_line(exc)}') from exc
    if not isinstance(state, dict):
        raise WeightsError(f'{path} holds a {type(state).__name__}, not a state dict')
    return {k: v.detach().cpu().numpy() for k, v in state.items() if hasattr(v, 'detach')}


def _load_npz(path):
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except ValueError as exc:
        if 'pickle' in str(exc):
            raise WeightsError(f'{path} holds Python objects (pickled), not plain arrays; '
                               'they are not loaded') from exc
        raise WeightsError(f'cannot read NumPy weights {path}: {_first_line(exc)}') from exc
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise WeightsError(f'cannot read NumPy weights {path}: {_first_line(exc)}') from exc


def _file_format(path):
    """Return 'npz' or 'torch' from the file's first bytes; WeightsError for anything else."""
    with open(path, 'rb') as handle:
        head = handle.read(4)
    if path.suffix == '.npz':
        if head != ZIP_MAGIC:
            raise WeightsError(f'{path} is not an .npz weights file (not a zip archive)')
        return 'npz'
    if head == ZIP_MAGIC or head[:1] == PICKLE_MAGIC:
        return 'torch'
    raise WeightsError(f'{path} is not a weights file (expected an .npz or a PyTorch '
                       f'state dict; it starts with {head!r})')


def load_weights(path):
    """
    Load a backbone state dict as ``{name: float32 ndarray}`` and check it.

    Accepts upstream's full ``xfeat.pt`` (with ``fine_matcher.*``), a
    backbone-only state dict, or an ``.npz`` with the same keys.
    """
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f'weights file {path} does not exist')
    raw = _load_npz(path) if _file_format(path) == 'npz' else _load_torch(path)
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
