# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
GPU backbone backends: the XFeat network on device buffers, on the caller's stream.

One interface for every backend::

    backbone.name                       'pytorch' | 'tensorrt' | 'onnxruntime_cuda'
    backbone.run(image, outputs, stream)
    backbone.release(image)             forget state bound to that buffer set

``image`` is a CuPy float32 device array [1, 1, mh, mw] (grey in [0, 1], model
size, ``mh``/``mw`` multiples of 32); ``outputs`` is the tuple of CuPy float32
device arrays ``(feats [1, 64, h, w], logits [1, 65, h, w], reliability [1, 1,
h, w])`` with ``h = mh / 8``, ``w = mw / 8``; ``stream`` is the
``cupy.cuda.Stream`` all work is enqueued on. ``run`` returns without
synchronizing (except the ONNX Runtime backend, see its docstring). Buffers
are expected to be reused frame after frame, so per-buffer state (PyTorch
views and CUDA graphs, TensorRT contexts) is built once and kept until
``release``.
"""

import contextlib
import hashlib
import logging
import os
from pathlib import Path
import tempfile

import numpy as np

from xfeat_ros.engine import GPU_BACKENDS  # the one list of backends
from xfeat_ros.errors import BackendError
from xfeat_ros.network_onnx import build_model, INPUT_NAME, OUTPUT_NAMES
from xfeat_ros.weights import cache_dir

LOG = logging.getLogger(__name__)

PRECISIONS = ('fp32', 'fp16')
FEATURE_CHANNELS = 64
LOGIT_CHANNELS = 65
WARMUP_RUNS = 3


def buffer_key(image, outputs):
    """Identity of a buffer set: device pointers and the input shape."""
    return (int(image.data.ptr), tuple(int(o.data.ptr) for o in outputs), tuple(image.shape))


def expected_output_shapes(mh, mw):
    """Map output role -> shape for model size ``mh x mw``."""
    h, w = mh // 8, mw // 8
    return {'feats': (1, FEATURE_CHANNELS, h, w), 'keypoint_logits': (1, LOGIT_CHANNELS, h, w),
            'reliability': (1, 1, h, w)}


def weights_digest(weights):
    """Short SHA-256 over a weights dict (names and float32 bytes), for cache names."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(weights[name], dtype=np.float32).tobytes())
    return digest.hexdigest()[:12]


# -- PyTorch ------------------------------------------------------------------------------------

@contextlib.contextmanager
def exact_convolutions(torch, benchmark=False):
    """
    Run cuDNN convolutions in IEEE FP32 (no TF32) inside the block, then restore.

    PyTorch's default lets cuDNN use TF32 for FP32 convolutions (10-bit
    mantissa), which breaks parity. Uses the per-backend ``fp32_precision``
    API where it exists (PyTorch >= 2.9), else the legacy ``allow_tf32`` flag,
    never both (PyTorch rejects a mix).
    """
    cudnn = torch.backends.cudnn
    conv = getattr(cudnn, 'conv', None)
    new_api = conv is not None and hasattr(conv, 'fp32_precision')
    saved_benchmark = cudnn.benchmark
    if new_api:
        saved = conv.fp32_precision
        conv.fp32_precision = 'ieee'
    else:
        saved = cudnn.allow_tf32
        cudnn.allow_tf32 = False
    cudnn.benchmark = bool(benchmark)
    try:
        yield
    finally:
        cudnn.benchmark = saved_benchmark
        if new_api:
            conv.fp32_precision = saved
        else:
            cudnn.allow_tf32 = saved


def _instance_norm_module(torch, eps):
    """Return an instance norm over one image that reduces with all SMs (PyTorch module)."""
    class _InstanceNorm(torch.nn.Module):
        def forward(self, x):
            mean = x.mean(dim=(2, 3), keepdim=True)
            centred = x - mean
            var = (centred * centred).mean(dim=(2, 3), keepdim=True)
            return centred / torch.sqrt(var + eps)

    return _InstanceNorm()


