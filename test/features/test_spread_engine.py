# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The spread's settings in the engines, the factory, the command lines and the node's table."""

import argparse
import logging
import sys
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest
from xfeat_ros.defaults import MIN_COSSIM
from xfeat_ros.errors import ParameterError
from xfeat_ros.features import factory as factory_module
from xfeat_ros.features.engine import EngineConfig
from xfeat_ros.features.factory import add_engine_args, create_engine, engine_config
from xfeat_ros.features.pipeline import CpuPipeline
from xfeat_ros.features.spread import CANDIDATE_FACTOR, Spread


@pytest.fixture
def built(monkeypatch):
    """Record the configurations the CPU engine is built from."""
    configs = []
    monkeypatch.setattr(factory_module, 'cpu_engine', lambda config: configs.append(config) or
                        'cpu engine')
    return configs


@pytest.fixture
def gpu_factory(monkeypatch):
    """Stand in for the GPU factory module, recording what the GPU engine is built with."""
    calls = []

    def create_gpu_engine(backend, weights, gpu, top_k, threshold, min_cossim, spread):
        calls.append((backend, top_k, spread))
        return SimpleNamespace(name=backend, device='cuda:0')
    module = ModuleType('xfeat_ros.features.gpu.factory')
    module.create_gpu_engine = create_gpu_engine
    monkeypatch.setitem(sys.modules, 'xfeat_ros.features.gpu.factory', module)
    return calls


@pytest.mark.parametrize('backend', ['auto', 'pytorch', 'tensorrt', 'onnxruntime_cuda'])
def test_a_gpu_backend_takes_the_spread(backend, built, gpu_factory):
    create_engine(EngineConfig(backend, top_k=300, min_distance=10.0))
    create_engine(EngineConfig(backend, top_k=200, grid_cell_px=32, max_per_cell=2))
    assert gpu_factory == [(backend, 300, Spread(10.0)), (backend, 200, Spread(0.0, 32, 2))]
    assert built == []


def test_invalid_spread_settings_stop_before_any_engine(built, gpu_factory):
    for settings in ({'min_distance': -1.0}, {'grid_cell_px': 32}):
        for backend in ('pytorch', 'auto'):
            with pytest.raises(ParameterError):
                create_engine(EngineConfig(backend, **settings))
    assert built == [] and gpu_factory == []


def test_auto_without_a_gpu_takes_the_cpu_engine_with_the_spread(built, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, 'xfeat_ros.features.gpu.factory', None)  # import fails
    config = EngineConfig(min_distance=10.0)
    with caplog.at_level(logging.INFO, logger='xfeat_ros.features.engine'):
        assert create_engine(config) == 'cpu engine'
    assert built == [config] and config.spread == Spread(10.0)
    assert 'no GPU engine' in caplog.text


def test_command_line_and_node_parameters_make_the_spread(ros_parameters):
    parser = argparse.ArgumentParser()
    add_engine_args(parser)
    assert engine_config(parser.parse_args([])).spread == Spread()
    args = parser.parse_args(['--min-distance', '15', '--grid-cell-px', '40',
                              '--max-per-cell', '3'])
    assert engine_config(args).spread == Spread(15.0, 40, 3)
    with pytest.raises(ParameterError, match='grid_cell_px and max_per_cell go together'):
        engine_config(parser.parse_args(['--grid-cell-px', '40']))
    params = {name: default for name, (default, _) in ros_parameters.PARAMETERS.items()}
    assert ros_parameters.engine_config(params).spread == Spread()
    params.update(min_distance=20.0, grid_cell_px=0, max_per_cell=0)
    assert ros_parameters.engine_config(params).spread == Spread(20.0)
    for name in ('min_distance', 'grid_cell_px', 'max_per_cell'):
        assert ros_parameters.PARAMETERS[name][1].read_only


def textured_image(seed=0, shape=(240, 320)):
    rng = np.random.default_rng(seed)
    small = rng.random((shape[0] // 8, shape[1] // 8)).astype(np.float32)
    return np.kron(small, np.ones((8, 8), np.float32))


def test_candidates_are_the_plain_detection_of_more_keypoints(cpu_pipeline):
    grey = textured_image()
    backbone = cpu_pipeline.backbone
    plain = CpuPipeline(backbone, top_k=100).extract(grey)
    off = CpuPipeline(backbone, top_k=100, spread=Spread()).extract(grey)
    for name in ('keypoints', 'scores', 'descriptors'):
        np.testing.assert_array_equal(getattr(off, name), getattr(plain, name))
    assert off.spread is None and plain.spread is None
    more = CpuPipeline(backbone, top_k=100 * CANDIDATE_FACTOR).extract(grey)
    candidates = CpuPipeline(backbone, top_k=100, spread=Spread(12.0)).extract(grey)
    assert len(candidates) == 100 * CANDIDATE_FACTOR
    for name in ('keypoints', 'scores', 'descriptors'):
        np.testing.assert_array_equal(getattr(candidates, name), getattr(more, name))
    assert candidates.spread == Spread(12.0, top_k=100, min_cossim=MIN_COSSIM)


@pytest.mark.parametrize('backend', ['auto', 'pytorch', 'tensorrt', 'onnxruntime_cuda'])
def test_a_gpu_backend_takes_carried_tracks(backend, built, gpu_factory, caplog):
    with caplog.at_level(logging.WARNING, logger='xfeat_ros.features.engine'):
        engine = create_engine(EngineConfig(backend, carry_frames=3, min_distance=10.0))
    assert engine.name == backend and built == []
    assert gpu_factory == [(backend, EngineConfig().top_k, Spread(10.0, carry_frames=3))]
    assert caplog.text == ''


def test_carry_settings_from_the_command_line_and_the_node(ros_parameters):
    parser = argparse.ArgumentParser()
    add_engine_args(parser)
    assert engine_config(parser.parse_args(['--carry-frames', '4'])).spread == \
        Spread(carry_frames=4)
    with pytest.raises(ParameterError, match='must be >= 0'):
        engine_config(parser.parse_args(['--carry-frames', '-1']))
    params = {name: default for name, (default, _) in ros_parameters.PARAMETERS.items()}
    params.update(carry_frames=5)
    assert ros_parameters.engine_config(params).spread == Spread(carry_frames=5)
    default, descriptor = ros_parameters.PARAMETERS['carry_frames']
    assert descriptor.read_only and default == 0


def test_carry_alone_detects_top_k_and_hands_out_the_dense_map(cpu_pipeline):
    grey = textured_image(1)
    backbone = cpu_pipeline.backbone
    plain = CpuPipeline(backbone, top_k=100).extract(grey)
    carry = CpuPipeline(backbone, top_k=100, spread=Spread(carry_frames=2)).extract(grey)
    for name in ('keypoints', 'scores', 'descriptors'):
        np.testing.assert_array_equal(getattr(carry, name), getattr(plain, name))
    assert plain.dense is None and carry.spread == Spread(carry_frames=2, top_k=100,
                                                          min_cossim=MIN_COSSIM)
    assert carry.dense.feats.shape == (64, 28, 40) and carry.dense.model_hw == (224, 320)
    np.testing.assert_allclose(np.linalg.norm(carry.dense.feats, axis=0), 1.0, atol=1e-5)
    spread = CpuPipeline(backbone, top_k=100, spread=Spread(12.0)).extract(grey)
    assert spread.dense is None
