# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
Fakes for the core's unit tests: a scene seen by a moving camera, a scripted engine.

Each frame's features are the projections of one fixed set of 3D points
(descriptors fixed per point), so matching and the epipolar check behave as on
real images, without a network or weights.
"""

import threading

import numpy as np
from xfeat_ros.features.camera import CameraModel
from xfeat_ros.features.engine import NO_CAPABILITIES
from xfeat_ros.features.image_codec import image_msg
from xfeat_ros.features.match import mutual_nn_match
from xfeat_ros.features.pipeline import Features, MatchResult
from xfeat_ros.tools.play import stamp_msg

K = np.array([[400.0, 0, 160], [0, 400.0, 120], [0, 0, 1]])
MODEL = CameraModel.from_parameters([400.0, 400.0, 160.0, 120.0], 'none', [], 320, 240)


def scene(count=200, seed=0):
    """Return ``(points [N, 3] in front of the camera, unit descriptors [N, 64])``."""
    rng = np.random.default_rng(seed)
    pixels = rng.uniform([20, 20], [300, 220], (count, 2))
    depth = rng.uniform(2.0, 6.0, (count, 1))
    points = np.c_[(pixels - K[:2, 2]) / K[0, 0], np.ones(count)] * depth
    descriptors = rng.normal(size=(count, 64)).astype(np.float32)
    descriptors /= np.linalg.norm(descriptors, axis=1, keepdims=True)
    return points, descriptors


def features_at(step, points, descriptors, shape=(240, 320)):
    """Features of the scene seen after ``step`` small camera moves (rotation + translation)."""
    angle = np.radians(0.4 * step)
    rotation = np.array([[np.cos(angle), 0, np.sin(angle)], [0, 1, 0],
                         [-np.sin(angle), 0, np.cos(angle)]])
    moved = points @ rotation.T + [0.02 * step, 0.01 * step, 0.0]
    image = moved @ K.T
    keypoints = (image[:, :2] / image[:, 2:]).astype(np.float32)
    scores = np.linspace(1.0, 0.5, len(points), dtype=np.float32)
    return Features(keypoints, scores, descriptors.copy(), shape)


def frame_msg(index, stamp_s=None, shape=(240, 320)):
    """Return a mono8 image message whose frame_id names the scripted frame ``index``."""
    stamp = stamp_msg(int(round((1.0 + index if stamp_s is None else stamp_s) * 1e9)))
    return image_msg(np.zeros((*shape, 1), np.uint8), 'mono8', stamp, str(index))


class Slot:
    """A scripted engine's slot."""

    def __init__(self):
        self.features = None
        self.matches = None


class ScriptedEngine:
    """
    The engine contract over scripted features (frame_id -> Features).

    ``gate``: a :class:`threading.Event` each submit waits for (None: no wait);
    ``failures``: exceptions raised by the next submits, in order; ``calls``
    records every contract call.
    """

    capabilities = NO_CAPABILITIES

    def __init__(self, features, device='cpu', name='scripted', min_cossim=0.5):
        self.features_by_id = features
        self.device, self.name = device, name
        self.min_cossim = min_cossim
        self.gate = None
        self.failures = []
        self.calls = []
        self.allocated = 0
        self.submitting = threading.Event()

    def configure(self, top_k=None, threshold=None, min_cossim=None):
        self.calls.append(('configure', top_k, threshold, min_cossim))
        if min_cossim is not None:
            self.min_cossim = min_cossim

    def alloc_slot(self):
        self.allocated += 1
        return Slot()

    def submit(self, msg, slot):
        self.calls.append(('submit', msg.header.frame_id))
        self.submitting.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.failures:
            raise self.failures.pop(0)
        slot.features = self.features_by_id[msg.header.frame_id]
        slot.matches = None

    def submit_match(self, previous, slot):
        self.calls.append(('match', len(previous.features), len(slot.features)))
        slot.matches = self.match_features(previous.features, slot.features)

    def match_features(self, features0, features1):
        return MatchResult(*mutual_nn_match(features0.descriptors, features1.descriptors,
                                            self.min_cossim))

    def synchronize(self):
        self.calls.append(('synchronize',))

    def features(self, slot):
        return slot.features

    def matches(self, slot):
        return slot.matches

    def results(self, slots):
        self.calls.append(('results', len(slots)))
        return [(slot.features, slot.matches) for slot in slots]