def fold_for_inference(net, torch):
    """
    Rewrite an :class:`xfeat_ros.model.XFeatNet` (CPU, eval) for fast GPU inference.

    Every BasicLayer's BatchNorm is folded into its convolution with
    :func:`xfeat_ros.network_onnx.fold_batchnorm` (the very weights of the
    ONNX graph the CPU path runs), which removes 24 BatchNorm kernels per
    frame; ``InstanceNorm2d(1)``, which PyTorch reduces in one thread block,
    becomes mean / variance reductions that use the whole GPU. Same maths:
    ``(x - mean) / sqrt(var + eps)``, biased variance. Returns ``net``.
    """
    from xfeat_ros.model import BasicLayer
    from xfeat_ros.network_onnx import BN_EPS, fold_batchnorm
    for layer in net.modules():
        if not isinstance(layer, BasicLayer):
            continue
        conv, norm = layer.layer[0], layer.layer[1]
        weight, bias = fold_batchnorm(conv.weight.detach().cpu().numpy(),
                                      norm.running_mean.detach().cpu().numpy(),
                                      norm.running_var.detach().cpu().numpy(), norm.eps)
        fused = torch.nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size,
                                stride=conv.stride, padding=conv.padding, bias=True)
        with torch.no_grad():
            fused.weight.copy_(torch.from_numpy(weight))
            fused.bias.copy_(torch.from_numpy(bias))
        layer.layer = torch.nn.Sequential(fused, torch.nn.ReLU(inplace=True))
    net.norm = _instance_norm_module(torch, BN_EPS)
    return net.eval()


class _TorchBinding:
    """Torch views of one buffer set and, when captured, its CUDA graph."""

    def __init__(self, image, feats, logits, reliability):
        self.image = image
        self.feats = feats
        self.logits = logits
        self.reliability = reliability
        self.graph = None


