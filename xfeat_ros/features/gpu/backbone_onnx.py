# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The GPU backbones that run the project's ONNX graph: TensorRT and ONNX Runtime CUDA.

Same interface as :mod:`xfeat_ros.features.gpu.backbone` (``name``, ``run(image,
outputs, stream)`` on [B, ...] device buffers, ``release(image)``). Both are
UNVERIFIED on the machines of this project (no TensorRT for them, no CUDA
execution provider on the GPU machine); only :func:`bind_by_shape` and
:func:`with_batch` are tested.
"""

import os
from pathlib import Path
import tempfile

import numpy as np

from xfeat_ros.errors import BackendError
from xfeat_ros.features.gpu.backbone import expected_output_shapes, PRECISIONS, weights_digest
from xfeat_ros.features.network_onnx import build_model, INPUT_NAME, OUTPUT_NAMES
from xfeat_ros.features.weights import cache_dir
from xfeat_ros.logs import package_logger

LOG = package_logger(__name__)


def with_batch(model, batch):
    """
    Set the leading (batch) dimension of ``model``'s input and outputs; return ``model``.

    ``batch`` is an int (a fixed batch) or a name (a symbolic, dynamic batch).
    The graph's operations work per image (instance norm over H and W,
    convolutions, pooling, resize to the sizes of other tensors, depth to
    space), so only the declared shapes change.
    """
    for value in list(model.graph.input) + list(model.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        if isinstance(batch, str):
            dim.dim_param = batch
        else:
            dim.dim_value = int(batch)
    return model


# -- TensorRT -----------------------------------------------------------------------------------

def _progress_monitor(trt):
    """Return a ``trt.IProgressMonitor`` that logs build phases (None before TensorRT 10)."""
    base = getattr(trt, 'IProgressMonitor', None)
    if base is None:
        return None

    class _BuildProgress(base):
        def __init__(self):
            base.__init__(self)

        def phase_start(self, phase_name, parent_phase, num_steps):
            LOG.info('TensorRT build: %s (%d steps)', phase_name, num_steps)

        def step_complete(self, phase_name, step):
            return True  # never cancel

        def phase_finish(self, phase_name):
            LOG.info('TensorRT build: %s done', phase_name)

    return _BuildProgress()


class _TrtState:
    """Deserialized engine, its execution context and the bound tensor names."""

    def __init__(self, engine, context, input_name, output_names):
        self.engine = engine
        self.context = context
        self.input_name = input_name
        self.output_names = output_names  # role -> tensor name, in OUTPUT_NAMES order


def bind_by_shape(io_tensors, mh, mw, batch=1):
    """
    Assign engine tensors to roles by SHAPE, never by name.

    ``io_tensors`` lists ``(name, is_input, shape, is_float32)``. Every dimension
    must be positive (a dynamic -1 would otherwise wrap to a huge size). Returns
    ``(input_name, {role: name})``; raises :class:`BackendError` for a missing,
    duplicated, non-float32 or mis-shaped tensor (``batch`` frames expected).
    """
    wanted = expected_output_shapes(mh, mw, batch)
    by_shape = {shape: role for role, shape in wanted.items()}
    inputs, outputs = [], {}
    for name, is_input, shape, is_float32 in io_tensors:
        shape = tuple(int(d) for d in shape)
        if not shape or any(d <= 0 for d in shape):
            raise BackendError(f'engine tensor {name!r} has a non-positive dimension: {shape}')
        if not is_float32:
            raise BackendError(f'engine tensor {name!r} is not float32')
        if is_input:
            if shape != (batch, 1, mh, mw):
                raise BackendError(
                    f'engine input {name!r} is {shape}, expected {(batch, 1, mh, mw)}')
            inputs.append(name)
            continue
        role = by_shape.get(shape)
        if role is None:
            raise BackendError(f'engine output {name!r} has unexpected shape {shape}')
        if role in outputs:
            raise BackendError(f'two engine outputs have the {role} shape {shape}')
        outputs[role] = name
    if len(inputs) != 1:
        raise BackendError(f'engine has {len(inputs)} inputs, expected 1')
    missing = [role for role in OUTPUT_NAMES if role not in outputs]
    if missing:
        raise BackendError(f'engine lacks outputs {missing} (bound by shape)')
    return inputs[0], {role: outputs[role] for role in OUTPUT_NAMES}


class TensorRTBackbone:
    """
    TensorRT 10 engine built from the project's ONNX graph (FP16 by default).

    UNVERIFIED HERE: TensorRT cannot be installed on the machines this project
    is developed and tested on (no wheel for them, no TensorRT on the GPU
    machine), so this backend was written against the TensorRT 10 Python API
    and has never run. It is kept thin: the graph is
    :func:`xfeat_ros.features.network_onnx.build_model` at a fixed input size with its
    batch dimension set to the batch's frame count (:func:`with_batch`),
    outputs are bound by shape (:func:`bind_by_shape`), and everything else
    (decode, detection, matching) is shared with the PyTorch backend.

    Engines are built on first use of a (batch, model size) pair (progress is
    logged; a build can take minutes) and cached under ``cache`` with a name
    encoding the batch, input size, precision, TensorRT version, GPU compute
    capability and a digest of the weights; a change of any of them builds a
    new engine, and ``rebuild=True`` forces a build.
    """

    name = 'tensorrt'

    def __init__(self, weights, gpu=0, precision='fp16', cache=None, rebuild=False,
                 workspace_bytes=1 << 30):
        """Check that TensorRT and the device are usable; engines are built lazily."""
        try:
            import tensorrt as trt
        except ImportError as exc:
            raise BackendError('TensorRT (python package tensorrt) is not installed') from exc
        if precision not in PRECISIONS:
            raise BackendError(f'unknown precision {precision!r} (choose from {PRECISIONS})')
        import cupy
        self.trt = trt
        self.cupy = cupy
        self.gpu = int(gpu)
        self.weights = weights
        self.precision = precision
        self.rebuild = bool(rebuild)
        self.workspace_bytes = int(workspace_bytes)
        self.cache = Path(cache) if cache else cache_dir() / 'tensorrt'
        self.capability = str(cupy.cuda.Device(self.gpu).compute_capability)
        self.tag = weights_digest(weights)
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self.logger)
        self._states = {}

    def engine_path(self, mh, mw, batch=1):
        """Cache file of the engine for one batch and input size."""
        return self.cache / (f'xfeat_b{batch}_{mh}x{mw}_{self.precision}'
                             f'_trt{self.trt.__version__}_sm{self.capability}_{self.tag}.engine')

    def build(self, mh, mw, batch=1):
        """Build and return a serialized engine for ``batch`` frames of ``mh x mw`` (bytes)."""
        trt = self.trt
        LOG.info('building a TensorRT %s engine for %d x %dx%d (this can take minutes)',
                 self.precision, batch, mw, mh)
        builder = trt.Builder(self.logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, self.logger)
        model = with_batch(build_model(self.weights, mh, mw), batch)
        if not parser.parse(model.SerializeToString()):
            errors = '; '.join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise BackendError(f'TensorRT cannot parse the XFeat ONNX graph: {errors}')
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, self.workspace_bytes)
        if self.precision == 'fp16':
            config.set_flag(trt.BuilderFlag.FP16)
        monitor = _progress_monitor(trt)
        if monitor is not None:
            config.progress_monitor = monitor
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise BackendError(f'TensorRT failed to build an engine for {batch} x {mw}x{mh}')
        return bytes(serialized)

    def _engine_bytes(self, mh, mw, batch):
        path = self.engine_path(mh, mw, batch)
        if path.is_file() and not self.rebuild:
            LOG.info('loading TensorRT engine %s', path)
            return path.read_bytes()
        data = self.build(mh, mw, batch)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:
            tmp.write(data)
        os.replace(tmp.name, path)
        LOG.info('cached TensorRT engine %s', path)
        return data

    def _prepare(self, mh, mw, batch):
        trt = self.trt
        engine = self.runtime.deserialize_cuda_engine(self._engine_bytes(mh, mw, batch))
        if engine is None:
            raise BackendError(f'cannot deserialize the TensorRT engine '
                               f'{self.engine_path(mh, mw, batch)}; rebuild it (rebuild=True)')
        tensors = []
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            tensors.append((name, engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT,
                            tuple(engine.get_tensor_shape(name)),
                            engine.get_tensor_dtype(name) == trt.DataType.FLOAT))
        input_name, output_names = bind_by_shape(tensors, mh, mw, batch)
        context = engine.create_execution_context()
        if context is None:
            raise BackendError('TensorRT could not create an execution context')
        return _TrtState(engine, context, input_name, output_names)

    def run(self, image, outputs, stream):
        """Enqueue the engine on ``stream`` (``execute_async_v3``; no sync)."""
        batch = int(image.shape[0])
        mh, mw = (int(s) for s in image.shape[-2:])
        with self.cupy.cuda.Device(self.gpu):
            state = self._states.get((batch, mh, mw))
            if state is None:
                state = self._prepare(mh, mw, batch)
                self._states[(batch, mh, mw)] = state
            context = state.context
            context.set_tensor_address(state.input_name, int(image.data.ptr))
            for role, array in zip(OUTPUT_NAMES, outputs):
                context.set_tensor_address(state.output_names[role], int(array.data.ptr))
            if not context.execute_async_v3(stream.ptr):
                raise BackendError('TensorRT execute_async_v3 failed')

    def release(self, image):
        """Keep engines (they depend on batch and size only); nothing is bound to buffers."""


# -- ONNX Runtime, CUDA execution provider --------------------------------------------------------

class OnnxRuntimeCudaBackbone:
    """
    ONNX Runtime with the CUDA execution provider (optional; where it is installed).

    Device buffers are bound with IOBinding and the session computes on the
    caller's stream (``user_compute_stream``), but ONNX Runtime synchronizes
    that stream at the end of every run: unlike the other backends this one
    blocks the host for the duration of the network.
    """

    name = 'onnxruntime_cuda'

    def __init__(self, weights, gpu=0):
        """Fail with :class:`BackendError` unless CUDAExecutionProvider is available."""
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise BackendError('onnxruntime is not installed') from exc
        if 'CUDAExecutionProvider' not in ort.get_available_providers():
            raise BackendError('onnxruntime has no CUDAExecutionProvider '
                               '(install onnxruntime-gpu)')
        self.ort = ort
        self.gpu = int(gpu)
        self.model = with_batch(build_model(weights), 'batch').SerializeToString()
        self._sessions = {}

    def _session(self, stream):
        session = self._sessions.get(stream.ptr)
        if session is None:
            options = self.ort.SessionOptions()
            options.log_severity_level = 3
            provider = ('CUDAExecutionProvider',
                        {'device_id': str(self.gpu), 'user_compute_stream': str(stream.ptr)})
            try:
                session = self.ort.InferenceSession(self.model, options, providers=[provider])
            except Exception as exc:  # onnxruntime raises its own non-exported types
                raise BackendError(f'ONNX Runtime (CUDA) cannot load the model: {exc}') from exc
            self._sessions[stream.ptr] = session
        return session

    def run(self, image, outputs, stream):
        """Run the session on device buffers bound with IOBinding (synchronizes)."""
        session = self._session(stream)
        binding = session.io_binding()
        binding.bind_input(INPUT_NAME, 'cuda', self.gpu, np.float32, list(image.shape),
                           int(image.data.ptr))
        for name, array in zip(OUTPUT_NAMES, outputs):
            binding.bind_output(name, 'cuda', self.gpu, np.float32, list(array.shape),
                                int(array.data.ptr))
        session.run_with_iobinding(binding)

    def release(self, image):
        """Nothing is bound to buffers between runs."""
