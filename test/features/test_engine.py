# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""The one engine factory, configuration and command-line options; device error types."""

import argparse
import builtins
import logging
import sys

import pytest
from xfeat_ros import defaults
from xfeat_ros.errors import BackendError, DeviceError
from xfeat_ros.features import factory as factory_module
from xfeat_ros.features.engine import (BACKENDS, CpuEngine, device_errors, EngineConfig,
                                       group_submit)
from xfeat_ros.features.factory import add_engine_args, create_engine, engine_config
from xfeat_ros.runtime.frontend import OutputConfig
from xfeat_ros.runtime.scheduler import SchedulerConfig


def test_one_default_configuration(ros_parameters):
    config = EngineConfig()
    assert (config.top_k, config.threshold, config.min_cossim) == \
        (defaults.TOP_K, defaults.THRESHOLD, defaults.MIN_COSSIM) == (4096, 0.05, 0.82)
    params = {name: default for name, (default, _) in ros_parameters.PARAMETERS.items()}
    params['stereo_pairs'] = []
    assert ros_parameters.engine_config(params) == config
    assert ros_parameters.scheduler_config(params) == SchedulerConfig()
    assert ros_parameters.output_config(params) == OutputConfig()
    backend = ros_parameters.PARAMETERS['backend'][1]
    assert backend.additional_constraints == 'one of: ' + ', '.join(BACKENDS)


def test_command_line_options_make_the_config():
    parser = argparse.ArgumentParser()
    add_engine_args(parser)
    assert engine_config(parser.parse_args([])) == EngineConfig()
    args = parser.parse_args(['--backend', 'onnxruntime', '--top-k', '512', '--num-threads', '2',
                              '--min-cossim', '0.9', '--weights', 'w.npz'])
    assert engine_config(args) == EngineConfig('onnxruntime', 'w.npz', 0, 2, 512, 0.05, 0.9)
    with pytest.raises(SystemExit):
        parser.parse_args(['--backend', 'cuda'])


@pytest.fixture
def no_gpu_engine(monkeypatch):
    """Make the GPU engine's factory unimportable, whatever this machine has."""
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == 'xfeat_ros.features.gpu.factory':
            raise ImportError('cupy is not installed')
        return real_import(name, *args, **kwargs)
    monkeypatch.delitem(sys.modules, 'xfeat_ros.features.gpu.factory', raising=False)
    monkeypatch.setattr(builtins, '__import__', fake_import)
    built = []
    monkeypatch.setattr(factory_module, 'cpu_engine', lambda config: built.append(config) or
                        'cpu engine')
    return built


def test_auto_falls_back_to_the_cpu_and_says_why(no_gpu_engine, caplog):
    with caplog.at_level(logging.INFO, logger='xfeat_ros.features.engine'):
        assert create_engine(EngineConfig(top_k=100)) == 'cpu engine'
    assert no_gpu_engine == [EngineConfig(top_k=100)]
    assert 'no GPU engine (cupy is not installed); using onnxruntime' in caplog.text


def test_a_named_gpu_backend_does_not_fall_back(no_gpu_engine):
    with pytest.raises(BackendError, match='pytorch: the GPU engine cannot be imported'):
        create_engine(EngineConfig('pytorch'))
    with pytest.raises(BackendError, match='unknown backend'):
        create_engine(EngineConfig('cuda'))
    assert create_engine(EngineConfig('onnxruntime')) == 'cpu engine'
    assert no_gpu_engine == [EngineConfig('onnxruntime')]


def test_cpu_engine_from_loaded_weights(weights):
    engine = create_engine(EngineConfig('onnxruntime', weights, top_k=64))
    assert isinstance(engine, CpuEngine) and engine.device == 'cpu'
    assert engine.pipeline.top_k == 64 and group_submit(engine) is None


class FakeEngine:
    def __init__(self, device):
        self.device = device


def test_device_errors_are_typed():
    assert device_errors(FakeEngine('cpu')) == (DeviceError,)
    gpu = device_errors(FakeEngine('cuda:0'))
    assert DeviceError in gpu and BackendError in gpu and MemoryError in gpu
    assert RuntimeError not in gpu and not issubclass(RuntimeError, gpu)
