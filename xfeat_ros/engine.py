# Copyright 2026 xfeat_ros contributors
# SPDX-License-Identifier: Apache-2.0
"""
The frame engine interface the node drives, and its CPU implementation.

An engine processes frames into pre-allocated *slots* (one per frame in
flight). The node's loop is the same for every engine::

    slot = engine.alloc_slot()             # once per in-flight position
    engine.submit(image_msg, slot)         # raises ImageError, enqueues nothing then
    engine.submit_match(prev_slot, slot)   # frame-to-frame, same camera
    ...                                    # up to max_frames_in_flight frames
    engine.synchronize()                   # one sync for the whole group
    engine.features(slot), engine.matches(slot)   # host copies, bounded by counts
    engine.match_features(f0, f1)          # two host Features (stereo), synchronous

On the CPU everything happens inside ``submit``/``submit_match`` and
``synchronize`` is a no-op; the GPU engine (``xfeat_ros.gpu``) enqueues device
work on one stream and copies only the final results down.
"""

from xfeat_ros.decode import decode_image_msg
from xfeat_ros.match import mutual_nn_match
from xfeat_ros.pipeline import CpuPipeline, MatchResult


class Slot:
    """Hold the per-frame results of one in-flight position (host memory on the CPU)."""

    def __init__(self):
        self.features = None
        self.matches = None


class CpuEngine:
    """Engine over :class:`xfeat_ros.pipeline.CpuPipeline` (ONNX Runtime + NumPy)."""

    device = 'cpu'

    def __init__(self, backbone, top_k=4096, threshold=0.05, min_cossim=0.82):
        """Build on a host backbone; thresholds can be changed between frames."""
        self.pipeline = CpuPipeline(backbone, top_k, threshold)
        self.min_cossim = float(min_cossim)
        self.name = backbone.name

    def configure(self, top_k=None, threshold=None, min_cossim=None):
        """Change detection or matching settings; takes effect on the next submit."""
        if top_k is not None:
            self.pipeline.top_k = int(top_k)
        if threshold is not None:
            self.pipeline.threshold = float(threshold)
        if min_cossim is not None:
            self.min_cossim = float(min_cossim)

    def alloc_slot(self):
        """Return a new slot."""
        return Slot()

    def submit(self, msg, slot):
        """Decode and extract the features of ``msg`` (sensor_msgs/Image) into ``slot``."""
        grey = decode_image_msg(msg)
        slot.features = self.pipeline.extract(grey)
        slot.matches = None

    def submit_match(self, previous, slot):
        """Match ``previous``'s features against ``slot``'s (both already submitted)."""
        idx0, idx1, sim = mutual_nn_match(previous.features.descriptors,
                                          slot.features.descriptors, self.min_cossim)
        slot.matches = MatchResult(idx0, idx1, sim)

    def match_features(self, features0, features1):
        """
        Match two host :class:`Features` now (stereo pairs); return a :class:`MatchResult`.

        Mutual nearest neighbours with the engine's ``min_cossim``; synchronous.
        """
        return MatchResult(*mutual_nn_match(features0.descriptors, features1.descriptors,
                                            self.min_cossim))

    def synchronize(self):
        """Nothing is asynchronous on the CPU."""

    def features(self, slot):
        """Host :class:`xfeat_ros.pipeline.Features` of a submitted slot."""
        return slot.features

    def matches(self, slot):
        """Host :class:`xfeat_ros.pipeline.MatchResult` of a slot (None if not matched)."""
        return slot.matches
