# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Shared test fixtures; also keeps every ROS node of the test run on loopback."""

import os
from pathlib import Path

import pytest

from xfeat_ros.ros.dds import ros_environment

# DDS must stay on this machine, this run gets its own domain, and every ROS
# process of the run loads the shipped Fast DDS profile (large messages through
# shared memory; an exported FASTDDS_DEFAULT_PROFILES_FILE wins). Set before any
# test imports rclpy or starts a node process (children inherit it).
ros_environment()

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get('XFEAT_ROS_SHARED', REPO.parent / 'shared'))
FIXTURES = REPO / 'test' / 'data'  # a few real frames and their golden outputs (README there)
HAVE_SHARED = SHARED.is_dir()
# Where data/ and golden/ are read from: ../shared when present, else the fixtures.
DATA_ROOT = SHARED if HAVE_SHARED else FIXTURES
MODELS = SHARED / 'models'
DATA = SHARED / 'data'
GOLDEN = SHARED / 'golden'
NEEDS_SHARED = (f'needs ../shared ({SHARED}: the full data sets, models and golden outputs), '
                'which is not beside this clone; the fixtures in test/data cover the short '
                'tests only')
MAX_TEST_ID = 120  # characters; colcon reads pytest's summary lines with a bounded reader


def gpu_skip_reason():
    """
    Return why the tests marked ``gpu`` are skipped here (one sentence), or None.

    The one GPU skip of the suite: a test needing CuPy and a CUDA device says so
    with ``@pytest.mark.gpu`` (or a ``pytest.param(..., marks=pytest.mark.gpu)``)
    and nothing else; :func:`pytest_collection_modifyitems` skips it with this reason.
    """
    from xfeat_ros.features.gpu import unavailable_reason
    reason = unavailable_reason()
    return None if reason is None else f'needs CuPy and a CUDA device: {reason}'


def pytest_configure(config):
    """Register the project's markers."""
    config.addinivalue_line('markers', 'gpu: needs CuPy and a CUDA device (skipped, with the '
                                       'reason, where either is missing)')
    config.addinivalue_line('markers', 'ros: starts ROS 2 nodes (needs rclpy and messages)')
    config.addinivalue_line('markers', 'linter: ament lint tests')
    config.addinivalue_line('markers', 'copyright: ament_copyright lint test')
    config.addinivalue_line('markers', 'flake8: ament_flake8 lint test')
    config.addinivalue_line('markers', 'pep257: ament_pep257 lint test')


def pytest_collection_modifyitems(config, items):
    """
    Refuse test ids longer than :data:`MAX_TEST_ID`; skip ``gpu`` tests where no GPU is usable.

    colcon stops reading pytest's output at a long line. The skip of ``gpu``
    tests is :func:`gpu_skip_reason`'s, added before any fixture is set up.
    """
    long_ids = [item.nodeid for item in items if len(item.nodeid) > MAX_TEST_ID]
    if long_ids:
        shown = ', '.join(f'{i[:80]}... ({len(i)} chars)' for i in long_ids[:3])
        raise pytest.UsageError(f'{len(long_ids)} test ids are longer than {MAX_TEST_ID} '
                                f'characters (give them short ids): {shown}')
    gpu_items = [item for item in items if item.get_closest_marker('gpu') is not None]
    reason = gpu_skip_reason() if gpu_items else None
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope='session')
def shared_dir():
    """Return the ../shared folder (models, data, golden); skip, saying so, where absent."""
    if not HAVE_SHARED:
        pytest.skip(NEEDS_SHARED)
    return SHARED


@pytest.fixture(scope='session')
def data_dir():
    """Return the folder holding ``data/`` and ``golden/``: ../shared, else test/data."""
    return DATA_ROOT


def need(path):
    """Return ``path``; skip the test (saying ../shared is needed) where it does not exist."""
    if not Path(path).exists():
        pytest.skip(f'{path} is not in the fixtures: {NEEDS_SHARED}')
    return path


@pytest.fixture(scope='session')
def weights_npz():
    """Return the path of the backbone weights as .npz (the copy packaged with xfeat_ros)."""
    from xfeat_ros.features.weights import packaged_weights
    return packaged_weights()


@pytest.fixture(scope='session')
def weights(weights_npz):
    """Return the loaded backbone weights dict."""
    from xfeat_ros.features.weights import load_weights
    return load_weights(weights_npz)


@pytest.fixture(scope='session')
def cpu_pipeline(weights):
    """Return one CPU pipeline (ONNX Runtime) for the whole run."""
    from xfeat_ros.features.backbone import OnnxRuntimeBackbone
    from xfeat_ros.features.network_onnx import build_model
    from xfeat_ros.features.pipeline import CpuPipeline
    return CpuPipeline(OnnxRuntimeBackbone(build_model(weights)), top_k=4096, threshold=0.05)


@pytest.fixture(scope='module')
def cp():
    """Return the cupy module (GPU tests only: they are skipped where CuPy is missing)."""
    import cupy
    return cupy


@pytest.fixture()
def stream(cp):
    """Return a fresh blocking CUDA stream, ordered after set-up work on the default one."""
    return cp.cuda.Stream(non_blocking=False)


@pytest.fixture
def ros_parameters():
    """Return the node's parameter module; skip where ROS messages are not installed (GPU box)."""
    pytest.importorskip('rcl_interfaces', reason='the ROS 2 wheels are not installed here '
                                                 '(the node parameter table needs them)')
    from xfeat_ros.ros import parameters
    return parameters