class TorchBackbone:
    """
    :class:`xfeat_ros.model.XFeatNet` on a CUDA device, zero-copy with CuPy.

    Buffers are shared through DLPack (``torch.from_dlpack`` of the CuPy
    arrays, once per buffer set); the network runs on the caller's stream
    through ``torch.cuda.ExternalStream``. With ``fold=True`` (default) the
    network is first rewritten by :func:`fold_for_inference` (BatchNorm folded
    into the convolutions, a parallel instance norm: 1.01 -> 0.54 ms at
    640x480 on an H200). Per buffer set the forward pass is captured as a
    CUDA graph (``cuda_graphs=True``) after a short warm-up and replayed on
    every later frame, which removes PyTorch's per-op launch overhead.
    ``precision='fp32'`` (default) runs FP32 with TF32 disabled in cuDNN
    (parity with the CPU path needs it: scores within 1e-4 relative);
    ``'fp16'`` runs the network in half precision and casts the outputs back
    (0.44 ms, but measured outside parity: scores off by up to 13 %, 98.9 %
    of golden keypoints found, so it is not the default).
    """

    name = 'pytorch'

    def __init__(self, weights, gpu=0, precision='fp32', cuda_graphs=True,
                 cudnn_benchmark=False, channels_last=False, fold=True):
        """Build the network from a weights dict (:func:`xfeat_ros.weights.load_weights`)."""
        try:
            import torch
        except ImportError as exc:
            raise BackendError('PyTorch is not installed') from exc
        if precision not in PRECISIONS:
            raise BackendError(f'unknown precision {precision!r} (choose from {PRECISIONS})')
        if not torch.cuda.is_available():
            raise BackendError('PyTorch sees no CUDA device')
        if not 0 <= int(gpu) < torch.cuda.device_count():
            raise BackendError(f'no CUDA device {gpu} ({torch.cuda.device_count()} visible)')
        from xfeat_ros.model import XFeatNet
        self.torch = torch
        self.device = torch.device('cuda', int(gpu))
        self.dtype = torch.float16 if precision == 'fp16' else torch.float32
        self.precision = precision
        self.cuda_graphs = bool(cuda_graphs)
        self.cudnn_benchmark = bool(cudnn_benchmark)
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        net = XFeatNet.from_weights(weights)
        if fold:
            net = fold_for_inference(net, torch)
        self.net = net.to(self.device, self.dtype).to(memory_format=self.memory_format).eval()
        self._bindings = {}
        self._streams = {}

    def _cudnn(self):
        return exact_convolutions(self.torch, self.cudnn_benchmark)

    def _torch_stream(self, stream):
        ext = self._streams.get(stream.ptr)
        if ext is None:
            ext = self.torch.cuda.ExternalStream(stream.ptr, device=self.device)
            self._streams[stream.ptr] = ext
        return ext

    def _forward_into(self, binding):
        image = binding.image.to(self.dtype, memory_format=self.memory_format)
        feats, logits, reliability = self.net(image)
        binding.feats.copy_(feats)
        binding.logits.copy_(logits)
        binding.reliability.copy_(reliability)

    def _bind(self, image, outputs, ext):
        views = [self.torch.from_dlpack(array) for array in (image,) + tuple(outputs)]
        binding = _TorchBinding(*views)
        side = self.torch.cuda.Stream(device=self.device)
        side.wait_stream(ext)
        with self.torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self._forward_into(binding)
        ext.wait_stream(side)
        if self.cuda_graphs:
            graph = self.torch.cuda.CUDAGraph()
            try:
                with self.torch.cuda.graph(graph, stream=side, capture_error_mode='thread_local'):
                    self._forward_into(binding)
                binding.graph = graph
                LOG.info('captured a CUDA graph of the backbone for %dx%d (%s)',
                         image.shape[-1], image.shape[-2], self.precision)
            except RuntimeError as exc:
                LOG.warning('CUDA graph capture failed (%s); running the backbone eagerly', exc)
            ext.wait_stream(side)
        return binding

    def run(self, image, outputs, stream):
        """Enqueue the network on ``stream``: ``image`` -> ``outputs`` (no sync)."""
        torch = self.torch
        ext = self._torch_stream(stream)
        binding = self._bindings.get(buffer_key(image, outputs))
        if binding is not None and binding.graph is not None:
            with torch.cuda.device(self.device), torch.cuda.stream(ext):
                binding.graph.replay()  # the per-frame path: one graph launch
            return
        with torch.cuda.device(self.device), torch.no_grad(), self._cudnn():
            if binding is None:
                binding = self._bind(image, outputs, ext)
                self._bindings[buffer_key(image, outputs)] = binding
            with torch.cuda.stream(ext):
                if binding.graph is not None:
                    binding.graph.replay()
                else:
                    self._forward_into(binding)

    def release(self, image):
        """Drop the views and graphs bound to ``image``'s buffer set."""
        ptr = int(image.data.ptr)
        for key in [k for k in self._bindings if k[0] == ptr]:
            del self._bindings[key]


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


