# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""Shared test fixtures; also keeps every ROS node of the test run on loopback."""

import os
from pathlib import Path

import pytest

from xfeat_ros.dds import ros_environment

# DDS must stay on this machine, this run gets its own domain, and every ROS
# process of the run loads the shipped Fast DDS profile (large messages through
# shared memory; an exported FASTDDS_DEFAULT_PROFILES_FILE wins). Set before any
# test imports rclpy or starts a node process (children inherit it).
ros_environment()

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get('XFEAT_ROS_SHARED', REPO.parent / 'shared'))
MODELS = SHARED / 'models'
DATA = SHARED / 'data'
GOLDEN = SHARED / 'golden'


def pytest_configure(config):
    """Register the project's markers."""
    config.addinivalue_line('markers', 'gpu: needs a CUDA GPU (skipped where none)')
    config.addinivalue_line('markers', 'ros: starts ROS 2 nodes (needs rclpy and messages)')
    config.addinivalue_line('markers', 'linter: ament lint tests')


@pytest.fixture(scope='session')
def shared_dir():
    """Return the ../shared folder (models, data, golden); skip where absent."""
    if not SHARED.is_dir():
        pytest.skip(f'{SHARED} (models, data, golden) is not present beside the repository')
    return SHARED


@pytest.fixture(scope='session')
def weights_npz(shared_dir):
    """Return the path of the backbone weights as .npz."""
    return MODELS / 'xfeat_backbone.npz'


@pytest.fixture(scope='session')
def weights(weights_npz):
    """Return the loaded backbone weights dict."""
    from xfeat_ros.weights import load_weights
    return load_weights(weights_npz)


@pytest.fixture(scope='session')
def cpu_pipeline(weights):
    """Return one CPU pipeline (ONNX Runtime) for the whole run."""
    from xfeat_ros.backbone import OnnxRuntimeBackbone
    from xfeat_ros.network_onnx import build_model
    from xfeat_ros.pipeline import CpuPipeline
    return CpuPipeline(OnnxRuntimeBackbone(build_model(weights)), top_k=4096, threshold=0.05)
