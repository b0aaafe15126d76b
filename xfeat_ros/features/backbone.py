# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Backbone backends: run the XFeat network on a model-size grey image.

CPU interface (:class:`OnnxRuntimeBackbone`): ``run(image)`` with ``image``
float32 [mh, mw] in [0, 1] returns host arrays ``(feats [64, mh/8, mw/8],
logits [65, mh/8, mw/8], reliability [mh/8, mw/8])``, all float32.

:func:`create_backbone` maps the node's ``backend`` parameter to an instance;
``auto`` takes the best backend present and says which in its log line.
"""

import os

import numpy as np

from xfeat_ros.errors import BackendError
from xfeat_ros.features.network_onnx import build_model, INPUT_NAME, OUTPUT_NAMES
from xfeat_ros.features.weights import load_weights, resolve_weights
from xfeat_ros.logs import package_logger

LOG = package_logger(__name__)

CPU_BACKENDS = ('onnxruntime',)
BACKENDS = ('auto',) + CPU_BACKENDS


class OnnxRuntimeBackbone:
    """ONNX Runtime on the CPU: the embedded default and the GPU oracle."""

    name = 'onnxruntime'

    def __init__(self, model, threads=0):
        """
        Create a session from an ``onnx.ModelProto``, serialized bytes or a file path.

        ``threads`` sets ONNX Runtime's intra-op threads (0: its default).
        """
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise BackendError('onnxruntime is not installed') from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(threads)
        options.log_severity_level = 3
        # No spin-waiting worker threads: the node runs its outputs on another thread
        # while the backbone runs, and spinning workers then take its cores (measured:
        # 20 ms a 160x128 run with spinning against 12-13 ms without, next to one busy
        # Python thread on 2 cores; alike when alone).
        options.add_session_config_entry('session.intra_op.allow_spinning', '0')
        if hasattr(model, 'SerializeToString'):
            model = model.SerializeToString()
        elif isinstance(model, (str, os.PathLike)):
            model = os.fspath(model)
        try:
            self.session = ort.InferenceSession(model, options,
                                                providers=['CPUExecutionProvider'])
        except Exception as exc:  # onnxruntime raises its own non-exported types
            raise BackendError(f'ONNX Runtime cannot load the model: {exc}') from exc
        names = [o.name for o in self.session.get_outputs()]
        if tuple(names) != OUTPUT_NAMES:
            raise BackendError(f'model outputs {names}, expected {list(OUTPUT_NAMES)}')

    def run(self, image):
        """Run the network on float32 [mh, mw]; returns (feats, logits, reliability)."""
        batch = np.ascontiguousarray(image, dtype=np.float32)[None, None]
        feats, logits, reliability = self.session.run(None, {INPUT_NAME: batch})
        return feats[0], logits[0], reliability[0, 0]


def create_backbone(backend='auto', weights='', threads=0):
    """
    Create the backbone named by ``backend`` from the weights lookup.

    Raises :class:`BackendError` for an unknown or unavailable backend and
    :class:`xfeat_ros.errors.WeightsError` when no usable weights are found.
    """
    if backend not in BACKENDS:
        raise BackendError(f'unknown backend {backend!r} (choose from {", ".join(BACKENDS)})')
    path = resolve_weights(weights)
    model = build_model(load_weights(path))
    chosen = OnnxRuntimeBackbone(model, threads)
    if backend == 'auto':
        LOG.info('backend auto: using %s (no GPU backend in this build)', chosen.name)
    return chosen