def bind_by_shape(io_tensors, mh, mw):
    """
    Assign engine tensors to roles by SHAPE, never by name.

    ``io_tensors`` lists ``(name, is_input, shape, is_float32)``. Every dimension
    must be positive (a dynamic -1 would otherwise wrap to a huge size). Returns
    ``(input_name, {role: name})``; raises :class:`BackendError` for a missing,
    duplicated, non-float32 or mis-shaped tensor.
    """
    wanted = expected_output_shapes(mh, mw)
    by_shape = {shape: role for role, shape in wanted.items()}
    inputs, outputs = [], {}
    for name, is_input, shape, is_float32 in io_tensors:
        shape = tuple(int(d) for d in shape)
        if not shape or any(d <= 0 for d in shape):
            raise BackendError(f'engine tensor {name!r} has a non-positive dimension: {shape}')
        if not is_float32:
            raise BackendError(f'engine tensor {name!r} is not float32')
        if is_input:
            if shape != (1, 1, mh, mw):
                raise BackendError(f'engine input {name!r} is {shape}, expected {(1, 1, mh, mw)}')
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
    :func:`xfeat_ros.network_onnx.build_model` at a fixed input size, outputs
    are bound by shape (:func:`bind_by_shape`), and everything else (decode,
    detection, matching) is shared with the PyTorch backend.

    Engines are built on first use of a model size (progress is logged; a
    build can take minutes) and cached under ``cache`` with a name encoding the
    input size, precision, TensorRT version, GPU compute capability and a
    digest of the weights; a change of any of them builds a new engine, and
    ``rebuild=True`` forces a build.
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

    def engine_path(self, mh, mw):
        """Cache file of the engine for one input size."""
        return self.cache / (f'xfeat_{mh}x{mw}_{self.precision}_trt{self.trt.__version__}'
                             f'_sm{self.capability}_{self.tag}.engine')

    def build(self, mh, mw):
        """Build and return a serialized engine for ``mh x mw`` (bytes)."""
        trt = self.trt
        LOG.info('building a TensorRT %s engine for %dx%d (this can take minutes)',
                 self.precision, mw, mh)
        builder = trt.Builder(self.logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse(build_model(self.weights, mh, mw).SerializeToString()):
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
            raise BackendError(f'TensorRT failed to build an engine for {mw}x{mh}')
        return bytes(serialized)

    def _engine_bytes(self, mh, mw):
        path = self.engine_path(mh, mw)
        if path.is_file() and not self.rebuild:
            LOG.info('loading TensorRT engine %s', path)
            return path.read_bytes()
        data = self.build(mh, mw)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:
            tmp.write(data)
        os.replace(tmp.name, path)
        LOG.info('cached TensorRT engine %s', path)
        return data

    def _prepare(self, mh, mw):
        trt = self.trt
        engine = self.runtime.deserialize_cuda_engine(self._engine_bytes(mh, mw))
        if engine is None:
            raise BackendError(f'cannot deserialize the TensorRT engine '
                               f'{self.engine_path(mh, mw)}; rebuild it (rebuild=True)')
        tensors = []
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            tensors.append((name, engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT,
                            tuple(engine.get_tensor_shape(name)),
                            engine.get_tensor_dtype(name) == trt.DataType.FLOAT))
        input_name, output_names = bind_by_shape(tensors, mh, mw)
        context = engine.create_execution_context()
        if context is None:
            raise BackendError('TensorRT could not create an execution context')
        return _TrtState(engine, context, input_name, output_names)

    def run(self, image, outputs, stream):
        """Enqueue the engine on ``stream`` (``execute_async_v3``; no sync)."""
        mh, mw = (int(s) for s in image.shape[-2:])
        with self.cupy.cuda.Device(self.gpu):
            state = self._states.get((mh, mw))
            if state is None:
                state = self._prepare(mh, mw)
                self._states[(mh, mw)] = state
            context = state.context
            context.set_tensor_address(state.input_name, int(image.data.ptr))
            for role, array in zip(OUTPUT_NAMES, outputs):
                context.set_tensor_address(state.output_names[role], int(array.data.ptr))
            if not context.execute_async_v3(stream.ptr):
                raise BackendError('TensorRT execute_async_v3 failed')

    def release(self, image):
        """Keep engines (they depend on the size only); nothing is bound to buffers."""


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
        self.model = build_model(weights).SerializeToString()
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


def create_gpu_backbone(backend, weights, gpu=0, **options):
    """Instantiate one GPU backbone by name (see :data:`GPU_BACKENDS`)."""
    classes = {'tensorrt': TensorRTBackbone, 'pytorch': TorchBackbone,
               'onnxruntime_cuda': OnnxRuntimeCudaBackbone}
    if backend not in classes:
        raise BackendError(f'unknown GPU backend {backend!r} (choose from {GPU_BACKENDS})')
    return classes[backend](weights, gpu=gpu, **options)
