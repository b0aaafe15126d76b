# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The methods ``xfeat_eval`` compares, each with ``extract(slot, pixels, encoding)`` and ``match``.

:class:`EngineMethod` wraps an xfeat_ros engine (CPU or GPU, the node's),
:class:`EncodedMethod` sends its descriptors through a wire encoding first and
:class:`UpstreamMethod` runs upstream XFeat from a checkout with the same weights.
"""

import numpy as np

from xfeat_ros.errors import ParameterError
from xfeat_ros.logs import package_logger
from xfeat_ros.tools.plumbing import load_upstream

LOG = package_logger('xfeat_eval')


class EngineMethod:
    """Wrap an xfeat_ros frame engine (CPU or GPU): ``extract``/``match`` on numbered slots."""

    def __init__(self, engine, slots):
        """Wrap ``engine`` with ``slots`` pre-allocated slots."""
        self.engine = engine
        self.name = f'xfeat_ros {engine.name} ({engine.device})'
        self.slots = [engine.alloc_slot() for _ in range(slots)]
        self.keypoints = [None] * slots

    def extract(self, slot, pixels, encoding):
        """Detect and describe an image into ``slot``; returns keypoints float32 [N, 2]."""
        from xfeat_ros.features.image_codec import image_msg
        self.engine.submit(image_msg(pixels, encoding), self.slots[slot])
        self.engine.synchronize()
        self.keypoints[slot] = self.engine.features(self.slots[slot]).keypoints
        return self.keypoints[slot]

    def match(self, slot0, slot1):
        """Return the mutual-NN matches ``(idx0, idx1)`` int64 [M] of two extracted slots."""
        self.engine.submit_match(self.slots[slot0], self.slots[slot1])
        self.engine.synchronize()
        result = self.engine.matches(self.slots[slot1])
        return result.idx0, result.idx1


class UpstreamMethod:
    """Run upstream XFeat (``detectAndCompute`` + ``match``) from a checkout, with our weights."""

    def __init__(self, directory, weights, slots, top_k, threshold, min_cossim, device='cpu'):
        """Import ``modules.xfeat`` from ``directory`` and load the weights dict into its net."""
        self.model = load_upstream(directory, weights, top_k, threshold, device)
        import torch  # present: load_upstream checked
        self.torch = torch
        self.device = self.model.dev
        self.top_k = int(top_k)
        self.threshold = float(threshold)
        self.min_cossim = float(min_cossim)
        self.name = f'upstream XFeat ({self.device})'
        self.outputs = [None] * slots

    def extract(self, slot, pixels, encoding):
        """Run ``detectAndCompute`` on the image; returns keypoints float32 [N, 2]."""
        scale = 65535.0 if encoding == 'mono16' else 255.0
        x = self.torch.from_numpy(pixels.astype(np.float32) / scale).permute(2, 0, 1)[None]
        out = self.model.detectAndCompute(x.to(self.device), top_k=self.top_k,
                                          detection_threshold=self.threshold)[0]
        self.outputs[slot] = out
        return out['keypoints'].cpu().numpy().astype(np.float32)

    def match(self, slot0, slot1):
        """Return upstream's ``match`` of two extracted slots: ``(idx0, idx1)`` int64 [M]."""
        idx0, idx1 = self.model.match(self.outputs[slot0]['descriptors'],
                                      self.outputs[slot1]['descriptors'], self.min_cossim)
        return idx0.cpu().numpy().astype(np.int64), idx1.cpu().numpy().astype(np.int64)


def create_engine_method(backend, args, slots):
    """Build an :class:`EngineMethod` for ``backend`` as the node would (auto: GPU first)."""
    from xfeat_ros.features.engine import EngineConfig
    from xfeat_ros.features.factory import create_engine
    engine = create_engine(EngineConfig(backend, args.weights, args.gpu, args.threads, args.top_k,
                                        args.threshold, args.min_cossim), LOG)
    return EngineMethod(engine, slots)


class EncodedMethod:
    """
    Run an :class:`EngineMethod` with its descriptors sent through a wire encoding.

    ``extract`` runs the engine, encodes its float32 [N, 64] descriptors with
    :func:`xfeat_ros.features.descriptor_format.encode_descriptors` and keeps the decoded float32
    [N, 64] copy; ``match`` is what a consumer of the wire format does:
    :func:`xfeat_ros.features.match.mutual_nn_match` on two decoded sets. Several
    encodings can wrap the same engine method (they share its slots; methods
    run one after another). Each match also runs the engine's own match and
    reports, through :meth:`match_extras`, how many of those (float32)
    matches the encoded descriptors reproduce and the encoded bytes per frame.
    """

    def __init__(self, method_engine, encoding, min_cossim):
        """Wrap ``method_engine`` (an :class:`EngineMethod`) for ``encoding``."""
        from xfeat_ros.features.descriptor_format import check_encoding
        check_encoding(encoding)
        self.inner = method_engine
        self.encoding = encoding
        self.min_cossim = float(min_cossim)
        self.name = f'{method_engine.name} {encoding}'
        slots = len(method_engine.slots)
        self.descriptors = [None] * slots
        self.frame_bytes = [0] * slots
        self.extras = {}

    def extract(self, slot, pixels, encoding):
        """Detect and describe through the engine; returns keypoints float32 [N, 2]."""
        from xfeat_ros.features.descriptor_format import decode_descriptors, encode_descriptors
        keypoints = self.inner.extract(slot, pixels, encoding)
        features = self.inner.engine.features(self.inner.slots[slot])
        wire = encode_descriptors(features.descriptors, self.encoding)
        self.descriptors[slot] = decode_descriptors(wire, self.encoding,
                                                    features.descriptors.shape[1])
        self.frame_bytes[slot] = int(wire.size)
        return keypoints

    def match(self, slot0, slot1):
        """Return mutual-NN matches ``(idx0, idx1)`` int64 [M] of the decoded descriptors."""
        from xfeat_ros.features.match import mutual_nn_match
        idx0, idx1, _ = mutual_nn_match(self.descriptors[slot0], self.descriptors[slot1],
                                        self.min_cossim)
        ref0, ref1 = self.inner.match(slot0, slot1)
        width = max(len(self.descriptors[slot1]), 1)
        reproduced = np.isin(ref0.astype(np.int64) * width + ref1,
                             idx0.astype(np.int64) * width + idx1)
        self.extras = {'descriptor_bytes0': self.frame_bytes[slot0],
                       'descriptor_bytes1': self.frame_bytes[slot1],
                       'float32_matches': len(ref0),
                       'float32_matches_reproduced': int(reproduced.sum())}
        return idx0, idx1

    def match_extras(self):
        """Return the encoding facts of the last match (bytes of both frames, agreement)."""
        return dict(self.extras)


def match_extras(method):
    """Return the extra per-pair record fields of ``method``'s last match (may be empty)."""
    extras = getattr(method, 'match_extras', None)
    return extras() if extras is not None else {}


def descriptor_encodings(values):
    """
    Return the encodings named by repeated and comma-separated ``values``, in order, once each.

    ``values`` None (the option not given) returns None. Raises
    :class:`xfeat_ros.errors.ParameterError` for an unknown name.
    """
    from xfeat_ros.features.descriptor_format import check_encoding
    if values is None:
        return None
    names = []
    for value in values:
        for name in (n.strip() for n in value.split(',')):
            if name:
                check_encoding(name)
                if name not in names:
                    names.append(name)
    if not names:
        raise ParameterError('--descriptor-encoding names no encoding')
    return names
